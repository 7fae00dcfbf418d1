"""NumPy's functions on traced arrays (``__array_function__``).

Data movement (reshape, transpose, concatenate, indexing, roll, pad, tril, ...) runs
the NumPy function itself on index arrays: each traced element is replaced by its
position + 1, each constant by 0, so the result says which element each output
element copies (0: a constant). A function with no rule makes each of its outputs
depend on every input (every pair, for Hessians), sized by running it on stand-in
values, with a ``SparsityWarning`` that names it.
"""

from __future__ import annotations

import numpy as np

from . import linalg
from . import reductions as R
from . import sets as S
from .tracer import PROTOCOLS, Trace, Traced, needs_values, rows_of, unboxed
from .ufuncs import elementwise
from .widen import widen


def apply_function(trace: Trace, func, types, args, kwargs):
    if any(not issubclass(t, Traced | np.ndarray) for t in types):
        return NotImplemented
    args, kwargs = unboxed(args), {k: unboxed(v) for k, v in kwargs.items()}
    rule = RULES.get(func)
    if rule is not None:
        return rule(trace, *args, **kwargs)
    move = MOVES.get(func)
    if move is not None:
        return moved(trace, func, move, args, kwargs)
    return widen(trace, func, args, kwargs)


# ---- data movement ---------------------------------------------------------------


def _data(args: tuple, kwargs: dict, spec) -> list:
    """The places (position, index in a sequence or None) of the data arguments."""
    places = []
    for p in spec:
        if p == "seq":
            places += [(0, i) for i in range(len(args[0]))]
        elif p < len(args):
            places.append((p, None))
    return places


def moved(trace: Trace, func, spec: tuple, args: tuple, kwargs: dict):
    """``func`` run on index arrays: out[k] copies the element its index names."""
    view, places = spec[0], _data(args, kwargs, spec[1:])
    args = [list(a) if i == 0 and spec[1] == "seq" else a for i, a in enumerate(args)]
    parts, dtypes, offset = [], [], 1
    for p, i in places:
        a = args[p] if i is None else args[p][i]
        dtypes.append(a.dtype if isinstance(a, Traced) else np.asarray(a).dtype)
        if isinstance(a, Traced):
            idx = np.arange(offset, offset + a.size, dtype=np.int64).reshape(a.shape)
            parts.append(a)
            offset += a.size
        else:
            idx = np.zeros(np.shape(a), np.int64)
        if i is None:
            args[p] = idx
        else:
            args[p][i] = idx
    dtype = kwargs.pop("dtype", None) or np.result_type(*dtypes)
    kwargs.pop("out", None)
    if _holds_traced((args, kwargs)):
        raise needs_values(
            f"passes a traced array as an index or setting of np.{func.__name__}",
            "use constant indices and settings",
        )
    got = func(*args, **kwargs)
    outs = got if isinstance(got, list | tuple) else (got,)
    single = view is not False and len(parts) == 1
    results = []
    for o in outs:
        o = np.asarray(o) - 1
        if single and (o >= 0).all():
            results.append(parts[0].share(o.shape, o, exact=bool(view)))
        else:
            results.append(_gathered(trace, parts, o, dtype))
    return type(got)(results) if isinstance(got, list | tuple) else results[0]


def _holds_traced(obj) -> bool:
    if isinstance(obj, list | tuple):
        return any(_holds_traced(o) for o in obj)
    if isinstance(obj, dict):
        return any(_holds_traced(o) for o in obj.values())
    return isinstance(obj, Traced)


def _gathered(trace: Trace, parts: list, idx: np.ndarray, dtype) -> Traced:
    g = S.stack([p.g for p in parts]) if parts else S.empty(0)
    h = S.stack([p.h for p in parts]) if parts and trace.second else None
    h = None if h is None else S.take(h, idx)
    return Traced(trace, idx.shape, dtype, S.take(g, idx), h)


def _pad(trace, array, pad_width, mode="constant", **kwargs):
    if callable(mode) or mode not in ("constant", "edge", "reflect", "symmetric", "wrap", "empty"):
        return widen(trace, np.pad, (array, pad_width), {"mode": mode, **kwargs})
    kwargs.pop("constant_values", None)  # (the padding is constant: index 0)
    return moved(trace, np.pad, (False, 0), (array, pad_width), {"mode": mode, **kwargs})


# view: True (NumPy returns a view), False (a copy), None (may be either; a write
# through it adds to its base); then the positions of the data arguments
_MOVE_SPECS = {
    (True, 0): "transpose moveaxis swapaxes squeeze expand_dims flip fliplr flipud "
    "diagonal broadcast_to matrix_transpose permute_dims",
    (None, 0): "reshape ravel atleast_1d atleast_2d atleast_3d",
    (False, 0): "roll rot90 tile repeat take take_along_axis diag diagflat tril triu "
    "copy ascontiguousarray asfortranarray resize delete",
    (False, "seq"): "concatenate stack hstack vstack dstack column_stack block concat",
    (True, 0, "split"): "split array_split hsplit vsplit dsplit unstack",
    (False, 0, 1): "append",
    (False, 0, 2): "insert",
}
MOVES: dict = {}
for _spec, _names in _MOVE_SPECS.items():
    for _name in _names.split():
        _f = getattr(np, _name, None)
        if _f is not None:
            _positions = tuple(p for p in _spec[1:] if p != "split")
            MOVES[_f] = (_spec[0], *_positions)
MOVES[np.broadcast_arrays] = (None, *range(8))  # (every argument is data)


def _real(trace, val):
    """A complex array's real part depends on what the array does; a real one is
    itself."""
    if np.iscomplexobj(np.empty(0, val.dtype)):
        return val.astype(np.empty(0, val.dtype).real.dtype)
    return val


def _imag(trace, val):
    if np.iscomplexobj(np.empty(0, val.dtype)):
        return _real(trace, val)
    return Traced(trace, val.shape, val.dtype)  # (zeros)


# ---- made from x, selections ----------------------------------------------------


def _like(fill=False):
    def rule(trace, a, *args, dtype=None, shape=None, **kwargs):
        shape = a.shape if shape is None else tuple(np.atleast_1d(shape))
        out = Traced(trace, shape, dtype or a.dtype)
        value = args[0] if args else kwargs.get("fill_value")
        if fill and isinstance(value, Traced):
            out.assign(*rows_of(trace, value, shape))
        return out

    return rule


def _select(cond, a, b):
    return np.where(cond, a, b)


def _where_rule(trace, cond, *ab):
    if len(ab) == 2 and isinstance(cond, Traced):
        a, b = ab
        shape = np.broadcast_shapes(cond.shape, np.shape(a), np.shape(b))
        dtype = np.result_type(*(x.dtype if isinstance(x, Traced) else x for x in ab))
        (ga, ha), (gb, hb) = rows_of(trace, a, shape), rows_of(trace, b, shape)
        h = S.union(ha, hb) if trace.second else None
        return Traced(trace, shape, dtype, S.union(ga, gb), h)
    if not ab:
        raise needs_values(
            "calls np.where(cond) (indices that depend on x)", "use np.where(cond, a, b)"
        )
    return moved(trace, _select, (False, 1, 2), (np.asarray(cond), *ab), {})


def _clip(trace, a, a_min=None, a_max=None, **kwargs):
    lo, hi = kwargs.get("min", a_min), kwargs.get("max", a_max)
    out = a if lo is None else np.maximum(a, lo)
    return out if hi is None else np.minimum(out, hi)


def _diff(trace, a, n=1, axis=-1, prepend=None, append=None):
    parts = [p for p in (prepend, a, append) if p is not None]
    if len(parts) > 1:
        shape = list(a.shape)
        shape[axis] = 1
        parts = [p if np.ndim(p) == a.ndim else np.broadcast_to(p, shape) for p in parts]
        a = np.concatenate(parts, axis=axis)
    for _ in range(n):
        hi = [slice(None)] * a.ndim
        lo = [slice(None)] * a.ndim
        hi[axis], lo[axis] = slice(1, None), slice(None, -1)
        a = a[tuple(hi)] - a[tuple(lo)]
    return a


def _sort(trace, a, axis=-1, **kwargs):
    """Each element of a sorted line may be any element of that line."""
    if axis is None:
        a, axis = np.reshape(a, -1), 0
    line = R.reduce(a, axis, keepdims=True)
    return np.broadcast_to(line, a.shape).copy()


def _elementwise(letter):
    def rule(trace, a, *args, **kwargs):
        return elementwise(trace, "", letter, (a,), np.shape(a), np.result_type(a.dtype, float))

    return rule


def _reduction(kind: str, floats: bool = False):
    """A rule for NumPy's reductions (their positional arguments after ``axis`` are
    ``dtype`` or ``out``: neither changes the sets)."""

    def rule(trace, a, axis=None, *rest, keepdims=False, dtype=None, **kwargs):
        if kind == "linear":
            return R.reduce(a, axis, keepdims, dtype, floats=floats)
        if kind == "nonlinear":
            return R.reduce(a, axis, keepdims, dtype, nonlinear=True)
        if kind == "product":
            return R.product(a, axis, keepdims, dtype)
        if kind == "scan":
            return R.scan(a, axis, dtype, nonlinear=floats)
        return R.no_derivative(a, axis, keepdims, np.bool_ if kind == "bool" else np.intp)

    return rule


def _average(trace, a, axis=None, weights=None, returned=False, *, keepdims=False):
    return R.reduce(a if weights is None else a * weights, axis, keepdims, floats=True)


def _isclose(trace, a, b, *args, **kwargs):
    return Traced(trace, np.broadcast_shapes(np.shape(a), np.shape(b)), np.bool_)


def _sized_by_values(func):
    def rule(trace, *args, **kwargs):
        raise needs_values(
            f"calls np.{func.__name__}, whose indices or sizes come from x's values",
            "use np.where(cond, a, b) for a selection",
        )

    return rule


def _argsort(trace, a, axis=-1, **kwargs):
    return Traced(trace, a.shape, np.intp)


_REDUCTIONS = {
    ("linear", False): "sum nansum max amax min amin nanmax nanmin ptp median nanmedian",
    ("linear", True): "mean nanmean",
    ("nonlinear", False): "std var nanstd nanvar",
    ("product", False): "prod nanprod",
    ("scan", False): "cumsum nancumsum",
    ("scan", True): "cumprod nancumprod",
    ("bool", False): "any all",
    ("int", False): "argmax argmin nanargmax nanargmin count_nonzero",
}
RULES: dict = {
    getattr(np, name): _reduction(kind, floats)
    for (kind, floats), names in _REDUCTIONS.items()
    for name in names.split()
}
for _name in "nonzero flatnonzero argwhere unique extract compress bincount histogram".split():
    RULES[getattr(np, _name)] = _sized_by_values(getattr(np, _name))
RULES.update(
    {
        np.average: _average,
        np.argsort: _argsort,
        np.isclose: _isclose,
        np.where: _where_rule,
        np.clip: _clip,
        np.diff: _diff,
        np.sort: _sort,
        np.pad: _pad,
        np.real: _real,
        np.imag: _imag,
        np.zeros_like: _like(),
        np.ones_like: _like(),
        np.empty_like: _like(),
        np.full_like: _like(fill=True),
        np.sinc: _elementwise("s"),
        np.nan_to_num: _elementwise("f"),
        np.round: _elementwise("z"),
        np.around: _elementwise("z"),
    }
)
RULES.update(linalg.RULES)
RULES.update(
    {
        np.shape: lambda tr, a: a.shape,
        np.ndim: lambda tr, a: a.ndim,
        np.size: lambda tr, a, axis=None: a.size if axis is None else a.shape[axis],
        np.iscomplexobj: lambda tr, a: np.iscomplexobj(np.empty(0, a.dtype)),
        np.isrealobj: lambda tr, a: np.isrealobj(np.empty(0, a.dtype)),
    }
)
PROTOCOLS["function"] = apply_function
