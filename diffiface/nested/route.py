"""Nested AD: an inner operator on a FixedParams inside an outer differentiation.

When ``f`` is a :class:`~diffiface.FixedParams` and the outer framework of the
backend differentiates ``x`` or the parameters, the call is routed to the rule
registered for (framework, operator) in ``core.registry``. ``"reverse_over_reverse"``
is the framework's own nesting (it differentiates the inner call's graph);
``"forward_over_reverse"`` swaps in a registered rule. The switch
``nested_ad(False)`` (or ``config.nested_ad = False``) turns routing off: the
results are the same, only the path changes.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from .. import _checks, _config
from .._tree import flatten
from ..core import registry as _registry
from ..core.operator import OPS, names
from .choose import (
    MEASURED,
    ROR,
    Choice,
    Timed,
    Trial,
    eager,
    lookup,
    measuring,
    signature,
    unmeasured,
)

# operator -> the implementation method a rule replaces
METHOD = {name: d.method for name, d in OPS.items() if d.method is not None}
_FORWARD = names(forward=True)  # computed by forward-mode products: no rule replaces them


_COUNTS: Counter = Counter()
_LOCK = threading.Lock()


@contextlib.contextmanager
def nested_ad(enabled: bool = True) -> Iterator[None]:
    """Turn the nested-AD rules on or off inside a ``with`` block (this thread or task).

    Off, an inner call on a FixedParams runs like the same call on a closure:
    the outer framework differentiates its graph. Results are the same either
    way; only the path changes (see :func:`nested_rule_counts`).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> with di.nested_ad(False):
        ...     g = di.gradient(di.FixedParams(lambda x, p: p * (x**2).sum(), 2.0),
        ...                     di.AutoFiniteDifferences(), np.array([1.0]))
        >>> g.round(6)
        array([4.])
    """
    with _config.options(nested_ad=bool(enabled)):
        yield


def enabled() -> bool:
    return _config.get("nested_ad")


def nested_rule_counts(reset: bool = False) -> dict:
    """How often the nested-AD rules ran, by ``(framework, operator, strategy)``.

    A rule runs when an inner call on a FixedParams sees an outer
    differentiation (for JAX: once per trace). ``reset=True`` clears the counts
    after reading them.

    Examples:
        >>> import diffiface as di
        >>> isinstance(di.nested_rule_counts(), dict)
        True
    """
    with _LOCK:
        out = dict(_COUNTS)
        if reset:
            _COUNTS.clear()
    return out


def route(
    impl: Any, fixed: Any, op: str, xs: tuple, ctx: tuple, aux: bool = False, single: bool = True
) -> Any:
    """``impl`` itself, or a view of it whose operator runs the registered rule
    (``fixed``: the call's FixedParams, whose parameters are ``ctx[0]``; ``aux``: f
    returns ``(out, aux)``; ``single``: x is one array)."""
    if not enabled():
        return impl
    params = flatten(ctx[0])[0]
    if not impl.outer_sees([*xs, *params]):
        return impl  # no outer differentiation sees this call
    strategy = fixed.strategy
    rule = sample = None
    if op in _FORWARD:  # already forward mode inside: the outer pass is reverse over forward
        strategy = "native"
    elif strategy in ("auto", "min_memory"):
        got = planned(impl, fixed, op, xs, ctx, aux, single)
        if type(got) is Trial:  # measuring: this call runs the strategy whose turn it is
            strategy, sample = got.take()
        else:
            strategy = got.strategy
        if strategy != ROR:
            rule = _registry.rule(impl.framework, METHOD[op])
    elif strategy == "forward_over_reverse":
        if aux:
            raise _checks.DiffifaceTypeError(
                f"{_checks.call_form(op, impl.backend)} with has_aux=True: FixedParams(strategy="
                "'forward_over_reverse') replaces the inner call by a rule whose outputs are "
                "its derivatives only, so f's aux could not reach the outer pass. Use "
                "strategy='auto' (or 'reverse_over_reverse')."
            )
        why = impl.no_forward(xs, ctx)
        if why is not None:
            raise _checks.DiffifaceTypeError(
                f"{_checks.call_form(op, impl.backend)}: FixedParams(strategy="
                f"'forward_over_reverse') differentiates the gradient in forward mode, and "
                f"{why}. Use strategy='auto' (reverse over reverse here)."
            )
        method = METHOD.get(op)
        rule = _registry.rule(impl.framework, method) if method else None
        if rule is None:
            have = _registry.rule_methods(impl.framework)
            raise _checks.DiffifaceValueError(
                f"{_checks.call_form(op, impl.backend)}: FixedParams(strategy="
                f"'forward_over_reverse') has no rule for {op} on {impl.framework}; rules "
                f"exist for {', '.join(sorted(have)) or 'no operator'}. Use strategy='auto'."
            )
        if not impl.can_run_rule(xs, ctx):  # e.g. inside torch.func transforms
            strategy = "reverse_over_reverse"
    if not measuring():
        with _LOCK:
            _COUNTS[(impl.framework, op, strategy)] += 1
    if strategy != "forward_over_reverse":
        return impl if sample is None else Timed(impl, impl, got, sample)
    methods = {METHOD[op]: rule}
    several = OPS[op].several  # (the Tangents method, the one it runs per direction)
    if several is not None and (one := _registry.rule(impl.framework, several[1])) is not None:
        methods[several[0]] = functools.partial(_each, one)
    view = _RuleView(impl, methods)
    return view if sample is None else Timed(view, impl, got, sample)


def planned(impl, fixed, op: str, xs: tuple, ctx: tuple, aux: bool, single: bool) -> Choice | Trial:
    """The strategy "auto" or "min_memory" stands for in this call: the framework's own
    nesting where no rule can run (aux, no forward mode, inside torch.func, no rule
    for ``op``), else the one ``choose`` measured for f's code and this signature, or
    the measurement under way (a Trial)."""
    method = METHOD.get(op)
    if aux or op in _FORWARD or method is None or _registry.rule(impl.framework, method) is None:
        return Choice(ROR, {})
    if eager(impl, fixed, xs[0]):
        return Choice(ROR, {})
    if op in MEASURED and single:
        key = (fixed.strategy, *signature(impl, xs, ctx))
        got = lookup(impl, fixed, key, xs[0], ctx)
    else:
        got = unmeasured(impl, fixed)
    if got.strategy == ROR:  # the framework's own nesting: no checks
        return got
    if impl.no_forward(xs, ctx) is not None or not impl.can_run_rule(xs, ctx):
        return Choice(ROR, {})
    return got


class _RuleView:
    """``impl`` with some methods replaced by rules (every other name delegates)."""

    __slots__ = ("_impl", "_methods")

    def __init__(self, impl: Any, methods: dict) -> None:
        self._impl, self._methods = impl, methods

    def __getattr__(self, name: str) -> Any:
        rule = self._methods.get(name)
        if rule is None:
            return getattr(self._impl, name)
        return functools.partial(rule, self._impl)


def _each(rule, impl, prob, xs, many, ctx, extra):
    """(first output, [second output per direction]) of the rule run per direction."""
    outs = [rule(impl, prob, xs, one, ctx, extra) for one in many]
    return outs[0][0], [second for _, second in outs]
