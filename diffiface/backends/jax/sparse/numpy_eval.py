"""NumPy versions of JAX primitives, for the global sparsity detector (``detect``).

Data-movement primitives run on index arrays (out[k] <- operand[map[k]], -1 for none)
and on concrete values alike; ``numpy_eval`` evaluates the common primitives on
concrete values without compiling anything (the rest goes through JAX).
"""

from __future__ import annotations

import math

import numpy as np


def clamped_starts(starts, shape, sizes):
    """Start indices as XLA clamps them: the slice stays inside the array."""
    return [
        int(np.clip(int(np.asarray(s)), 0, d - k))
        for s, d, k in zip(starts, shape, sizes, strict=True)
    ]


def _np_pad(a, pv, config):
    for axis, (lo, hi, interior) in enumerate(config):
        k = a.shape[axis]
        m = k + max(k - 1, 0) * interior
        shape = list(a.shape)
        shape[axis] = m + max(lo, 0) + max(hi, 0)
        out = np.full(shape, np.asarray(pv).reshape(()), dtype=a.dtype)
        put = [slice(None)] * a.ndim
        put[axis] = slice(max(lo, 0), max(lo, 0) + m, interior + 1)
        out[tuple(put)] = a
        crop = [slice(None)] * a.ndim
        crop[axis] = slice(max(-lo, 0), shape[axis] - max(-hi, 0))
        a = out[tuple(crop)]
    return a


def gather_map(op_shape, indices, dnums, slice_sizes, clip: bool):
    """Flat operand position read by each element of a gather (-1: filled, out of bounds)."""
    nd = len(op_shape)
    idx = np.asarray(indices).astype(np.int64)
    bshape = idx.shape[:-1]
    starts = np.zeros((math.prod(bshape), nd), np.int64)
    starts[:, list(dnums.start_index_map)] = idx.reshape(-1, idx.shape[-1])
    if dnums.operand_batching_dims:
        bpos = np.indices(bshape).reshape(len(bshape), -1)
        for od, sd in zip(
            dnums.operand_batching_dims, dnums.start_indices_batching_dims, strict=True
        ):
            starts[:, od] = bpos[sd]
    hi = np.asarray(op_shape) - np.asarray(slice_sizes)
    ok = np.all((starts >= 0) & (starts <= hi), axis=1)
    starts = np.clip(starts, 0, hi)
    window = np.indices(slice_sizes).reshape(nd, -1).T
    strides = np.array([math.prod(op_shape[d + 1 :]) for d in range(nd)])
    flat = (starts @ strides)[:, None] + (window @ strides)[None, :]
    if not clip:
        flat = np.where(ok[:, None], flat, -1)
    removed = set(dnums.collapsed_slice_dims) | set(dnums.operand_batching_dims)
    offset_shape = [slice_sizes[d] for d in range(nd) if d not in removed]
    res = flat.reshape(tuple(bshape) + tuple(offset_shape))
    out_nd, nb = res.ndim, len(bshape)
    batch_pos = [i for i in range(out_nd) if i not in dnums.offset_dims]
    perm = [
        nb + dnums.offset_dims.index(i) if i in dnums.offset_dims else batch_pos.index(i)
        for i in range(out_nd)
    ]
    return res.transpose(perm)


def _np_gather(eqn, operand, indices):
    p = eqn.params
    clip = p["mode"].name != "FILL_OR_DROP"
    m = gather_map(operand.shape, indices, p["dimension_numbers"], p["slice_sizes"], clip)
    return np.where(m >= 0, operand.ravel()[m], -1)  # -1: filled (index arrays)


def _np_dus(op, upd, *starts):
    out = op.copy()
    s = clamped_starts(starts, op.shape, upd.shape)
    out[tuple(slice(a, a + k) for a, k in zip(s, upd.shape, strict=True))] = upd
    return out


def _np_split(eqn, a):
    cuts = np.cumsum(eqn.params["sizes"])[:-1]
    return np.split(a, cuts, axis=eqn.params["axis"])


def _np_reshape(eqn, a, *_):
    dims = eqn.params.get("dimensions")
    return (a if dims is None else a.transpose(dims)).reshape(eqn.params["new_sizes"])


def _np_broadcast(eqn, a, *_):
    shape, bdims = eqn.params["shape"], eqn.params["broadcast_dimensions"]
    expanded = [1] * len(shape)
    for i, d in enumerate(bdims):
        expanded[d] = a.shape[i]
    return np.broadcast_to(a.reshape(expanded), shape)


def _np_slice(eqn, a):
    p = eqn.params
    strides = p["strides"] or (1,) * a.ndim
    return a[tuple(map(slice, p["start_indices"], p["limit_indices"], strides))]


def _np_dynamic_slice(eqn, a, *starts):
    sizes = eqn.params["slice_sizes"]
    s = clamped_starts(starts, a.shape, sizes)
    return a[tuple(slice(b, b + k) for b, k in zip(s, sizes, strict=True))]


# name -> (positions of the data operands or None for all, numpy function -> list)
MOVES = {
    "reshape": ((0,), lambda e, a, *r: [_np_reshape(e, a, *r)]),
    "broadcast_in_dim": ((0,), lambda e, a, *r: [_np_broadcast(e, a, *r)]),
    "transpose": (None, lambda e, a: [a.transpose(e.params["permutation"])]),
    "squeeze": (None, lambda e, a: [a.reshape(e.outvars[0].aval.shape)]),
    "slice": (None, lambda e, a: [_np_slice(e, a)]),
    "rev": (None, lambda e, a: [np.flip(a, e.params["dimensions"])]),
    "concatenate": (None, lambda e, *a: [np.concatenate(a, axis=e.params["dimension"])]),
    "pad": (None, lambda e, a, v: [_np_pad(a, v, e.params["padding_config"])]),
    "select_n": (slice(1, None), lambda e, w, *c: [np.choose(np.asarray(w, int), c)]),
    "dynamic_slice": ((0,), lambda e, a, *s: [_np_dynamic_slice(e, a, *s)]),
    "dynamic_update_slice": ((0, 1), lambda e, a, u, *s: [_np_dus(a, u, *s)]),
    "gather": ((0,), lambda e, a, i: [_np_gather(e, a, i)]),
    "split": (None, lambda e, a: _np_split(e, a)),
    "stack": (None, lambda e, *a: [np.stack(a, axis=e.params["axis"])]),
    "unstack": (None, lambda e, a: list(np.moveaxis(a, e.params["axis"], 0))),
    "tile": (None, lambda e, a: [np.tile(a, e.params["reps"])]),
    "copy": (None, lambda e, a: [a]),
    "copy_p": (None, lambda e, a: [a]),
}

# concrete evaluation: elementwise ufuncs and reductions
_UFUNCS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "neg": np.negative,
    "max": np.maximum, "min": np.minimum, "eq": np.equal, "ne": np.not_equal,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "not": np.invert,
    "abs": np.abs, "sign": np.sign, "floor": np.floor, "ceil": np.ceil, "sqrt": np.sqrt,
    "square": np.square, "convert_element_type": np.asarray, "stop_gradient": np.asarray,
}  # fmt: skip
_REDUCERS = {
    "reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min,
    "reduce_prod": np.prod, "reduce_and": np.all, "reduce_or": np.any,
    "argmax": np.argmax, "argmin": np.argmin,
}  # fmt: skip


def numpy_eval(eqn, ins):
    """Outputs of an equation with concrete inputs, or None to let JAX evaluate it."""
    with np.errstate(all="ignore"):
        return _numpy_eval(eqn, ins)


def _numpy_eval(eqn, ins):
    name, p = eqn.primitive.name, eqn.params
    if name == "gather" and p["mode"].name == "FILL_OR_DROP":
        return None  # the fill value is JAX's
    if name in MOVES:
        return MOVES[name][1](eqn, *ins)
    if name in _UFUNCS:
        return [_UFUNCS[name](*ins)]
    if name == "div" and all(np.asarray(v).dtype.kind == "f" for v in ins):
        return [np.true_divide(*ins)]
    if name == "integer_pow":
        return [np.power(ins[0], p["y"])]
    if name == "clamp":
        return [np.clip(ins[1], ins[0], ins[2])]
    if name == "iota":
        shape, dim = p["shape"], p["dimension"]
        ax = [1] * len(shape)
        ax[dim] = shape[dim]
        return [np.broadcast_to(np.arange(shape[dim]).reshape(ax), shape)]
    if name in _REDUCERS:
        axes = tuple(p["axes"])
        return [_REDUCERS[name](ins[0], axis=axes[0] if name[:3] == "arg" else axes)]
    return None
