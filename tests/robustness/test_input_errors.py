"""Bad input gets a clear error naming the fix, the same on every backend: wrong
arguments, odd leaves (object, bool, masked arrays), mismatched tangents, f that
drops the derivative (conversions to NumPy or Python numbers), JAX without x64."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import ALL_BACKENDS
from helpers import HAVE, native, to_numpy, xp

import diffiface as di

X = np.array([1.0, 2.0, 3.0])


def test_backend_class_instead_of_instance():
    with pytest.raises(TypeError, match=r"Did you mean AutoJax\(\)\?"):
        di.gradient(lambda x: x.sum(), di.AutoJax, X)


def test_arguments_in_the_wrong_order():
    with pytest.raises(TypeError, match="f first, then the backend"):
        di.gradient(di.AutoTorch(), lambda x: x.sum(), X)


def test_f_not_callable():
    with pytest.raises(TypeError, match="f must be callable"):
        di.gradient(3.0, di.AutoFiniteDifferences(), X)


@pytest.mark.parametrize("cls", [di.AutoJax, di.AutoTorch, di.AutoAutograd])
def test_unknown_mode(cls):
    with pytest.raises(ValueError, match=r"mode must be None, 'forward' or 'reverse'"):
        cls(mode="backwards")


def test_unknown_method_and_bad_step():
    with pytest.raises(ValueError, match="method must be 'central', 'forward' or 'backward'"):
        di.AutoFiniteDifferences(method="centered")
    with pytest.raises(ValueError, match="step must be a positive float"):
        di.AutoFiniteDifferences(step=-1e-3)


def test_abstract_backend_not_instantiable():
    with pytest.raises(TypeError, match="cannot be instantiated"):
        di.AbstractBackend()


def test_gradient_of_non_scalar(backend):
    with pytest.raises(ValueError, match=r"got shape \(3,\)\. Reduce it with \.sum\(\)"):
        di.gradient(lambda x: x * 2, backend, X)


def test_gradient_of_size_one_output(backend):
    with pytest.raises(ValueError, match=r"got shape \(1,\).*reshape\(\(\)\)"):
        di.gradient(lambda x: x[:1] * 2, backend, X)


@pytest.mark.parametrize(
    "bad",
    [lambda x: None, lambda x: (x.sum(), x.sum()), lambda x: "loss"],
    ids=["None", "tuple", "str"],
)
def test_output_not_an_array(backend, bad):
    with pytest.raises(TypeError, match="f must return"):
        di.gradient(bad, backend, X)
    if bad(X) is not None and type(bad(X)) is tuple:  # a pytree output: jvp takes it
        with pytest.raises(TypeError, match="pass has_aux=True"):
            di.gradient(bad, backend, X)
        return
    with pytest.raises(TypeError, match="f must return"):
        di.jvp(bad, backend, X, X)


@pytest.mark.parametrize(
    ("leaf", "words"),
    [
        (np.array([1, 2]), "int64"),
        (np.array([True, False]), "bool"),
        (3, "int"),
        ("abc", "str"),
    ],
)
def test_non_float_leaves_name_the_path(backend, leaf, words):
    x = {"ok": X, "bad": [leaf]}
    with pytest.raises(
        TypeError, match=rf"x\['bad'\]\[0\] must be a floating-point array.*{words}"
    ):
        di.gradient(lambda t: t["ok"].sum(), backend, x)


def test_integer_native_leaf(ad_backend):
    if ad_backend.framework == "autograd":
        pytest.skip("NumPy is autograd's native kind, covered above")
    x = native(ad_backend, np.array([1, 2]))
    with pytest.raises(TypeError, match="cast it"):
        di.gradient(lambda x: x.sum(), ad_backend, x)


@pytest.mark.parametrize(
    ("v", "what"),
    [
        (np.ones(4), r"shape of x: expected \(3,\), got \(4,\)"),
        (np.ones(3, dtype=np.float32), "dtype of x: expected float64, got float32"),
        ([np.ones(3)], "structure of x"),
    ],
)
def test_tangent_mismatch(backend, v, what):
    with pytest.raises(ValueError, match=what):
        di.jvp(lambda x: x * 2, backend, X, v)


def test_tangent_mismatch_in_a_pytree_names_the_path(backend):
    x = {"a": X, "b": np.ones(2)}
    v = {"a": X, "b": np.ones(5)}
    with pytest.raises(ValueError, match=r"expected \(2,\), got \(5,\) at \['b'\]"):
        di.jvp(lambda t: t["a"] * t["b"].sum(), backend, x, v)


@pytest.mark.parametrize(
    ("w", "what"),
    [
        (np.ones(4), r"shape of f\(x\): expected \(3,\), got \(4,\)"),
        (np.ones(3, dtype=np.float32), r"dtype of f\(x\): expected float64, got float32"),
        ({"w": np.ones(3)}, "w must have the structure"),
    ],
)
def test_cotangent_mismatch(backend, w, what):
    with pytest.raises(ValueError, match=what):
        di.vjp(lambda x: x * 2, backend, X, w)


def test_python_float_cotangent_for_scalar_output(backend):
    g = di.vjp(lambda x: (x**2).sum(), backend, X, 2.0)
    np.testing.assert_allclose(g, 4 * X, rtol=1e-6)


def test_jacobian_of_a_pytree(backend):
    """A pytree x: one Jacobian per leaf, in x's structure (as jax.jacobian nests)."""
    ja, jb = di.jacobian(lambda t: t[0] * t[1], backend, (X, 2 * X))
    np.testing.assert_allclose(np.asarray(ja), np.diag(2 * X), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jb), np.diag(X), rtol=1e-6)


def test_derivative_of_an_array(backend):
    with pytest.raises(ValueError, match="x must be a scalar"):
        di.derivative(lambda x: x * 2, backend, X)


def test_context_must_be_constant(backend):
    with pytest.raises(TypeError, match=r"Wrap extra arguments of f as di\.Constant"):
        di.gradient(lambda x, c: (c * x).sum(), backend, X, 3.0)


def test_converting_to_numpy_is_an_error(ad_backend):
    f = lambda x: np.asarray(x).sum() * x.sum()  # noqa: E731
    if ad_backend.framework == "autograd":
        # autograd boxes survive np.asarray as an object array: the result stays right
        np.testing.assert_allclose(di.gradient(f, ad_backend, X), 2 * X.sum(), rtol=1e-12)
        return
    # MLX converts silently: the NumPy result is caught as no array of the framework
    with pytest.raises(TypeError, match=r"f must (use|compute with) the framework's array ops"):
        di.gradient(f, ad_backend, X)


def test_converting_to_a_python_float(ad_backend):
    """The same error on every backend (torch itself would only warn and drop the graph)."""
    f = lambda x: float(x.sum()) * x.sum()  # noqa: E731
    with pytest.raises(TypeError, match="f converted"):
        di.gradient(f, ad_backend, X)


def test_jax_float64_without_x64():
    jax = pytest.importorskip("jax")
    with jax.enable_x64(False):
        with pytest.raises(ValueError, match=r"jax_enable_x64.*astype\(np\.float32\)"):
            di.gradient(lambda x: (x**2).sum(), di.AutoJax(), X)
        with pytest.raises(ValueError, match="a Constant holds float64"):
            di.gradient(
                lambda x, c: (c * x).sum(), di.AutoJax(), X.astype(np.float32), di.Constant(X)
            )
        g = di.gradient(lambda x: (x**2).sum(), di.AutoJax(), X.astype(np.float32))
        assert g.dtype == np.float32
        assert not jax.config.jax_enable_x64
    assert jax.config.jax_enable_x64  # diffiface changed nothing


def test_jax_python_control_flow_under_jit():
    pytest.importorskip("jax")

    def f(x):
        if x.sum() > 0:
            return (x**2).sum()
        return x.sum()

    with pytest.raises(TypeError, match=r"jnp\.where or jax\.lax\.cond"):
        di.gradient(f, di.AutoJax(), X)


def test_missing_framework_names_the_pip_command():

    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np, diffiface as di\n"
        "try:\n"
        "    di.gradient(lambda x: x.sum(), di.AutoTorch(), np.ones(2))\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "FrameworkMissingError AutoTorch() needs torch" in out.stdout
    assert 'pip install "diffiface[torch]"' in out.stdout


def test_same_message_on_every_backend():
    messages = set()
    for backend in (di.AutoJax(), di.AutoTorch(), di.AutoAutograd(), di.AutoFiniteDifferences()):
        pytest.importorskip(
            backend.framework if backend.framework != "finite_differences" else "numpy"
        )
        try:
            di.gradient(lambda x: x * 2, backend, X)
        except ValueError as exc:
            messages.add(str(exc).replace(repr(backend), "B"))
    assert len(messages) == 1, messages
    _ = xp


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


X3 = np.array([0.3, -0.7, 1.1])


def test_object_and_bool_leaves_name_path_and_dtype(backend):
    with pytest.raises(TypeError, match=r"x\['o'\].*object"):
        di.gradient(lambda d: d["a"].sum(), backend, {"a": X3, "o": np.array([1, "s"], object)})
    with pytest.raises(TypeError, match=r"x\[1\].*bool"):
        di.gradient(lambda t: t[0].sum(), backend, (native(backend, X3), native(backend, X3 > 0)))


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
@pytest.mark.parametrize("convert", ["float", "item"])
def test_strict_turns_torch_scalar_conversions_into_errors(convert):
    import torch

    x = torch.tensor(X3)
    to_py = float if convert == "float" else (lambda t: t.item())
    f = lambda x: to_py(x.sum()) * x.sum()  # noqa: E731
    with di.options(strict=True):
        with pytest.raises(TypeError, match=f"carries the derivative with Tensor.*{convert}"):
            di.gradient(f, di.AutoTorch(), x)
        with pytest.raises(TypeError, match="drops the derivative"):
            di.jvp(lambda x: f(x) * x, di.AutoTorch(), x, x)
        g = di.gradient(lambda x: (x**2).sum(), di.AutoTorch(), x)  # others unaffected
    np.testing.assert_allclose(g.numpy(), 2 * X3)


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
@pytest.mark.parametrize("convert", ["float", "item", "tolist", "numpy"])
def test_torch_scalar_conversions_are_errors_by_default(convert):
    """Defect class 6 of the oracle issue: a derivative dropped by a conversion to a number
    is an error without strict (JAX and autograd raise on the same f); a detached value
    (torch's stop_gradient) is not; the check runs on f's first call only."""
    import torch

    from diffiface.backends.torch import graph as _torch_graph

    x = torch.tensor(X3)
    to_py = {
        "float": float,
        "item": lambda t: t.item(),
        "tolist": lambda t: sum(t.reshape(1).tolist()),
        "numpy": lambda t: float(t.numpy()),
    }[convert]
    f = lambda x: to_py(x.sum()) * x.sum()  # noqa: E731
    for op in (di.gradient, di.hessian):
        with pytest.raises(TypeError, match="drops the derivative"):
            op(f, di.AutoTorch(), x)
    with pytest.raises(TypeError, match="drops the derivative"):
        di.vjp(lambda x: f(x) * x, di.AutoTorch(), x, x)
    stop = lambda x: to_py(x.sum().detach()) * x.sum()  # noqa: E731
    for _ in range(2):  # (an f after another object of its code: its own plan by its 2nd call)
        g = di.gradient(stop, di.AutoTorch(), x)
        np.testing.assert_allclose(g.numpy(), np.full(3, X3.sum()))
    entered = []
    real = _torch_graph.Watch.__enter__
    _torch_graph.Watch.__enter__ = lambda self: entered.append(1) or real(self)
    try:
        di.gradient(stop, di.AutoTorch(), x)  # already checked: no mode on the hot path
    finally:
        _torch_graph.Watch.__enter__ = real
    assert entered == []


def test_jax_float64_tangent_without_x64():
    jax = pytest.importorskip("jax")
    with jax.enable_x64(False):
        x = jax.numpy.ones(2)
        with pytest.raises(ValueError, match="v is float64, but JAX has x64 disabled"):
            di.jvp(lambda x: x**2, di.AutoJax(), x, np.ones(2))


# ---- found in review of the operator shell ---------------------------------------------------
def _prepared(op, f, b, x):
    return getattr(di, f"prepare_{op}")(f, b, x, x if op != "vjp" else f(x))


@pytest.mark.parametrize("op", ["jvp", "vjp", "hvp"])
@pytest.mark.parametrize("prepared", [False, True], ids=["unprep", "prep"])
def test_a_none_tangent_is_a_clear_error(backend, op, prepared):
    """None is a (bad) tangent: the shell must not take it for "no tangent"."""
    ns = xp(backend)

    def f(x):
        return ns.sin(x) if op != "hvp" else ns.sin(x).sum()

    x = native(backend, np.array([0.3, 0.6]))
    kw = {"prep": _prepared(op, f, backend, x)} if prepared else {}
    with pytest.raises((di.DiffifaceTypeError, di.DiffifaceValueError)):
        getattr(di, op)(f, backend, x, None, **kw)


def test_a_bad_chunk_size_is_named_first():
    x = np.array([1.0, 2.0])
    with pytest.raises(di.DiffifaceValueError, match=r"jacobian.*chunk_size must be a positive"):
        di.jacobian(np.sin, "not a backend", x, chunk_size=0)
    with pytest.raises(di.DiffifaceTypeError, match=r"^hessian\(.*chunk_size must be a positive"):
        di.hessian(lambda x: (x**2).sum(), di.AutoFiniteDifferences(), x, chunk_size=1.5)


def test_a_bad_chunk_size_across_frameworks_names_the_users_call():
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    b = di.second_order(di.AutoFiniteDifferences(), di.AutoTorch())
    with pytest.raises(di.DiffifaceValueError, match=r"^hessian\(f, SecondOrder"):
        di.hessian(lambda x: (x**2).sum(), b, x, chunk_size=0)


def _nested(a, depth):
    for _ in range(depth):
        a = [a]
    return a


def _innermost(t):
    while isinstance(t, list):
        t = t[0]
    return t


@pytest.mark.parametrize("where", ["x", "the tangent", "a context"])
def test_a_pytree_nested_too_deep_names_the_limit(backend, where):
    """optree flattens 1000 levels at most: a deeper x, tangent or context raised a bare
    RecursionError."""
    x = native(backend, X)
    deep = _nested(x, 3000)
    form = {
        "x": lambda: di.gradient(lambda t: (_innermost(t) ** 2).sum(), backend, deep),
        "the tangent": lambda: di.jvp(lambda t: t**2, backend, x, deep),
        "a context": lambda: di.gradient(lambda t, c: (t**2).sum(), backend, x, di.Constant(deep)),
    }[where]
    msg = rf"{where} is nested more than 1000 levels deep.*flatter pytree"
    with pytest.raises(di.DiffifaceValueError, match=msg):
        form()


@pytest.mark.skipif(not HAVE["autograd"], reason="autograd missing")
def test_autograd_takes_what_optree_flattens():
    """AutoAutograd opened x's containers recursively: RecursionError at 900 levels,
    which the other backends take."""
    deep = _nested(X, 900)
    g = di.gradient(lambda t: (_innermost(t) ** 3).sum(), di.AutoAutograd(), deep)
    np.testing.assert_allclose(_innermost(g), 3 * X**2, rtol=1e-12)
