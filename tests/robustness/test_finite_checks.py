"""NaN and inf: they propagate by default on every backend; with check_finite on,
the first non-finite input raises, naming its path and index, on every backend
and through preparations and the fast paths. At kinks, each framework's own value."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import native, to_numpy, xp

import diffiface as di

X = np.array([0.3, -0.7, 1.1])


def _loss(ns):
    return lambda x: (ns.sin(x) * x).sum()


def test_nan_and_inf_propagate(backend):
    for bad in (np.nan, np.inf):
        x = X.copy()
        x[1] = bad
        with np.errstate(invalid="ignore"):  # NumPy's own warning for sin(inf)
            g = to_numpy(di.gradient(_loss(xp(backend)), backend, native(backend, x)))
        assert np.isnan(g[1])  # cos(inf) * inf and sin(nan) are nan: propagated, not hidden
        if isinstance(backend, di.AutoFiniteDifferences):  # every f(x + h e_i) is nan
            assert np.isnan(g).all()
        else:
            np.testing.assert_allclose(g[[0, 2]], (np.cos(X) * X + np.sin(X))[[0, 2]], rtol=1e-6)


def test_check_finite_names_the_path_on_every_backend(backend):
    x = {"a": X, "b": np.array([[1.0, 2.0], [np.inf, 4.0]])}
    x = {k: native(backend, v) for k, v in x.items()}
    f = lambda x: (x["a"] ** 2).sum() + (x["b"] ** 2).sum()  # noqa: E731
    with di.options(check_finite=True):
        with pytest.raises(ValueError, match=r"x\['b'\] holds inf at index \(1, 0\)") as err:
            di.gradient(f, backend, x)
    assert repr(backend) in str(err.value) and "check_finite" in str(err.value)
    with np.errstate(invalid="ignore", over="ignore"):
        di.gradient(f, backend, x)  # off again outside the block: inf propagates


def test_check_finite_covers_tangents_constants_and_params(backend, monkeypatch):
    monkeypatch.setattr(di.config, "check_finite", True)
    ns, x = xp(backend), native(backend, X)
    bad = native(backend, np.array([1.0, np.nan, 0.0]))
    with pytest.raises(ValueError, match=r"v holds nan at index \(1,\)"):
        di.jvp(ns.sin, backend, x, bad)
    with pytest.raises(ValueError, match=r"w holds nan"):
        di.vjp(ns.sin, backend, x, bad)
    with pytest.raises(ValueError, match=r"v\[1\] holds nan"):
        di.hvp(_loss(ns), backend, x, di.Tangents(x, bad))
    with pytest.raises(ValueError, match=r"Constant #0\[1\] holds nan"):
        di.gradient(lambda x, c: (x * c[1]).sum(), backend, x, di.Constant((1.0, bad)))
    with pytest.raises(ValueError, match=r"params holds nan"):
        di.gradient(di.FixedParams(lambda x, p: (x * p).sum(), bad), backend, x)


def test_check_finite_applies_to_prepared_and_repeated_calls(backend):
    f, x = _loss(xp(backend)), native(backend, X)
    prep = di.prepare_gradient(f, backend, x)
    di.gradient(f, backend, x)  # an implicit runner for the next plain call
    x_bad = native(backend, np.array([0.3, np.nan, 1.1]))
    with np.errstate(invalid="ignore"):
        assert np.isnan(to_numpy(di.gradient(f, backend, x_bad, prep=prep))[1])
    with di.options(check_finite=True):
        for kwargs in ({"prep": prep}, {}):
            with pytest.raises(ValueError, match="holds nan"):
                di.gradient(f, backend, x_bad, **kwargs)
        g = di.gradient(f, backend, x, prep=prep)  # finite: the result as always
    np.testing.assert_allclose(to_numpy(g), np.cos(X) * X + np.sin(X), rtol=1e-6)


def test_options_are_per_thread_and_validated():
    import threading

    seen = []

    def other():
        seen.append(di.config.check_finite)
        try:
            with np.errstate(invalid="ignore"):
                di.gradient(_loss(np), di.AutoFiniteDifferences(), np.array([np.nan]))
            seen.append("propagated")
        except ValueError:
            seen.append("raised")

    with di.options(check_finite=True):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == [False, "propagated"]
    with pytest.raises(TypeError, match="max_dense_bytes, max_compiled_shapes; got check_finit"):
        with di.options(check_finit=True):
            pass


def _native_grad(backend, f, x):
    name = backend.framework
    if name == "jax":
        import jax

        return np.asarray(jax.grad(f)(x))
    if name == "torch":
        import torch

        xg = x.detach().requires_grad_()
        return torch.autograd.grad(f(xg), xg)[0].numpy()
    if name == "mlx":
        import mlx.core as mx

        return np.asarray(mx.grad(f)(x))
    import autograd

    return autograd.grad(f)(x)


@pytest.mark.parametrize("kink", ["abs", "sqrt", "norm"])
def test_kinks_pass_the_frameworks_own_value_through(ad_backend, kink):
    ns = xp(ad_backend)
    f = {
        "abs": lambda x: ns.abs(x).sum(),
        "sqrt": lambda x: ns.sqrt(x).sum(),
        "norm": lambda x: ns.sqrt((x**2).sum()),
    }[kink]
    x = native(ad_backend, np.zeros(2))
    with np.errstate(all="ignore"):
        ours = to_numpy(di.gradient(f, ad_backend, x))
        theirs = _native_grad(ad_backend, f, x)
    np.testing.assert_array_equal(ours, theirs)  # nan == nan here, inf == inf


def test_kinks_on_finite_differences_are_as_documented():
    b, x = di.AutoFiniteDifferences(), np.zeros(2)
    with np.errstate(all="ignore"):
        assert (di.gradient(lambda x: np.abs(x).sum(), b, x) == 0).all()
        assert np.isnan(di.gradient(lambda x: np.sqrt(x).sum(), b, x)).all()
        assert (di.gradient(lambda x: np.sqrt((x**2).sum()), b, x) == 0).all()
