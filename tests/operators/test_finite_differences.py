"""Reliability of finite differences, chunked dense results and ``diffiface bench``:

* a finite-difference step that is not finite and positive, or too small to change
  x, is an error (it gave NaN);
* finite differences nested in finite differences whose steps multiply to under
  1e-13 are an error (three levels of default steps, two one-sided ones: rounding
  noise of the order of the result);
* a NumPy masked array is an error on every backend (its mask was ignored);
* ``chunk_size=k`` gives the dense result: bitwise for finite differences (it
  differed by 5.5e-8 in a Jacobian and 1.3e-5 in an unsymmetrized Hessian below),
  within a few ulps for AD;
* ``diffiface bench`` writes where ``--out`` says and never overwrites without
  ``--force``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ALL_BACKENDS, HAVE
from helpers import native, to_numpy, xp

import diffiface as di
from diffiface import _cli

FD = di.AutoFiniteDifferences()
EPS = np.finfo(np.float64).eps

# ---- 6. the finite-difference step ------------------------------------------------


@pytest.mark.parametrize(
    "bad", [np.inf, -np.inf, np.nan, 0, 0.0, -1e-3, 1e-300, 1e-14, 9.9e-14, True, "1e-3"]
)
def test_fd_step_must_be_finite_and_at_least_1e_13(bad):
    with pytest.raises(di.DiffifaceValueError) as err:
        di.AutoFiniteDifferences(step=bad)
    msg = str(err.value)
    assert msg.startswith(f"AutoFiniteDifferences(step={bad!r}): step must be a positive float")
    assert "finite and at least 1e-13" in msg and "None" in msg


@pytest.mark.parametrize("step", [1e-13, 1e-3, 0.5, 1, np.float64(1e-4)])
def test_fd_steps_in_range_are_accepted(step):
    b = di.AutoFiniteDifferences(step=step)
    x = np.array([0.3, -0.7])
    g = di.gradient(lambda x: (x**2).sum(), b, x)  # exact for any step: central, quadratic
    np.testing.assert_allclose(g, 2 * x, rtol=2e-3 if step == 1e-13 else 1e-9)


@pytest.mark.parametrize(
    "call",
    [
        lambda b, x: di.gradient(lambda x: (x**2).sum(), b, x),
        lambda b, x: di.jvp(lambda x: x**2, b, x, np.ones_like(x)),
        lambda b, x: di.jacobian(lambda x: x**2, b, x),
    ],
)
def test_fd_step_that_cannot_change_float32_x_is_an_error(call):
    # 1e-10 is fine for float64 but under float32's eps: x + h == x, and the differences
    # were 0 / 0 (NaN with a RuntimeWarning) or silently zero
    b = di.AutoFiniteDifferences(step=1e-10)
    x = np.array([0.5, 2.0], dtype=np.float32)
    with pytest.raises(di.DiffifaceValueError, match=r"step=1e-10 cannot change x in float32"):
        call(b, x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(call(b, x64), call(FD, x64), rtol=1e-5)


# ---- 6. finite differences nested in finite differences ----------------------------


def _d3_sin(b1, b2, b3, t):
    return di.derivative(
        lambda a: di.derivative(lambda s: di.derivative(np.sin, b3, s), b2, a), b1, t
    )


def _third(b1, b2, b3, x):
    """The diagonal of the third-derivative tensor of sum(x**4): 24 x."""
    f = lambda x: (x**4).sum()  # noqa: E731
    t = di.jacobian(
        lambda a: di.jacobian(lambda z: di.gradient(f, b3, z), b2, a), b1, x
    )  # (3, 3, 3)
    return np.einsum("iii->i", t)


X3 = np.array([1 / 3, -0.8, 4 / 3])  # 24 x = [8, -19.2, 32]


DEEP = r"finite differences 3 levels deep .* whose product, .*, is under 1e-13"


def test_three_nested_fd_levels_of_default_steps_are_an_error():
    # before: derivative^3 of sin at 0.3 gave -1.0000000 (-cos(0.3) = -0.9553365) and
    # the jacobian of a jacobian of a gradient [8.50, -19.25, 32.11] for [8, -19.2, 32]
    with pytest.raises(di.DiffifaceValueError, match=DEEP):
        _d3_sin(FD, FD, FD, 0.3)
    with pytest.raises(di.DiffifaceValueError, match=DEEP) as err:
        _third(FD, FD, FD, X3)
    msg = str(err.value)
    assert msg.startswith("gradient(f, AutoFiniteDifferences(method='central', step=None), x):")
    assert "AutoJax()" in msg and "step=1e-3" in msg
    # a second-order operator counts twice
    f = lambda x: (x**4).sum()  # noqa: E731
    with pytest.raises(di.DiffifaceValueError, match=DEEP):
        di.jacobian(lambda z: di.hessian(f, FD, z), FD, X3)
    with pytest.raises(di.DiffifaceValueError, match=DEEP):
        di.derivative(lambda t: di.second_derivative(np.sin, FD, t), FD, 0.3)
    with pytest.raises(di.DiffifaceValueError, match=DEEP):
        di.gradient(lambda z: di.hvp(f, FD, z, np.ones(3)).sum(), FD, X3)


def test_two_levels_of_one_sided_or_tiny_steps_are_an_error():
    # before: forward differences of forward differences gave sin''(0.3) = -0.5, not
    # -0.2955 (steps 1.5e-08 twice: noise eps / 2.2e-16 ~ 1); a Hessian with step=1e-10
    # was exactly 0
    one_sided = di.AutoFiniteDifferences(method="forward")
    with pytest.raises(di.DiffifaceValueError, match=r"2 levels deep .* is under 1e-13"):
        di.derivative(lambda s: di.derivative(np.sin, one_sided, s), one_sided, 0.3)
    tiny = di.AutoFiniteDifferences(step=1e-10)
    with pytest.raises(di.DiffifaceValueError, match=r"2 levels deep .* product, 1e-20"):
        di.hessian(lambda x: (x**3).sum(), tiny, np.array([0.5, 2.0]))
    # one level of each runs, and so does a one-sided Hessian (outer step eps**(1/4))
    np.testing.assert_allclose(di.derivative(np.sin, one_sided, 0.3), np.cos(0.3), rtol=1e-7)
    np.testing.assert_allclose(di.derivative(np.sin, tiny, 0.3), np.cos(0.3), rtol=1e-5)
    H = di.hessian(lambda x: (x**3).sum(), one_sided, np.array([0.5, 2.0]))
    np.testing.assert_allclose(H, np.diag([3.0, 12.0]), atol=1e-5)


def test_one_and_two_fd_levels_still_run():
    t = 0.3
    d2 = di.derivative(lambda s: di.derivative(np.sin, FD, s), FD, t)
    np.testing.assert_allclose(d2, -np.sin(t), rtol=1e-5)  # 1.4e-6: two levels
    np.testing.assert_allclose(di.second_derivative(np.sin, FD, t), -np.sin(t), rtol=1e-7)
    f = lambda x: (x**4).sum()  # noqa: E731
    for b in (FD, di.second_order(FD, FD)):
        np.testing.assert_allclose(di.hessian(f, b, X3), np.diag(12 * X3**2), atol=1e-5)
    jg = di.jacobian(lambda z: di.gradient(f, FD, z), FD, X3)
    np.testing.assert_allclose(jg, np.diag(12 * X3**2), atol=1e-5)
    # after an error inside f the count is back at zero: one level runs again
    with pytest.raises(di.DiffifaceValueError):
        _d3_sin(FD, FD, FD, t)
    np.testing.assert_allclose(di.derivative(np.sin, FD, t), np.cos(t), rtol=1e-9)


def test_coarser_steps_resolve_three_levels():
    coarse = di.AutoFiniteDifferences(step=1e-3)
    np.testing.assert_allclose(_third(coarse, coarse, coarse, X3), 24 * X3, rtol=1e-5)
    np.testing.assert_allclose(_d3_sin(coarse, coarse, coarse, 0.3), -np.cos(0.3), rtol=1e-5)
    # one default level among coarse ones: steps 1e-3 * 6e-6 * 1e-3 = 6e-12, resolved
    np.testing.assert_allclose(_third(coarse, FD, coarse, X3), 24 * X3, rtol=1e-5)
    with pytest.raises(di.DiffifaceValueError, match=DEEP):  # two default levels
        _third(coarse, FD, FD, X3)


@pytest.mark.skipif(not HAVE["autograd"], reason="autograd missing")
def test_fd_over_an_ad_gradient_is_one_level():
    import autograd.numpy as anp

    fd_over_ad = di.second_order(FD, di.AutoAutograd())
    d3 = di.derivative(lambda t: di.second_derivative(anp.sin, fd_over_ad, t), FD, 0.3)
    np.testing.assert_allclose(d3, -np.cos(0.3), rtol=1e-6)


# ---- 6. NumPy masked arrays ---------------------------------------------------------

MASKED = np.ma.array([1.0, 2.0, 3.0], mask=[False, True, False])


def _masked_message(where, name=None):
    name = name or where
    return rf"{where} is a NumPy masked array .*{name}\.filled\(value\).*np\.asarray\({name}\)"


def test_masked_leaves_in_pytrees_w_and_constants_are_errors(backend):
    ns = xp(backend)
    x = np.ones(3)
    with pytest.raises(di.DiffifaceTypeError, match=_masked_message(r"x\['w'\]")) as err:
        di.gradient(lambda d: (d["w"] ** 2).sum(), backend, {"w": MASKED})
    assert str(err.value).startswith(f"gradient(f, {backend!r}, x):")
    with pytest.raises(di.DiffifaceTypeError, match=_masked_message("w")):
        di.vjp(lambda x: x**2, backend, x, MASKED)
    with pytest.raises(
        di.DiffifaceTypeError, match=_masked_message("a leaf c of Constant #0", "c")
    ):
        di.gradient(lambda x, c: (x * c).sum(), backend, x, di.Constant(MASKED))
    ok = di.gradient(lambda x: (x**2 * ns.ones(3)).sum(), backend, MASKED.filled(0.0))
    np.testing.assert_allclose(to_numpy(ok), [2.0, 0.0, 6.0], rtol=1e-6)


@pytest.mark.parametrize("b", ALL_BACKENDS)
def test_masked_x_and_v_are_errors(b):
    f = lambda x: (x**2).sum()  # noqa: E731
    # before: finite differences gave [2, nan, 6], JAX and torch [2, 4, 6] (the mask ignored)
    with pytest.raises(di.DiffifaceTypeError, match=_masked_message("x")):
        di.gradient(f, b, MASKED)
    with pytest.raises(di.DiffifaceTypeError, match=_masked_message("v")):
        di.jvp(lambda x: x**2, b, np.ones(3), MASKED)
    with pytest.raises(di.DiffifaceTypeError, match=_masked_message("v")):
        di.hvp(f, b, np.ones(3), MASKED)


# ---- 7. chunked results equal the dense ones -------------------------------------------

X7 = np.array([0.3, -0.7, 1.1, 0.2, 0.5, -1.3, 0.9])


def _field(ns):
    return lambda x: ns.exp(ns.sin(x) * (x**2).sum()) * ns.cos(x).sum()


def _loss(ns):
    return lambda x: (ns.exp(ns.sin(x) * (x**2).sum()) * ns.cos(x)).sum() * x[0]


def _assert_equal_or_ulps(backend, chunked, dense):
    if isinstance(backend, di.AutoFiniteDifferences) or (
        isinstance(backend, di.SecondOrder) and isinstance(backend.outer, di.AutoFiniteDifferences)
    ):
        np.testing.assert_array_equal(chunked, dense)  # built the same way: bitwise
    else:  # the same products batched otherwise: rounding only (measured <= 3 eps max)
        np.testing.assert_array_less(np.abs(chunked - dense), 16 * EPS * np.abs(dense).max())


@pytest.mark.parametrize("k", [1, 2, 3, 7, 50])
def test_chunked_jacobian_equals_dense(backend, k):
    # before (finite differences): max |chunked - dense| = 5.5e-08 over k = 1, 2, 3
    f, x = _field(xp(backend)), native(backend, X7)
    dense = to_numpy(di.jacobian(f, backend, x))
    chunked = to_numpy(di.jacobian(f, backend, x, chunk_size=k))
    _assert_equal_or_ulps(backend, chunked, dense)
    y, J = di.value_and_jacobian(f, backend, x, chunk_size=k)
    _assert_equal_or_ulps(backend, to_numpy(J), dense)
    _assert_equal_or_ulps(backend, to_numpy(y), to_numpy(di.value_and_jacobian(f, backend, x)[0]))


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_chunked_hessian_equals_dense_and_is_symmetrized_like_it(backend, k):
    # before (finite differences): max |chunked - dense| = 1.3e-05 over k = 1, 2, 3 (max|H|
    # = 146), and the chunked Hessian was not symmetrized (|H - H.T| up to 8.1e-06)
    f, x = _loss(xp(backend)), native(backend, X7)
    dense = to_numpy(di.hessian(f, backend, x))
    chunked = to_numpy(di.hessian(f, backend, x, chunk_size=k))
    _assert_equal_or_ulps(backend, chunked, dense)
    y, g, H = di.value_gradient_and_hessian(f, backend, x, chunk_size=k)
    _assert_equal_or_ulps(backend, to_numpy(H), dense)
    y0, g0, _ = di.value_gradient_and_hessian(f, backend, x)
    _assert_equal_or_ulps(backend, to_numpy(y), to_numpy(y0))  # JAX: f(x) jitted or not
    _assert_equal_or_ulps(backend, to_numpy(g), to_numpy(g0))
    if isinstance(backend, di.AutoFiniteDifferences):
        np.testing.assert_array_equal(chunked, chunked.T)


def _fd_over(inner):
    return pytest.param(
        inner,
        id=f"FD over {inner!r}",
        marks=[]
        if inner.framework == "finite_differences" or HAVE[inner.framework]
        else [pytest.mark.skip(f"{inner.framework} missing")],
    )


@pytest.mark.parametrize(
    "inner",
    [_fd_over(b) for b in (di.AutoJax(), di.AutoTorch(), di.AutoAutograd(), FD)],
)
def test_chunked_hessian_of_finite_differences_over_any_gradient(inner):
    # before: FD over JAX or torch was an error (f(x) evaluated on NumPy arrays),
    # FD over autograd differed by 2.4e-08 from the dense Hessian, FD over FD by 1.3e-05
    b = di.second_order(FD, inner)
    f = _loss(xp(inner))
    dense = di.hessian(f, b, X7)
    for k in (1, 3):
        np.testing.assert_array_equal(di.hessian(f, b, X7, chunk_size=k), dense)
        y, g, H = di.value_gradient_and_hessian(f, b, X7, chunk_size=k)
        np.testing.assert_array_equal(H, dense)
        y0, g0, _ = di.value_gradient_and_hessian(f, b, X7)
        np.testing.assert_array_equal(y, y0)
        np.testing.assert_array_equal(g, g0)


# ---- 8. diffiface bench: where to write, and no silent overwrite --------------------

BENCH = ["bench", "--backends", "fd", "--operators", "gradient", "--repeat", "1"]


def test_bench_refuses_to_overwrite_without_force(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.json").write_text("mine")
    with pytest.raises(SystemExit, match=r"bench\.json already exists; pass --force"):
        _cli.main(BENCH)
    assert (tmp_path / "bench.json").read_text() == "mine"  # before: overwritten
    (tmp_path / "bench.png").write_text("mine too")
    with pytest.raises(SystemExit, match=r"bench\.json and .*bench\.png already exist"):
        _cli.main(BENCH)
    assert (tmp_path / "bench.png").read_text() == "mine too"
    assert _cli.main([*BENCH, "--force"]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())
    assert rows and {r["operator"] for r in rows} == {"gradient"}


def test_bench_writes_to_out_and_not_to_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _cli.main([*BENCH, "--out", "results/run1"]) == 0
    assert (tmp_path / "results" / "run1" / "bench.json").is_file()
    assert not (tmp_path / "bench.json").exists()
    assert "results/run1/bench.json" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="already exists"):
        _cli.main([*BENCH, "--out", "results/run1"])
    assert _cli.main(BENCH) == 0  # the default: the current folder
    assert (tmp_path / "bench.json").is_file()
    (tmp_path / "afile").write_text("")
    with pytest.raises(SystemExit, match="--out afile is a file"):
        _cli.main([*BENCH, "--out", "afile"])
