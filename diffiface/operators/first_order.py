"""The operators: check the arguments, look up the backend, run, convert back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _checks, _config, _finite
from .._contexts import Constant, FixedParams, unfix
from .._tangents import Tangents
from .._tree import flatten, unflatten
from ..bridge.operators import Foreign, cross
from ..core import convert as _convert
from ..core import unprepared as _implicit
from ..core.backend import SLOW, _size
from ..core.plan import Prep, _native_sig
from ..core.problem import Problem
from ..core.registry import implementation
from ..nested.route import route
from . import dense as _dense


def _enter(op, f, backend, x, contexts, scalar=False, prep=None, t=None):
    if _config.check_finite():
        _finite.check(op, backend, f, x, contexts, t)
    if prep is not None:
        return _prepared(prep).enter(op, f, backend, x, contexts, t)
    _checks.check_backend(op, f, backend)
    return _enter_impl(op, f, backend, implementation(backend), x, contexts, scalar)


def _enter_impl(op, f, backend, impl, x, contexts, scalar):
    """Convert x and the contexts for ``impl`` and build the Problem; a FixedParams
    becomes its function with the parameters as the first context."""
    f, contexts, fixed = unfix(f, contexts)
    if impl.is_native(x) and impl.is_float(x):  # fast path: one array of the framework
        xs, kinds, single, tree = (x,), _ONE_NATIVE, True, _LEAF
    else:
        x = impl.open(x)
        leaves, tree = flatten(x)
        xs, kinds = _convert.point(op, impl, leaves, tree)
        single = len(leaves) == 1 and leaves[0] is x
    prob = Problem(op, backend, impl, f, tree, single, scalar)
    ctx = _convert.contexts(op, impl, contexts) if contexts else ()
    if fixed is not None:
        impl = route(impl, fixed, op, xs, ctx)
    return impl, prob, xs, kinds, ctx


_ONE_NATIVE = (_convert.NATIVE,)
NUMPY, PYTHON = _convert.NUMPY, _convert.PYTHON
_VG, _VV = "value_and_gradient", "value_and_vjp"
_LEAF = flatten(0.0)[1]


def _prepared(prep: Any) -> Prep:
    if not isinstance(prep, Prep):
        raise _checks.DiffifaceTypeError(
            f"prep must come from a di.prepare_<operator>(...) call, got {type(prep).__name__}."
        )
    return prep


def _direct(op: str, prep: Any, f, backend, x, contexts: tuple, *t: Any) -> Any:
    """A prepared call that matches exactly goes straight to the backend's runner."""
    if _config.checking():  # the general path checks
        return SLOW
    return _prepared(prep).run_direct(op, f, backend, x, contexts, *t)


def _fast(op: str, prep: Any, f, backend, x, contexts: tuple) -> Any:
    """``_direct``, and for an unprepared call the runner of the last plain call like
    it (see ``_implicit``); SLOW when the general path must run."""
    if _config.checking():  # the general path checks
        return SLOW
    if prep is not None:
        return _prepared(prep).run_direct(op, f, backend, x, contexts)
    run = None if contexts else _implicit.lookup(op, f, backend, x)
    if run is not None:
        return run(x)
    out = _implicit.run_leaves(op, f, backend, x, contexts)
    return SLOW if out is None else out


def _remember(
    op: str, f, backend, x, impl, prob: Problem, kinds: tuple, ctx: tuple, prep, contexts=None
) -> None:
    """After a plain unprepared call: enter its runner for the next call like it (one
    native or NumPy array; or, given the caller's ``contexts``, native pytree leaves
    with Constant contexts of native leaves)."""
    if prep is not None or impl is not prob.impl:
        return
    if prob.single and not ctx and kinds[0] != PYTHON:
        _implicit.store(op, f, backend, x, impl.implicit(prob, kinds[0] == NUMPY))
        return
    if contexts is not None and all(k == _convert.NATIVE for k in kinds):
        if type(f) is FixedParams or any(type(c) is not Constant for c in contexts):
            return
        run = impl.implicit_leaves(prob)
        if run is None:
            return
        x_sig = _native_sig(impl, x)
        c_sig = _native_sig(impl, tuple(c.value for c in contexts)) if ctx else None
        if x_sig is not None and (c_sig is not None or not ctx):
            _implicit.store_leaves(op, f, backend, x_sig, c_sig, run)


def _out_kind(kinds: tuple) -> int:
    """Kind of results shaped like f(x): native if any leaf of x was native."""
    return _convert.NATIVE if _convert.NATIVE in kinds else min(kinds, default=0)


def _like_x(impl, prob: Problem, gs: tuple, kinds: tuple) -> Any:
    if prob.single and kinds[0] == _convert.NATIVE:
        return gs[0]
    gs = [_convert.back(impl, g, k) for g, k in zip(gs, kinds, strict=True)]
    return gs[0] if prob.single else unflatten(prob.treedef, gs)


def value_and_gradient(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None
) -> tuple[Any, Any]:
    """The value ``f(x)`` and the gradient of a scalar ``f`` with respect to ``x``.

    Args:
        f: function ``f(x, *contexts)`` returning a 0-d array.
        backend: a backend instance, e.g. ``AutoJax()``.
        x: an array, a Python float, or a pytree (dict, list, tuple, namedtuple)
            of floating-point arrays.
        *contexts: ``di.Constant(c)`` arguments passed to ``f`` after ``x``.
        prep: the result of ``prepare_gradient`` for these arguments (optional).

    Returns:
        ``(f(x), grad)``, where ``grad`` has the structure, shapes and dtypes of ``x``.

    Raises:
        ValueError: f does not return a scalar.
        TypeError: x holds non-float leaves, or f leaves the framework's array ops.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, g = di.value_and_gradient(lambda x: (x**2).sum(), di.AutoFiniteDifferences(),
        ...                              np.array([1.0, 2.0]))
        >>> float(y), g.round(6)
        (5.0, array([2., 4.]))
    """
    try:
        if (out := _fast(_VG, prep, f, backend, x, contexts)) is not SLOW:
            return out
        impl, prob, xs, kinds, ctx = _enter(_VG, f, backend, x, contexts, True, prep)
        y, gs = impl.value_and_gradient(prob, xs, ctx)
        _remember(_VG, f, backend, x, impl, prob, kinds, ctx, prep, contexts)
        return _convert.back(impl, y, _out_kind(kinds)), _like_x(impl, prob, gs, kinds)
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(exc, value_and_gradient, f, backend, (x, *contexts), {"prep": prep})


def gradient(f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None) -> Any:
    """The gradient of a scalar ``f`` with respect to ``x``, shaped like ``x``.

    Same arguments as :func:`value_and_gradient`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.gradient(lambda x: (x**3).sum(), di.AutoFiniteDifferences(),
        ...             np.array([1.0, 2.0])).round(5)
        array([ 3., 12.])
    """
    try:
        if (out := _fast("gradient", prep, f, backend, x, contexts)) is not SLOW:
            return out
        impl, prob, xs, kinds, ctx = _enter("gradient", f, backend, x, contexts, True, prep)
        gs = impl.gradient(prob, xs, ctx)
        _remember("gradient", f, backend, x, impl, prob, kinds, ctx, prep, contexts)
        return _like_x(impl, prob, gs, kinds)
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(exc, gradient, f, backend, (x, *contexts), {"prep": prep})


def value_and_jvp(
    f: Callable, backend: Any, x: Any, v: Any, *contexts: Any, prep: Any = None
) -> tuple[Any, Any]:
    """The value ``f(x)`` and the Jacobian-vector product ``J(x) v``.

    Args:
        f: function ``f(x, *contexts)`` returning an array.
        backend: a backend instance.
        x: an array, a Python float, or a pytree of floating-point arrays.
        v: the tangent: same structure, shapes and dtypes as ``x`` (or a
            ``di.Tangents`` of several, giving a ``Tangents`` of results).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).

    Returns:
        ``(f(x), J v)``, both shaped like ``f(x)``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, t = di.value_and_jvp(lambda x: x**2, di.AutoFiniteDifferences(),
        ...                         np.array([1.0, 2.0]), np.array([1.0, 0.0]))
        >>> t.round(6)
        array([2., 0.])
    """
    try:
        return _jvp("value_and_jvp", f, backend, x, v, contexts, prep)
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(exc, value_and_jvp, f, backend, (x, v, *contexts), {"prep": prep})


def jvp(f: Callable, backend: Any, x: Any, v: Any, *contexts: Any, prep: Any = None) -> Any:
    """The Jacobian-vector product ``J(x) v``, shaped like ``f(x)``.

    Same arguments as :func:`value_and_jvp`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.jvp(lambda x: x * x[0], di.AutoFiniteDifferences(),
        ...        np.array([1.0, 2.0]), np.array([0.0, 1.0])).round(6)
        array([0., 1.])
    """
    try:
        return _jvp("jvp", f, backend, x, v, contexts, prep)[1]
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(exc, jvp, f, backend, (x, v, *contexts), {"prep": prep})


def tangents_in(op: str, impl, prob: Problem, xs: tuple, v: Any) -> list:
    """The native tangent leaves of each direction in ``v`` (one or a Tangents)."""
    if prob.single and impl.is_native(v):  # fast path: one array like x
        x = xs[0]
        if v.shape == x.shape and v.dtype == x.dtype:
            return [(v,)]
    many = v if isinstance(v, Tangents) else (v,)
    out = []
    for one in many:
        vl, vtree = flatten(one)
        out.append(_convert.tangent(op, impl, "v", xs, vl, vtree, prob.treedef))
    return out


def _jvp(op: str, f, backend, x, v, contexts, prep):
    if prep is not None and (out := _direct(op, prep, f, backend, x, contexts, v)) is not SLOW:
        return out if op == "value_and_jvp" else (None, out)
    impl, prob, xs, kinds, ctx = _enter(op, f, backend, x, contexts, prep=prep, t=v)
    k = _out_kind(kinds)
    vss = tangents_in(op, impl, prob, xs, v)
    if isinstance(v, Tangents):
        y, ts = impl.forward_or_reverse(
            prob,
            lambda: impl.value_and_jvps(prob, xs, vss, ctx),
            lambda: _reverse_jvps(impl, prob, xs, vss, ctx),
        )
        return _convert.back(impl, y, k), Tangents(*(_convert.back(impl, t, k) for t in ts))
    y, t = impl.forward_or_reverse(
        prob,
        lambda: impl.value_and_jvp(prob, xs, vss[0], ctx),
        lambda: impl.reverse_jvp(prob, xs, vss[0], ctx),
    )
    return _convert.back(impl, y, k), _convert.back(impl, t, k)


def _reverse_jvps(impl, prob: Problem, xs: tuple, vss: list, ctx: tuple):
    out = [impl.reverse_jvp(prob, xs, vs, ctx) for vs in vss]
    return out[0][0], [t for _, t in out]


def _vjp(op: str, f, backend, x, w, contexts, prep):
    impl, prob, xs, kinds, ctx = _enter(op, f, backend, x, contexts, prep=prep, t=w)
    ws = []
    for one in w if isinstance(w, Tangents) else (w,):
        if not (isinstance(one, float) or hasattr(one, "shape")):
            got = type(one).__name__
            raise _checks.mismatch(op, backend, "w", "structure", "one array", got)
        ws.append(_convert.native_tangent(op, impl, "w", one))
    if isinstance(w, Tangents):
        y, gss = impl.value_and_vjps(prob, xs, ws, ctx, _CheckW(op, impl))
        return impl, prob, kinds, y, Tangents(*(_like_x(impl, prob, g, kinds) for g in gss))
    y, gs = impl.value_and_vjp(prob, xs, ws[0], ctx, _CheckW(op, impl))
    return impl, prob, kinds, y, _like_x(impl, prob, gs, kinds)


class _CheckW:
    """Checks the cotangent against f(x) once f(x) is known (also under jit tracing).

    One convention for a complex f(x) on every backend (torch's):
    ``vjp(f, x, w) == gradient(lambda x: real(vdot(w, f(x))), x)``, the Hermitian
    product; a backend whose native pullback is bilinear (JAX, autograd, finite
    differences) gets ``conj(w)``."""

    __slots__ = ("impl", "op")

    def __init__(self, op, impl):
        self.op, self.impl = op, impl

    def __call__(self, y, w):
        w = _convert.match(self.op, self.impl, "w", w, y)
        if not self.impl.hermitian_vjp and self.impl.is_complex(w):
            return w.conj()
        return w


def value_and_vjp(
    f: Callable, backend: Any, x: Any, w: Any, *contexts: Any, prep: Any = None
) -> tuple[Any, Any]:
    """The value ``f(x)`` and the vector-Jacobian product ``wᵀ J(x)``.

    Args:
        f: function ``f(x, *contexts)`` returning an array.
        backend: a backend instance.
        x: an array, a Python float, or a pytree of floating-point arrays.
        w: the cotangent: an array with the shape and dtype of ``f(x)`` (or a
            ``di.Tangents`` of several, giving a ``Tangents`` of results).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).

    Returns:
        ``(f(x), wᵀ J)``, the second with the structure of ``x``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, g = di.value_and_vjp(lambda x: 3 * x, di.AutoFiniteDifferences(),
        ...                         np.array([1.0, 2.0]), np.array([1.0, 1.0]))
        >>> g.round(6)
        array([3., 3.])
    """
    try:
        if prep is not None and (out := _direct(_VV, prep, f, backend, x, contexts, w)) is not SLOW:
            return out
        impl, _, kinds, y, g = _vjp(_VV, f, backend, x, w, contexts, prep)
        return _convert.back(impl, y, _out_kind(kinds)), g
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(exc, value_and_vjp, f, backend, (x, w, *contexts), {"prep": prep})


def vjp(f: Callable, backend: Any, x: Any, w: Any, *contexts: Any, prep: Any = None) -> Any:
    """The vector-Jacobian product ``wᵀ J(x)``, with the structure of ``x``.

    Same arguments as :func:`value_and_vjp`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.vjp(lambda x: x**2, di.AutoFiniteDifferences(),
        ...        np.array([1.0, 2.0]), np.array([1.0, 0.0])).round(6)
        array([2., 0.])
    """
    try:
        if (
            prep is not None
            and (out := _direct("vjp", prep, f, backend, x, contexts, w)) is not SLOW
        ):
            return out
        return _vjp("vjp", f, backend, x, w, contexts, prep)[4]
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(exc, vjp, f, backend, (x, w, *contexts), {"prep": prep})


def value_and_jacobian(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None, chunk_size: Any = None
) -> tuple[Any, Any]:
    """The value ``f(x)`` and the Jacobian, of shape ``f(x).shape + x.shape``.

    The direction follows the backend's ``mode``; with ``mode=None`` it is
    forward when f has more outputs than inputs, else reverse.

    Args:
        f: function ``f(x, *contexts)`` returning an array.
        backend: a backend instance.
        x: one floating-point array (or a Python float).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).
        chunk_size: build the Jacobian ``chunk_size`` products (rows or columns)
            at a time, bounding the working memory; without it a Jacobian over
            ``di.config.max_dense_bytes`` (1 GiB) is an error.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, J = di.value_and_jacobian(lambda x: x[::-1] * 2, di.AutoFiniteDifferences(),
        ...                              np.array([1.0, 2.0]))
        >>> J.round(6)
        array([[0., 2.],
               [2., 0.]])
    """
    try:
        if chunk_size is None:
            if (out := _fast("value_and_jacobian", prep, f, backend, x, contexts)) is not SLOW:
                return out
        else:
            _dense.check_chunk_size("value_and_jacobian", backend, chunk_size)
        impl, prob, xs, kinds, ctx = _enter(
            "value_and_jacobian", f, backend, x, contexts, prep=prep
        )
        if not prob.single:
            raise _checks.not_single_array(prob.op, backend, len(xs))
        y, jac = _value_and_jacobian(impl, prob, xs, ctx, chunk_size)
        if chunk_size is None:  # a chunked call compiled other functions
            _remember("value_and_jacobian", f, backend, x, impl, prob, kinds, ctx, prep)
        k = _out_kind(kinds)
        return _convert.back(impl, y, k), _convert.back(impl, jac, k)
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(
            exc,
            value_and_jacobian,
            f,
            backend,
            (x, *contexts),
            {"prep": prep, "chunk_size": chunk_size},
        )


def jacobian(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None, chunk_size: Any = None
) -> Any:
    """The Jacobian of ``f`` at ``x``, of shape ``f(x).shape + x.shape``.

    Same arguments as :func:`value_and_jacobian`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.jacobian(lambda x: x**2, di.AutoFiniteDifferences(), np.array([1.0, 2.0])).round(6)
        array([[2., 0.],
               [0., 4.]])
    """
    try:
        if chunk_size is None:
            if (out := _fast("jacobian", prep, f, backend, x, contexts)) is not SLOW:
                return out
        else:
            _dense.check_chunk_size("jacobian", backend, chunk_size)
        impl, prob, xs, kinds, ctx = _enter("jacobian", f, backend, x, contexts, prep=prep)
        if not prob.single:
            raise _checks.not_single_array(prob.op, backend, len(xs))
        jac = _value_and_jacobian(impl, prob, xs, ctx, chunk_size, value=False)[1]
        if chunk_size is None:  # a chunked call compiled other functions
            _remember("jacobian", f, backend, x, impl, prob, kinds, ctx, prep)
        return _convert.back(impl, jac, _out_kind(kinds))
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(
            exc, jacobian, f, backend, (x, *contexts), {"prep": prep, "chunk_size": chunk_size}
        )


def _value_and_jacobian(impl, prob: Problem, xs: tuple, ctx: tuple, chunk_size=None, value=True):
    """The backend's jacobian (under the dense limit), built in chunks, or zeros when x
    is empty (no basis to run over)."""
    (x,) = xs
    n = _size(x)
    if not n:
        y = prob.flat()(xs, *ctx)
        return y, _convert.zeros(impl, (*y.shape, *x.shape), x)
    if chunk_size is not None:
        return _dense.jacobian(impl, prob, xs, ctx, chunk_size)
    m = impl.memo_output_size(prob, xs, ctx)
    _dense.check_limit(prob.op, prob.backend, m, n, x, "Jacobian")
    if value:
        run = lambda: impl.value_and_jacobian(prob, xs, ctx)  # noqa: E731
    else:
        run = lambda: (None, impl.jacobian(prob, xs, ctx))  # noqa: E731
    return impl.forward_or_reverse(
        prob, run, lambda: _reverse_jacobian(impl, prob, xs, ctx), impl.mode == "forward"
    )


def _reverse_jacobian(impl, prob: Problem, xs: tuple, ctx: tuple):
    y, (jac,) = impl.reverse_jacobian(prob, xs, ctx)
    return y, jac


def value_and_derivative(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None
) -> tuple[Any, Any]:
    """The value ``f(x)`` and the derivative ``f'(x)`` for a scalar ``x``.

    Args:
        f: function ``f(x, *contexts)`` returning an array (of any shape).
        backend: a backend instance.
        x: a Python float or a 0-d floating-point array.
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).

    Returns:
        ``(f(x), f'(x))``, both shaped like ``f(x)``.

    Examples:
        >>> import diffiface as di
        >>> y, d = di.value_and_derivative(lambda x: x**3, di.AutoFiniteDifferences(), 2.0)
        >>> round(y, 6), round(d, 5)
        (8.0, 12.0)
    """
    try:
        if (
            prep is not None
            and (out := _direct("value_and_derivative", prep, f, backend, x, contexts)) is not SLOW
        ):
            return out
        impl, prob, xs, kinds, ctx = _enter(
            "value_and_derivative", f, backend, x, contexts, prep=prep
        )
        return _derivative(impl, prob, xs, kinds, ctx)
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(exc, value_and_derivative, f, backend, (x, *contexts), {"prep": prep})


def derivative(f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None) -> Any:
    """The derivative ``f'(x)`` for a scalar ``x``, shaped like ``f(x)``.

    Same arguments as :func:`value_and_derivative`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> round(di.derivative(np.sin, di.AutoFiniteDifferences(), 0.0), 6)
        1.0
    """
    try:
        if (
            prep is not None
            and (out := _direct("derivative", prep, f, backend, x, contexts)) is not SLOW
        ):
            return out
        impl, prob, xs, kinds, ctx = _enter("derivative", f, backend, x, contexts, prep=prep)
        return _derivative(impl, prob, xs, kinds, ctx)[1]
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(exc, derivative, f, backend, (x, *contexts), {"prep": prep})


def _derivative(impl, prob: Problem, xs: tuple, kinds: tuple, ctx: tuple):
    if not prob.single or tuple(xs[0].shape) != ():
        shape = tuple(xs[0].shape) if prob.single else (len(xs),)
        raise _checks.not_scalar_input(prob.op, prob.backend, shape)
    one = (impl.ones_like(xs[0]),)
    y, t = impl.forward_or_reverse(
        prob,
        lambda: impl.value_and_jvp(prob, xs, one, ctx),
        lambda: _reverse_jacobian(impl, prob, xs, ctx),
    )
    k = _out_kind(kinds)
    return _convert.back(impl, y, k), _convert.back(impl, t, k)
