"""The one operator shell: check -> plan -> run -> convert back.

Every public operator is an :class:`Operator` declaration (its name, its family,
whether f must be scalar, whether it takes a tangent or a ``second_order``
backend, and a ``run`` function on a :class:`Call`) and a thin public function
that hands its arguments to :func:`call`. The shell does the rest, the same way for
every operator:

1. the plan: a prepared call runs the plan the user holds (a same-point plan, an
   ``OwnPlan``, runs the call itself), an unprepared one the
   plan kept weakly on f by the last call like it (``core.unprepared``); both run
   the backend's runner and nothing else when the call matches;
2. enter: the boundary checks, the backend's implementation, x and the contexts
   converted, the Problem, a FixedParams routed to its nested-AD rule;
3. run, then keep the plan of an unprepared call for the next one like it (with
   ``has_aux``, the general path runs inside a sink that catches f's aux);
4. a call on arrays of another framework (or a ``second_order`` of two frameworks)
   is known before anything is converted (``core.crossing``): it runs across the
   bridge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _checks, _config, _finite
from .._contexts import Constant, FixedParams, unfix
from .._tangents import Tangents, stacked_call
from .._tree import TooDeep, flatten, too_deep, tree_map, unflatten
from ..nested.route import planned, route
from . import convert, crossing, outputs, registry, unprepared
from .backend import SLOW
from .operator import OPS
from .plan import OwnPlan, Prep
from .problem import Problem


class Operator:
    """One public operator, declared.

    Its facts (family, scalar f, tangent) come from its declaration in
    ``core.operator``. ``run(call, t, chunk_size)`` computes the result from an
    entered :class:`Call` (``t``: the tangent or cotangent, None for operators without
    one).
    ``resolve(f, backend, contexts)`` gives ``(impl, combo)`` for a second-order
    backend. Every operator keeps its plans (prepared, and unprepared ones weakly on
    f): the backend's runner decides which calls it runs.
    """

    __slots__ = (
        "aux_name",
        "family",
        "many_name",
        "name",
        "public",
        "resolve",
        "run",
        "scalar",
        "tangent",
    )

    def __init__(self, name, run, *, resolve=None):
        facts = OPS[name]  # (the one declaration of its facts: core.operator)
        self.name, self.family, self.run, self.scalar = name, facts.family, run, facts.scalar
        self.tangent = facts.tangent is not None  # a tangent or cotangent after x
        self.resolve = resolve
        self.aux_name = unprepared.aux_key(name)  # its kept plans for an f with aux
        self.many_name = unprepared.tangents_key(name)  # and for calls with Tangents
        self.public: Callable | None = None  # set by ``public``

    def __repr__(self) -> str:
        return f"<diffiface operator {self.name}>"


def public(op: Operator) -> Callable:
    """Decorator: the public function of ``op`` (the bridge calls it by this link)."""

    def deco(fn: Callable) -> Callable:
        op.public = fn
        return fn

    return deco


class Call:
    """One entered call: the implementation, the Problem, x's native leaves and kinds,
    the contexts' values, the second-order combination; and the conversions back."""

    __slots__ = ("combo", "ctx", "impl", "kinds", "prob", "xs")

    def __init__(self, impl, prob: Problem, xs: tuple, kinds: tuple, ctx: tuple, combo=None):
        self.impl, self.prob, self.xs, self.kinds, self.ctx, self.combo = (
            impl,
            prob,
            xs,
            kinds,
            ctx,
            combo,
        )

    def back(self, a: Any) -> Any:
        """A result shaped like f(x) (a pytree where f(x) is one), in x's kind (native if
        any leaf of x was)."""
        kinds = self.kinds
        kind = convert.NATIVE if convert.NATIVE in kinds else min(kinds, default=0)
        layout = self.layout() if outputs.SEEN[0] else None
        if layout is not None:
            impl = self.impl
            tree = layout.split(impl, a)
            return (
                tree
                if kind == convert.NATIVE
                else tree_map(lambda v: convert.back(impl, v, kind), tree)
            )
        return convert.back(self.impl, a, kind)

    def layout(self) -> outputs.Layout | None:
        """The Layout of f's pytree output (None for one array), once f has run."""
        f = self.prob.f
        if self.prob.op not in outputs.TREE_OPS or not outputs.returns_tree(f):
            return None
        prob, impl = self.prob, self.impl
        sig = outputs.signature(self.xs, self.ctx, prob.aux, impl.leaf_signature, prob.op)
        layout = outputs.layout_of(f, sig)
        if layout is outputs.MISSING:  # compiled before: trace f for its output alone
            impl.output_like(prob, self.xs, self.ctx)
            layout = outputs.layout_of(f, sig)
        if layout is outputs.MISSING:  # never silently unsplit
            raise _checks.DiffifaceValueError(
                f"{_checks.call_form(prob.op, prob.backend)}: diffiface lost the structure of "
                "f's pytree output for these arguments. This is a bug in diffiface: please "
                "report it; as a workaround, return one array and split it yourself."
            )
        return layout

    def like_x(self, gs: tuple) -> Any:
        """Leaves shaped like x's, in x's structure and kinds."""
        prob, kinds = self.prob, self.kinds
        if prob.single and kinds[0] == convert.NATIVE:
            return gs[0]
        gs = [convert.back(self.impl, g, k) for g, k in zip(gs, kinds, strict=True)]
        return gs[0] if prob.single else unflatten(prob.treedef, gs)


def call(
    op: Operator,
    f,
    backend,
    x,
    t,
    contexts: tuple,
    prep,
    chunk_size=None,
    has_aux=False,
    restack=True,
) -> Any:
    """The public operator ``op`` on these arguments (``t``: its tangent, for an
    operator that takes one); with ``has_aux``, ``(its result, f's aux)``. A stacked
    ``Tangents`` gives stacked results (``restack``: the call that stacks them)."""
    if restack and type(t) is Tangents and t._stack is not None:
        args = (op, f, backend, x, t, contexts, prep, chunk_size, has_aux, False)
        return stacked_call(lambda: call(*args), t, OPS[op.name].tangent)
    aux = has_aux is not False or (prep is not None and getattr(prep, "aux", False))
    sink = None
    if aux or chunk_size is not None or (prep is not None and type(prep) is not Prep):
        # the steps a common call skips (no aux, no chunk_size, a plan of the plain kind)
        if isinstance(prep, OwnPlan):
            return prep.run_call(op, f, backend, x, t, contexts, chunk_size, has_aux)
        sink = _uncommon(op, backend, prep, chunk_size, has_aux, aux)
    try:
        # (``_config.checking()``, its common case inline: no options block)
        planned = chunk_size is None and not (
            _config.CHECKING[0] if _config.OPTIONS.get() is None else _config.checking()
        )
        if planned:
            args = (t,) if op.tangent else ()
            if prep is not None:  # the user's plan
                plan = prep if type(prep) is Prep else prepared(prep, op, backend)  # (raises)
                out = plan.run_direct(op.name, f, backend, x, contexts, args)
            elif type(backend) in registry.KEEPS_PLANS:  # the plan kept from a call like it
                name = op.aux_name if aux else op.many_name if type(t) is Tangents else op.name
                out = unprepared.run(name, f, backend, x, contexts, args)
            else:
                out = SLOW
            if out is not SLOW:  # (SLOW: the general path runs, and explains)
                if sink is None:
                    return out
                return out, (sink.box[0] if sink.box else _aux(op, backend, sink))
        how = crosses(op, f, backend, x, t, contexts, prep)
        if how is not None:  # the call runs across the bridge
            return _cross(how, op, f, backend, x, t, contexts, prep, chunk_size, aux)
        c = enter(op, f, backend, x, contexts, prep, t, aux)
        out = op.run(c, t, chunk_size)
        if prep is None:
            if planned and c.impl.traits.keeps_plans:
                unprepared.remember(
                    op.name, f, backend, c.impl, c.prob, c.combo, x, c.kinds, contexts, t
                )
        elif planned and type(prep) is Prep:
            prep.learn(op.name)
        return out if sink is None else (out, c.impl.settle(_aux(op, backend, sink), out))
    except TooDeep:
        raise _too_deep(op, backend, x, t, contexts) from None
    except _checks.ERRORS as exc:  # a prepared call's errors name prep= as the user wrote
        if prep is not None:
            form = _checks.call_form(op.name, backend)
            _checks.restate(exc, _checks.with_prep(form), form)
        raise
    finally:
        if sink is not None:
            outputs.LOCAL.stack.pop()


def _uncommon(op: Operator, backend, prep, chunk_size, has_aux, aux: bool):
    """The checks of a call with chunk_size or aux, and its open sink (None without aux),
    which catches f's aux around the call (pushed here, popped by ``call``)."""
    if chunk_size is not None:
        _checks.check_chunk_size(op.name, backend, chunk_size)
    if not aux:
        return None
    if has_aux is not True or (
        prep is not None and not getattr(prep, "aux", False)
    ):  # (_check_aux's conditions: it raises)
        _check_aux(op, backend, prep, has_aux)
    sink = outputs.Sink()
    outputs.LOCAL.stack.append(sink)
    return sink


def _aux(op: Operator, backend, sink: outputs.Sink) -> Any:
    """f's aux, which the call's run of f put in the sink (a runner hands it over as the
    caller sees it: runs_aux)."""
    if not sink.box:  # f never ran (a result known without calling it)
        raise _checks.DiffifaceValueError(
            f"{_checks.call_form(op.name, backend)}: f was not called, so it has no aux."
        )
    return sink.aux


def _too_deep(
    op: Operator, backend, x, t, contexts: tuple, name: str | None = None
) -> _checks.DiffifaceValueError:
    """The error for a pytree deeper than diffiface flattens, naming the call and which
    argument it is (optree raised RecursionError)."""
    values = [c.value if isinstance(c, Constant) else c for c in contexts]
    what = "x, a tangent, a context or f's output"
    for arg, tree in (("x", x), ("the tangent", t), ("a context", values)):
        if too_deep(tree):
            what = arg
            break
    form = _checks.call_form(name or op.name, backend)
    return _checks.DiffifaceValueError(f"{form}: {TooDeep(what)}")


def _cross(how: str, op: Operator, f, backend, x, t, contexts, prep, chunk_size, has_aux) -> Any:
    args = (x, t, *contexts) if op.tangent else (x, *contexts)
    kw = {"prep": prep} if chunk_size is None else {"prep": prep, "chunk_size": chunk_size}
    if has_aux:
        kw["has_aux"] = True
    return crossing.run(how, op.public, f, backend, args, kw)


def _check_aux(op: Operator, backend, prep, has_aux) -> None:
    """has_aux is True, and the preparation's."""
    if prep is not None and bool(getattr(prep, "aux", False)) != bool(has_aux):
        raise _checks.DiffifaceValueError(
            f"{_checks.call_form(op.name, backend)}: has_aux={has_aux!r} differs from the "
            f"preparation's (has_aux={getattr(prep, 'aux', False)!r}). Pass the same has_aux "
            "to the operator and to its prepare_ function."
        )
    if has_aux is not True:
        raise _checks.DiffifaceTypeError(
            f"{_checks.call_form(op.name, backend)}: has_aux must be True or False, got "
            f"{has_aux!r}."
        )


def prepared(prep: Any, op: Operator, backend: Any) -> Prep:
    if not isinstance(prep, Prep):
        raise _checks.DiffifaceTypeError(
            f"{_checks.call_form(op.name, backend)}: prep must come from a "
            f"di.prepare_{op.family}(...) call, got {type(prep).__name__}."
        )
    return prep


def crosses(op: Operator, f, backend, x, t, contexts: tuple, prep) -> str | None:
    """How the call crosses to another framework (``core.crossing``; None: it does not),
    asked before :func:`enter` and once the backend is checked."""
    if prep is None:
        _checks.check_backend(op.name, f, backend, second=op.resolve is not None)
    return crossing.of(f, backend, x, t, contexts)


def enter(op: Operator, f, backend, x, contexts: tuple, prep, t=None, aux=False) -> Call:
    """Check the arguments, convert x and the contexts, build the Problem (the backend
    was checked: :func:`crosses`)."""
    if _config.check_finite():
        _finite.check(op.name, backend, f, x, contexts, t)
    if prep is not None:
        plan = prepared(prep, op, backend)
        impl, prob, xs, kinds, ctx = plan.enter(op.name, f, backend, x, contexts, t)
        if not getattr(plan.impl, "holds_call", False):
            return Call(impl, prob, xs, kinds, ctx, plan.combo)
        # finite differences over an AD gradient hold f and the contexts: enter anew
    if op.resolve is None:
        impl, combo = registry.implementation(backend), None
    else:
        impl, combo = op.resolve(f, backend, contexts)
    return enter_impl(op.name, f, backend, impl, x, contexts, op.scalar, combo, aux)


def enter_impl(
    name: str, f, backend, impl, x, contexts: tuple, scalar: bool, combo=None, aux=False
) -> Call:
    """Convert x and the contexts for ``impl`` and build the Problem; a FixedParams
    becomes its function with the parameters as the first context."""
    f, contexts, fixed = unfix(f, contexts)
    if impl.is_native(x) and impl.is_float(x):  # fast path: one array of the framework
        xs, kinds, single, tree = (x,), _ONE_NATIVE, True, _LEAF
    else:
        x = impl.open(x)
        leaves, tree = flatten(x)
        xs, kinds = convert.point(name, impl, leaves, tree)
        single = len(leaves) == 1 and leaves[0] is x
    prob = Problem(name, backend, impl, f, tree, single, scalar, aux)
    ctx = convert.contexts(name, impl, contexts) if contexts else ()
    if fixed is not None:
        impl = route(impl, fixed, name, xs, ctx, aux, single)
    return Call(impl, prob, xs, kinds, ctx, combo)


_ONE_NATIVE = (convert.NATIVE,)
_LEAF = flatten(0.0)[1]


def prepare(op: Operator, f, backend, x, contexts: tuple, t=None, has_aux=False) -> Prep:
    """``prepare_<op>``: enter once, build the plan, warm it up (JAX compiles), and
    build its runners."""
    if has_aux is not True and has_aux is not False:
        raise _checks.DiffifaceTypeError(
            f"prepare_{op.family}(f, {backend!r}, ...): has_aux must be True or False, got "
            f"{has_aux!r}."
        )
    try:
        if crosses(op, f, backend, x, t, contexts, None) is not None:
            raise _checks.DiffifaceValueError(
                f"prepare_{op.family}(f, {backend!r}, ...): the arguments hold arrays of "
                "another framework (or second_order crosses frameworks), and a preparation "
                "holds one framework's arrays. Prepare with the backend's arrays, or call "
                "the operator without prep= (it then crosses a bridge)."
            )
        c = enter(op, f, backend, x, contexts, None, aux=has_aux)
        plan = Prep(op.family, f, backend, c.impl, c.combo, c.prob, x, c.kinds, contexts, t)
        if type(f) is FixedParams and f.strategy in ("auto", "min_memory"):
            plan.nested = planned(c.impl, f, op.name, c.xs, c.ctx, has_aux, c.prob.single)
        call(op, f, backend, x, t, contexts, plan, has_aux=has_aux)
        plan.finalize(x)
        if c.impl.traits.keeps_plans:  # the next unprepared call like it runs it too
            prob = plan.problem(op.name)
            unprepared.remember(op.name, f, backend, c.impl, prob, c.combo, x, c.kinds, contexts, t)
    except TooDeep:
        raise _too_deep(op, backend, x, t, contexts, f"prepare_{op.family}") from None
    except _checks.ERRORS as exc:  # raised for op: the user called prepare_<family>
        called, form = (
            _checks.call_form(f"prepare_{op.family}", backend),
            _checks.call_form(op.name, backend),
        )
        _checks.restate(exc, called, form, _checks.with_prep(form))
        raise
    return plan
