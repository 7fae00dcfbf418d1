"""Global sparsity patterns of torch functions, read from their traced aten graph.

``make_fx`` traces ``fn`` on a fake ``x`` (the graph does not depend on x's values), and
through ``functionalize`` again when the graph writes in place. The graph is then
interpreted op by op: values that do not depend on x are computed (constant index tensors
are known exactly); a value that does is a :class:`~diffiface.backends.torch.sparse.rules.Sym`
holding a bool csr matrix of the inputs each of its elements may depend on, for any x.
The result is a superset of every local Jacobian pattern. An op without a rule is run
through torch's decomposition of it when there is one; otherwise each of its outputs is
taken to depend on everything its operands depend on, with a ``SparsityWarning``.
"""

from __future__ import annotations

import operator
import warnings

import numpy as np
import scipy.sparse as sp
import torch
from torch._decomp import decomposition_table
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from .... import _checks
from ...._errors import DiffifaceTypeError, DiffifaceValueError, SparsityWarning
from . import rules
from .elementwise import Signed
from .rules import Call, Sym
from .table import rule_for

__all__ = ["hessian_pattern", "jacobian_pattern"]


def jacobian_pattern(fn, x: torch.Tensor) -> sp.csr_array:
    """Global Jacobian sparsity pattern of ``fn`` at any point.

    Args:
        fn: a torch function of one float tensor returning one tensor.
        x: a point: its shape and dtype matter (its values only for a ``fn`` that
            cannot be traced without them, see below).

    Returns:
        A canonical bool ``csr_array`` of shape ``(y.numel(), x.numel())``: rows are the
        flattened outputs, columns the flattened inputs; (i, j) is True when output i may
        depend on input j for some x.

    Raises:
        DiffifaceValueError: ``fn`` cannot be traced to aten ops, even at this x (Python
            control flow on x's values, ``.item()``).

    Warns:
        SparsityWarning: for ops the detector has no rule (nor decomposition) for: their
            outputs are taken to depend on everything their operands depend on (dense
            from there on); and when ``fn`` can be traced only with x's values (sizes
            that depend on them, as boolean-mask indexing): the pattern then holds for
            the sizes and branches taken at this ``x``.
    """
    return read(_trace(fn, x), x)


def read(gm: torch.fx.GraphModule, x: torch.Tensor) -> sp.csr_array:
    """The Jacobian pattern of a traced graph of one input shaped like ``x``."""
    n = x.numel()
    interpreter = _Interpreter(n)
    meta = next(iter(gm.graph.find_nodes(op="placeholder"))).meta.get("val", x)
    with torch.device("cpu"):  # the rules' index tensors, whatever the default device
        out = interpreter.run(gm, [Sym(meta, sp.identity(n, dtype=bool, format="csr"))])
    if interpreter.unknown:
        ops = ", ".join(f"{op} ({why})" for op, why in sorted(interpreter.unknown.items()))
        warnings.warn(
            f"sparsity detection widened the pattern at {ops}: each output of these ops "
            "is taken to depend on every input its operands depend on (dense from there on)",
            SparsityWarning,
            stacklevel=3,
        )
    return _canonical(out, n)


def hessian_pattern(fn, x: torch.Tensor) -> sp.csr_array:
    """Global Hessian sparsity pattern of a scalar-valued ``fn``.

    Args:
        fn: a torch function of one float tensor returning a scalar tensor.
        x: a point (as for :func:`jacobian_pattern`).

    Returns:
        A symmetric canonical bool ``csr_array`` of shape ``(n, n)``, n = ``x.numel()``:
        the Jacobian pattern of ``torch.func.grad(fn)``, symmetrised.
    """
    p = jacobian_pattern(torch.func.grad(fn), x)
    return tidy(p + p.T)


def _trace(fn, x: torch.Tensor) -> torch.fx.GraphModule:
    """Aten graph of ``fn``: on a fake x, or on x itself when that fails (with a warning)."""
    x = x.detach()
    try:
        gm = _make_fx(fn, x, "fake")
        if any(_data_dependent(node.meta.get("val")) for node in gm.graph.nodes):
            raise ValueError("sizes that depend on x's values")
    except (DiffifaceTypeError, DiffifaceValueError):
        raise  # f's output checked in the trace: not a tracing failure
    except Exception as err:  # data-dependent shapes, control flow, .item(), ...
        if isinstance(err, TypeError) and _checks.foreign_framework(err) not in (None, "torch"):
            raise  # a JAX or MLX f: the error that names its backend
        try:
            gm = _make_fx(fn, x, "real")
        except Exception:
            raise DiffifaceValueError(
                f"sparsity detection could not trace fn ({type(err).__name__}: {err}). The "
                "global detector needs fn traceable to aten ops: no Python control flow on "
                "x's values, no .item(). Use a local detector or pass the pattern."
            ) from err
        _RecordValues(gm).run(x)
        warnings.warn(
            f"sparsity detection: fn could not be traced independently of x's values "
            f"({type(err).__name__}); it was traced at this x, so the pattern covers the "
            "branches and sizes taken here only and may miss nonzeros elsewhere",
            SparsityWarning,
            stacklevel=3,
        )
    gm.graph.eliminate_dead_code()
    return gm


def trace_real(fn, x: torch.Tensor) -> torch.fx.GraphModule:
    """Aten graph of ``fn`` traced on real values (each node's value at x recorded)."""
    gm = _make_fx(fn, x, "real")
    _RecordValues(gm).run(x)
    gm.graph.eliminate_dead_code()
    return gm


def _make_fx(fn, x: torch.Tensor, mode: str) -> torch.fx.GraphModule:
    """``make_fx``, then again through ``functionalize`` if the graph mutates tensors."""
    gm = make_fx(fn, tracing_mode=mode, _allow_non_fake_inputs=True)(x)
    if any(
        isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
        for node in gm.graph.nodes
    ):
        functional = torch.func.functionalize(gm, remove="mutations")
        gm = make_fx(functional, tracing_mode=mode, _allow_non_fake_inputs=True)(x)
    return gm


def _data_dependent(meta) -> bool:
    """Whether a traced value's shape is symbolic (boolean masks, nonzero, ...)."""
    leaves = pytree.tree_leaves(meta)
    return any(
        isinstance(t, torch.Tensor) and not all(isinstance(s, int) for s in t.shape) for t in leaves
    )


class _RecordValues(torch.fx.Interpreter):
    """Stores each node's value at x as its metadata (real-mode traces)."""

    def run_node(self, n):
        out = super().run_node(n)
        n.meta["val"] = out
        return out


class _Interpreter:
    """Runs aten graphs on Syms and concrete values; records the ops widened to dense."""

    def __init__(self, n: int):
        self.n = n
        self.unknown: dict[str, str] = {}

    def run(self, gm: torch.fx.GraphModule, inputs: list, depth: int = 0):
        """The graph's output value, its placeholders bound to ``inputs``."""
        env: dict = {}
        inputs = iter(inputs)
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(inputs)
            elif node.op == "get_attr":
                env[node] = operator.attrgetter(node.target)(gm)
            elif node.op == "call_function":
                args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__)
                env[node] = self.call(node.target, args, kwargs, node.meta.get("val"), depth)
            elif node.op == "output":
                return torch.fx.node.map_arg(node.args[0], env.__getitem__)
        raise AssertionError("graph without output")  # pragma: no cover

    def call(self, op, args, kwargs, meta, depth: int):
        """One node: concrete when no operand depends on x, else by its rule."""
        if op is operator.getitem:
            return args[0][args[1]]
        if isinstance(op, type) and issubclass(op, tuple):
            return op(*args, **kwargs)  # return_types namedtuples in decompositions
        leaves = pytree.tree_leaves((args, kwargs))
        aten_op = isinstance(op, torch._ops.OpOverload)
        if not any(isinstance(a, Sym) for a in leaves):
            if aten_op and torch.Tag.nondeterministic_seeded in op.tags:
                return _wrap(meta, None)  # random: values not known in advance
            return op(*args, **kwargs)
        call = Call(op, args, kwargs, meta, self.n)
        rule = rule_for(op) if aten_op else None
        if rule is rules.metadata_only:
            return rule(call).value
        if not any(rules.is_float(m) for m in pytree.tree_leaves(meta)):
            return _wrap(meta, None)  # integer / bool outputs carry no derivative
        reason = "no rule"
        if rule is not None:
            try:
                out = rule(call)
                if isinstance(out, Signed):
                    return Sym(meta, out.p, out.base)
                return out.value if isinstance(out, rules.Concrete) else _wrap(meta, out)
            except rules.XDependentIndex:
                reason = "indices computed from x"
            except Exception as err:  # a rule that cannot evaluate this call
                reason = f"rule failed: {type(err).__name__}"
        elif aten_op and op in decomposition_table and depth < 4:
            out = self.decompose(op, args, kwargs, depth)
            if out is not None:
                return out
        self.unknown[str(op)] = reason
        syms = call.syms()
        return pytree.tree_map(
            lambda m: (
                Sym(m, rules.dense_rows(syms, m.numel(), self.n) if syms else None)
                if isinstance(m, torch.Tensor)
                else m
            ),
            meta,
        )

    def decompose(self, op, args, kwargs, depth: int):
        """Trace torch's decomposition of ``op`` on these operands and run that (or None)."""
        flat, spec = pytree.tree_flatten((args, kwargs))
        where = [i for i, a in enumerate(flat) if isinstance(a, Sym)]

        def f(*tensors):
            leaves = list(flat)
            for i, t in zip(where, tensors, strict=True):
                leaves[i] = t
            a, k = pytree.tree_unflatten(leaves, spec)
            return decomposition_table[op](*a, **k)

        examples = [torch.zeros(flat[i].shape, dtype=flat[i].meta.dtype) for i in where]
        try:
            gm = make_fx(f, tracing_mode="fake", _allow_non_fake_inputs=True)(*examples)
        except Exception:
            return None
        return self.run(gm, [flat[i] for i in where], depth + 1)


def _wrap(meta, p):
    """Syms for the (possibly tuple) output ``meta``; ``p`` one pattern or one per output."""
    if isinstance(meta, (tuple, list)):
        ps = p if isinstance(p, (tuple, list)) else [p] * len(meta)
        return type(meta)(_wrap(m, q) for m, q in zip(meta, ps, strict=True))
    if not isinstance(meta, torch.Tensor):
        return meta
    if p is not None and rules.is_float(meta) and p.shape[0] != meta.numel():
        raise ValueError(f"pattern rows {p.shape[0]} != numel {meta.numel()}")
    return Sym(meta, p)


def _canonical(out, n: int) -> sp.csr_array:
    """The output's pattern as a canonical bool csr_array."""
    if isinstance(out, (tuple, list)):
        return sp.vstack([_canonical(o, n) for o in out], format="csr")
    if isinstance(out, Sym):
        rows, p = out.numel, out.p
    else:
        rows, p = int(np.prod(getattr(out, "shape", ()))), None
    return rules.empty(rows, n) if p is None else tidy(p)


def tidy(p) -> sp.csr_array:
    """``p`` in canonical form: sorted indices, no duplicates, data all True."""
    p = sp.csr_array(p, dtype=bool)
    p.sum_duplicates()
    p.eliminate_zeros()
    p.sort_indices()
    p.data[:] = True
    return p
