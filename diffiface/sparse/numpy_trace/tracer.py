"""The traced array: a shape, a dtype and index sets, no values.

NumPy hands every ufunc (``np.sin(t)``, ``t * 2``, ``A @ t``) to ``__array_ufunc__``
and every other function that takes it (``np.sum``, ``np.concatenate``) to
``__array_function__``; the rules are in ``ufuncs`` and ``functions``. Anything that
needs x's values (``if t[0] > 0``, ``float(t)``, ``np.asarray(t)``) raises an error
naming the fix.

Views: basic indexing, reshapes and transposes share their base's sets (``Store``) as
NumPy shares memory, so writing through a view (``out[1:] += y``, ``v = out[1:];
v[:] = y``) reaches the base. Where NumPy may copy instead (a reshape), a write through
it adds to the base's sets rather than replacing them: a superset either way.
"""

from __future__ import annotations

import builtins
import math
import sys
import warnings

import numpy as np

from ..._errors import DiffifaceTypeError, DiffifaceValueError, SparsityWarning
from . import sets as S

LOCAL = (
    "AutoSparse(backend, sparsity_detector='local') (the nonzeros at x and two nearby "
    "points), or pass the pattern itself"
)


# NumPy's two protocols: "ufunc" and "function", set by the modules of their rules
PROTOCOLS: dict = {}


class Trace:
    """What every traced array of one detection shares: n (x's size), whether
    second-order sets are kept (Hessians), the functions already warned about."""

    def __init__(self, n: int, second: bool):
        self.n, self.second = n, second
        self.warned: set[str] = set()

    def warn(self, name: str, why: str) -> None:
        if name not in self.warned:
            self.warned.add(name)
            warnings.warn(f"sparsity detection, {name}: {why}", SparsityWarning, stacklevel=4)


class Store:
    __slots__ = ("g", "h")

    def __init__(self, g: S.Rows, h: S.Rows | None):
        self.g, self.h = g, h


def inexact(dtype) -> bool:
    return np.issubdtype(dtype, np.inexact)


class Traced:
    """An array of ``shape`` and ``dtype`` whose element k may depend on the inputs in
    its first-order set ``g`` (and, for Hessians, have nonzero second derivatives in the
    pairs of ``h``), for some value of x."""

    __array_priority__ = 1000
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, trace: Trace, shape, dtype, g=None, h=None, *, store=None, pos=None):
        self.trace, self.shape, self.dtype = trace, tuple(int(s) for s in shape), np.dtype(dtype)
        self.pos, self.exact = pos, True
        if store is None:
            size = math.prod(self.shape)
            keep = inexact(self.dtype)
            g = g if keep and g is not None else S.empty(size)
            h = (h if keep and h is not None else S.empty(size)) if trace.second else None
            store = Store(g, h)
        self.store = store

    # ---- sets ----------------------------------------------------------------
    @property
    def g(self) -> S.Rows:
        return self.store.g if self.pos is None else S.take(self.store.g, self.pos)

    @property
    def h(self) -> S.Rows | None:
        h = self.store.h
        return h if h is None or self.pos is None else S.take(h, self.pos)

    def like(self, shape, dtype, g, h) -> Traced:
        """A new array of the same trace."""
        return Traced(self.trace, shape, dtype, g, h)

    def share(self, shape, positions: np.ndarray, exact: bool) -> Traced:
        """The elements at flat ``positions`` as an array of ``shape`` sharing the sets."""
        positions = np.asarray(positions, np.int64).ravel()
        out = Traced(self.trace, shape, self.dtype, store=self.store)
        out.pos = positions if self.pos is None else self.pos[positions]
        out.exact = self.exact and exact
        return out

    def assign(self, g: S.Rows, h: S.Rows | None) -> None:
        """Replace this array's sets (its base's, through a view)."""
        if not inexact(self.dtype):
            return
        st = self.store
        if self.pos is None:
            st.g, st.h = g, h if st.h is not None else None
            return
        if not self.exact:  # NumPy may have copied: keep what the base held
            g = S.union(S.take(st.g, self.pos), g) or S.empty(len(self.pos))
            if st.h is not None:
                h = S.union(S.take(st.h, self.pos), h) or S.empty(len(self.pos))
        st.g = S.replace(st.g, self.pos, g)
        if st.h is not None:
            st.h = S.replace(st.h, self.pos, h)

    # ---- attributes ------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise DiffifaceTypeError("sparsity detection: len() of a 0-d traced array")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"Traced(shape={self.shape}, dtype={self.dtype})"

    @property
    def T(self) -> Traced:
        return np.transpose(self)

    @property
    def mT(self) -> Traced:
        return np.swapaxes(self, -1, -2)

    @property
    def real(self) -> Traced:
        return np.real(self)

    @property
    def imag(self) -> Traced:
        return np.imag(self)

    def __array_namespace__(self, *, api_version=None):
        try:
            import array_api_compat.numpy as xp
        except ImportError:  # (NumPy's own namespace: its functions dispatch here too)
            return np
        return xp

    # ---- NumPy's protocols ------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return PROTOCOLS["ufunc"](self.trace, ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return PROTOCOLS["function"](self.trace, func, types, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        if _asked_by_sparse_matmul():  # (its signal to defer to our __rmatmul__)
            out = np.empty((), object)
            out[()] = self
            return out
        raise needs_values(
            "converts a traced array to a NumPy array (np.asarray, np.array, "
            "or writing it into an array made without x, as np.zeros(n))",
            "make arrays from x (np.zeros_like(x), xp.zeros_like(x)), "
            "combine with xp.stack / np.concatenate",
        )

    def __bool__(self):
        raise needs_values(
            "uses a traced value as a Python bool (`if`, `while`, `and`, "
            "`or`, `assert` on values of x)",
            "write a branch as np.where(cond, a, b)",
        )

    def __float__(self):
        raise needs_values(
            "takes a Python number from a traced array (float(), int(), .item())",
            "keep the values as arrays",
        )

    __int__ = __complex__ = __index__ = __float__

    def item(self, *args):
        return self.__float__()

    def tolist(self):
        return self.__float__()

    # ---- indexing -----------------------------------------------------------------
    def __getitem__(self, key):
        key = index_key(key)
        got = np.arange(self.size, dtype=np.int64).reshape(self.shape)[key]
        if is_basic(key):
            return self.share(got.shape, got, exact=True)
        return self.like(got.shape, self.dtype, S.take(self.g, got), _take(self.h, got))

    def __setitem__(self, key, value):
        key = index_key(key)
        where = np.arange(self.size, dtype=np.int64).reshape(self.shape)[key]
        g, h = rows_of(self.trace, value, where.shape)
        self.assign(
            S.replace(self.g, where.ravel(), g),
            None if self.h is None else S.replace(self.h, where.ravel(), h),
        )

    # ---- methods (NumPy's functions) ------------------------------------------------
    def reshape(self, *shape, order="C"):
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return np.reshape(self, shape, order=order)

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes
        return np.transpose(self, axes or None)

    def astype(self, dtype, copy=True, **kwargs):
        return self.like(self.shape, dtype, self.g, self.h)

    def view(self, dtype=None, type=None):
        """The same elements (``.view(np.ndarray)``, as autograd.numpy's concatenate
        calls it); a dtype of another size is not followed."""
        if isinstance(dtype, builtins.type) and issubclass(dtype, np.ndarray):
            dtype = None
        if dtype is not None and np.dtype(dtype).itemsize != self.dtype.itemsize:
            raise needs_values(
                "reinterprets a traced array's bytes (.view(dtype))", "use .astype(dtype)"
            )
        out = self.share(self.shape, np.arange(self.size), exact=True)
        out.dtype = self.dtype if dtype is None else np.dtype(dtype)
        return out

    def copy(self, order="C"):
        return self.like(self.shape, self.dtype, self.g, self.h)

    def flatten(self, order="C"):
        return np.reshape(self, -1, order=order).copy()

    def conj(self):
        return np.conjugate(self)

    conjugate = conj


def _asked_by_sparse_matmul() -> bool:
    """``A @ t`` with a ``scipy.sparse`` A: its matmul asks for t as an array and, given
    a 0-d object array, returns NotImplemented, so Python calls ``t.__rmatmul__``."""
    caller = sys._getframe(2)
    return caller.f_globals.get("__name__", "").startswith("scipy.sparse") and (
        caller.f_code.co_name in ("_matmul_dispatch", "_rmatmul_dispatch")
    )


def _take(h, m):
    return None if h is None else S.take(h, m)


def rows_of(trace: Trace, value, shape) -> tuple:
    """The sets of ``value`` (traced or constant) broadcast to ``shape``."""
    size = math.prod(shape)
    if not isinstance(value, Traced):
        return S.empty(size), (S.empty(size) if trace.second else None)
    m = np.broadcast_to(np.arange(value.size).reshape(value.shape), shape)
    return S.take(value.g, m), _take(value.h, m)


def _method(name):
    def run(self, *args, **kwargs):
        return getattr(np, name)(self, *args, **kwargs)

    run.__name__ = name
    return run


_METHODS = (
    "sum mean prod max min cumsum cumprod std var ravel squeeze swapaxes dot clip any all "
    "argmax argmin round trace diagonal repeat take nonzero sort argsort ptp"
)
for _name in _METHODS.split():
    setattr(Traced, _name, _method(_name))


# what a traced array combines with (Python asks any other operand)
OPERANDS = (np.ndarray, np.generic, int, float, complex, list, tuple)


def unboxed(obj):
    """``obj`` with each box of an outer AD pass (an object holding ``_value``, as
    autograd's boxes of a context f reads) replaced by its value: a constant here."""
    if isinstance(obj, list | tuple):
        return type(obj)(unboxed(o) for o in obj)
    for _ in range(8):
        if isinstance(obj, Traced) or not hasattr(obj, "_value"):
            break
        obj = obj._value
    return obj


def _operator(ufunc, reflected=False):
    def run(self, other):
        other = unboxed(other)
        if not isinstance(other, (Traced, *OPERANDS)):
            return NotImplemented
        return ufunc(other, self) if reflected else ufunc(self, other)

    return run


def _inplace(ufunc):
    def run(self, other):
        out = ufunc(self, other)
        g, h = rows_of(self.trace, out, self.shape)
        self.assign(g, h)
        return self

    return run


_OPERATORS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.divide,
    "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}  # fmt: skip
_COMPARISONS = {
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
}  # fmt: skip
for _op, _uf in _OPERATORS.items():
    setattr(Traced, f"__{_op}__", _operator(_uf))
    setattr(Traced, f"__r{_op}__", _operator(_uf, reflected=True))
    setattr(Traced, f"__i{_op}__", _inplace(_uf))
for _op, _uf in _COMPARISONS.items():
    setattr(Traced, f"__{_op}__", _operator(_uf))
Traced.__matmul__ = lambda self, other: PROTOCOLS["matmul"](self, other)
Traced.__rmatmul__ = lambda self, other: PROTOCOLS["matmul"](other, self)
Traced.__neg__ = lambda self: np.negative(self)
Traced.__pos__ = lambda self: np.positive(self)
Traced.__abs__ = lambda self: np.absolute(self)
Traced.__invert__ = lambda self: np.invert(self)


def index_key(key):
    """``key`` as a tuple NumPy indexes with; a traced index is an error (its values
    decide which elements are read)."""
    key = key if isinstance(key, tuple) else (key,)
    for k in key:
        if isinstance(k, Traced):
            raise needs_values(
                "indexes with a traced array (its values pick the elements)",
                "index with constant indices, or use np.where for a mask",
            )
    return key


def is_basic(key: tuple) -> bool:
    """Basic indexing (ints, slices, None, ...): NumPy returns a view."""
    return all(
        k is None
        or k is Ellipsis
        or (isinstance(k, slice | int | np.integer) and not isinstance(k, bool | np.bool_))
        for k in key
    )


def needs_values(what: str, fix: str) -> DiffifaceValueError:
    return DiffifaceValueError(
        f"sparsity detection: f {what}, and the global detector traces f without x's "
        f"values (the pattern holds for every x). Either {fix}, or use {LOCAL}."
    )
