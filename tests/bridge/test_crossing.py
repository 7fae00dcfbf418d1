"""The crossing between frameworks is decided before anything is converted
(``core.crossing``): conversion never meets another framework's array, and the calls
that cannot cross (a sparsity pattern, a same-point preparation) say so, naming the
call the user wrote.

References: the same function written in the backend's own framework, run there
(float64; AD agrees to 1e-10, finite differences to 1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE

import diffiface as di
from diffiface.core import convert

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy

X0 = np.linspace(0.1, 1.0, 4)
V0 = np.array([1.0, -0.5, 0.25, 2.0])
C0 = np.array([2.0, -1.0, 0.5, 3.0])


def _loss(xp):
    return lambda x, c: xp.sum(xp.sin(x) * c) * xp.sum(x**2)


# (backend, its arrays, another framework's arrays)
PAIRS = {
    "torch arrays into AutoJax": (di.AutoJax(), jnp.asarray, torch.from_numpy),
    "jax arrays into AutoTorch": (di.AutoTorch(), torch.from_numpy, jnp.asarray),
    "torch arrays into finite differences": (
        di.AutoFiniteDifferences(),
        np.asarray,
        torch.from_numpy,
    ),
}
XP = {"AutoJax": jnp, "AutoTorch": torch, "AutoFiniteDifferences": np}
if HAVE["mlx"]:
    import mlx.core as mx

    def _mx(a):
        return mx.array(np.asarray(a), dtype=mx.float64)

    PAIRS["mlx arrays into AutoJax"] = (di.AutoJax(), jnp.asarray, _mx)
    PAIRS["torch arrays into AutoMLX"] = (di.AutoMLX(), _mx, torch.from_numpy)
    PAIRS["jax arrays into AutoMLX"] = (di.AutoMLX(), _mx, jnp.asarray)
    PAIRS["mlx arrays into finite differences"] = (di.AutoFiniteDifferences(), np.asarray, _mx)
    XP["AutoMLX"] = mx


def _xp(backend):
    return XP[type(backend).__name__]


def _close(got, want, backend):
    # (MLX's float64 sin is float32-accurate: relative errors up to 1.1e-7, mlx 0.32.4)
    tol = 1e-6 if isinstance(backend, di.AutoFiniteDifferences | di.AutoMLX) else 1e-10
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


@pytest.fixture
def conversions_see_no_other_framework(monkeypatch):
    """Every leaf that reaches the conversions is NumPy's, a float or the backend's."""
    seen = []

    def watch(fn):
        def wrapped(op, impl, *args):
            leaves = [a for arg in args if isinstance(arg, list | tuple) for a in arg]
            seen.extend(
                type(a).__module__.partition(".")[0]
                for a in leaves
                if hasattr(a, "shape") and not isinstance(a, np.ndarray | np.generic)
                if not impl.is_native(a)
            )
            return fn(op, impl, *args)

        return wrapped

    monkeypatch.setattr(convert, "point", watch(convert.point))
    monkeypatch.setattr(convert, "contexts", watch(convert.contexts))
    yield seen
    assert not seen, f"conversion met arrays of another framework: {seen}"


@pytest.mark.parametrize("pair", PAIRS, ids=str)
@pytest.mark.parametrize("where", ["x", "tangent", "Constant", "FixedParams"])
def test_a_call_on_another_frameworks_arrays_crosses_before_converting(
    pair, where, conversions_see_no_other_framework
):
    backend, own, other = PAIRS[pair]
    loss = _loss(_xp(backend))
    want_g = di.gradient(loss, backend, own(X0), di.Constant(own(C0)))
    want_hv = di.hvp(loss, backend, own(X0), own(V0), di.Constant(own(C0)))
    # (a bridged call takes one framework's arrays: the others are NumPy's)
    x, v, c = (other if where == name else np.asarray for name in ("x", "tangent", "Constant"))
    if where == "FixedParams":
        fixed = di.FixedParams(lambda x, c: loss(x, c), other(C0))
        g = di.gradient(fixed, backend, X0)
        hv = di.hvp(fixed, backend, X0, V0)
    else:
        g = di.gradient(loss, backend, x(X0), di.Constant(c(C0)))
        hv = di.hvp(loss, backend, x(X0), v(V0), di.Constant(c(C0)))
    _close(to_numpy(hv), to_numpy(want_hv), backend)
    if where != "tangent":  # (gradient takes none)
        _close(to_numpy(g), to_numpy(want_g), backend)


def to_numpy(a):
    return a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


@pytest.mark.parametrize("pair", PAIRS, ids=str)
@pytest.mark.parametrize("where", ["x", "Constant"])
def test_a_sparsity_pattern_on_another_frameworks_arrays_is_a_clear_error(pair, where):
    backend, own, other = PAIRS[pair]
    xp = _xp(backend)
    x = other(X0) if where == "x" else own(X0)
    sparse = di.AutoSparse(backend, sparsity_detector="local") if xp is np else backend
    with pytest.raises(di.DiffifaceTypeError) as err:
        di.sparsity_pattern(lambda x, c: x[1:] * x[:-1] * c[1:], sparse, x, di.Constant(other(C0)))
    msg = str(err.value)
    assert msg.startswith(f"sparsity_pattern(f, {sparse!r}, x): "), msg
    assert "does not cross frameworks" in msg and "report" not in msg, msg


@pytest.mark.parametrize("family", ["hvp", "jvp", "vjp"])
def test_a_same_point_call_at_another_frameworks_x_is_a_clear_error(family):
    backend = di.AutoJax()
    f = (lambda x: jnp.sum(jnp.sin(x) ** 2)) if family == "hvp" else (lambda x: jnp.sin(x) * x)
    x = jnp.asarray(X0)
    prep = getattr(di, f"prepare_{family}_same_point")(f, backend, x, x)
    with pytest.raises(di.DiffifaceTypeError, match="does not cross frameworks"):
        getattr(di, family)(f, backend, torch.from_numpy(X0), x, prep=prep)


@pytest.mark.parametrize("pair", PAIRS, ids=str)
def test_preparing_on_another_frameworks_arrays_is_a_clear_error(pair):
    backend, own, other = PAIRS[pair]
    loss = _loss(_xp(backend))
    for call in (
        lambda: di.prepare_gradient(loss, backend, other(X0), di.Constant(own(C0))),
        lambda: di.prepare_hvp(loss, backend, own(X0), own(V0), di.Constant(other(C0))),
    ):
        with pytest.raises(di.DiffifaceValueError, match="arrays of another framework"):
            call()
