"""Dependence rules for aten ops, used by the global torch detector (``detect``).

A value that depends on x is a :class:`Sym`: its (fake) tensor metadata and a bool csr
matrix ``p`` of shape ``(numel, n)`` whose row k holds the inputs element k may depend on.
A rule maps an op's operands (Syms, concrete tensors, Python values) to the ``p`` of each
output. Data movement is found by running the op itself on index tensors (each element
holds its own row number + 1, so 0 means "no dependence"); sums over many elements build
a 0/1 selection matrix S and take ``S @ p``.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch
from torch.utils import _pytree as pytree

aten = torch.ops.aten


class XDependentIndex(Exception):
    """An op indexes with integers computed from x (values unknown here)."""


class Concrete:
    """A rule's result that does not depend on x (shape-only ops such as zeros_like)."""

    def __init__(self, value):
        self.value = value


class Sym:
    """A tensor that depends on x.

    Attributes:
        meta: a (fake) tensor with the value's shape, dtype and strides.
        p: bool csr ``(numel, n)``: the derivative dependence; None when there is none
            (integer or bool tensors, detached or random values).
        sign_of: a Sym this value is a piecewise constant multiple of (``copysign``'s
            first operand), or None.
    """

    __slots__ = ("meta", "p", "sign_of")

    def __init__(self, meta, p=None, sign_of=None):
        self.meta = meta
        self.p = p if is_float(meta) else None
        self.sign_of = sign_of

    @property
    def shape(self):
        return tuple(self.meta.shape)

    @property
    def numel(self):
        return math.prod(self.meta.shape)


def _cpu(a):
    return a.cpu() if isinstance(a, torch.Tensor) else a


def is_float(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.dtype.is_floating_point or t.dtype.is_complex)


class Call:
    """One op application: the op, its evaluated operands, the traced output metadata."""

    def __init__(self, op, args, kwargs, meta, n):
        self.op, self.args, self.kwargs, self.meta, self.n = op, args, kwargs, meta, n

    def bound(self) -> dict:
        """The operands by schema name, defaults filled in, concrete tensors on the CPU."""
        out = {}
        for i, arg in enumerate(self.op._schema.arguments):
            if i < len(self.args) and not arg.kwarg_only:
                out[arg.name] = self.args[i]
            elif arg.name in self.kwargs:
                out[arg.name] = self.kwargs[arg.name]
            elif arg.has_default_value():
                out[arg.name] = arg.default_value
        return pytree.tree_map(_cpu, out)

    def leaves(self) -> list:
        return pytree.tree_leaves((self.args, self.kwargs))

    def syms(self, skip=()) -> list[Sym]:
        """The operands that carry a derivative dependence (less those named in ``skip``)."""
        if skip:
            leaves = pytree.tree_leaves([v for k, v in self.bound().items() if k not in skip])
        else:
            leaves = self.leaves()
        return [a for a in leaves if isinstance(a, Sym) and a.p is not None]

    def out_meta(self):
        """The first output's metadata (tuple outputs: the first element)."""
        return self.meta[0] if isinstance(self.meta, (tuple, list)) else self.meta


# --- sparse helpers -----------------------------------------------------------------


def empty(rows: int, n: int) -> sp.csr_array:
    return sp.csr_array((rows, n), dtype=bool)


def take_rows(p: sp.csr_array, m: np.ndarray) -> sp.csr_array:
    """Rows ``p[m]`` (canonical), an empty row where ``m < 0``."""
    m = np.asarray(m, dtype=np.int64).ravel()
    ok = m >= 0
    if p.shape[0] == 0 or not ok.any():
        return empty(len(m), p.shape[1])
    safe = np.where(ok, m, 0)
    counts = np.where(ok, np.diff(p.indptr)[safe], 0)
    indptr = np.zeros(len(m) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    take = np.repeat(p.indptr[safe].astype(np.int64) - indptr[:-1], counts)
    take += np.arange(indptr[-1])
    data = np.ones(indptr[-1], dtype=bool)
    return sp.csr_array((data, p.indices[take], indptr), shape=(len(m), p.shape[1]))


def union(parts):
    """Elementwise OR of same-shape patterns (None for an empty list)."""
    parts = [q for q in parts if q is not None]
    if not parts:
        return None
    out = parts[0]
    for q in parts[1:]:
        out = out + q
    return out


def select(rows, cols, shape, p: sp.csr_array) -> sp.csr_array:
    """``(S @ p) > 0`` for the 0/1 matrix S with ones at (rows, cols)."""
    rows, cols = np.asarray(rows).ravel(), np.asarray(cols).ravel()
    s = sp.csr_array((np.ones(len(rows), dtype=bool), (rows, cols)), shape=shape)
    out = s @ p
    out.sort_indices()
    return out


def arange(shape) -> torch.Tensor:
    return torch.arange(math.prod(shape), dtype=torch.int64).view(tuple(shape))


def broadcast(sym: Sym, shape) -> sp.csr_array:
    """The pattern of ``sym`` broadcast to ``shape``."""
    if sym.shape == tuple(shape):
        return sym.p
    return take_rows(sym.p, torch.broadcast_to(arange(sym.shape), shape).reshape(-1).numpy())


def dims_of(dim, ndim: int) -> set[int]:
    """Normalised reduction dims (None or [] means all)."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return set(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return {d % max(ndim, 1) for d in dims} if ndim else set()


def reduce(sym: Sym, dims: set[int]) -> tuple[sp.csr_array, list[int]]:
    """Union over ``dims``: the pattern in keepdim shape, and that shape."""
    kshape = [1 if d in dims else s for d, s in enumerate(sym.shape)]
    if kshape == list(sym.shape):
        return sym.p, kshape
    m = torch.broadcast_to(arange(kshape), sym.shape).reshape(-1).numpy()
    return select(m, np.arange(len(m)), (math.prod(kshape), len(m)), sym.p), kshape


def spread(p: sp.csr_array, kshape, shape) -> sp.csr_array:
    """A keepdim-shaped pattern broadcast back to ``shape`` (same ndim)."""
    if math.prod(kshape) == math.prod(shape):
        return p
    return take_rows(p, torch.broadcast_to(arange(kshape), shape).reshape(-1).numpy())


def dense_rows(syms, rows: int, n: int) -> sp.csr_array:
    """Every one of ``rows`` rows depends on every input any of ``syms`` depends on."""
    cols = np.unique(np.concatenate([s.p.indices for s in syms] or [np.zeros(0, np.int32)]))
    indptr = np.arange(rows + 1, dtype=np.int64) * len(cols)
    return sp.csr_array(
        (np.ones(rows * len(cols), bool), np.tile(cols, rows), indptr), shape=(rows, n)
    )


# --- rules --------------------------------------------------------------------------


def _index_tensor(sym_meta, offset: int, strided: bool) -> torch.Tensor:
    """Float64 tensor of row numbers + 1 + offset; in ``sym_meta``'s memory layout if
    ``strided`` (for as_strided: elements sharing memory are equal, so any one will do)."""
    shape, numel = tuple(sym_meta.shape), math.prod(sym_meta.shape)
    values = torch.arange(offset + 1, offset + 1 + numel, dtype=torch.float64).view(shape)
    stride, start = tuple(sym_meta.stride()), sym_meta.storage_offset()
    if not strided or (sym_meta.is_contiguous() and start == 0) or numel == 0:
        return values
    where = torch.full(shape, start, dtype=torch.int64)
    for d, (size, st) in enumerate(zip(shape, stride, strict=True)):
        where += (torch.arange(size) * st).view([-1 if i == d else 1 for i in range(len(shape))])
    buf = torch.zeros(int(where.max()) + 1, dtype=torch.float64)
    buf[where.reshape(-1)] = values.reshape(-1)
    return buf.as_strided(shape, stride, start)


def _scalar_names(op) -> set[str]:
    return {a.name for a in op._schema.arguments if str(a.type) in ("Scalar", "Scalar?")}


def movement(call: Call):
    """Ops that copy elements around: run the op on index tensors to find the sources."""
    pats, offset = [], 0
    strided = call.op.overloadpacket.__name__.startswith("as_strided")

    def sub(a):
        nonlocal offset
        if isinstance(a, Sym):
            if not is_float(a.meta):
                raise XDependentIndex
            if a.p is None:
                return torch.zeros(a.shape, dtype=torch.float64)
            idx = _index_tensor(a.meta, offset, strided)
            pats.append(a.p)
            offset += a.numel
            return idx
        if is_float(a):
            return torch.zeros(a.shape, dtype=torch.float64)
        return _cpu(a)

    scalars = _scalar_names(call.op)
    names = [a.name for a in call.op._schema.arguments]
    args = [
        0 if i < len(names) and names[i] in scalars else pytree.tree_map(sub, a)
        for i, a in enumerate(call.args)
    ]
    kwargs = {k: 0 if k in scalars else pytree.tree_map(sub, v) for k, v in call.kwargs.items()}
    out = call.op(*args, **kwargs)
    if not pats:
        return None
    stacked = pats[0] if len(pats) == 1 else sp.vstack(pats, format="csr")

    def rows(t):
        return take_rows(stacked, t.reshape(-1).numpy().astype(np.int64) - 1)

    return [rows(t) for t in out] if isinstance(out, (tuple, list)) else rows(out)


def reduction(call: Call):
    """Reductions over ``dim`` (all dims when absent, None or empty)."""
    b = call.bound()
    src = b.get("self", b.get("input"))
    if not isinstance(src, Sym) or src.p is None:
        return None
    return reduce(src, dims_of(b.get("dim"), len(src.shape)))[0]


def along(call: Call):
    """Ops where each output depends on its whole fiber along ``dim``: softmax, sort, ..."""
    b = call.bound()
    meta = call.out_meta()
    dims = dims_of(b.get("dim", -1), meta.dim())
    parts = []
    for s in call.syms():
        p, kshape = reduce(s, dims)
        parts.append(spread(p, kshape, meta.shape))
    return union(parts)


def layer_norm(call: Call):
    """``native_layer_norm``: fibers over the normalised trailing dims; weight, bias pointwise."""
    b = call.bound()
    src, shape = b["input"], tuple(call.meta[0].shape)
    k = len(b["normalized_shape"])
    dims = set(range(len(shape) - k, len(shape)))
    stats = reduce(src, dims)[0] if isinstance(src, Sym) and src.p is not None else None
    kshape = [1 if d in dims else s for d, s in enumerate(shape)]
    parts = [spread(stats, kshape, shape) if stats is not None else None]
    for name in ("weight", "bias"):
        w = b.get(name)
        if isinstance(w, Sym) and w.p is not None:
            parts.append(broadcast(w, shape))
    return [union(parts), stats, stats]


def prefix(call: Call):
    """Cumulative ops: output k along ``dim`` depends on inputs 0..k."""
    b = call.bound()
    src = b["self"]
    if src.p is None:
        return None
    if len(src.shape) == 0:
        return src.p
    dim = b["dim"] % len(src.shape)
    length = src.shape[dim]
    idx = arange(src.shape).movedim(dim, -1).reshape(-1, length).numpy()
    hi, lo = np.tril_indices(length)
    return select(idx[:, hi], idx[:, lo], (src.numel, src.numel), src.p)


def _operand(a, shape3):
    """(nonzero mask, pattern) of a matmul operand viewed as a (b, r, c) batch."""
    if isinstance(a, Sym):
        return torch.ones(shape3, dtype=torch.bool), a.p
    return (a.reshape(shape3) != 0), None


def _mm(a, b, n):
    """Pattern of the batched product ``a @ b`` from operands (mask, p); None if none."""
    (ma, pa), (mb, pb) = a, b
    nb, ni, nk = ma.shape
    nj = mb.shape[2]
    rows_out = nb * ni * nj
    parts = []
    if pb is not None:  # out[b,i,j] <- b[b,k,j] where a[b,i,k] may be nonzero
        bb, i, k = (t.numpy() for t in ma.nonzero(as_tuple=True))
        j = np.arange(nj)
        rows = ((bb * ni + i) * nj)[:, None] + j
        cols = ((bb * nk + k) * nj)[:, None] + j
        parts.append(select(rows, cols, (rows_out, nb * nk * nj), pb))
    if pa is not None:  # out[b,i,j] <- a[b,i,k] where b[b,k,j] may be nonzero
        bb, k, j = (t.numpy() for t in mb.nonzero(as_tuple=True))
        i = np.arange(ni)
        bi = (bb * ni)[:, None] + i
        parts.append(
            select(bi * nj + j[:, None], bi * nk + k[:, None], (rows_out, nb * ni * nk), pa)
        )
    return union(parts)


_MATMUL_OPERANDS = {
    "mm": ("self", "mat2"),
    "bmm": ("self", "mat2"),
    "addmm": ("mat1", "mat2"),
    "baddbmm": ("batch1", "batch2"),
    "mv": ("self", "vec"),
    "addmv": ("mat", "vec"),
    "dot": ("self", "tensor"),
    "vdot": ("self", "other"),
}


def matmul(call: Call):
    """mm, bmm, mv, dot and their ``add*`` forms (the added term broadcast pointwise)."""
    name = call.op.overloadpacket.__name__
    b = call.bound()
    shape = call.out_meta().shape
    x, y = (b[k] for k in _MATMUL_OPERANDS[name])
    xs, ys = tuple(x.shape), tuple(y.shape)
    if len(xs) == 3:
        sx, sy = xs, ys
    elif len(xs) == 2:
        sx, sy = (1, *xs), ((1, *ys) if len(ys) == 2 else (1, ys[0], 1))
    else:
        sx, sy = (1, 1, xs[0]), (1, ys[0], 1)
    parts = [_mm(_operand(x, sx), _operand(y, sy), call.n)]
    if name in ("addmm", "baddbmm", "addmv"):
        s = b["self"]
        if isinstance(s, Sym) and s.p is not None:
            parts.append(broadcast(s, shape))
    return union(parts)


def _fiber(out_idx: torch.Tensor, src_idx: torch.Tensor, dim: int):
    """(rows, cols): every out element takes its whole src fiber along ``dim``."""
    o = out_idx.movedim(dim, -1)
    s = src_idx.movedim(dim, -1)
    shape = (*o.shape[:-1], o.shape[-1], s.shape[-1])
    rows = o.unsqueeze(-1).expand(shape)
    cols = s.unsqueeze(-2).expand(shape)
    return rows.reshape(-1).numpy(), cols.reshape(-1).numpy()


def _crop(t: torch.Tensor, shape, dim: int) -> torch.Tensor:
    """``t`` cut to ``shape`` in every dim but ``dim``."""
    return t[tuple(slice(None) if d == dim else slice(0, s) for d, s in enumerate(shape))]


def scatter_like(call: Call):
    """gather/scatter/index_put/index_add: sums gathered with S, x-dependent indices by fiber."""
    name = call.op.overloadpacket.__name__
    b = call.bound()
    meta = call.out_meta()
    rows_out = meta.numel()
    out_idx = arange(meta.shape)
    if name == "gather":
        src, index, dim = b["self"], b["index"], b["dim"] % max(meta.dim(), 1)
        if not isinstance(index, Sym):
            return movement(call)
        if src.p is None or meta.dim() == 0:
            return src.p
        rows, cols = _fiber(out_idx, _crop(arange(src.shape), meta.shape, dim), dim)
        return select(rows, cols, (rows_out, src.numel), src.p)
    self_ = b["self"]
    parts = [self_.p if isinstance(self_, Sym) else None]
    if name in ("index_put", "_unsafe_index_put", "_index_put_impl", "put"):
        indices = b["index"] if name == "put" else b["indices"]
        if any(isinstance(i, Sym) for i in pytree.tree_leaves(indices)):
            raise XDependentIndex
        if not b.get("accumulate"):
            return movement(call)
        src = b["source"] if name == "put" else b["values"]
        if name == "put":
            dest = out_idx.reshape(-1)[indices.reshape(-1)]
        else:
            dest = aten.index.Tensor(out_idx, indices)
        srcmap = torch.broadcast_to(arange(src.shape), dest.shape) if isinstance(src, Sym) else None
    elif name == "_unsafe_masked_index_put_accumulate":
        src, mask = b["values"], b["mask"]
        if isinstance(mask, Sym) or any(isinstance(i, Sym) for i in b["indices"]):
            raise XDependentIndex
        full = aten.index.Tensor(out_idx, b["indices"])
        keep = torch.broadcast_to(mask, full.shape)
        dest = full[keep]
        srcmap = None
        if isinstance(src, Sym):
            srcmap = torch.broadcast_to(arange(src.shape), full.shape)[keep]
    elif name == "index_add":
        src, index, dim = b["source"], b["index"], b["dim"]
        if isinstance(index, Sym):
            raise XDependentIndex
        dest = aten.index_select(out_idx, dim, index) if meta.dim() else out_idx
        srcmap = arange(src.shape).reshape(dest.shape) if isinstance(src, Sym) else None
    else:  # scatter, scatter_add, scatter_reduce
        src, index = b.get("src"), b["index"]
        dim = b["dim"] % max(meta.dim(), 1)
        accumulate = name != "scatter" or b.get("reduce") is not None
        if not isinstance(index, Sym) and not accumulate:
            return movement(call)
        if isinstance(src, Sym) and src.p is not None and meta.dim():
            crop_src = _crop(arange(src.shape), index.shape, -1)
            if isinstance(index, Sym):
                rows, cols = _fiber(_crop(out_idx, index.shape, dim), crop_src, dim)
                parts.append(select(rows, cols, (rows_out, src.numel), src.p))
                src = None
            else:
                dest, srcmap = aten.gather(out_idx, dim, index), crop_src
        elif isinstance(src, Sym) and src.p is not None:
            dest, srcmap = out_idx, arange(src.shape)
        else:
            src = None
    if isinstance(src, Sym) and src.p is not None:
        parts.append(select(dest, srcmap, (rows_out, src.numel), src.p))
    return union(parts)


def adjoint(call: Call):
    """Backward of a data-movement op (unfold, nearest upsampling, replication padding):
    each input element sums the gradients of the output elements the forward op copied
    it to. The input's shape is an argument, or that of ``self`` (whose values the
    gradient does not depend on)."""
    b = call.bound()
    names = list(b)
    grad = b[names[0]]
    size_name = next(k for k in ("input_sizes", "input_size", "self") if k in b)
    if not isinstance(grad, Sym) or grad.p is None:
        return None
    fwd = getattr(aten, call.op.overloadpacket.__name__.removesuffix("_backward")).default
    rest = [b[k] for k in names[1:] if k != size_name]  # the forward op's other arguments
    in_shape = tuple(b[size_name].shape if size_name == "self" else b[size_name])
    src = torch.arange(1, math.prod(in_shape) + 1, dtype=torch.float64).view(in_shape)
    m = fwd(src, *rest).reshape(-1).long().numpy() - 1
    ok = m >= 0
    return select(m[ok], np.flatnonzero(ok), (math.prod(in_shape), grad.numel), grad.p)


def metadata_only(call: Call):
    """Ops that read only shapes and dtypes (zeros_like, new_zeros, ...): concrete."""

    def sub(a):
        if isinstance(a, Sym):
            return torch.zeros(a.shape, dtype=a.meta.dtype, device=a.meta.device)
        return a

    args, kwargs = pytree.tree_map(sub, (call.args, call.kwargs))
    return Concrete(call.op(*args, **kwargs))
