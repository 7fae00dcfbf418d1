"""Per-primitive rules of the global JAX sparsity detector (used by ``detect``).

A value is either concrete (a NumPy array that does not depend on x) or a pattern: a
bool ``csr_array`` of shape (value.size, x.size), canonical, whose row k holds the
inputs that element k may depend on. A rule takes (eqn, input values, x.size) and
returns one pattern per output, or None for "depends on nothing".
"""

from __future__ import annotations

import math

import jax
import numpy as np
import scipy.sparse as sp

from .numpy_eval import MOVES, clamped_starts, gather_map

# Patterns -------------------------------------------------------------------------


def is_pat(v) -> bool:
    """True for a pattern, False for a concrete value."""
    return isinstance(v, sp.csr_array)


def size_of(atom) -> int:
    return math.prod(atom.aval.shape)


def inexact(atom) -> bool:
    """Whether the variable is floating or complex (it can carry a derivative)."""
    dtype = getattr(atom.aval, "dtype", None)
    return dtype is not None and jax.numpy.issubdtype(dtype, jax.numpy.inexact)


def _csr(indptr, indices, rows: int, n: int) -> sp.csr_array:
    return sp.csr_array((np.ones(len(indices), bool), indices, indptr), shape=(rows, n))


def empty(rows: int, n: int) -> sp.csr_array:
    return _csr(np.zeros(rows + 1, np.int32), np.zeros(0, np.int32), rows, n)


def identity(n: int) -> sp.csr_array:
    return _csr(np.arange(n + 1), np.arange(n), n, n)


def take_rows(p, m):
    """Rows ``p[m]`` of a pattern; a row index -1 gives an empty row."""
    m = np.asarray(m).ravel()
    if p is None or (len(m) == p.shape[0] and np.array_equal(m, np.arange(len(m)))):
        return p
    valid = m >= 0
    start = p.indptr[np.where(valid, m, 0)]
    length = np.where(valid, p.indptr[np.where(valid, m + 1, 0)] - start, 0)
    indptr = np.zeros(len(m) + 1, np.int64)
    np.cumsum(length, out=indptr[1:])
    pos = np.arange(indptr[-1]) - np.repeat(indptr[:-1] - start, length)
    return _csr(indptr, p.indices[pos], len(m), p.shape[1])


def stack_rows(pats):
    """Patterns one above the other (vstack)."""
    if len(pats) == 1:
        return pats[0]
    offsets = np.cumsum([0] + [p.nnz for p in pats])
    indptr = np.concatenate(
        [p.indptr[:-1] + o for p, o in zip(pats, offsets, strict=False)] + [offsets[-1:]]
    )
    indices = np.concatenate([p.indices for p in pats])
    return _csr(indptr, indices, sum(p.shape[0] for p in pats), pats[0].shape[1])


def union(pats):
    """Elementwise union of same-shape patterns (None entries skipped)."""
    out = None
    for p in pats:
        if p is not None and p.nnz:
            out = p if out is None else out + p
    if out is not None and not out.has_canonical_format:
        out.sum_duplicates()
    return out


def apply(s, p):
    """Pattern ``(S @ P) > 0`` for a 0/1 selection matrix S (out.size x in.size)."""
    if p is None or not p.nnz:
        return None
    out = sp.csr_array((s if s.dtype == bool else s.astype(bool)) @ p)
    out.sum_duplicates()
    return out


def all_cols(p):
    """One row: the union of all rows of ``p``."""
    if p is None or not p.nnz:
        return None
    cols = np.unique(p.indices)
    return _csr(np.array([0, cols.size]), cols, 1, p.shape[1])


def fill(row, size: int):
    """``size`` copies of a one-row pattern."""
    return None if row is None else take_rows(row, np.zeros(size, np.int64))


_MAX_ENTRIES = 50_000_000  # above this, dot_general ignores a concrete operand's zeros


def _sel(rows, cols, shape):
    return sp.csr_array((np.ones(len(rows), bool), (rows, cols)), shape=shape)


def _eye(k: int):
    return sp.eye_array(k, dtype=bool, format="csr")


def _ones(a: int, b: int):
    return sp.csr_array(np.ones((a, b), bool))


def _kron(*mats):
    out = mats[0]
    for m in mats[1:]:
        out = sp.kron(out, m, format="csr")
    return out


def _along(shape, axis: int, m):
    """Selection matrix acting as ``m`` along ``axis`` and as identity elsewhere."""
    return _kron(_eye(math.prod(shape[:axis])), m, _eye(math.prod(shape[axis + 1 :])))


def dep(v):
    """The pattern of a value, or None when it depends on nothing (concrete or empty)."""
    return v if is_pat(v) and v.nnz else None


def _bcast(p, shape, out_shape):
    if p is None or tuple(shape) == tuple(out_shape):
        return p
    return take_rows(p, np.broadcast_to(np.arange(math.prod(shape)).reshape(shape), out_shape))


# Data movement -----------------------------------------------------------------


def _data_positions(name, k):
    pos = MOVES[name][0]
    return range(k) if pos is None else range(k)[pos] if isinstance(pos, slice) else pos


def _move(eqn, ins, n):
    """Run the primitive's NumPy version on index arrays: out[k] <- operands[map[k]]."""
    name = eqn.primitive.name
    arrs, pats, offset = list(ins), [], 0
    for k in _data_positions(name, len(ins)):
        shape = eqn.invars[k].aval.shape
        if is_pat(ins[k]):
            arrs[k] = np.arange(offset, offset + math.prod(shape)).reshape(shape)
            pats.append(ins[k])
            offset += math.prod(shape)
        else:
            arrs[k] = np.full(shape, -1, np.int64)
    if not pats:
        return [None] * len(eqn.outvars)
    maps = MOVES[name][1](eqn, *arrs)
    stacked = stack_rows(pats)
    return [take_rows(stacked, m) for m in maps]


# Elementwise, reductions, products -----------------------------------------------


# operands (by position) in which the primitive is piecewise constant: no derivative
_FLAT_OPERANDS = {"nextafter": (1,)}


def elementwise(eqn, ins, n):
    """Each output element depends on the same element of every operand (broadcast)
    with a derivative (``x ** 0`` and nextafter's direction have none)."""
    name, out_shape = eqn.primitive.name, eqn.outvars[0].aval.shape
    if name == "integer_pow" and eqn.params["y"] == 0:
        return [None] * len(eqn.outvars)
    flat = _FLAT_OPERANDS.get(name, ())
    u = union(
        _bcast(dep(v), a.aval.shape, out_shape)
        for k, (v, a) in enumerate(zip(ins, eqn.invars, strict=True))
        if k not in flat
    )
    if u is not None and name == "mul":  # d(0 * y)/dy = 0
        zero = np.zeros(out_shape, bool)
        for v in ins:
            if not is_pat(v):
                zero = zero | (np.asarray(v) == 0)
        if zero.any():
            u = take_rows(u, np.where(zero.ravel(), -1, np.arange(zero.size)))
    return [u] * len(eqn.outvars)


def zero_derivative(eqn, ins, n):
    return [None] * len(eqn.outvars)


def bitcast(eqn, ins, n):
    """bitcast_convert_type: elementwise when the shape is kept."""
    if eqn.invars[0].aval.shape == eqn.outvars[0].aval.shape:
        return elementwise(eqn, ins, n)
    return dense(eqn, ins, n)


def passthrough(eqn, ins, n):
    """Output i is input i (optimization_barrier, device_put, ...)."""
    return list(ins[: len(eqn.outvars)])


def _reduce_matrix(shape, axes):
    keep = [d for d in range(len(shape)) if d not in axes]
    out = np.arange(math.prod(shape[d] for d in keep))
    expanded = [shape[d] if d in keep else 1 for d in range(len(shape))]
    rows = np.broadcast_to(out.reshape(expanded), shape).ravel()
    return _sel(rows, np.arange(rows.size), (out.size, rows.size))


def reduce(eqn, ins, n):
    """reduce_* (and lax.reduce): each output depends on the elements it reduces."""
    p = eqn.params
    axes = tuple(p["axes"] if "axes" in p else p["dimensions"])
    k = len(eqn.outvars) if eqn.primitive.name == "reduce" else len(ins)
    s = _reduce_matrix(eqn.invars[0].aval.shape, axes)
    u = union(apply(s, dep(v)) for v in ins[:k])
    init = union(dep(v) for v in ins[k:])  # lax.reduce's init values (scalars)
    u = union([u, fill(init, size_of(eqn.outvars[0]))])
    return [u] * len(eqn.outvars)


def cumulative(eqn, ins, n):
    """cumsum, cumprod, cummax, cummin, cumlogsumexp: prefix unions along the axis."""
    shape, axis = eqn.invars[0].aval.shape, eqn.params["axis"]
    tri = np.tril(np.ones((shape[axis],) * 2, bool))
    tri = sp.csr_array(tri.T if eqn.params["reverse"] else tri)
    return [apply(_along(shape, axis, tri), dep(ins[0]))]


def sort(eqn, ins, n):
    """Sorted output k may hold any element of operand k along the sorted axis."""
    shape, axis = eqn.invars[0].aval.shape, eqn.params["dimension"]
    s = _along(shape, axis, _ones(shape[axis], shape[axis]))
    return [apply(s, dep(v)) for v in ins]


def top_k(eqn, ins, n):
    shape = eqn.invars[0].aval.shape
    axis = eqn.params.get("axis", eqn.params.get("reduction_dimension", -1)) % len(shape)
    s = _along(shape, axis, _ones(eqn.outvars[0].aval.shape[axis], shape[axis]))
    return [apply(s, dep(ins[0])), None]


def dot_general(eqn, ins, n):
    """Out[b, i, j] depends on lhs[b, i, :] and rhs[b, :, j] (minus a concrete zero)."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    ls, rs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    lf = [d for d in range(len(ls)) if d not in lc and d not in lb]
    rf = [d for d in range(len(rs)) if d not in rc and d not in rb]
    b, k = math.prod(ls[d] for d in lb), math.prod(ls[d] for d in lc)
    fl, fr = math.prod(ls[d] for d in lf), math.prod(rs[d] for d in rf)
    lidx = np.arange(math.prod(ls)).reshape(ls).transpose([*lb, *lf, *lc]).reshape(b, fl, k)
    ridx = np.arange(math.prod(rs)).reshape(rs).transpose([*rb, *rc, *rf]).reshape(b, k, fr)
    out_bij = np.arange(b * fl * fr).reshape(b, fl, fr)
    parts = []
    for own, other in ((0, 1), (1, 0)):
        p = dep(ins[own])
        if p is None:
            continue
        mask = None
        if not is_pat(ins[other]):  # a concrete other operand: its zeros cut dependence
            val = np.asarray(ins[other])
            if own == 0:
                mask = val.transpose([*rb, *rc, *rf]).reshape(b, k, fr) != 0
            else:
                mask = val.transpose([*lb, *lf, *lc]).reshape(b, fl, k) != 0
            if mask.all() or mask.sum() * (fl if own == 0 else fr) > _MAX_ENTRIES:
                mask = None
        if mask is None:  # union over the contracted axis, then copy along the free one
            grp = lidx if own == 0 else ridx.transpose(0, 2, 1)  # (b, free, k)
            rows = np.repeat(np.arange(grp.shape[0] * grp.shape[1]), k)
            u = apply(_sel(rows, grp.ravel(), (grp.shape[0] * grp.shape[1], p.shape[0])), p)
            src = np.arange(b * (fr if own else fl)).reshape((b, 1, fr) if own else (b, fl, 1))
            parts.append(take_rows(u, np.broadcast_to(src, out_bij.shape)))
        elif own == 0:  # (b, i, j) <- lhs[b, i, kk] where rhs[b, kk, j] != 0
            bb, kk, jj = np.nonzero(mask)
            ii = np.arange(fl)[:, None]
            s = _sel(
                out_bij[bb, ii, jj].ravel(), lidx[bb, ii, kk].ravel(), (b * fl * fr, p.shape[0])
            )
            parts.append(apply(s, p))
        else:  # (b, i, j) <- rhs[b, kk, j] where lhs[b, i, kk] != 0
            bb, ii, kk = np.nonzero(mask)
            jj = np.arange(fr)[:, None]
            s = _sel(
                out_bij[bb, ii, jj].ravel(), ridx[bb, kk, jj].ravel(), (b * fl * fr, p.shape[0])
            )
            parts.append(apply(s, p))
    return [union(parts)]


# Indexing with concrete or unknown indices ---------------------------------------


_INDEX_OPERANDS = {
    "select_n": slice(0, 1),
    "gather": slice(1, 2),
    "dynamic_slice": slice(1, None),
    "dynamic_update_slice": slice(2, None),
}


def move_or(fallback):
    """Index-map rule when the index operands are concrete, ``fallback`` otherwise."""

    def rule(eqn, ins, n):
        if any(map(is_pat, ins[_INDEX_OPERANDS[eqn.primitive.name]])):
            return fallback(eqn, ins, n)
        return _move(eqn, ins, n)

    return rule


def _dense_over(eqn, ins, positions):
    u = union(all_cols(dep(ins[k])) for k in positions)
    return [fill(u, size_of(v)) if inexact(v) else None for v in eqn.outvars]


def gather_unknown(eqn, ins, n):
    """Unknown indices: every output element may read any operand element."""
    return _dense_over(eqn, ins, [0])


def _start_sets(starts, shape, sizes):
    """Possible (clamped) start of each axis: one if concrete, all otherwise."""
    out = []
    for s, d, k in zip(starts, shape, sizes, strict=True):
        out.append(clamped_starts([s], [d], [k]) if not is_pat(s) else range(d - k + 1))
    return out


def _band(rows, cols, starts):
    """0/1 matrix (rows x cols) with entry (r, c) when c - r (or r - c) is a start."""
    r, s = np.meshgrid(np.arange(min(rows, cols)), np.asarray(starts), indexing="ij")
    if rows <= cols:  # slice: out r reads in r + s
        return _sel(r.ravel(), (r + s).ravel(), (rows, cols))
    return _sel((r + s).ravel(), r.ravel(), (rows, cols))  # update: in c lands at c + s


def dynamic_slice_unknown(eqn, ins, n):
    shape, sizes = eqn.invars[0].aval.shape, eqn.params["slice_sizes"]
    sets = _start_sets(ins[1:], shape, sizes)
    s = _kron(*[_band(k, d, st) for k, d, st in zip(sizes, shape, sets, strict=True)])
    return [apply(s, dep(ins[0]))]


def dynamic_update_slice_unknown(eqn, ins, n):
    shape, ushape = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    sets = _start_sets(ins[2:], shape, ushape)
    s = _kron(*[_band(d, k, st) for k, d, st in zip(ushape, shape, sets, strict=True)])
    return [union([dep(ins[0]), apply(s, dep(ins[1]))])]  # operand may survive anywhere


def scatter(eqn, ins, n):
    """Scatter family: out[p] <- operand[p] (unless surely overwritten) and the updates
    landing at p; the landing place of each update comes from the transposed gather."""
    operand, indices, updates = ins[0], ins[1], ins[2]
    out_size = size_of(eqn.outvars[0])
    if is_pat(indices):
        return [union([dep(operand), fill(all_cols(dep(updates)), out_size)])]
    d, p = eqn.params["dimension_numbers"], eqn.params
    gd = jax.lax.GatherDimensionNumbers(
        offset_dims=d.update_window_dims,
        collapsed_slice_dims=d.inserted_window_dims,
        start_index_map=d.scatter_dims_to_operand_dims,
        operand_batching_dims=d.operand_batching_dims,
        start_indices_batching_dims=d.scatter_indices_batching_dims,
    )
    op_shape, upd_shape = eqn.invars[0].aval.shape, eqn.invars[2].aval.shape
    window = iter(d.update_window_dims)
    sizes = [
        1
        if i in d.inserted_window_dims or i in d.operand_batching_dims
        else upd_shape[next(window)]
        for i in range(len(op_shape))
    ]
    mode = p["mode"].name
    land = gather_map(op_shape, indices, gd, sizes, clip=mode != "FILL_OR_DROP").ravel()
    sure = land if mode != "PROMISE_IN_BOUNDS" else gather_map(op_shape, indices, gd, sizes, False)
    ok = land >= 0
    upd = None
    if dep(updates) is not None:
        s = _sel(land[ok], np.nonzero(ok)[0], (out_size, land.size))
        upd = apply(s, dep(updates))
    keep = dep(operand)
    if keep is not None and eqn.primitive.name == "scatter" and p["update_jaxpr"] is None:
        # plain scatter (not scatter_apply): an overwritten operand element is gone
        covered = np.zeros(out_size, bool)
        sure = np.asarray(sure).ravel()
        covered[sure[sure >= 0]] = True
        keep = take_rows(keep, np.where(covered, -1, np.arange(out_size)))
    return [union([keep, upd])]


# Windows: convolutions and reduce_window -----------------------------------------


def _window_1d(size, win, stride, pad, base_dil, win_dil):
    """0/1 matrix (out x in) of one axis of a dilated, padded, strided window."""
    lo, hi = pad
    dilated = (size - 1) * base_dil + 1 if size else 0
    out = max(0, (dilated + lo + hi - ((win - 1) * win_dil + 1)) // stride + 1)
    o, w = np.meshgrid(np.arange(out), np.arange(win), indexing="ij")
    pos = o * stride + w * win_dil - lo
    ok = (pos >= 0) & (pos < dilated) & (pos % base_dil == 0)
    return _sel(o[ok], pos[ok] // base_dil, (out, size))


def _window_matrix(shape, p):
    nd = len(shape)
    base = p.get("base_dilation") or (1,) * nd
    wdil = p.get("window_dilation") or (1,) * nd
    dims = zip(
        shape, p["window_dimensions"], p["window_strides"], p["padding"], base, wdil, strict=True
    )
    return _kron(*[_window_1d(*args) for args in dims])


def reduce_window(eqn, ins, n):
    """reduce_window_*: each output depends on its window (and init values)."""
    k = len(eqn.outvars)
    s = _window_matrix(eqn.invars[0].aval.shape, eqn.params)
    u = union(apply(s, dep(v)) for v in ins[:k])
    if eqn.primitive.name == "reduce_window":
        u = union([u, fill(union(dep(v) for v in ins[k:]), size_of(eqn.outvars[0]))])
    return [u] * k


def select_and_gather_add(eqn, ins, n):
    s = _window_matrix(eqn.invars[0].aval.shape, eqn.params)
    return [apply(s, dep(ins[0]))]


def select_and_scatter_add(eqn, ins, n):
    s = _window_matrix(eqn.invars[1].aval.shape, eqn.params)  # (source x operand)
    return [apply(sp.csr_array(s.T), dep(ins[0]))]


def conv(eqn, ins, n):
    """conv_general_dilated: receptive field in space, all input features, and for the
    kernel all of its weights for the output feature (a superset for grouped convs)."""
    p = eqn.params
    lspec, rspec, ospec = p["dimension_numbers"]
    ls, rs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    os_ = eqn.outvars[0].aval.shape
    parts = []
    if dep(ins[0]) is not None:
        spatial = [
            _window_1d(ls[a], rs[b], st, pad, ld, rd)
            for a, b, st, pad, ld, rd in zip(
                lspec[2:], rspec[2:], p["window_strides"], p["padding"],
                p["lhs_dilation"], p["rhs_dilation"], strict=True)
        ]  # fmt: skip
        nb_out, nb_in = os_[ospec[0]], ls[lspec[0]]
        batch = _eye(nb_in) if p["batch_group_count"] == 1 else _ones(nb_out, nb_in)
        g = p["feature_group_count"]  # output feature group i reads input group i
        feat = _kron(_eye(g), _ones(os_[ospec[1]] // g, ls[lspec[1]] // g))
        s = _kron(batch, feat, *spatial).tocoo()
        orows = np.arange(math.prod(os_)).reshape(os_).transpose(ospec).ravel()
        lcols = np.arange(math.prod(ls)).reshape(ls).transpose(lspec).ravel()
        s = _sel(orows[s.row], lcols[s.col], (orows.size, lcols.size))
        parts.append(apply(s, ins[0]))
    if dep(ins[1]) is not None:
        nf = rs[rspec[0]]
        grp = np.arange(math.prod(rs)).reshape(rs).transpose(rspec).reshape(nf, -1)
        u = apply(_sel(np.repeat(np.arange(nf), grp.shape[1]), grp.ravel(), (nf, grp.size)), ins[1])
        parts.append(take_rows(u, np.indices(os_)[ospec[1]]))
    return [union(parts)]


# Conservative ------------------------------------------------------------------


def dense(eqn, ins, n):
    """Every (float) output element depends on every input element."""
    return _dense_over(eqn, ins, range(len(ins)))


def batched_dense(core):
    """Dense within each batch element: leading axes are independent (linalg, fft)."""

    def rule(eqn, ins, n):
        shape0 = eqn.invars[0].aval.shape
        nb = len(shape0) - (core(eqn) if callable(core) else core)
        batch = shape0[: max(nb, 0)]
        nbatch = math.prod(batch)
        if nbatch == 0:
            return [None] * len(eqn.outvars)
        atoms = [*eqn.invars, *eqn.outvars]
        if nb <= 0 or any(tuple(a.aval.shape[:nb]) != batch for a in atoms if inexact(a)):
            return dense(eqn, ins, n)
        rows = []
        for v, a in zip(ins, eqn.invars, strict=True):
            if dep(v) is not None:
                inner = size_of(a) // nbatch
                s = _sel(
                    np.repeat(np.arange(nbatch), inner), np.arange(size_of(a)), (nbatch, size_of(a))
                )
                rows.append(apply(s, v))
        u = union(rows)
        if u is None:
            return [None] * len(eqn.outvars)
        return [
            take_rows(u, np.repeat(np.arange(nbatch), size_of(v) // nbatch)) for v in eqn.outvars
        ]

    return rule


# Table --------------------------------------------------------------------------

_ELEMENTWISE = (
    "add add_any sub mul div rem pow max min atan2 nextafter complex clamp neg exp exp2 log "
    "log1p expm1 sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh logistic sqrt "
    "rsqrt cbrt abs square integer_pow real imag conj erf erfc erf_inv lgamma digamma "
    "polygamma zeta igamma igammac igamma_grad_a random_gamma_grad bessel_i0e bessel_i1e "
    "regularized_incomplete_beta convert_element_type reduce_precision"
)
_ZERO = "floor ceil round sign stop_gradient is_finite"
_PASS = "optimization_barrier device_put pvary reshard mesh_cast sharding_constraint"
_LINALG = (
    "cholesky eigh eig lu qr svd schur hessenberg householder_product geqrf geqp3 "
    "triangular_solve cholesky_update tridiagonal"
)

RULES = {
    **dict.fromkeys(_ELEMENTWISE.split(), elementwise),
    **dict.fromkeys(_ZERO.split(), zero_derivative),
    **dict.fromkeys(_PASS.split(), passthrough),
    **dict.fromkeys(MOVES, _move),
    "select_n": move_or(elementwise),
    "gather": move_or(gather_unknown),
    "dynamic_slice": move_or(dynamic_slice_unknown),
    "dynamic_update_slice": move_or(dynamic_update_slice_unknown),
    **dict.fromkeys(
        "scatter scatter-add scatter_add scatter-sub scatter_sub scatter-mul scatter_mul "
        "scatter-min scatter_min scatter-max scatter_max".split(),
        scatter,
    ),
    **dict.fromkeys("reduce_sum reduce_max reduce_min reduce_prod reduce".split(), reduce),
    **dict.fromkeys("cumsum cumprod cummax cummin cumlogsumexp".split(), cumulative),
    **dict.fromkeys(
        "reduce_window_sum reduce_window_max reduce_window_min reduce_window".split(), reduce_window
    ),
    "select_and_gather_add": select_and_gather_add,
    "select_and_scatter_add": select_and_scatter_add,
    "sort": sort,
    "top_k": top_k,
    "approx_top_k": top_k,
    "dot_general": dot_general,
    "bitcast_convert_type": bitcast,
    "conv_general_dilated": conv,
    **dict.fromkeys(_LINALG.split(), batched_dense(2)),
    "tridiagonal_solve": batched_dense(1),
    "fft": batched_dense(lambda e: len(e.params["fft_lengths"])),
}
