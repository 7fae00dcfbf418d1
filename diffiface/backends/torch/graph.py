"""torch graphs for one call: the leaves diffiface differentiates, f run on them (with
the check that f drops no derivative), the pullbacks, and what an outer pass sees."""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwAD
from torch._C._functorch import is_functorch_wrapped_tensor, peek_interpreter_stack
from torch.overrides import TorchFunctionMode

from ... import _checks, _config
from ..._cache import CodeFacts
from ..._tree import flatten
from ...core import direction
from .forward import FORWARD_LOCK


def seen_by_outer(t) -> bool:
    """A tangent or cotangent ``t`` that an outer differentiation sees."""
    return isinstance(t, torch.Tensor) and (
        (t.requires_grad and torch.is_grad_enabled())
        or is_functorch_wrapped_tensor(t)
        or (fwAD._current_level >= 0 and is_dual(t))
    )


def is_dual(a) -> bool:
    """``a`` carries a forward-mode tangent. Checked per tensor: torch's current
    forward-AD level is a process-wide global that another thread's jvp may have set."""
    return fwAD._current_level >= 0 and fwAD.unpack_dual(a).tangent is not None


def tensors_of(ctx: tuple) -> list:
    """The tensor leaves of the contexts."""
    return [c for c in flatten(ctx)[0] if isinstance(c, torch.Tensor)] if ctx else []


def in_functorch() -> bool:
    """A torch.func transform is running: it may see this call through x, a context,
    a tangent or a closure, and it forbids the graph-building calls of a plain pass."""
    return peek_interpreter_stack() is not None


def outer_pass(xs: tuple, ctx: tuple) -> bool:
    """True when an outer differentiation can see this call through x or a Constant
    (the contexts are flattened only when x alone does not tell)."""
    if fwAD._current_level >= 0 and any(is_dual(a) for a in (*xs, *tensors_of(ctx))):
        return True  # forward-mode AD sees this call: keep every tangent
    if not torch.is_grad_enabled():
        return False
    for x in xs:  # (loops, not any(): no frames on every call)
        if x.requires_grad:
            return True
    if ctx:
        for c in tensors_of(ctx):
            if c.requires_grad:
                return True
    return False


def reaches_outside(y, xg: tuple) -> bool:
    """True when y's graph (y: a tensor, or a list of f's output leaves) reaches a leaf
    requiring grad other than xg: f closes over tensors of an outer differentiation, so
    the result must stay attached. (Runs on every call of a runner, on a graph whose
    nodes Python sees for the first time: one x is compared by identity, no set.)"""
    if type(y) is list:
        stack = [a.grad_fn for a in y if a.grad_fn is not None]
    else:
        node = y.grad_fn
        stack = [] if node is None else [node]
    if not stack or not torch.is_grad_enabled():
        return False
    one = xg[0] if len(xg) == 1 else None
    own = None if one is not None else set(map(id, xg))  # (no comprehension: no frame)
    seen: set = set()
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is None:
                continue
            if type(nxt) is _ACCUMULATE:  # a leaf (no getattr: it raises on other nodes)
                variable = nxt.variable
                if variable is one or (own is not None and id(variable) in own):
                    continue
                if not hasattr(variable, DONE):
                    return True
            elif nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def _accumulate_type() -> type:
    """The class of torch's graph node that accumulates into a leaf."""
    a = torch.zeros((), requires_grad=True)
    return type((a * 1).grad_fn.next_functions[0][0])


_ACCUMULATE = _accumulate_type()


DONE = "_diffiface_done"  # marks a leaf of a finished call (see ``finished``)


def forward_graph(prob, fn, xs, ctx, outer):
    """(the leaves, f at them, whether the results stay attached: see ``finished``),
    f run with grad mode on (under no_grad nothing stays attached)."""
    with torch.enable_grad():
        xg = tuple(map(own, xs, (outer,) * len(xs)))
        y = call_f(prob, lambda: fn(xg, *ctx))
    return xg, y, finished(y, xg, outer)


def finished(y, xg: tuple, outer: bool) -> bool:
    """f returned ``y`` (a tensor, or a list of its output leaves) at diffiface's own
    leaves ``xg``. While f ran, a diffiface call
    nested in f saw them as an outer pass's; now they are this call's own (marked), and
    a graph that reaches them (an attached inner result) reaches nothing outside.

    True when the results stay on the graph: an outer pass sees the call (``outer``),
    or f's graph reaches what an outer pass differentiates (f closes over a model's
    parameters, a Constant requiring grad, a forward-mode dual tensor)."""
    for x in xg:
        setattr(x, DONE, True)
    if outer or reaches_outside(y, xg):
        return True
    if fwAD._current_level < 0:
        return False
    return any(map(is_dual, y)) if type(y) is list else is_dual(y)


def own(x, outer: bool):
    """The tensor to differentiate. Inside an outer pass an alias of x (a view, or a
    clone that keeps a forward-mode tangent), so that other uses of x (in a Constant,
    a FixedParams parameter, a closure) are not counted as uses of the argument; a
    detached copy of the reference otherwise."""
    if outer:
        if x.requires_grad:  # a view of a leaf refuses in-place ops; a non-leaf is copied
            return x.view_as(x) if x.is_leaf else x.clone()
        return x.clone().requires_grad_()
    return leaf(x)


def leaf(x):
    """A leaf that requires grad, on a copy of x's data: torch refuses in-place ops on a
    leaf, but f could still write to its storage through ``.detach()`` or ``.data``,
    which would change the caller's tensor (or NumPy array: it shares the storage)."""
    return x.detach().clone().requires_grad_()


def grads(prob, y, xg: tuple, w, attached: bool, retain: bool, once=None) -> tuple:
    """The one reverse pass of the torch backend: the pullback of ``w`` (None: a scalar
    y) to the leaves ``xg``, zeros where y does not depend on a leaf. ``y`` and ``w`` may
    be lists (f's output leaves on the graph, and their cotangents).

    The result stays on the graph when the call's results do (``attached``) or an
    outer pass sees ``w``; such a derivative is first checked for a backward marked
    ``@once_differentiable`` (``check_twice``; ``once``: what the runner of one object
    of f found on an earlier call, see ``Once``). ``retain``: y's graph serves another
    pullback (a graph built on y's graph keeps it too: its saved tensors are read
    again)."""
    if type(y) is list:
        create = attached or any(map(seen_by_outer, w))
    elif not y.requires_grad:  # f does not depend on x: every derivative is zero
        return tuple(torch.zeros_like(x) for x in xg)
    else:
        create = attached or (w is not None and seen_by_outer(w))
    if create and (once is None or once.name != ""):
        check_twice(prob, y, xg, once)
    gs = torch.autograd.grad(
        y, xg, w, allow_unused=True, create_graph=create, retain_graph=retain or create
    )
    for g in gs:  # (a loop, not any(): no frame on the hot path)
        if g is None:
            zeros = torch.zeros_like
            return tuple(zeros(x) if g is None else g for g, x in zip(gs, xg, strict=True))
    return gs


def once_differentiable(y, xg: tuple) -> str | None:
    """The name of an autograd.Function on y's graph whose backward is marked
    ``@once_differentiable`` and lies on a path to ``xg``, or None (``y``: a tensor, or a
    list of f's output leaves). A derivative built on its backward (create_graph=True)
    would silently lose that Function's part: its backward runs under no_grad unless its
    cotangent requires grad."""
    # (loops, not comprehensions: no frames; an unprepared hvp's runner walks on every call)
    stack = []  # (node, closing)
    for a in y if type(y) is list else (y,):
        if a.grad_fn is not None:
            stack.append((a.grad_fn, False))
    if not stack:
        return None
    targets, leaves = set(), set()
    for x in xg:
        if x.grad_fn is None:
            leaves.add(id(x))
        else:
            targets.add(id(x.grad_fn))
    reach: dict = {}  # id(node) -> whether it reaches xg (provisional False while open)
    found = None
    while stack:
        n, closing = stack.pop()
        key = id(n)
        if closing:
            hit = False
            for m, _ in n.next_functions:
                if m is not None and reach.get(id(m), False):
                    hit = True
                    break
            reach[key] = hit
            cls = getattr(n, "_forward_cls", None)
            if hit and cls is not None and _is_once(cls):
                found = cls.__name__
            continue
        if key in reach:
            continue
        if key in targets:
            reach[key] = True
            continue
        variable = getattr(n, "variable", None)
        if variable is not None:  # an accumulating leaf
            reach[key] = id(variable) in leaves
            continue
        reach[key] = False
        stack.append((n, True))
        for m, _ in n.next_functions:
            if m is not None and id(m) not in reach:
                stack.append((m, False))
    return found


def _is_once(cls) -> bool:
    return getattr(getattr(cls, "backward", None), "__code__", None) is _ONCE_CODE


_ONCE_CODE = torch.autograd.function.once_differentiable(lambda ctx: None).__code__
# f's code -> the once_differentiable Function its graph holds ("" for none)
_TWICE = CodeFacts()


class Once:
    """What the runner of one object of f (``f``: as the runner holds it) found on f's
    graph: the name of an autograd.Function whose backward is marked
    ``@once_differentiable`` ("" for none, None before its first call). A fact of f's
    code (``_TWICE``), so a runner looks once; a runner made per call (a closure made
    anew per call, ``direct.code_runner``) looks it up under the call's own f. Runners
    run outside strict (the shell hands strict calls to the general path)."""

    __slots__ = ("f", "name")

    def __init__(self, f) -> None:
        self.f, self.name = f, None


def check_twice(prob, y, xg: tuple, once: Once | None = None) -> None:
    """Raise where a derivative of f's derivative would pass through a backward marked
    ``@once_differentiable`` (see ``once_differentiable``); looked for on the first
    such call of f's code (every call under strict, and every call of a runner that
    holds f weakly without ``once``: ``Problem.named``), kept in ``once``."""
    f = prob.f if once is None else once.f
    over = _config.OPTIONS.get()  # (``_config.strict()`` inline: no options block, no frame)
    strict = _config.config.strict if over is None else _config.strict()
    name = None if f is None or strict else _TWICE.get(f)
    if name is None:
        name = once_differentiable(y, xg) or ""
        if f is not None:
            _TWICE.put(f, name)
    if once is not None and not strict:
        once.name = name
    if name:
        raise _checks.DiffifaceTypeError(
            f"{_checks.call_form(prob.op, prob.backend)}: this derivative differentiates "
            f"the backward of the autograd.Function {name}, which is marked "
            "@once_differentiable: torch would silently drop its part. Implement a "
            f"differentiable backward in {name} (without @once_differentiable), or "
            "differentiate the gradient by finite differences: "
            "second_order(AutoFiniteDifferences(), AutoTorch()) for hvp and hessian."
        )


def call_forward(prob, thunk):
    """``call_f`` for torch.func forward mode (jvp, jacfwd), one thread at a time: torch
    keeps its forward-AD level in a process-wide global that concurrent jvps corrupt
    ("no level exists")."""
    with FORWARD_LOCK:
        return call_f(prob, thunk, forward=True)


class NoGradInForward(RuntimeError):
    """f computes on x under torch.no_grad() in a forward-mode call: torch's forward
    mode ignores no_grad, so the reverse formulation runs instead."""


class Watch(TorchFunctionMode):
    """f's first call, watched for two ways of losing a derivative silently.

    A tensor that carries a derivative converted to a Python number or to NumPy is an
    error (torch itself only warns for float(), and says nothing for .item(), so the
    derivative through it would silently be dropped). JAX and autograd raise on the same
    f. ``.detach()`` is torch's stop_gradient and stays allowed.

    f computing on x with grad mode off (``torch.no_grad()``, ``set_grad_enabled(False)``,
    entered inside f; both modes drop ``inference_mode()`` alike): reverse mode treats
    that block as a constant, torch's forward mode ignores it, so the two would disagree.
    f then runs in
    reverse mode only (``core.direction``), and a forward-mode call stops here."""

    _NAMES = frozenset(("__float__", "__int__", "__complex__", "item", "tolist", "numpy"))
    _FREE = frozenset(("detach", "detach_", "__get__", "_set_grad_enabled"))

    def __init__(self, prob, forward: bool):
        super().__init__()
        self.prob, self.forward = prob, forward
        self.off = False  # f turned grad mode off itself

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self._NAMES and args and isinstance(args[0], torch.Tensor):
            t = args[0]
            if t.requires_grad or is_functorch_wrapped_tensor(t) or is_dual(t):
                raise _checks.dropped_derivative(self.prob.op, self.prob.backend, f"Tensor.{name}")
        if func is torch._C._set_grad_enabled and args:
            self.off = not args[0]
        elif self.off and not torch.is_grad_enabled() and name not in self._FREE:
            self._grad_off(name, args)
        return func(*args, **(kwargs or {}))

    def _grad_off(self, name: str, args: tuple) -> None:
        leaves = [b for a in args for b in (a if isinstance(a, list | tuple) else (a,))]
        for t in leaves:
            if not isinstance(t, torch.Tensor):
                continue
            seen = is_functorch_wrapped_tensor(t) or is_dual(t)
            if seen or (t.requires_grad and not self.forward):
                why = (
                    f"f computes {name} on x under torch.no_grad() or "
                    "set_grad_enabled(False): reverse mode treats it as a constant, torch's "
                    "forward mode does not"
                )
                if self.forward:
                    raise NoGradInForward(why)
                direction.learn(self.prob, direction.REVERSE, why)
                return


# f's code -> its first call ran under Watch without losing a derivative
CHECKED = CodeFacts()


def call_f(prob, thunk, forward: bool = False):
    """Run f; the first call of its code (and every call under strict) is watched (see
    ``Watch``), at no cost to the calls after it (about 4 µs per operation of f under
    the watch). ``forward``: a forward-mode call."""
    if _config.strict() or CHECKED.get(prob.f) is None:
        with Watch(prob, forward):
            out = call_plain(prob, thunk)
        CHECKED.put(prob.f, True)
        return out
    return call_plain(prob, thunk)


def call_plain(prob, thunk):
    try:
        return thunk()
    except TypeError as exc:
        clear = _checks.framework_error(prob.op, prob.backend, exc)
        if clear is None:
            raise
        raise clear from exc
    except RuntimeError as exc:
        if "numpy()" in str(exc) or "NumPy" in str(exc):
            raise _checks.left_framework(prob.op, prob.backend, exc) from exc
        if "in-place operation" in str(exc):
            raise _checks.DiffifaceValueError(
                f"{_checks.call_form(prob.op, prob.backend)}: f changes its input in place "
                f"({exc}). Your x is unchanged; make f work on a copy (x = x.clone()) or "
                "use out-of-place ops."
            ) from exc
        raise


def batched_grads(outputs, inputs, ws, create: bool) -> tuple:
    """``torch.autograd.grad`` of ``outputs`` along each of the stacked ``ws`` (leading
    axis), batched in one backward pass (``is_grads_batched``). An op without a batching
    rule on the graph (a bridged call, an autograd.Function without vmap support) makes
    torch refuse the batched pass: then one backward per direction, the same results."""
    try:
        return torch.autograd.grad(
            outputs,
            inputs,
            ws,
            is_grads_batched=True,
            allow_unused=True,
            create_graph=create,
            retain_graph=True,  # for the fallback below; freed with the graph on return
        )
    except RuntimeError as exc:
        if "atching rule not implemented" not in str(exc) and "vmap" not in str(exc):
            raise
    single = not isinstance(outputs, list | tuple)
    outs = [outputs] if single else list(outputs)
    stacks = [ws] if single else list(ws)
    per = [
        torch.autograd.grad(
            outs,
            inputs,
            [s[i] for s in stacks],
            allow_unused=True,
            create_graph=create,
            retain_graph=True,
        )
        for i in range(stacks[0].shape[0])
    ]
    return tuple(
        None if any(p[k] is None for p in per) else torch.stack([p[k] for p in per])
        for k in range(len(inputs))
    )
