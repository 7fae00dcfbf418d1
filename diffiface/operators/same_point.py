"""Same-point preparations: many tangents at one x, each one linear pass.

``prep = di.prepare_hvp_same_point(f, backend, x, v)`` does the work that depends on x
alone once, and ``di.hvp(f, backend, x, v2, prep=prep)`` then costs one linear pass per
tangent (as DifferentiationInterface.jl's ``prepare_hvp_same_point``). What is kept:

- JAX: the linearization of the gradient (of f, for jvp; f's pullback, for vjp), made
  by a jit-compiled function that every x of the same signature reuses, and applied by
  another (a ``Tangents`` of k: one vmapped call);
- torch: the gradient's graph (built with ``create_graph=True``), each hvp one backward
  through it; for vjp f's graph; for jvp the graph of the pullback ``u -> J^T u``, each
  jvp one backward of it (the double-vjp trick, which runs no part of f again);
- autograd: the gradient's pullback (``make_vjp`` of the gradient); f's pullback; for
  jvp the pullback of f's pullback;
- finite differences: f(x) and the gradient at x; each hvp one more gradient (a
  one-sided outer difference), each jvp one or two more values of f, each vjp a
  product with the Jacobian built once.

The preparation belongs to its point. A call is at the same point when x (and every
Constant context) equals the prepared one in value; anything else is a MismatchError,
never a stale result. The check is cheap next to a linear pass: a JAX array is
immutable, so the same object needs no comparison (another object is compared by
value, and an equal one is accepted); a torch tensor is the same object with the same
``_version`` (in-place changes bump it), else compared by value with a copy taken at
preparation; a NumPy array is mutable and has no version, so it is compared with a copy
(O(n), against an operator that costs at least that).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _checks
from .._backend_types import AutoSparse, SecondOrder
from .._contexts import Constant, FixedParams
from .._tangents import Tangents
from .._tree import TooDeep, flatten
from ..core import convert, crossing, outputs, shell
from ..core.operator import FAMILY, OPS, pick
from ..core.plan import MismatchError, OwnPlan, Prep
from . import first_order, second_order


def _same(a: Any) -> Any:
    return a


class SamePoint(OwnPlan):
    """The result of a ``prepare_*_same_point`` call: pass it as ``prep=`` to the
    operators of its family, at the x it was prepared at."""

    __slots__ = ("_fast", "_linear", "_point", "_prep", "_single", "backend", "f", "family")

    def __init__(self, op, f, backend, prep, point: list, single: bool, linear: tuple, fast):
        self.f, self.backend, self.family = f, backend, op.family
        self._prep, self._point, self._linear = prep, point, linear  # (a Prep, made late)
        self._single = single  # x is one array and there are no contexts
        self._fast = fast  # (x's type, the tangent's type, shape, dtype): a native call

    def __repr__(self) -> str:
        return f"<diffiface same-point prep for {self.family}(f, {self.backend!r}, x)>"

    def run_call(self, op, f, backend, x, t, contexts: tuple, chunk_size, has_aux):
        """The result of ``op`` at the prepared point (the shell hands it the call)."""
        if self._fast is not None and not contexts and chunk_size is None and has_aux is False:
            out = self._run_fast(op.name, f, backend, x, t)
            if out is not None:
                return out
        if has_aux is not False:
            raise _no_aux(_checks.call_form(op.name, backend), op.family)
        if chunk_size is not None:
            raise _checks.DiffifaceTypeError(
                f"{_form(op.name, backend)}: a same-point preparation takes no chunk_size. "
                "Call it without chunk_size."
            )
        if crossing.of(f, backend, x, t, contexts) is not None:
            raise _checks.DiffifaceTypeError(
                f"{_form(op.name, backend)}: the arguments hold arrays of another framework, "
                "and a same-point preparation does not cross frameworks. Pass the backend's "
                "arrays or NumPy arrays."
            )
        try:
            if not isinstance(self._prep, Prep):  # the signature checks: made on first use
                self._prep = self._prep()
            impl, prob, xs, kinds, ctx = self._prep.enter(op.name, f, backend, x, contexts, t)
        except TooDeep:
            raise _checks.DiffifaceValueError(
                f"{_form(op.name, backend)}: {TooDeep('x')}"
            ) from None
        if not _holds(self._point, self._single, impl, x, contexts):
            raise _moved(op.name, backend, self.family)
        return _FINISH[self.family](shell.Call(impl, prob, xs, kinds, ctx), self._linear, t)

    def _run_fast(self, name: str, f, backend, x, t):
        """The result of a native call that matches exactly, else None (the general
        path converts, or explains the mismatch)."""
        fast = self._fast
        if f is not self.f or (backend is not self.backend and backend != self.backend):
            return None
        if type(x) is not fast[0] or type(t) is not fast[1] or t.shape != fast[2]:
            return None
        same, kept = self._point[0]
        if t.dtype != fast[3] or FAMILY.get(name) != self.family or not same(kept, x):
            return None
        at, one, _ = self._linear
        if self.family == "jvp":
            return _result(name, one((t,)), at)
        out = one(t if self.family == "vjp" else (t,))[0]
        return _result(name, out, at, gradient=lambda g: g[0])


def _result(name: str, out: Any, at: Callable, value=_same, gradient=_same) -> Any:
    """The result of ``name`` from its tangent output ``out``; ``at()`` (f(x), and for
    hvp the gradient's leaves) is asked only where ``name`` returns more than ``out``,
    and ``value`` and ``gradient`` give those parts to the caller."""
    returns = OPS[name].returns
    if len(returns) == 1:
        return out
    kept = at()
    parts = {returns[-1]: out, "value": value(kept[0])}
    if "gradient" in returns:
        parts["gradient"] = gradient(kept[1])
    return pick(name, parts)


def _form(op: str, backend: Any) -> str:
    return _checks.call_form(op, backend)[:-1] + ", prep=prep)"


def _moved(op: str, backend: Any, family: str) -> MismatchError:
    return MismatchError(
        f"{_form(op, backend)}: x (or a Constant context) differs from the point this "
        f"preparation was made at (prepare_{family}_same_point keeps work that holds at that "
        "x alone): it is another array with other values, or the prepared array was changed "
        f"in place. Prepare again at the new x with prepare_{family}_same_point(f, backend, "
        f"x, ...), or use prepare_{family} for a preparation that takes any x."
    )


def _no_aux(form: str, family: str) -> _checks.DiffifaceValueError:
    return _checks.DiffifaceValueError(
        f"{form}: has_aux=True is not supported with a same-point preparation. Compute "
        f"the aux with a separate call of f, or use prepare_{family} with has_aux=True."
    )


# ---- the point: x and the Constant contexts, kept to recognize them ----------------
def _leaves(impl: Any, x: Any, contexts: tuple) -> list:
    return flatten(impl.open(x))[0] + flatten(tuple(c.value for c in contexts))[0]


def _keep(kit: Any, impl: Any, leaf: Any) -> tuple:
    """(same, kept): ``same(kept, leaf)`` tells whether a later leaf is this one."""
    if isinstance(leaf, np.ndarray | np.generic):
        return _same_numpy, np.array(leaf, copy=True)
    if impl.is_native(leaf) and hasattr(kit, "same"):  # (NumPy backends keep none)
        return kit.same, kit.keep(leaf)
    return _same_value, leaf


def _same_numpy(kept: np.ndarray, leaf: Any) -> bool:
    return (
        isinstance(leaf, np.ndarray | np.generic)
        and np.shape(leaf) == kept.shape
        and np.array_equal(leaf, kept, equal_nan=kept.dtype.kind in "fc")
    )


def _same_value(kept: Any, leaf: Any) -> bool:
    """A Python number or another Constant value: equal (NaN equals NaN)."""
    if leaf is kept:
        return True
    try:
        return bool(leaf == kept) or (leaf != leaf and kept != kept)
    except Exception:  # an object that cannot compare to a bool: only itself is equal
        return False


def _holds(point: list, single: bool, impl: Any, x: Any, contexts: tuple) -> bool:
    if single:  # one array: no flattening
        same, kept = point[0]
        return same(kept, x)
    got = _leaves(impl, x, contexts)
    return len(got) == len(point) and all(
        same(kept, leaf) for (same, kept), leaf in zip(point, got, strict=True)
    )


# ---- preparation ---------------------------------------------------------------------
def prepare(op, f: Callable, backend: Any, x: Any, t: Any, contexts: tuple, has_aux) -> SamePoint:
    """``prepare_<family>_same_point``: enter once, keep the point, build the linear map."""
    name = f"prepare_{op.family}_same_point"
    form = f"{name}(f, {backend!r}, x, {'w' if op.family == 'vjp' else 'v'})"
    _refuse(form, f, backend, contexts, has_aux, op.family)
    try:
        if shell.crosses(op, f, backend, x, t, contexts, None) is not None:
            raise _checks.DiffifaceValueError(
                f"{form}: the arguments hold arrays of another framework. Prepare with the "
                "backend's arrays."
            )
        c = shell.enter(op, f, backend, x, contexts, None)
        kit = _kit(form, c.impl)
        if any(c.impl.is_complex(v) or c.impl.is_traced(v) for v in c.xs):
            raise _checks.DiffifaceTypeError(
                f"{form}: x must hold real floating arrays that are not traced by an outer "
                "transform. Use prepare_" + op.family + " for complex or traced x."
            )
        prep = functools.partial(
            Prep, op.family, f, backend, c.impl, c.combo, c.prob, x, c.kinds, contexts, t
        )
        single = c.prob.single and not contexts  # one array: no flattening
        leaves = [x] if single else _leaves(c.impl, x, contexts)
        point = [_keep(kit, c.impl, leaf) for leaf in leaves]
        linear = getattr(kit, op.family)(c.impl, c.prob, c.xs, c.ctx)
    except TooDeep:
        raise _checks.DiffifaceValueError(f"{form}: {TooDeep('x or a context')}") from None
    except _checks.ERRORS as exc:
        _checks.restate(exc, form, _checks.call_form(op.name, backend))
        raise
    if outputs.returns_tree(f):
        raise _checks.DiffifaceTypeError(
            f"{form}: f returns a pytree; a same-point preparation takes f returning one "
            f"array. Use prepare_{op.family} for a pytree output."
        )
    fast = _fast(c, op.family, x, t, linear[0], single)
    return SamePoint(op, f, backend, prep, point, single, linear, fast)


def _fast(c, family: str, x: Any, t: Any, at: Callable, single: bool):
    """(x's type, the tangent's type, shape and dtype) where a call with one native x and
    a native tangent can skip the conversions, else None."""
    if not single or c.kinds[0] != convert.NATIVE or isinstance(t, Tangents):
        return None
    if family == "vjp" and hasattr(at, "out"):  # f(x)'s (type, shape, dtype), not computed
        kind, shape, dtype = at.out
        return None if np.dtype(dtype).kind == "c" else (type(x), kind, shape, dtype)
    like = at()[0] if family == "vjp" else x
    if not c.impl.is_native(like) or c.impl.is_complex(like):
        return None
    return type(x), type(like), tuple(like.shape), like.dtype


def _refuse(form: str, f, backend, contexts: tuple, has_aux, family: str) -> None:
    """The arguments a same-point preparation does not take, each a clear error."""
    if has_aux is not False:
        raise _no_aux(form, family)
    if isinstance(backend, SecondOrder | AutoSparse):
        raise _checks.DiffifaceTypeError(
            f"{form}: a same-point preparation takes a plain backend (AutoJax(), AutoTorch(), "
            f"AutoAutograd(), AutoFiniteDifferences()), got {backend!r}. Use prepare_"
            f"{family} for it."
        )
    if type(f) is FixedParams:
        raise _checks.DiffifaceTypeError(
            f"{form}: f is a FixedParams, which a same-point preparation does not take. Pass "
            "its parameters as a di.Constant context of the plain function, or use prepare_"
            f"{family}."
        )
    for c in contexts:
        if type(c) is not Constant:
            raise _checks.DiffifaceTypeError(
                f"{form}: contexts must be di.Constant(...) for a same-point preparation, got "
                f"{type(c).__name__}. Wrap the value in di.Constant."
            )


def _kit(form: str, impl: Any) -> Any:
    """The backend's same-point module (``backends/<framework>/same_point.py``)."""
    kit = _KITS.get(impl.framework)
    if kit is not None:
        return kit
    try:
        kit = importlib.import_module(f"diffiface.backends.{impl.framework}.same_point")
        _KITS[impl.framework] = kit
        return kit
    except ModuleNotFoundError:
        raise _checks.DiffifaceTypeError(
            f"{form}: the {impl.framework} backend has no same-point preparation. Use the "
            "ordinary prepare_ function."
        ) from None


_KITS: dict = {}  # framework -> its same-point module, once imported


# ---- the results, from the kept linear map -------------------------------------------
def _hvps(c, linear: tuple, v: Any):
    at, one, many = linear
    vss = convert.tangents(c.prob.op, c.impl, c.prob, c.xs, v)
    if isinstance(v, Tangents):
        hv = Tangents(*(c.like_x(h) for h in many(vss)))
    else:
        hv = c.like_x(one(vss[0]))
    return _result(c.prob.op, hv, at, c.back, c.like_x)


def _jvps(c, linear: tuple, v: Any):
    at, one, many = linear
    vss = convert.tangents(c.prob.op, c.impl, c.prob, c.xs, v)
    if isinstance(v, Tangents):
        out = Tangents(*(c.back(t) for t in many(vss)))
    else:
        out = c.back(one(vss[0]))
    return _result(c.prob.op, out, at, c.back)


def _vjps(c, linear: tuple, w: Any):
    at, one, many = linear
    value = at()[0]
    op, impl = c.prob.op, c.impl
    check = first_order._CheckW(op, impl)

    def native(a: Any) -> Any:  # a NumPy cotangent to a framework's backend is converted
        return check(value, convert.native_tangent(op, impl, "w", a))

    if isinstance(w, Tangents):
        out = Tangents(*(c.like_x(g) for g in many([native(a) for a in w])))
    else:
        out = c.like_x(one(native(w)))
    return _result(op, out, lambda: (value,), c.back)


_FINISH = {"hvp": _hvps, "jvp": _jvps, "vjp": _vjps}


# ---- the public functions ------------------------------------------------------------
def prepare_hvp_same_point(
    f: Callable, backend: Any, x: Any, v: Any, *contexts: Any, has_aux: bool = False
) -> SamePoint:
    """Prepare :func:`hvp`, :func:`gradient_and_hvp` and :func:`value_gradient_and_hvp`
    at this ``x``: the gradient's linearization is kept, so each direction costs one
    linear pass. A call at another x raises :class:`~diffiface.MismatchError`.

    ``v`` fixes the tangent's kind (one, or a ``Tangents`` of k) as for
    :func:`prepare_hvp`. Finite differences difference the kept gradient one-sidedly
    (about 1e-5 relative error in float64; ``prepare_hvp`` differences centrally).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, b = (lambda x: (x**3).sum()), di.AutoFiniteDifferences()
        >>> x = np.array([1.0, 2.0])
        >>> prep = di.prepare_hvp_same_point(f, b, x, x)
        >>> di.hvp(f, b, x, np.array([1.0, 0.0]), prep=prep).round(3)
        array([6., 0.])
        >>> di.hvp(f, b, x, np.array([0.0, 1.0]), prep=prep).round(3)
        array([ 0., 12.])
    """
    return prepare(second_order.HVP, f, backend, x, v, contexts, has_aux)


def prepare_jvp_same_point(
    f: Callable, backend: Any, x: Any, v: Any, *contexts: Any, has_aux: bool = False
) -> SamePoint:
    """Prepare :func:`jvp` and :func:`value_and_jvp` at this ``x``: f's linearization is
    kept, so each tangent costs one linear pass and no run of f (finite differences:
    f(x) is kept). A call at another x raises :class:`~diffiface.MismatchError`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, b = (lambda x: x**2), di.AutoFiniteDifferences()
        >>> x = np.array([1.0, 2.0])
        >>> prep = di.prepare_jvp_same_point(f, b, x, x)
        >>> di.jvp(f, b, x, np.array([1.0, 0.0]), prep=prep).round(6)
        array([2., 0.])
    """
    return prepare(first_order.JVP, f, backend, x, v, contexts, has_aux)


def prepare_vjp_same_point(
    f: Callable, backend: Any, x: Any, w: Any, *contexts: Any, has_aux: bool = False
) -> SamePoint:
    """Prepare :func:`vjp` and :func:`value_and_vjp` at this ``x``: f's pullback is kept
    (finite differences: the Jacobian), so each cotangent costs one reverse pass. A call
    at another x raises :class:`~diffiface.MismatchError`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, b = (lambda x: 3 * x), di.AutoFiniteDifferences()
        >>> x = np.array([1.0, 2.0])
        >>> prep = di.prepare_vjp_same_point(f, b, x, x)
        >>> di.vjp(f, b, x, np.array([1.0, 1.0]), prep=prep).round(6)
        array([3., 3.])
    """
    return prepare(first_order.VJP, f, backend, x, w, contexts, has_aux)
