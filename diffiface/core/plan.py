"""Preparation: do the one-time work once, then check each call cheaply against it.

``prep = di.prepare_gradient(f, backend, x, *contexts)`` converts nothing twice,
looks the backend up once, compiles (JAX) during preparation, and keeps the
compiled functions on the prepared problem; ``di.gradient(f, backend, x,
*contexts, prep=prep)`` then only compares ``x`` and the contexts with the
prepared signature. A prep is immutable after preparation (its compiled-function
memo only fills in for the sibling operator, e.g. value_and_gradient on a
gradient prep) and can be shared between threads.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from .. import _checks
from .._contexts import FixedParams, unfix
from .._tangents import Tangents
from .._tree import flatten
from ..nested.route import route
from . import convert as _convert
from . import outputs, signature
from .backend import SLOW
from .operator import FAMILY, OPS, SHAPED_LIKE_F, of_family
from .problem import Problem
from .signature import ARRAY, LEAVES, NUMPY, Signature


class MismatchError(_checks.DiffifaceValueError):
    """The arguments of a prepared call differ from those of the preparation."""


class OwnPlan:
    """A plan that runs the calls made with it itself (a same-point preparation): the
    shell hands it every call whose ``prep=`` it is."""

    __slots__ = ()

    def run_call(self, op, f, backend, x, t, contexts: tuple, chunk_size, has_aux) -> Any:
        raise NotImplementedError


class Prep:
    """The result of a ``prepare_<operator>`` call; pass it as ``prep=`` to the operator."""

    __slots__ = (
        "_example",
        "_form",
        "_kinds",
        "_probs",
        "_runners",
        "_tree",
        "_tried",
        "aux",
        "backend",
        "combo",
        "f",
        "family",
        "impl",
        "nested",
        "sig",
    )

    def __init__(self, family, f, backend, impl, combo, prob, x, kinds, contexts, t):
        self.family, self.f, self.backend, self.impl, self.combo = family, f, backend, impl, combo
        self.aux = prob.aux  # f returns (out, aux): every call takes has_aux=True
        self.nested = None  # FixedParams "auto"/"min_memory": the strategy chosen for it
        f, contexts, _ = unfix(f, contexts)  # FixedParams: its parameters are a context
        self._kinds = kinds
        self.sig = Signature(impl, x, kinds, contexts, t, prob.single)  # what calls must match
        ops = of_family(family)
        self._probs = {
            op: Problem(op, backend, impl, f, prob.treedef, prob.single, prob.scalar, prob.aux)
            for op in ops
        }
        for p in self._probs.values():
            p.prepared = True
        self._runners: dict = {}  # op -> the backend's runner, taking calls in one form:
        self._form: str | None = None  # one array (x, *t), or native leaves (see Signature)
        self._tree = None  # f returns a pytree: the signature of its layout (runners split)
        self._example = (x,) if t is None else (x, t)  # the preparation's arguments
        self._tried: set = set()  # operators whose runner was looked for after a call

    def finalize(self, x: Any = None) -> Prep:
        """Build the runners (after the warm-up call ``prepare`` made at ``x`` compiled
        what they use)."""
        self._form = self._takes(x)
        if self._tree is None:
            self._example = None  # (kept for a pytree output's siblings: see _runner)
        if self._form is not None:
            for op in self._probs:
                run = self._runner(op)
                if run is not None:
                    self._runners[op] = run
        return self

    def learn(self, op: str) -> None:
        """The runner of ``op`` after its first call ran the general path (a sibling
        operator, e.g. value_and_jvp on a jvp prep: it compiled what its runner uses)."""
        if self._form is None or op in self._runners or op in self._tried:
            return
        self._tried.add(op)
        run = self._runner(op)
        if run is not None:
            self._runners[op] = run

    def _takes(self, x: Any) -> str | None:
        """The form in which the backend's runners take this plan's calls, or None (the
        general path runs them): for an f with aux, only where the runners hand the aux
        to the sink (``runs_aux``); for a pytree output, one native array
        (see ``tree_runner``); native pytree leaves (and a tangent's) without FixedParams."""
        form, sig, f = self.sig.form(), self.sig, unfix(self.f, ())[0]
        if form is None or (self.aux and not self.impl.traits.runs_aux):
            return None
        if outputs.returns_tree(f):
            if self.aux or form != ARRAY or type(self.f) is FixedParams or sig.many:
                return None
            self._tree = outputs.signature((x,), (), False, self.impl.leaf_signature, self.family)
        elif form == LEAVES and type(self.f) is FixedParams:
            return None
        return form

    def _runner(self, op: str) -> Callable | None:
        """``op``'s runner; for a pytree output, compiled with the split at the
        preparation's arguments (kept for the siblings, whose runners come later)."""
        form, prob, tree = self._form, self._probs[op], self._tree
        run = self.impl.runner(prob, form, self.combo)
        if tree is None:
            return run
        return tree_runner(self.impl, prob.f, op, tree, run, self._example)

    def problem(self, op: str) -> Problem:
        """The plan's problem for ``op`` (its compiled functions, once it ran)."""
        return self._probs[op]

    def run_direct(self, op: str, f: Callable, backend: Any, x: Any, contexts: tuple, t: tuple):
        """The result of a call that matches exactly, by the plan's runner, else SLOW
        (the general path runs: it converts, routes, or raises the mismatch). ``t``:
        ``(tangent,)`` for an operator that takes one, else ``()``."""
        run = self._runners.get(op)
        if run is None:
            return SLOW
        sig, form = self.sig, self._form
        if form is ARRAY or form is NUMPY:  # one array: the signature's check, inline
            one = sig.one
            if (
                contexts
                or type(x) is not one[0]
                or (one[3](x) != one[4] and (x.shape != one[1] or x.dtype != one[2]))
            ):
                return SLOW
            form = None
        if f is not self.f and not _same_f(f, self.f):
            return SLOW
        if backend is not self.backend and backend != self.backend:
            return SLOW
        if t and (len(t[0]) if type(t[0]) is Tangents else 0) != sig.count:  # (k tangents)
            return SLOW
        if form is not None:
            return sig.run(form, run, x, contexts, t)
        return run(x, *t) if t else run(x)  # (a call with *() costs 0.15 µs more)

    # ---- a sparse preparation's pattern and coloring (AutoSparse) -------------
    @property
    def sparsity_pattern(self) -> Any:
        """The pattern of the Jacobian (or Hessian) that an ``AutoSparse`` preparation
        computes: a boolean ``scipy.sparse.csr_array`` (rows: f(x) flattened; columns:
        x flattened)."""
        return self._sparse("sparsity_pattern").pattern

    @property
    def ncolors(self) -> int:
        """The number of colors of an ``AutoSparse`` preparation: its compressed passes
        (jvps, vjps or Hessian-vector products) per call."""
        return self._sparse("ncolors").colors

    @property
    def column_colors(self) -> Any:
        """The color of each column (x's elements) of an ``AutoSparse`` preparation that
        compresses columns (jvps; a Hessian's star coloring), else None."""
        plan = self._sparse("column_colors")
        return None if plan.kind == "row" else plan.coloring()

    @property
    def row_colors(self) -> Any:
        """The color of each row (f(x)'s elements) of an ``AutoSparse`` preparation that
        compresses rows (vjps), else None."""
        plan = self._sparse("row_colors")
        return plan.coloring() if plan.kind == "row" else None

    def _sparse(self, what: str) -> Any:
        """The sparse plan of this preparation (``AutoSparse``), or an error naming
        ``what`` was asked."""
        find = getattr(self.impl, "sparse_plan", None)
        plan = None if find is None else find(self._probs.values())
        if plan is None:
            raise _checks.DiffifaceTypeError(
                f"{self!r}.{what}: only a preparation of jacobian or hessian with "
                f"AutoSparse(...) has a sparsity pattern and colors, this one is for "
                f"{self.backend!r}. Prepare with di.AutoSparse({self.backend!r})."
            )
        return plan

    def __repr__(self) -> str:
        nested = "" if self.nested is None else f"; nested: {self.nested}"
        return f"<diffiface prep for {self.family}(f, {self.backend!r}, x){nested}>"

    def enter(self, op: str, f: Callable, backend: Any, x: Any, contexts: tuple, t: Any):
        """(impl, prob, xs, kinds, ctx) for a call that matches this preparation."""
        sig = self.sig
        if (
            FAMILY.get(op) != self.family
            or not _same_f(f, self.f)
            or (backend is not self.backend and backend != self.backend)
        ):
            raise self._mismatch(op, f, backend, x, contexts, t)
        one = sig.one
        if (
            one is not None
            and self._kinds[0] == _convert.NATIVE
            and type(x) is one[0]
            and x.shape == one[1]
            and x.dtype == one[2]
        ):
            xs, kinds = (x,), self._kinds
        elif (xs := signature.matches_native(x, sig.x_native)) is not None:
            kinds = self._kinds
        else:
            leaves, treedef = flatten(self.impl.open(x))
            if (treedef, tuple(signature.leaf(v) for v in leaves)) != sig.x:
                raise self._mismatch(op, f, backend, x, contexts, t)
            xs, kinds = _convert.point(op, self.impl, leaves, treedef)
        given = contexts
        _, contexts, fixed = unfix(f, contexts)
        if sig.t is not None and not sig.takes(t):
            raise self._mismatch(op, f, backend, x, given, t)
        if not contexts and not sig.ctx:
            ctx = ()
        elif (got := signature.constant_leaves(contexts, sig.c_native)) is not None:
            ctx = got[1]  # native leaves with the prepared signature: nothing to convert
        else:
            if signature.contexts(contexts) != sig.ctx:
                raise self._mismatch(op, f, backend, x, given, t)
            ctx = _convert.contexts(op, self.impl, contexts)
        if fixed is not None:
            impl = route(self.impl, fixed, op, xs, ctx, self.aux, self._probs[op].single)
        else:
            impl = self.impl
        return impl, self._probs[op], xs, kinds, ctx

    def _mismatch(self, op, f, backend, x, contexts, t) -> MismatchError:
        rows = []

        def row(name, ok, got, want):
            rows.append(
                f"  {name:<10} {'ok' if ok else 'MISMATCH'}: "
                + (f"{got}" if ok else f"got {got}, prepared {want}")
            )

        row("operator", FAMILY.get(op) == self.family, op, f"the {self.family} family")
        same = _same_f(f, self.f)
        other = not same and _name(f) == _name(self.f)
        row("f", same, _name(f) + (" (another object)" if other else ""), _name(self.f))
        row("backend", backend == self.backend, repr(backend), repr(self.backend))
        for r in signature.rows(self.sig, x, unfix(f, contexts)[1], t):
            row(*r)
        return MismatchError(
            f"{_checks.with_prep(_checks.call_form(op, backend))}: the arguments do not match the "
            "preparation:\n" + "\n".join(rows) + f"\nPrepare again with "
            f"prepare_{FAMILY.get(op, op)}(...) for these arguments, or call {op} without prep."
        )


def tree_runner(
    impl: Any, f: Callable, op: str, sig: tuple, run: Callable | None, example: tuple | None
):
    """``run`` (a runner at one native array x) with the parts of its results shaped like
    f(x) split as f's pytree output (and a cotangent like it raveled), or None. ``sig``:
    the signature of the layout (``outputs.signature`` of x). For a backend that
    compiles: the compiled function fixed the output's structure when it traced f, and
    the layout recorded then holds for every call of the runner's signature. With the
    arguments of a call, ``example`` (None: ``run`` takes f too, which is no array), the
    ravel, ``run`` and the split are compiled as one call (for an empty ``example``, at
    its first call). A backend whose runners take the output as each call gives it
    (``runs_trees``): ``run``."""
    if run is None or impl.traits.runs_trees:
        return run
    if impl.compile is None:
        return None
    layout = outputs.layout_of(f, sig)
    if layout is None or layout is outputs.MISSING:
        return None
    shaped = tuple(part in SHAPED_LIKE_F for part in OPS[op].returns)
    if example is not None:
        fused = _fused(impl, layout, OPS[op].tangent == "w", shaped, run)
        if example:
            fused(*example)  # compiled now: the calls of a runner built so never compile
        return fused
    if OPS[op].tangent == "w":
        run = _raveled(impl, layout, run)
    split = layout.split
    if shaped == (False,):  # (a vjp: a result like x)
        return run
    if len(shaped) == 1:

        def one(*args):
            out = run(*args)
            return out if out is SLOW else split(impl, out)

        return one

    def several(*args):
        out = run(*args)
        if out is SLOW:
            return out
        return tuple(split(impl, o) if s else o for o, s in zip(out, shaped, strict=True))

    return several


class _HandOver(Exception):
    """(traced) The runner handed the call over: the general path runs it."""


def _fused(impl: Any, layout: outputs.Layout, takes_w: bool, shaped: tuple, run: Callable):
    """``run`` with a cotangent like f's pytree output (``takes_w``) raveled before it and
    its parts shaped like f(x) split after it, all three traced into one compiled call
    (one dispatch, where ravel and split would each be one more). The cotangent's leaves
    and a tangent's type are checked first; ``run``'s own checks run in its trace."""

    def traced(x, *t):
        if takes_w:
            t = (layout.ravel(impl, list(t[0])),)
        out = run(x, *t)
        if out is SLOW:
            raise _HandOver
        if len(shaped) == 1:
            return layout.pieces(impl, out) if shaped[0] else out
        return tuple(layout.pieces(impl, o) if s else o for o, s in zip(out, shaped, strict=True))

    compiled = impl.compile(traced)
    treedef, shapes = layout.treedef, layout.shapes

    def fused(x, *t):
        if t and takes_w:
            leaves, tree = flatten(t[0])
            if tree != treedef:
                return SLOW
            kind = type(x)
            for a, shape in zip(leaves, shapes, strict=True):
                if type(a) is not kind or a.shape != shape:
                    return SLOW
            t = (tuple(leaves),)
        elif t and type(t[0]) is not type(x):
            return SLOW
        try:
            return compiled(x, *t)
        except _HandOver:
            return SLOW

    return fused


def _raveled(impl: Any, layout: outputs.Layout, run: Callable) -> Callable:
    """``run(..., x, w)`` taking a cotangent like f's pytree output: its leaves, of x's type and
    of the layout's structure and shapes, raveled as the general path ravels them (any
    other cotangent: SLOW, the general path converts it or explains)."""
    treedef, shapes, ravel = layout.treedef, layout.shapes, layout.ravel

    def raveled(*args):  # (x, w), or (f, x, w) for a runner of f's code
        *head, w = args
        kind = type(head[-1])
        leaves, tree = flatten(w)
        if tree != treedef or any(type(a) is not kind for a in leaves):
            return SLOW
        if [a.shape for a in leaves] != shapes:
            return SLOW
        return run(*head, ravel(impl, leaves))

    return raveled


def _same_f(f: Any, g: Any) -> bool:
    """The same function; a bound method is the same when its function and instance are
    (each attribute access makes a new method object); a FixedParams when its function
    and strategy are (its parameters are compared as a context)."""
    if f is g:
        return True
    if type(f) is FixedParams and type(g) is FixedParams:
        return f.strategy == g.strategy and _same_f(f.f, g.f)
    return (
        isinstance(f, types.MethodType)
        and isinstance(g, types.MethodType)
        and f.__func__ is g.__func__
        and f.__self__ is g.__self__
    )


def _name(f: Any) -> str:
    if type(f) is FixedParams:
        return f"FixedParams({_name(f.f)}, strategy={f.strategy!r})"
    return getattr(f, "__qualname__", None) or type(f).__name__
