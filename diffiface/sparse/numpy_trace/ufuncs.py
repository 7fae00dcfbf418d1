"""Ufuncs on traced arrays, classified as SparseConnectivityTracer.jl classifies its
operators: per argument, is the first derivative nonzero, is the second; for two
arguments, is the cross derivative.

Letters, one per argument, then the cross derivative: ``s`` first and second derivative
nonzero, ``f`` first nonzero and second zero (linear in it), ``z`` both zero, ``c``
cross derivative nonzero. A ufunc not in the table is elementwise (every ufunc is) with
every derivative taken nonzero, and a ``SparsityWarning``.
"""

from __future__ import annotations

import math

import numpy as np

from . import sets as S
from .linalg import ufunc_product
from .reductions import ufunc_method
from .tracer import PROTOCOLS, Trace, Traced, inexact, needs_values, rows_of, unboxed

_S1 = (
    "sin cos tan arcsin arccos arctan sinh cosh tanh arcsinh arccosh arctanh exp exp2 "
    "expm1 log log2 log10 log1p sqrt cbrt square reciprocal "
    # scipy.special
    "expit logit erf erfc erfcx erfinv erfcinv gamma gammaln loggamma digamma psi "
    "log_expit ndtr ndtri log_ndtr softplus sinc i0 i0e i1 i1e j0 j1 y0 y1 dawsn "
    "entr spence"
)
_F1 = "negative positive absolute fabs conjugate deg2rad rad2deg degrees radians"
_Z1 = (
    "sign floor ceil trunc rint fix isnan isinf isfinite signbit logical_not spacing "
    "invert isnat bitwise_count"
)
_BINARY = {
    "ffz": "add subtract maximum minimum fmax fmin remainder fmod mod",
    "ffc": "multiply",
    "fsc": "divide true_divide",
    "ssc": "power float_power arctan2 hypot logaddexp logaddexp2 xlogy xlog1py",
    "fzz": "copysign nextafter ldexp",
    "zzz": (
        "floor_divide greater greater_equal less less_equal equal not_equal "
        "logical_and logical_or logical_xor heaviside gcd lcm bitwise_and bitwise_or "
        "bitwise_xor left_shift right_shift"
    ),
}
CLASSES: dict[str, str] = {name: "s" for name in _S1.split()}
CLASSES.update({name: "f" for name in _F1.split()})
CLASSES.update({name: "z" for name in _Z1.split()})
for _letters, _names in _BINARY.items():
    CLASSES.update({name: _letters for name in _names.split()})
# several outputs: one class per output
MULTI = {"modf": ("f", "z"), "frexp": ("f", "z"), "divmod": ("zzz", "ffz")}


def apply_ufunc(trace: Trace, ufunc, method: str, inputs: tuple, kwargs: dict):
    inputs = tuple(np.asarray(a) if isinstance(a, list | tuple) else a for a in unboxed(inputs))
    if any(not _known(a) for a in inputs):
        return NotImplemented
    name = ufunc.__name__
    if method == "__call__":
        out = kwargs.pop("out", None)
        if kwargs.get("where", True) is not True:
            raise needs_values(
                f"calls np.{name} with where= (unsupported by the detector)",
                "use np.where on the result",
            )
        kwargs.pop("where", None)
        if name in ("matmul", "vecdot", "matvec", "vecmat"):
            result = ufunc_product(name, inputs)
        else:
            result = call(trace, ufunc, inputs, kwargs)
        return _write_out(result, out) if out is not None else result
    return ufunc_method(trace, ufunc, method, inputs, kwargs)


def _known(a) -> bool:
    return isinstance(a, Traced | np.ndarray | np.generic | int | float | complex | bool)


def _write_out(result, out):
    outs = out if isinstance(out, tuple) else (out,)  # (NumPy passes a tuple)
    results = result if isinstance(result, tuple) else (result,)
    for o, r in zip(outs, results, strict=True):
        if not isinstance(o, Traced):
            raise needs_values(
                "writes a traced result into a NumPy array (out=)",
                "make out from x (np.zeros_like(x))",
            )
        o.assign(*rows_of(o.trace, r, o.shape))
    return out if isinstance(result, tuple) else out[0]


def call(trace: Trace, ufunc, inputs: tuple, kwargs: dict):
    """``ufunc(*inputs)`` on sets."""
    name = ufunc.__name__
    classes = MULTI.get(name) or (CLASSES.get(name),) * ufunc.nout
    if classes[0] is None:
        trace.warn(
            f"np.{name}",
            "a ufunc the detector does not know: each output element is taken to "
            "depend on the same elements of every input, with every second "
            "derivative nonzero",
        )
        classes = ("s" * ufunc.nin + "c",) * ufunc.nout
    shape = np.broadcast_shapes(*(np.shape(a) for a in inputs))
    dtypes = _dtypes(ufunc, inputs, kwargs)
    outs = tuple(
        elementwise(trace, name, letters, inputs, shape, dt)
        for letters, dt in zip(classes, dtypes, strict=True)
    )
    return outs if ufunc.nout > 1 else outs[0]


def _dtypes(ufunc, inputs: tuple, kwargs: dict) -> tuple:
    """The output dtypes, from the ufunc on empty stand-ins."""
    stand = [np.empty(0, a.dtype) if isinstance(a, Traced | np.ndarray) else a for a in inputs]
    with np.errstate(all="ignore"):
        got = ufunc(*stand, **{k: v for k, v in kwargs.items() if k in ("dtype", "casting")})
    return tuple(np.asarray(o).dtype for o in (got if ufunc.nout > 1 else (got,)))


def elementwise(trace: Trace, name: str, letters: str, inputs: tuple, shape, dtype):
    """One output of an elementwise operation with derivative classes ``letters``."""
    size = math.prod(shape)
    if not inexact(dtype) or not any(isinstance(a, Traced) for a in inputs):
        return Traced(trace, shape, dtype)
    letters = _special(name, letters, inputs)
    parts = [rows_of(trace, a, shape) if isinstance(a, Traced) else None for a in inputs]
    if name == "multiply":
        parts = _times_zero(inputs, parts, shape)
    first = [p[0] if p is not None and letters[i] != "z" else None for i, p in enumerate(parts)]
    g = S.union(*first)
    h = None
    if trace.second:
        n = trace.n
        terms = [p[1] for p, f in zip(parts, first, strict=True) if f is not None]
        terms += [
            S.self_pairs(p[0], n)
            for i, p in enumerate(parts)
            if p is not None and letters[i] == "s"
        ]
        if letters.endswith("c") and len(parts) == 2:
            terms.append(S.cross_pairs(*(p[0] if p is not None else None for p in parts), n))
        elif letters.endswith("c"):  # (an unknown ufunc of three or more inputs)
            terms.append(S.self_pairs(g, n))
        h = S.union(*terms)
    return Traced(trace, shape, dtype, g or S.empty(size), h)


def _special(name: str, letters: str, inputs: tuple) -> str:
    """A constant exponent's class: x**0 is constant, x**1 linear."""
    if name in ("power", "float_power") and not isinstance(inputs[1], Traced):
        p = np.asarray(inputs[1])
        if (p == 0).all():
            return "zzz"
        if (p == 1).all():
            return "fzz"
    return letters


def _times_zero(inputs: tuple, parts: list, shape) -> list:
    """``0 * y``: no dependence on y where a constant factor is zero (as the JAX
    detector, which reads the constants of the jaxpr)."""
    zero = np.zeros(shape, bool)
    for a in inputs:
        if not isinstance(a, Traced):
            zero = zero | (np.asarray(a) == 0)
    if not zero.any():
        return parts
    keep = np.where(zero.ravel(), -1, np.arange(zero.size))
    return [
        None if p is None else (S.take(p[0], keep), None if p[1] is None else S.take(p[1], keep))
        for p in parts
    ]


PROTOCOLS["ufunc"] = apply_ufunc
