"""Global Jacobian and Hessian sparsity patterns of JAX functions.

The function is traced once to a jaxpr, which is then interpreted abstractly. Each
variable is either concrete, a NumPy array that does not depend on x (constants, iota,
index arithmetic: indices are known exactly), or a pattern, a bool ``csr_array`` of
shape (var.size, x.size) whose row k holds the inputs that element k may depend on for
some value of x. Integer and bool values that depend on x carry no derivative (empty
rows), but an index that is not concrete makes its indexing operation conservative.
The per-primitive rules are in ``rules``; calls and control flow are here.

Exact: elementwise ops, data movement and indexing with known indices (the primitive's
NumPy version run on index arrays), reductions, cumulative ops, dot_general (a constant
operand's zeros included), windows and convolutions (receptive fields), calls, cond
with a known index, loops whose trip count is known and at most ``_MAX_UNROLL``
(simulated step by step, so loop counters stay known). Conservative (a superset):
indexing with unknown indices, sort and top_k (the whole sorted axis), linalg and fft
(dense per batch element), cond with an unknown index (union of the branches), longer
loops (a fixpoint, widened after ``_WIDEN_AFTER`` rounds), and unknown primitives
(dense, with a ``SparsityWarning``). A custom_jvp function gets the union of its primal
and of its JVP rule; a custom_vjp function is taken as its primal (its bwd rule is
Python, not traced: one that couples more than the primal is not seen).
"""

from __future__ import annotations

import math
import warnings

import jax
import numpy as np
import scipy.sparse as sp
from jax.extend.core import ClosedJaxpr, Literal

from ...._errors import SparsityWarning
from . import rules as R
from .numpy_eval import numpy_eval

__all__ = ["hessian_pattern", "jacobian_pattern"]

_MAX_UNROLL = 100  # loops simulated iteration by iteration up to this many steps
_WIDEN_AFTER = 30  # fixpoint iterations before widening a loop carry to all its columns
_MAX_RULE_DEPTH = 4  # custom JVP rules inside rules: deeper ones follow the primal
_CALLS = {
    "jit", "pjit", "closed_call", "core_call", "named_call", "remat", "remat2",
    "checkpoint", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "composite",
}  # fmt: skip


def jacobian_pattern(fn, x) -> sp.csr_array:
    """Global sparsity pattern of the Jacobian of a JAX function.

    Args:
        fn: JAX-traceable function of one array, returning one array.
        x: the input, or a ``jax.ShapeDtypeStruct``; only its shape and dtype matter.

    Returns:
        A canonical bool ``csr_array`` of shape (y.size, x.size), rows the flattened
        outputs and columns the flattened inputs (C order). Entry (i, j) is True when
        output i may depend on input j for some value of x: a superset of the pattern
        at every point.

    Warns:
        SparsityWarning: for a primitive the detector does not know, whose outputs are
            taken to depend on all of its inputs (dense for that operation).
    """
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        x = np.asarray(x)
    spec = jax.ShapeDtypeStruct(tuple(x.shape), jax.dtypes.canonicalize_dtype(x.dtype))
    closed = jax.make_jaxpr(fn)(spec)
    n = math.prod(spec.shape)
    outs = _Interpreter(n).run(closed.jaxpr, closed.consts, [R.identity(n)])
    rows = [v if R.is_pat(v) else R.empty(math.prod(np.shape(v)), n) for v in outs]
    return canonical(R.stack_rows(rows) if rows else R.empty(0, n))


def hessian_pattern(fn, x) -> sp.csr_array:
    """Global sparsity pattern of the Hessian of a scalar JAX function.

    The pattern of the Jacobian of ``jax.grad(fn)``, made symmetric.

    Args:
        fn: JAX-traceable scalar function of one array.
        x: the input, or a ``jax.ShapeDtypeStruct``.

    Returns:
        A canonical, symmetric bool ``csr_array`` of shape (x.size, x.size).
    """
    p = jacobian_pattern(lambda z: jax.grad(fn)(z).ravel(), x)
    return canonical(sp.csr_array(p + p.T))


def canonical(p) -> sp.csr_array:
    """Sorted, no duplicates, data all True, int32 indices where they fit."""
    p.sum_duplicates()
    p.sort_indices()
    if max(p.nnz, *p.shape) < 2**31:
        p.indices, p.indptr = p.indices.astype(np.int32), p.indptr.astype(np.int32)
    return p


class _Interpreter:
    """Abstract evaluation of jaxprs over (concrete value | pattern)."""

    def __init__(self, n: int):
        self.n = n
        self.warned: set[str] = set()
        self.live: dict[tuple, tuple] = {}
        self.rules: dict[int, tuple] = {}  # custom JVP rules traced, by equation
        self.rule_depth = 0

    def run(self, jaxpr, consts, args, wanted=None) -> list:
        """Values of ``jaxpr``'s outputs (those at positions ``wanted``, default all)."""
        env = {}

        def read(a):
            return _literal(a) if isinstance(a, Literal) else env[a]

        env.update((v, self._const(c, v)) for v, c in zip(jaxpr.constvars, consts, strict=True))
        env.update(zip(jaxpr.invars, args, strict=True))
        outvars = jaxpr.outvars if wanted is None else [jaxpr.outvars[i] for i in wanted]
        for eqn in self._live_eqns(jaxpr, outvars, wanted):
            outs = self.eqn(eqn, [read(a) for a in eqn.invars])
            env.update(zip(eqn.outvars, outs, strict=True))
        return [read(a) for a in outvars]

    def _live_eqns(self, jaxpr, outvars, wanted) -> list:
        """Equations that the outputs need (dead code is skipped)."""
        key = (id(jaxpr), None if wanted is None else tuple(wanted))
        if key not in self.live:
            need = {a for a in outvars if not isinstance(a, Literal)}
            kept = []
            for eqn in reversed(jaxpr.eqns):
                if any(v in need for v in eqn.outvars):
                    kept.append(eqn)
                    need.update(a for a in eqn.invars if not isinstance(a, Literal))
            self.live[key] = (jaxpr, kept[::-1])  # jaxpr kept alive: ids stay unique
        return self.live[key][1]

    def eqn(self, eqn, ins) -> list:
        """Output values of one equation."""
        name = eqn.primitive.name
        if name == "custom_jvp_call":
            outs = self.custom_jvp(eqn, ins)
        elif name in _CALLS:
            outs = self.run(*_sub_jaxpr(eqn), ins)
        else:
            outs = None if any(map(R.is_pat, ins)) else _concrete(eqn, ins)
            if outs is not None:
                return outs
            if not any(map(R.inexact, eqn.outvars)):
                outs = [None] * len(eqn.outvars)
            elif name in ("cond", "while", "scan", "custom_linear_solve"):
                rule = {"cond": self.cond, "while": self.while_, "scan": self.scan}
                outs = rule.get(name, self.linear_solve)(eqn, ins)
            else:
                rule = R.RULES.get(name)
                if rule is None:
                    self._warn(name)
                    rule = R.dense
                outs = rule(eqn, ins, self.n)
        return [self._checked(o, v) for o, v in zip(outs, eqn.outvars, strict=True)]

    def _const(self, c, var):
        """A jaxpr constant: concrete (PRNG keys stay JAX arrays); a tracer of an outer
        trace is unknown, with no derivative."""
        v = _to_numpy(c)
        if isinstance(v, jax.core.Tracer):
            return R.empty(R.size_of(var), self.n)
        return v

    def _checked(self, o, var):
        """None as an empty pattern; no derivative through integer or bool values."""
        if o is None or (R.is_pat(o) and o.nnz and not R.inexact(var)):
            return R.empty(R.size_of(var), self.n)
        return o

    def _warn(self, name: str, why: str = "") -> None:
        if name not in self.warned:
            self.warned.add(name)
            why = why or (
                "unknown primitive: its outputs are taken to depend on all of its inputs "
                "(dense pattern for that operation)"
            )
            warnings.warn(f"Sparsity detection, JAX primitive '{name}': {why}.", SparsityWarning, 4)

    # Control flow ------------------------------------------------------------

    def cond(self, eqn, ins) -> list:
        """The branch when the index is concrete, else the union of all branches."""
        branches = eqn.params["branches"]
        index, ops = ins[0], ins[1:]
        if not R.is_pat(index):
            branches = [branches[int(np.clip(index, 0, len(branches) - 1))]]
        results = [self.run(b.jaxpr, b.consts, ops) for b in branches]
        return [self._join_all(vals) for vals in zip(*results, strict=True)]

    def custom_jvp(self, eqn, ins) -> list:
        """The primal function's pattern, joined with the pattern of the custom JVP rule
        in its tangents (a rule may couple what the primal does not: straight-through)."""
        primal = self.run(*_sub_jaxpr(eqn), ins)
        args = ins[eqn.params["num_consts"] :]
        if self.rule_depth >= _MAX_RULE_DEPTH:  # a rule that calls its own function
            return primal
        try:  # the rule as a jaxpr (primals, tangents) -> (primals out, tangents out)
            if id(eqn) not in self.rules:
                fun = eqn.params["jvp_jaxpr_fun"]
                with jax.ensure_compile_time_eval():
                    self.rules[id(eqn)] = (eqn, fun.call_wrapped(*[False] * len(args)))
            jaxpr, consts, zeros = self.rules[id(eqn)][1]
        except Exception:
            self._warn("custom_jvp_call", "its JVP rule could not be traced: primal pattern")
            return primal
        # primal values carry no derivative (known ones stay known); tangents = patterns
        values = [R.empty(v.shape[0], self.n) if R.is_pat(v) else v for v in args]
        tangent_at = range(len(zeros), len(jaxpr.outvars))
        self.rule_depth += 1
        try:
            outs = self.run(jaxpr, consts, [*values, *map(self._pat, args)], list(tangent_at))
        finally:
            self.rule_depth -= 1
        tangents = iter(outs)
        joined = []
        for p, zero in zip(primal, zeros, strict=True):
            t = None if zero else R.dep(next(tangents))
            joined.append(p if t is None else R.union([self._pat(p), t]))
        return joined

    def linear_solve(self, eqn, ins) -> list:
        """custom_linear_solve: its solve function, where b also gets every column of
        the matvec constants (implicit differentiation: dx = solve(db - dA x))."""
        lengths, jaxprs = eqn.params["const_lengths"], eqn.params["jaxprs"]
        start = lengths.matvec + lengths.vecmat
        consts, b = ins[start : start + lengths.solve], ins[sum(lengths) :]
        mat = R.union(R.all_cols(R.dep(v)) for v in ins[: lengths.matvec])
        b = [
            R.union([self._pat(v), R.fill(mat, R.size_of(a))])
            for v, a in zip(b, eqn.invars[sum(lengths) :], strict=True)
        ]
        b = [self._pat(v) if u is None else u for v, u in zip(ins[sum(lengths) :], b, strict=True)]
        return self.run(jaxprs.solve.jaxpr, jaxprs.solve.consts, [*consts, *b])

    def while_(self, eqn, ins) -> list:
        p = eqn.params
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        cconsts, bconsts, carry = ins[:cn], ins[cn : cn + bn], ins[cn + bn :]
        cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
        for _ in range(_MAX_UNROLL):  # exact while the condition is concrete
            (go,) = self.run(cj.jaxpr, cj.consts, [*cconsts, *carry])
            if R.is_pat(go):
                break
            if not bool(go):
                return carry
            carry = self.run(bj.jaxpr, bj.consts, [*bconsts, *carry])
        return self._fixpoint(lambda c: self.run(bj.jaxpr, bj.consts, [*bconsts, *c]), carry)

    def scan(self, eqn, ins) -> list:
        p = eqn.params
        nc, ncar, length = p["num_consts"], p["num_carry"], p["length"]
        consts, carry, xs = ins[:nc], ins[nc : nc + ncar], ins[nc + ncar :]
        body = p["jaxpr"]
        slice_sizes = [R.size_of(a) // max(length, 1) for a in eqn.invars[nc + ncar :]]

        def step(c, xt):
            out = self.run(body.jaxpr, body.consts, [*consts, *c, *xt])
            return out[:ncar], out[ncar:]

        if length <= _MAX_UNROLL:  # exact: one pass of the body per iteration
            ys_steps = []
            order = range(length - 1, -1, -1) if p["reverse"] else range(length)
            for t in order:
                carry, ys = step(
                    carry, [_row_block(v, t, s) for v, s in zip(xs, slice_sizes, strict=True)]
                )
                ys_steps.append(ys)
            if p["reverse"]:
                ys_steps.reverse()
            if not ys_steps:
                return [*carry, *(R.empty(0, self.n) for _ in eqn.outvars[ncar:])]
            per_output = zip(*ys_steps, strict=True)
            ys = [
                self._stack(list(v), a) for v, a in zip(per_output, eqn.outvars[ncar:], strict=True)
            ]
            return [*carry, *ys]
        # long scan: every x slice is the union of all of them, carries reach a fixpoint
        xt = [_all_blocks(v, length, s, self.n) for v, s in zip(xs, slice_sizes, strict=True)]
        carry = self._fixpoint(lambda c: step(c, xt)[0], carry)
        _, ys = step(carry, xt)
        return [*carry, *[_repeat(v, length, self.n) for v in ys]]

    # Lattice helpers -------------------------------------------------------

    def _pat(self, v):
        return v if R.is_pat(v) else R.empty(math.prod(np.shape(v)), self.n)

    def _join_all(self, vals):
        """Least common bound of values: concrete if all equal, else union of patterns."""
        first = vals[0]
        if not any(map(R.is_pat, vals)) and all(_same_value(first, v) for v in vals[1:]):
            return first
        u = R.union([self._pat(v) for v in vals])
        return u if u is not None else self._pat(vals[0])

    def _fixpoint(self, step, carry) -> list:
        """Smallest state containing ``carry`` and closed under ``step``; after
        ``_WIDEN_AFTER`` rounds each float carry widens to the union of its columns."""
        state = list(carry)
        for it in range(10**6):
            new = step(state)
            joined = [self._join_all([a, b]) for a, b in zip(state, new, strict=True)]
            if all(_unchanged(a, b) for a, b in zip(state, joined, strict=True)):
                return state
            state = joined
            if it >= _WIDEN_AFTER:
                cols = R.union(R.all_cols(v) for v in state if R.is_pat(v))
                state = [
                    R.union([v, R.fill(cols, v.shape[0])]) if R.is_pat(v) and v.nnz else v
                    for v in state
                ]  # fmt: skip
        raise RuntimeError("no fixpoint")  # pragma: no cover (widening terminates)

    def _stack(self, vals, outvar):
        if not any(map(R.is_pat, vals)):
            try:
                return np.stack([np.asarray(v) for v in vals]).reshape(outvar.aval.shape)
            except Exception:  # PRNG keys: no longer concrete
                pass
        return R.stack_rows([self._pat(v) for v in vals])


def _sub_jaxpr(eqn):
    """(jaxpr, consts) of a call-like equation."""
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        sub = eqn.params.get(key)
        if sub is not None:
            if isinstance(sub, ClosedJaxpr):
                return sub.jaxpr, sub.consts
            return sub, []
    raise NotImplementedError(f"no inner jaxpr in {eqn.primitive.name}")


def _row_block(v, t: int, s: int):
    """Slice t (of size s) along the leading axis of a scan input."""
    if R.is_pat(v):
        return R.take_rows(v, np.arange(t * s, (t + 1) * s))
    return v[t]


def _all_blocks(v, length: int, s: int, n: int):
    """A scan input slice valid for every iteration: union of all slices."""
    if R.is_pat(v):
        idx = np.arange(length * s)
        u = R.apply(sp.csr_array((np.ones(idx.size, bool), (idx % s, idx)), shape=(s, idx.size)), v)
        return u if u is not None else R.empty(s, n)
    return v[0] if _same_value(v, np.broadcast_to(v[:1], np.shape(v))) else R.empty(s, n)


def _repeat(v, length: int, n: int):
    """A scan output slice repeated for every iteration."""
    if R.is_pat(v):
        return R.take_rows(v, np.tile(np.arange(v.shape[0]), length))
    try:
        return np.broadcast_to(v, (length, *np.shape(v)))
    except Exception:  # PRNG keys: no longer concrete
        return R.empty(length * math.prod(np.shape(v)), n)


def _same_value(a, b) -> bool:
    try:
        return a is b or (np.shape(a) == np.shape(b) and np.array_equal(a, b))
    except Exception:  # e.g. PRNG keys
        return False


def _unchanged(old, new) -> bool:
    """``new`` joins ``old`` with something: equal when it did not grow."""
    if R.is_pat(old) != R.is_pat(new):
        return False
    return old.nnz == new.nnz if R.is_pat(old) else old is new or _same_value(old, new)


def _to_numpy(v):
    try:
        return np.asarray(v)
    except Exception:  # extended dtypes (PRNG keys) stay JAX arrays
        return v


def _literal(a):
    return np.asarray(a.val, dtype=a.aval.dtype)


def _concrete(eqn, ins):
    """Outputs of an equation whose inputs are all concrete (NumPy when it can, else
    JAX), or None when that fails: the rules then give outputs that depend on nothing."""
    outs = None
    if all(isinstance(v, np.ndarray) for v in ins):
        try:
            outs = numpy_eval(eqn, ins)
        except Exception:
            outs = None
    try:
        if outs is None:
            args = [
                np.asarray(v, a.aval.dtype) if isinstance(v, np.ndarray) else v
                for v, a in zip(ins, eqn.invars, strict=True)
            ]
            with jax.ensure_compile_time_eval():  # eager, even under an outer trace
                outs = eqn.primitive.bind(*args, **eqn.params)
            return [_to_numpy(o) for o in (outs if eqn.primitive.multiple_results else [outs])]
        return [
            np.asarray(o).astype(v.aval.dtype, copy=False)
            for o, v in zip(outs, eqn.outvars, strict=True)
        ]
    except Exception:
        return None
