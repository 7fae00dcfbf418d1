"""Argument checks and error messages, one grammar for every backend.

A message reads: the call form, what was expected, what came, the fix.
"""

from __future__ import annotations

import numbers
import os
import sys
import threading
import warnings
import weakref
from typing import Any, NoReturn

from ._arrays import framework_of, named, registered
from ._backend_types import AbstractBackend, AutoSparse, SecondOrder
from ._errors import (
    DiffifaceTypeError,
    DiffifaceValueError,
    DisconnectedWarning,
    FrameworkMissingError,
    RecompileWarning,
)
from .core.operator import OPS

__all__ = [
    "DiffifaceTypeError",
    "DiffifaceValueError",
    "DisconnectedWarning",
    "FrameworkMissingError",
    "RecompileWarning",
]

ERRORS = (DiffifaceTypeError, DiffifaceValueError)  # the errors whose message starts with a call

# how the user wrote a call of an operator (or its prepare_) that takes a tangent
_CALL = {
    name: f"{{op}}(f, {{b}}, x, {d.tangent})"
    for d in OPS.values()
    if d.tangent is not None
    for name in (d.name, f"prepare_{d.family}")
}


def call_form(op: str, backend: Any) -> str:
    b = repr(backend) if isinstance(backend, AbstractBackend) else "backend"
    return _CALL.get(op, "{op}(f, {b}, x)").format(op=op, b=b)


def with_prep(form: str) -> str:
    """The call form of a prepared call: ``gradient(f, b, x, prep=prep)``."""
    return f"{form[:-1]}, prep=prep)"


def restate(exc: BaseException, call: str, *internal: str) -> None:
    """Start ``exc``'s message with ``call``, the call the user wrote, where it starts
    with one of the ``internal`` call forms (an operator diffiface called on the way:
    a prepare_ function's operator, the inner gradient of finite differences over AD,
    ...)."""
    msg = exc.args[0] if exc.args and isinstance(exc.args[0], str) else None
    if msg is None:
        return
    for old in internal:
        if msg.startswith(old) and old != call:
            exc.args = (call + msg[len(old) :], *exc.args[1:])
            return


def check_backend(op: str, f: Any, backend: Any, second: bool = False) -> None:
    if isinstance(backend, type) and issubclass(backend, AbstractBackend):
        raise DiffifaceTypeError(
            f"{op}(f, {backend.__name__}, x): backend must be an instance, got the class "
            f"{backend.__name__}. Did you mean {backend.__name__}()?"
        )
    if isinstance(backend, AutoSparse) and isinstance(backend.backend, SecondOrder):
        if not second:
            raise DiffifaceTypeError(
                f"{op}(f, {backend!r}, x): a sparse SecondOrder backend is for hessian and "
                f"hvp. Use a first-order one: {op}(f, AutoSparse({backend.backend.inner!r}), x)."
            )
    if isinstance(backend, SecondOrder) and not second:
        raise DiffifaceTypeError(
            f"{op}(f, {backend!r}, x): a SecondOrder backend is for hvp, hessian and "
            f"second_derivative. Use its inner backend: {op}(f, {backend.inner!r}, x)."
        )
    if not isinstance(backend, AbstractBackend):
        raise DiffifaceTypeError(
            f"{op}(f, backend, x): backend must be a diffiface backend such as AutoJax(), "
            f"AutoTorch(), AutoAutograd() or AutoFiniteDifferences(), got "
            f"{type(backend).__name__}. Note the order: f first, then the backend."
        )
    if not callable(f):
        raise DiffifaceTypeError(
            f"{call_form(op, backend)}: f must be callable, got {type(f).__name__}. "
            "Pass the function first, then the backend, then the point."
        )


def describe(leaf: Any) -> str:
    """Short type/shape/dtype description of a leaf for messages."""
    shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    name = f"{type(leaf).__module__.split('.')[0]}.{type(leaf).__name__}"
    if shape is None:
        return type(leaf).__name__
    return f"{name} of shape {tuple(shape)} and dtype {dtype_name(dtype)}"


def bad_leaf(op: str, backend: Any, path: str, leaf: Any, fix: str) -> DiffifaceTypeError:
    return DiffifaceTypeError(
        f"{call_form(op, backend)}: {path} must be a floating-point array, got "
        f"{describe(leaf)}. {fix}"
    )


def mismatch(op: str, backend: Any, name: str, what: str, expected: Any, got: Any):
    if what == "dtype":
        expected, got = dtype_name(expected), dtype_name(got)
    return DiffifaceValueError(
        f"{call_form(op, backend)}: {name} must have the {what} of {_ref(name)}: expected "
        f"{expected}, got {got}. Build {name} like {_ref(name)} (e.g. with zeros_like)."
    )


def dtype_name(dtype: Any) -> str:
    """``float32`` for numpy, jax, torch and MLX dtypes alike."""
    text = str(dtype)
    module, _, name = text.rpartition(".")  # torch.float32, mlx.core.float32
    return name if all(part.isidentifier() for part in module.split(".")) else text


def _ref(name: str) -> str:
    return "f(x)" if name == "w" else "x"


def not_scalar(op: str, backend: Any, shape: tuple) -> DiffifaceValueError:
    if tuple(shape) and all(d == 1 for d in shape):
        fix = "Make it a true scalar with .reshape(()) or .sum(), or use jacobian / vjp."
    else:
        fix = "Reduce it with .sum(), or use jacobian / vjp."
    return DiffifaceValueError(
        f"{call_form(op, backend)}: f must return a scalar (shape ()), got shape "
        f"{tuple(shape)}. {fix}"
    )


def not_array(op: str, backend: Any, y: Any, kind: str, trees: bool = False) -> DiffifaceTypeError:
    """f's output is no array of the backend's framework. ``trees``: ``op`` also takes a
    pytree (tuple, list, dict) of arrays."""
    used = framework_of(y)
    if used not in (None, "numpy"):
        clear = foreign_f(op, backend, used, f"f returned a {describe(y)}")
        if clear is not None:
            return clear
    empty = isinstance(y, tuple | list | dict) and not y
    got = f"an empty {type(y).__name__}" if empty else describe(y)
    if trees:
        want = f"{kind}, or a pytree (tuple, list, dict) of them"
        banned = "no float(), .item(), NumPy conversion or None"
    else:
        want, banned = kind, "no float(), .item(), NumPy conversion, tuples or None"
    pair = type(y) is tuple and len(y) == 2
    hint = " If f returns (output, aux), pass has_aux=True." if pair else ""
    return DiffifaceTypeError(
        f"{call_form(op, backend)}: f must return {want}, got {got}. f must compute with "
        f"the framework's array ops all the way to its result ({banned}).{hint}"
    )


def left_framework(op: str, backend: Any, cause: BaseException) -> DiffifaceTypeError:
    return DiffifaceTypeError(
        f"{call_form(op, backend)}: f converted its input to NumPy or a Python number "
        f"({type(cause).__name__}). f must use the framework's array ops "
        f"(jax.numpy for AutoJax, torch for AutoTorch, autograd.numpy for AutoAutograd) "
        f"so that the derivative can flow."
    )


def framework_error(op: str, backend: Any, exc: BaseException) -> DiffifaceTypeError | None:
    """A clear error for a raw framework error that says f used another framework's
    functions, or changed its input in place under autograd; None for any other (and
    for diffiface's own errors, which already say what is wrong)."""
    if isinstance(exc, DiffifaceTypeError):
        return None
    msg = str(exc)
    call = call_form(op, backend)
    if "does not support item assignment" in msg and "Box" in msg:
        return DiffifaceTypeError(
            f"{call}: f changes its input in place ({msg}), which autograd cannot "
            "differentiate. Your x is unchanged; build a new array instead (e.g. "
            "np.concatenate, or x * mask) or use AutoJax() / AutoTorch()."
        )
    used = foreign_framework(exc)
    if used is None:
        return None
    return foreign_f(op, backend, used, msg.strip().splitlines()[0])


def foreign_framework(exc: BaseException) -> str | None:
    """The framework whose functions, by ``exc``'s message, f called on arrays not its
    own (None if the message says no such thing)."""
    msg = str(exc)
    return next((fw.name for fw in registered() if fw.says_foreign_arrays(msg)), None)


def reraise(op: str, backend: Any, exc: TypeError) -> NoReturn:
    """Inside ``except TypeError as exc``: raise :func:`framework_error`'s clear error
    from ``exc`` where there is one, else ``exc`` itself."""
    clear = framework_error(op, backend, exc)
    if clear is None:
        raise exc
    raise clear from exc


def foreign_f(op: str, backend: Any, used: str, what: str) -> DiffifaceTypeError | None:
    """f is written with ``used``'s functions, another framework than the backend's: the
    error that names the backend for it and the bridge (None when ``used`` is the
    backend's own framework)."""
    dense = backend.backend if isinstance(backend, AutoSparse) else backend
    own = getattr(dense, "framework", "")
    fw, mine = named(used), named(own)
    if used == own or fw is None:
        return None
    ops = "numpy" if mine is None else mine.numpy_module
    return DiffifaceTypeError(
        f"{call_form(op, backend)}: f calls {used} functions on the arrays of "
        f"{type(dense).__name__}() ({what}). Write f with {ops} for "
        f"this backend, pass {fw.backend_name}() to differentiate a {used} f, or wrap it as "
        f"di.differentiate_with(f, {fw.backend_name}()) to call it from another framework."
    )


def complex_jacobian(op: str, backend: Any) -> DiffifaceTypeError:
    return DiffifaceTypeError(
        f"{call_form(op, backend)}: f returns complex values; {op} takes real outputs (the "
        "frameworks disagree on a complex Jacobian, and reverse mode would drop its "
        "imaginary part). Stack the parts (e.g. stack([y.real, y.imag])), or use jvp, "
        "which takes complex outputs."
    )


def integer_output(op: str, backend: Any, dtype: Any) -> DiffifaceTypeError:
    return DiffifaceTypeError(
        f"{call_form(op, backend)}: f returns {dtype}, whose values cannot change smoothly: "
        "derivatives are defined for floating-point outputs. Cast the output to a float "
        "(its derivative is then zero) or differentiate a floating-point quantity."
    )


def dropped_derivative(op: str, backend: Any, what: str) -> DiffifaceTypeError:
    return DiffifaceTypeError(
        f"{call_form(op, backend)}: f converted a tensor that carries the derivative with "
        f"{what}, which drops the derivative (the result would silently be wrong). Keep it "
        "a tensor (torch ops, torch.where for branches), or call .detach() first where no "
        "derivative is meant (control flow, logging)."
    )


def not_single_array(op: str, backend: Any, path_count: int) -> DiffifaceTypeError:
    return DiffifaceTypeError(
        f"{call_form(op, backend)}: x must be a single array for {op}, got a pytree with "
        f"{path_count} leaves. Flatten x into one array first, or use "
        + ("hvp, which takes pytrees." if "hessian" in op else "jvp / vjp, which take pytrees.")
    )


def not_scalar_input(op: str, backend: Any, shape: tuple | None, leaves: int = 1):
    """x is no scalar: an array of ``shape``, or (shape None) a pytree of ``leaves``."""
    got = f"shape {tuple(shape)}" if shape is not None else f"a pytree with {leaves} leaves"
    return DiffifaceValueError(
        f"{call_form(op, backend)}: x must be a scalar (a float or a 0-d array), got {got}. "
        "Use gradient, jacobian or jvp for arrays."
    )


def closed_over(framework: str) -> DiffifaceTypeError:
    return DiffifaceTypeError(
        f"FixedParams(f, params, strategy='forward_over_reverse'): f closes over values that "
        f"the outer {framework} differentiation tracks but that are not in params; the rule "
        "only differentiates x and params, so their gradient would be lost. Pass them in "
        "params, or use strategy='auto'."
    )


def disconnected(op: str, backend: Any, strict: bool) -> None:
    """f's output does not depend on x: a warning, or an error under strict."""
    msg = (
        f"{call_form(op, backend)}: f's output does not depend on x, so every derivative "
        "is zero. f is constant in x, or leaves the framework's graph (.detach(), .item(), "
        "float(), jax.lax.stop_gradient, a NumPy conversion)."
    )
    if strict:
        raise DiffifaceValueError(msg + " Keep f in the framework's array ops, or turn strict off.")
    frame = _caller()
    warnings.warn_explicit(
        msg + " If that is intended, ignore this warning (di.options(strict=True) makes it "
        "an error).",
        DisconnectedWarning,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=frame.f_globals.get("__name__"),
        registry=frame.f_globals.setdefault("__warningregistry__", {}),
    )


# code object -> [how many function objects of it were compiled, the live ones]
_NEW_FUNCTIONS: dict = {}
_NEW_LOCK = threading.Lock()
RECOMPILE_AFTER = 5
_NOT_COUNTED: set = set()  # diffiface's own closures made anew by design (choose.measure)


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_SCENARIOS = os.path.join(_PACKAGE, "testing") + os.sep  # (users' functions, in effect)


def _own(code: Any) -> bool:
    """Code of diffiface's own (a stand-in a sparse plan makes per plan, say): never the
    user's to fix, so never warned about."""
    name = code.co_filename
    return name.startswith(_PACKAGE) and not name.startswith(_SCENARIOS)


def not_counted(fn: Any) -> None:
    """Never warn about new function objects of ``fn``'s code."""
    _NOT_COUNTED.add(fn.__code__)


def compiled_new_function(f: Any) -> None:
    """Count a compilation for a function object new to the cache; warn once per code
    object when the same code arrives as a new object again and again (a lambda made
    inside a loss: every call retraces and compiles it anew). The same object compiled
    again (after ``clear_caches``, or evicted from a full cache) is no new object."""
    code = getattr(getattr(f, "__func__", f), "__code__", None)
    if code is None or code in _NOT_COUNTED or _own(code):
        return
    with _NEW_LOCK:
        entry = _NEW_FUNCTIONS.setdefault(code, [0, weakref.WeakSet()])
        try:
            if f in entry[1]:
                return
            entry[1].add(f)
        except TypeError:  # not weakly referenceable: counted each time
            pass
        entry[0] += 1
        n = entry[0]
    if n != RECOMPILE_AFTER:
        return
    frame = _caller()
    warnings.warn_explicit(
        f"diffiface compiled {code.co_name} (defined at {code.co_filename}:"
        f"{code.co_firstlineno}) anew for {n} function objects of the same code: it is made "
        "anew on each call (a lambda or def inside the loss), so no compilation is reused and "
        "every call retraces. Define it once outside and pass what it closes over as "
        "di.FixedParams(f, params) or di.Constant(...).",
        RecompileWarning,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=frame.f_globals.get("__name__"),
        registry=frame.f_globals.setdefault("__warningregistry__", {}),
    )


_INTERNAL = ("diffiface", "contextlib", "functools")


def _caller():
    """The innermost frame outside diffiface and the frameworks: where the user called."""
    internal = {*_INTERNAL, *(m for fw in registered() for m in fw.modules)}
    frame = sys._getframe(1)
    while frame.f_back is not None and (
        frame.f_globals.get("__name__", "").split(".")[0] in internal
    ):
        frame = frame.f_back
    return frame


def complex_output(op: str, backend: Any) -> DiffifaceValueError:
    b = repr(backend) if isinstance(backend, AbstractBackend) else "backend"
    return DiffifaceValueError(
        f"{call_form(op, backend)}: f returns a complex scalar; {op} needs a real one (a "
        "gradient is defined for real f). Differentiate a real quantity, such as the real "
        "part f(x).real or abs(f(x)) ** 2; or take f's complex derivative with jvp, which "
        f"takes complex outputs: jvp(f, {b}, x, v) for a real x, and for a holomorphic f of "
        "a complex z, pass the real and imaginary parts of z as two real leaves: "
        f"jvp(lambda p: f(p[0] + 1j * p[1]), {b}, (z.real, z.imag), (v, 0 * v)) is f'(z) v."
    )


def check_batch(prob, x_shape: tuple, y_shape: tuple) -> None:
    """f must keep the batch axis: f(x).shape[0] == x.shape[0]."""
    check_batch_of(prob.op, prob.backend, x_shape, y_shape)


def check_batch_of(op: str, backend: Any, x_shape: tuple, y_shape: tuple) -> None:
    """check_batch without the Problem (for compiled closures, which must not hold f)."""
    if len(y_shape) == 0 or y_shape[0] != x_shape[0]:
        raise DiffifaceValueError(
            f"{call_form(op, backend)}: f must keep the batch axis first: "
            f"x has shape {tuple(x_shape)}, f(x) has shape {tuple(y_shape)}. Map each sample "
            "to its output along axis 0."
        )


def check_chunk_size(op: str, backend: Any, chunk_size: Any) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral):
        got = type(chunk_size).__name__
        raise DiffifaceTypeError(
            f"{call_form(op, backend)}: chunk_size must be a positive int, got {got}."
        )
    if chunk_size < 1:
        raise DiffifaceValueError(
            f"{call_form(op, backend)}: chunk_size must be a positive int, got {chunk_size}."
        )
