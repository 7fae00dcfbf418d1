"""MLX where its transforms stop short: an operation without a batching rule (mx.vmap
raises "[Primitive::vmap] Not implemented"), an f without forward mode at a scalar x, an
operation without any derivative rule. f's runs are counted, results checked against
closed forms or float64 differences."""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

import diffiface as di  # noqa: E402

X = np.array([0.3, -0.7, 1.1, 0.5], dtype=np.float32)
TOL = 2e-5  # float32 (tests/helpers.py TOLERANCE)
IDX = [0, 1, 1, 2, 2, 3]  # the entries of x that as_strided((3, 2), (1, 1)) reads


def _strided(x):  # its JVP has no batching rule in mlx 0.32
    return mx.sin(mx.as_strided(x, (3, 2), (1, 1)).reshape(-1)) * 2


def _strided_jac(x):
    jac = np.zeros((6, 4))
    jac[np.arange(6), IDX] = 2 * np.cos(x[IDX])
    return jac


def _counting(g):
    runs = [0]

    def f(x):
        runs[0] += 1
        return g(x)

    return f, runs


def test_mlx_has_no_batching_rule_here():
    x, eye = mx.array(X), mx.eye(4)
    with pytest.raises((RuntimeError, ValueError), match=r"vmap\] Not implemented"):
        mx.eval(mx.vmap(lambda v: mx.jvp(lambda x: [_strided(x)], [x], [v])[1][0])(eye))


@pytest.mark.parametrize("prepared", [False, True])
def test_products_mlx_cannot_batch_run_one_by_one(prepared):
    # a forward Jacobian: one jvp per column, f once each (f(x)'s shape known); before:
    # MLX's vmap error
    b, x = di.AutoMLX(mode="forward"), mx.array(X)
    f, runs = _counting(_strided)
    prep = di.prepare_jacobian(f, b, x) if prepared else None
    for _ in range(3):  # the third call is warm
        runs[0] = 0
        got = di.jacobian(f, b, x, prep=prep)
        np.testing.assert_allclose(np.asarray(got), _strided_jac(X), rtol=TOL, atol=TOL)
    assert runs[0] == X.size
    vs = di.Tangents(*(mx.array(np.eye(4, dtype=np.float32)[i]) for i in range(2)))
    runs[0] = 0
    for k, t in enumerate(di.jvp(f, di.AutoMLX(), x, vs)):  # k jvps, one by one
        np.testing.assert_allclose(np.asarray(t), _strided_jac(X)[:, k], rtol=TOL, atol=TOL)
    assert runs[0] == 2


def _scatter_np(x):
    z = x.copy()
    z[[0, 2]] += x[:2]
    return np.sin(z) * x


def _scatter(x):  # x.at[i].add: its JVP is "not yet implemented", its VJP is fine
    return mx.sin(x.at[mx.array([0, 2])].add(x[:2])) * x


@pytest.mark.parametrize("prepared", [False, True])
def test_second_derivative_without_forward_mode_runs_f_once(prepared):
    # reverse over reverse in vmapped passes (before: 5 runs of f per call)
    xs = X.astype(np.float64)
    f, runs = _counting(lambda s: _scatter(s * mx.array(X)))
    s, h = 0.8, 1e-4
    y0, yp, ym = (_scatter_np(v * xs) for v in (s, s + h, s - h))
    want_d2 = (yp - 2 * y0 + ym) / h**2  # float64 differences: error ~h^2
    want_d = (yp - ym) / (2 * h)
    b, x = di.AutoMLX(), mx.array(np.float32(s))
    prep = di.prepare_second_derivative(f, b, x) if prepared else None
    for _ in range(3):
        runs[0] = 0
        y, d, d2 = di.value_derivative_and_second_derivative(f, b, x, prep=prep)
        np.testing.assert_allclose(np.asarray(y), y0, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(d), want_d, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(d2), want_d2, rtol=1e-3, atol=1e-3)
    assert runs[0] == 1


def _inverse(x):  # Inverse has neither a JVP nor a VJP in mlx 0.32
    return mx.linalg.inv(x.reshape(2, 2) + 3 * mx.eye(2), stream=mx.cpu).reshape(-1)


@pytest.mark.parametrize("op", ["jacobian", "gradient", "jvp", "hessian"])
def test_an_operation_without_derivative_rules_is_a_clear_error(op):
    x = mx.array(X)
    g = _inverse if op in ("jacobian", "jvp") else (lambda x: _inverse(x).sum())
    args = (x,) if op == "jvp" else ()
    with pytest.raises(di.DiffifaceTypeError, match=r"(?s)in neither.*Inverse") as got:
        getattr(di, op)(g, di.AutoMLX(), x, *args)
    assert str(got.value).startswith(f"{op}(f, AutoMLX(mode=None), x")
