"""A warm plan of pytree arguments (the LEAVES form, ``core.signature.Native``) takes a
call only when x, the tangent and the Constant contexts match it: another container
(an OrderedDict or a defaultdict where the plan has a dict, an extra key), a leaf of
another shape, dtype or kind (NumPy where the plan's are native) goes to the general
path, which raises the prepared call's MismatchError or, unprepared, gives the result
at the call's own arguments. Every backend; results checked against closed forms.
Counted, never timed: Python calls inside diffiface per warm call."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from helpers import python_calls

import diffiface as di
from diffiface.core import shell

N = 6
TOL = {"rtol": 1e-10, "atol": 1e-12}
BACKENDS = ["jax", "torch", "autograd", "fd"]
OPS = ["gradient", "vjp", "hvp"]


def kit(fw: str):
    """(backend, xp, to native, to NumPy)."""
    if fw == "jax":
        jax = pytest.importorskip("jax")
        jax.config.update("jax_enable_x64", True)
        return di.AutoJax(), jax.numpy, jax.numpy.asarray, np.asarray
    if fw == "torch":
        torch = pytest.importorskip("torch")
        return (
            di.AutoTorch(),
            torch,
            torch.from_numpy,
            lambda a: np.asarray(a.detach() if hasattr(a, "detach") else a),
        )
    if fw == "autograd":
        anp = pytest.importorskip("autograd.numpy")
        return di.AutoAutograd(), anp, np.asarray, np.asarray
    return di.AutoFiniteDifferences(), np, np.asarray, np.asarray


def functions(xp):
    def s(x):  # scalar: gradient and hvp
        out = xp.sum(xp.sin(x["a"]) * x["b"]) + xp.sum(x["a"] ** 2)
        return out + xp.sum(x["c"] ** 2) if "c" in x else out

    def v(x):  # vector: vjp
        out = xp.sin(x["a"]) * x["b"]
        return out + x["c"] ** 2 if "c" in x else out

    def sc(x, c):  # with a Constant
        return s(x) * xp.sum(c)

    return s, v, sc


def closed(op: str, x: dict, t, scale: float = 1.0) -> dict:
    """The closed form of ``op`` at x (NumPy leaves) along t, times ``scale``."""
    a, b = x["a"], x["b"]
    if op == "gradient":
        out = {"a": np.cos(a) * b + 2 * a, "b": np.sin(a)}
        if "c" in x:
            out["c"] = 2 * x["c"]
    elif op == "vjp":
        out = {"a": np.cos(a) * b * t, "b": np.sin(a) * t}
        if "c" in x:
            out["c"] = 2 * x["c"] * t
    else:
        ta, tb = t["a"], t["b"]
        out = {"a": (2 - np.sin(a) * b) * ta + np.cos(a) * tb, "b": np.cos(a) * ta}
        if "c" in x:
            out["c"] = 2 * t["c"]
    return {k: scale * o for k, o in out.items()}


def point(n: int = N, dtype=np.float64, extra: bool = False) -> tuple[dict, dict, np.ndarray]:
    """x, a tangent like x and a cotangent like v(x), as NumPy (float64 values)."""
    a = np.linspace(-1.0, 1.0, n)
    x = {"a": a, "b": np.cos(a) + 2.0}
    t = {"a": np.sin(3 * a), "b": np.cos(2 * a)}
    if extra:
        x["c"], t["c"] = a / 3, a + 1.0
    cast = lambda d: {k: u.astype(dtype) for k, u in d.items()}  # noqa: E731
    return cast(x), cast(t), np.cos(5 * a).astype(dtype)


# a call unlike the plan's (a dict of two float64 native leaves of N):
# name -> (x, t, w) as NumPy, the container, the leaves' kind ("native" or "numpy")
UNLIKE = {
    "OrderedDict": (point(), collections.OrderedDict, "native"),
    "defaultdict": (point(), lambda d: collections.defaultdict(list, d), "native"),
    "an extra key": (point(extra=True), dict, "native"),
    "another shape": (point(N + 2), dict, "native"),
    "another dtype": (point(dtype=np.float32), dict, "native"),
    "NumPy leaves": (point(), dict, "numpy"),
}


def arguments(fw: str, case: str | None, op: str):
    """(x, the operator's tangent, the NumPy x and tangent) of the plan's call (None)
    or of an unlike one."""
    _, _, native, _ = kit(fw)
    (x, t, w), container, kind = UNLIKE[case] if case else (point(), dict, "native")
    conv = native if kind == "native" else np.asarray
    tree = lambda d: container({k: conv(u) for k, u in d.items()})  # noqa: E731
    tangent = {"gradient": None, "vjp": w, "hvp": t}[op]
    made = None if tangent is None else (conv(w) if op == "vjp" else tree(t))
    return tree(x), made, x, tangent


def call(op, f, b, x, t, **kw):
    return getattr(di, op)(f, b, x, **kw) if t is None else getattr(di, op)(f, b, x, t, **kw)


def check(got, want: dict, fw: str, like) -> None:
    to_numpy = kit(fw)[3]
    assert type(got) is type(like)
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == like[k].dtype
        tol = TOL if like[k].dtype == np.float64 else {"rtol": 2e-5, "atol": 1e-6}
        if fw == "fd":
            tol = {"rtol": 1e-5, "atol": 1e-6} if like[k].dtype == np.float64 else {"atol": 1e-2}
        np.testing.assert_allclose(to_numpy(got[k]), want[k], **tol)


@pytest.fixture
def entered(monkeypatch):
    """The number of calls that took the general path (``shell.enter``)."""
    count = [0]
    real = shell.enter

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(shell, "enter", counting)
    return count


def skip_same(fw: str, case: str) -> None:
    if case == "NumPy leaves" and fw in ("autograd", "fd"):
        pytest.skip("NumPy is the native kind of this backend")


@pytest.mark.parametrize("case", sorted(UNLIKE))
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("fw", BACKENDS)
def test_an_unlike_call_to_a_prep_is_a_mismatch(fw, op, case, entered):
    """A prepared call unlike the preparation: the general path names the mismatch,
    after calls like it ran (and still run) without it."""
    skip_same(fw, case)
    b, xp, _, _ = kit(fw)
    s, v, _ = functions(xp)
    f = v if op == "vjp" else s
    x, t, x_np, t_np = arguments(fw, None, op)
    prep = getattr(di, f"prepare_{op}")(f, b, x, *(() if t is None else (t,)))
    for _ in range(2):
        check(call(op, f, b, x, t, prep=prep), closed(op, x_np, t_np), fw, x)
    runs = entered[0]
    ux, ut, _, _ = arguments(fw, case, op)
    with pytest.raises(di.MismatchError, match="prep=prep"):
        call(op, f, b, ux, ut, prep=prep)
    assert entered[0] == runs + 1  # (the general path raised it)
    check(call(op, f, b, x, t, prep=prep), closed(op, x_np, t_np), fw, x)


@pytest.mark.parametrize("case", sorted(UNLIKE))
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("fw", BACKENDS)
def test_an_unlike_call_to_a_kept_plan_gets_its_own_result(fw, op, case, entered):
    """An unprepared call unlike f's kept plan: the general path, and the result at
    the call's own arguments (its container, its dtype)."""
    skip_same(fw, case)
    b, xp, _, _ = kit(fw)
    s, v, _ = functions(xp)
    f = v if op == "vjp" else s
    x, t, x_np, t_np = arguments(fw, None, op)
    for _ in range(3):  # (the plan is kept, then taken)
        check(call(op, f, b, x, t), closed(op, x_np, t_np), fw, x)
    runs = entered[0]
    check(call(op, f, b, x, t), closed(op, x_np, t_np), fw, x)
    kept = entered[0] == runs  # (fd keeps no plan of native leaves for vjp and hvp)
    ux, ut, ux_np, ut_np = arguments(fw, case, op)
    check(call(op, f, b, ux, ut), closed(op, ux_np, ut_np), fw, ux)
    if fw in ("jax", "torch"):
        assert kept
    if kept:
        assert entered[0] == runs + 1


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize("fw", BACKENDS)
def test_a_constant_of_another_shape(fw, prepared, entered):
    """A Constant context's leaves are matched with x's: another shape is the prep's
    mismatch, or (unprepared) the result with the call's constant."""
    b, xp, native, _ = kit(fw)
    _, _, sc = functions(xp)
    x, _, x_np, _ = arguments(fw, None, "gradient")
    c2, c3 = di.Constant(native(np.ones(2))), di.Constant(native(np.ones(3)))
    prep = di.prepare_gradient(sc, b, x, c2) if prepared else None
    for _ in range(3):
        check(di.gradient(sc, b, x, c2, prep=prep), closed("gradient", x_np, None, 2.0), fw, x)
    runs = entered[0]
    if prepared:
        with pytest.raises(di.MismatchError, match="contexts"):
            di.gradient(sc, b, x, c3, prep=prep)
    else:
        check(di.gradient(sc, b, x, c3), closed("gradient", x_np, None, 3.0), fw, x)
    assert entered[0] == runs + 1


@pytest.mark.parametrize("prepared", [True, False])
def test_jax_leaves_of_another_weak_type_are_taken(prepared, entered):
    """JAX: a leaf whose aval differs from the plan's by its weak type alone has the
    plan's shape and dtype: the plan takes it, as before (jit traces it once)."""
    b, jnp, _, _ = kit("jax")
    s, _, _ = functions(jnp)
    strong = {"a": jnp.asarray(0.3, dtype=jnp.float64), "b": jnp.asarray(1.5, dtype=jnp.float64)}
    weak = {"a": jnp.asarray(0.3), "b": jnp.asarray(1.5)}
    assert weak["a"].weak_type and not strong["a"].weak_type
    want = closed("gradient", {"a": np.float64(0.3), "b": np.float64(1.5)}, None)
    prep = di.prepare_gradient(s, b, strong) if prepared else None
    for _ in range(3):
        check(di.gradient(s, b, strong, prep=prep), want, "jax", strong)
    runs = entered[0]
    for _ in range(2):
        got = di.gradient(s, b, weak, prep=prep)
        for k in want:
            np.testing.assert_allclose(np.asarray(got[k]), want[k], **TOL)
    assert entered[0] == runs


@pytest.mark.parametrize("op", ["hvp", "vjp"])
@pytest.mark.parametrize("fw", ["jax", "torch"])
def test_a_tangent_unlike_the_prep(fw, op, entered):
    """The tangent is matched with x: one of another dtype or container goes to the
    general path, which names the prepared call."""
    b, xp, native, _ = kit(fw)
    s, v, _ = functions(xp)
    f = v if op == "vjp" else s
    x, t, _, _ = arguments(fw, None, op)
    prep = getattr(di, f"prepare_{op}")(f, b, x, t)
    call(op, f, b, x, t, prep=prep)
    if op == "vjp":
        unlike = [native(np.ones(N, dtype=np.float32)), native(np.ones(N + 1))]
    else:
        unlike = [
            {k: native(np.ones(N, dtype=np.float32)) for k in ("a", "b")},
            collections.OrderedDict((k, native(np.ones(N))) for k in ("a", "b")),
        ]
    for u in unlike:
        runs = entered[0]
        with pytest.raises((di.DiffifaceValueError, di.DiffifaceTypeError), match="prep=prep"):
            call(op, f, b, x, u, prep=prep)
        assert entered[0] == runs + 1


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize("fw", ["jax", "torch"])
def test_python_calls_of_a_warm_call_with_a_constant(fw, prepared):
    """A dict x with a Constant context, gradient: one walk matches x and the
    constant's leaves. Before (ec0ddb6), prepared / unprepared: torch 18 / 19, JAX
    14 / 16 (a frame per helper, generator expressions over the contexts); after:
    11 / 12 and 6 / 8."""
    b, xp, native, _ = kit(fw)
    _, _, sc = functions(xp)
    x, _, x_np, _ = arguments(fw, None, "gradient")
    c = di.Constant(native(np.ones(2)))
    prep = di.prepare_gradient(sc, b, x, c) if prepared else None
    go = lambda: di.gradient(sc, b, x, c, prep=prep)  # noqa: E731
    check(go(), closed("gradient", x_np, None, 2.0), fw, x)
    bound = {"torch": (11, 12), "jax": (6, 8)}[fw][0 if prepared else 1]
    assert python_calls(go) <= bound
