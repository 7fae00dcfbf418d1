"""AutoSparse's implementation: the dense backend's, with sparse Jacobians and Hessians.

Every operator but the four sparse ones runs on the dense backend unchanged (attribute
access goes through to it). The sparse ones build a :class:`SparsePlan` once per
problem (a prepared problem keeps it) and then run its compressed passes.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np
import scipy.sparse as sp

from .. import _checks
from .._backend_types import AutoSparse, SecondOrder
from .._cache import FunctionCache, weak_callable
from .._reads import fingerprint
from .._tree import flatten
from ..core import convert, raveled, registry
from ..core.backend import SLOW
from ..core.operator import OPS, names
from ..core.problem import Problem
from ..core.shell import Call
from ..core.signature import ARRAY, LEAVES, NUMPY, entered, leaf, one
from ..core.traits import Traits
from . import detect, kept
from .plan import KEY, SparsePlan

# the plans of unprepared calls, weakly on f: an unprepared call keeps its plan like
# every other operator (detection and coloring once per f and signature, not per call)
PLANS = FunctionCache(per_function=16)

SPARSE_OPS = names(sparse=True)


@registry.register(AutoSparse)
class SparseImpl:
    """The implementation of one ``AutoSparse`` backend over its dense implementation."""

    def __init__(self, backend: AutoSparse, dense: Any = None) -> None:
        self.backend = backend
        if dense is None and not isinstance(backend.backend, SecondOrder):
            dense = registry.implementation(backend.backend)
        self.dense = dense  # (a second-order one is resolved per call: see over)
        # the dense backend's traits (for the other operators), as AutoSparse's
        base = Traits(backend.framework) if dense is None else dense.traits
        self.traits = dataclasses.replace(base, sparse=True)

    def __getattr__(self, name: str) -> Any:
        dense = self.__dict__.get("dense")
        if dense is None:
            raise AttributeError(name)
        return getattr(dense, name)

    def over(self, dense: Any) -> SparseImpl:
        """This backend over ``dense`` (the implementation a second-order call resolved)."""
        return self if dense is self.dense else SparseImpl(self.backend, dense)

    def code_runner(self, prob, form: str):
        """The dense backend's, for the other operators. For a sparse one on one array or
        native pytree leaves, ``run(f, *args)`` (args: the runner's) for a closure of
        prob.f's code whose cells hold what prob.f's held (``kept``: the same code on
        equal cells computes what prob.f computes, so prob.f's plan runs, on the call's
        own f: no f is kept alive here), else SLOW (the general path detects). Built
        once per plan (calls of f with other signatures in turn rebuild the table's
        entry each time)."""
        if prob.op not in SPARSE_OPS:
            return self.dense.code_runner(prob, form)
        sub = prob.fns.get(RAVELED) if form == LEAVES else prob  # (the plan's problem)
        plan = None if sub is None else sub.fns.get(KEY)
        cells = kept.cells(prob.f) if plan is not None and plan.kept else None
        if cells is None or not detect.everywhere(self.backend):
            return None
        memo = (prob.op, form, cells.key)
        run = plan.code_runs.get(memo)
        if run is None:
            run = self._code_run(prob, form, sub, plan, cells)
            if run is not None:
                plan.code_runs[memo] = run
        return run

    def _code_run(self, prob, form: str, sub, plan: SparsePlan, cells: kept.Cells):
        """``code_runner``'s runner: the plan's runner on a stand-in f that calls the
        call's own f."""
        record = cells.record()
        if record is None:
            return None
        current = threading.local()  # .f: the call's own f, in its thread, during its call

        def calls_current(*args):
            return current.f(*args)

        stand_in = own = _like(prob, calls_current)
        if form == LEAVES:  # (its raveled problem: the same cut into leaves, of the stand-in)
            fn = sub.f
            cut = raveled.Raveled(lambda: calls_current, fn.treedef, fn.shapes, fn.dtypes)
            own = stand_in.fns[RAVELED] = _like(sub, cut)
        # the plan alone: passes compiled for prob.f (held weakly) would call a dead f
        own.fns[KEY], own.prepared = plan, prob.prepared
        run = self.runner(stand_in, form, plan.combo)
        if run is None:
            return None
        key = cells.key

        def code_run(f, *args):
            now = kept.cells(f)
            if now is None or now.key != key or not now.same_arrays(record):
                return SLOW
            before, current.f = getattr(current, "f", None), f  # (a call within f's call)
            try:
                return run(*args)
            finally:
                current.f = before

        return code_run

    def runner(self, prob, form: str, combo=None, weak: bool = False):
        """The dense backend's runner for the other operators; for a prepared sparse one,
        the compressed passes on one native array, on a NumPy array (made native, the
        results back as NumPy), or on native pytree leaves (those of its raveled
        problem)."""
        if prob.op not in SPARSE_OPS:
            return self.dense.runner(prob, form, combo, weak)
        if form == LEAVES:
            return self._leaves_runner(prob, combo, weak)
        run = self._array_runner(prob, combo, weak) if form in (ARRAY, NUMPY) else None
        return run if form == ARRAY or run is None else _from_numpy(self.dense, run)

    def _array_runner(self, prob, combo, weak: bool):
        """``runner`` on one native array."""
        plan = prob.fns.get(KEY)
        if plan is None or plan.contexts or self.backend.strict:
            return None
        if weak and not detect.everywhere(self.backend):  # a local pattern: its x only
            return None
        fmt, facts = plan.format, OPS[prob.op]
        if facts.scalar and combo != plan.combo:  # (a Hessian: its second-order combination)
            return None
        if len(facts.returns) == 1:  # the matrix alone
            bare = plan.direct(prob, combo, value=False, weak=weak)
            if bare is None:
                return None

            def matrix(x):
                out = bare(x)
                return out if out is SLOW else fmt(out[1])

            return matrix
        run = plan.direct(prob, combo, weak=weak)  # (a forward failure: rows from now on)
        if run is None:
            return None
        if not facts.scalar:

            def value_and_jacobian(x):
                out = run(x)
                return out if out is SLOW else (out[0], fmt(out[1]))

            return value_and_jacobian
        f = weak_callable(prob.f, weak)  # (the value: f called as the runner holds it)
        if f is None:
            return None
        fn = _like(prob, f).flat()

        def value_gradient_and_hessian(x):
            out = run(x)
            if out is SLOW:
                return out
            g, data = out
            return _value(fn((x,))), g[0], fmt(data)

        return value_gradient_and_hessian

    def _leaves_runner(self, prob, combo, weak: bool):
        """``runner`` on native pytree leaves (of a plan without contexts): the one-array
        runner of the problem on x's leaves end to end (``_one_array``) on their
        concatenation, a gradient cut back into x's structure. It holds neither problem
        (a kept plan's runner holds f weakly: the raveled function does)."""
        sub = prob.fns.get(RAVELED)
        run = None if sub is None else self._array_runner(sub, combo, weak)
        if run is None:
            return None
        d, split, with_g = self.dense, sub.f.split, prob.op == "value_gradient_and_hessian"

        def on_leaves(xs, c_leaves, values):
            if values:  # (a plan without contexts: calls with them take the general path)
                return SLOW
            out = run(d.concat([d.reshape(a, (-1,)) for a in xs]))
            if not with_g or out is SLOW:
                return out
            y, g, h = out
            return y, split(g), h

        return on_leaves

    @staticmethod
    def sparse_plan(probs) -> SparsePlan | None:
        """The sparse plan a preparation's problems hold (its ``sparsity_pattern``,
        ``ncolors``, ...), or None."""
        for prob in probs:
            sub = prob.fns.get(RAVELED)  # (a pytree x: the problem on its leaves)
            plan = (prob if sub is None else sub).fns.get(KEY)
            if plan is not None:
                return plan
        return None

    # ---- the sparse operators (called by the operators' run functions) ---------
    def sparse_jacobian(self, c, chunk_size=None) -> tuple:
        """(f(x), J) with J sparse (over x's leaves end to end for a pytree x)."""
        c, _ = _one_array(c)
        prob, xs, ctx = c.prob, c.xs, c.ctx
        plan = self._plan(c, None, lambda: self.dense.output_like(prob, xs, ctx))
        y, data = plan.jacobian(prob, xs, ctx, chunk_size)
        if self.backend.strict:
            plan.check(prob, xs, ctx, data, None)
        return c.back(y), self._out(c, plan, data)

    def sparse_hessian(self, c, either, value: bool, chunk_size=None) -> tuple:
        """(f(x), g, H) with H sparse; ``either(run)`` runs ``run(combo)`` in the second-order
        combination (reverse over reverse where f has no forward mode)."""
        outer, (c, tree) = c, _one_array(c)
        prob, xs, ctx = c.prob, c.xs, c.ctx
        plan = self._plan(c, c.combo)
        g, data = either(lambda combo: plan.hessian(prob, xs, ctx, combo, chunk_size))
        if self.backend.strict:
            plan.check(prob, xs, ctx, data, c.combo)
        y = None
        if value:
            y = c.back(_value(prob.flat()(xs, *ctx)))
        if g is not None:
            g = c.like_x(g) if tree is None else outer.like_x(_leaves(tree.split(g[0])))
        return y, g, self._out(c, plan, data)

    def _plan(self, c, combo, value=None) -> SparsePlan:
        """The problem's plan: a prepared problem keeps its own; an unprepared call finds
        the plan of the last call like it (same f and what f reads, signature, contexts),
        or of an earlier closure of f's code with the same cells (``kept``)."""
        prob = c.prob
        plan = prob.fns.get(KEY)
        if plan is not None:
            return plan
        key = None if prob.prepared else _key(self, c, combo)
        user = _user_f(prob.f)
        code = None if key is None else kept.cells(user)
        if key is not None:
            got = PLANS.peek(prob.f, key)
            if got is None and code is not None:  # a closure made anew: its code's plan
                got = PLANS.peek(user.__code__, (*key[:-1], code.key))
                if got is not None and not code.same_arrays(got[2]):
                    got = None
            if got is not None and _same_values(got[0], c.ctx):
                prob.fns[KEY] = got[1]
                return got[1]
        y = None if value is None else value()
        kind = "native" if c.kinds[0] == convert.NATIVE else "numpy"
        plan = SparsePlan(self.backend, self.dense, prob, c.xs[0], c.ctx, combo, y, kind)
        prob.fns[KEY] = plan
        if key is not None:
            plan.kept = True
            PLANS.put(prob.f, key, (c.ctx, plan))
            record = None if code is None else code.record()
            if record is not None:
                PLANS.put(user.__code__, (*key[:-1], code.key), (c.ctx, plan, record))
        return plan

    def _out(self, c, plan: SparsePlan, data: Any) -> Any:
        out = plan.format(data)
        return c.back(out) if self.backend.dense else out


def _like(prob: Problem, f: Any) -> Problem:
    """A problem like ``prob`` of another f."""
    return Problem(
        prob.op, prob.backend, prob.impl, f, prob.treedef, prob.single, prob.scalar, prob.aux
    )


def _from_numpy(d: Any, run: Any) -> Any:
    """A runner on one native array as one on a NumPy array, which it makes native as the
    general path does (``convert.point``), its results back as NumPy (a matrix of the
    plan's NumPy format is ``scipy.sparse`` already)."""

    def back(a):
        return a if sp.issparse(a) else convert.back(d, a, convert.NUMPY)

    def from_numpy(x):
        if d.check_numpy_dtype(x.dtype):  # (JAX's x64 is global: the general path explains)
            return SLOW
        out = run(d.from_numpy(x))
        if out is SLOW:
            return out
        return tuple(map(back, out)) if type(out) is tuple else back(out)

    return from_numpy


def _value(y: Any) -> Any:
    """f(x) as the value of a sparse Hessian call: an array (a NumPy sum is a scalar)."""
    return np.asarray(y) if isinstance(y, np.generic) else y


def _key(impl: SparseImpl, c, combo) -> tuple | None:
    """What an unprepared call's plan depends on, or None where it is not kept: a local
    pattern is taken at x (each call detects anew, as it warns)."""
    if not detect.everywhere(impl.backend) or len(c.xs) != 1:
        return None
    prob, sig = c.prob, (c.kinds[0], one(c.xs[0]), entered(leaf, (), c.ctx))  # (x's type too)
    fn = prob.f
    if type(fn) is raveled.Raveled:  # a pytree x: its layout too (a plan of f's code)
        sig = (*sig, fn.treedef, tuple(fn.shapes), tuple(map(str, fn.dtypes)))
    return (KEY, impl.backend, prob.scalar, prob.aux, combo, sig, fingerprint(_user_f(fn)))


def _user_f(fn: Any) -> Any:
    """The user's f of a problem's function (a pytree x's: the raveled one's f)."""
    return fn.fget() if type(fn) is raveled.Raveled else fn


def _same_values(kept: tuple, ctx: tuple) -> bool:
    """The contexts are the same objects as the plan's (a global pattern may depend on a
    context's values, which f reads as constants)."""
    return len(kept) == len(ctx) and all(a is b for a, b in zip(kept, ctx, strict=True))


def _one_array(c) -> tuple:
    """(c, None) for one array x; for a pytree x, (the call on x's leaves end to end,
    its ``Raveled`` function): the sparse matrix's columns are x's leaves in order,
    each flattened (``core.raveled``)."""
    prob = c.prob
    if prob.single:
        return c, None
    if not c.xs:
        raise _checks.DiffifaceValueError(
            f"{_checks.call_form(prob.op, prob.backend)}: x is an empty pytree, which has "
            "no Jacobian or Hessian columns. Pass x with at least one array."
        )
    fn, v = raveled.raveled(prob.op, prob.backend, c.impl, prob.f, prob.treedef, c.xs)
    sub = prob.fns.get(RAVELED)  # (a prepared problem keeps its raveled problem)
    if sub is None or sub.f is not fn:
        sub = Problem(prob.op, prob.backend, prob.impl, fn, _LEAF, True, prob.scalar, prob.aux)
        sub.prepared = prob.prepared
        prob.fns[RAVELED] = sub
    kind = convert.NATIVE if convert.NATIVE in c.kinds else min(c.kinds)
    return Call(c.impl, sub, (v,), (kind,), c.ctx, c.combo), fn


def _leaves(tree) -> tuple:
    return tuple(flatten(tree)[0])


RAVELED = "sparse raveled"
_LEAF = flatten(0.0)[1]
