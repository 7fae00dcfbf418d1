"""Window rules of the torch detector: convolutions and pooling, forward and backward
(each output reads its receptive field; a gradient reaches the window's inputs)."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch

from .rules import Call, Sym, reduce, select, take_rows, union

aten = torch.ops.aten


def _conv_edges(ishape, weight, stride, padding, dilation, groups, masked=True):
    """Flat (out, in, weight) indices of every multiply-add of a convolution.

    Found by convolving the input's index tensor with one-hot kernels (one per tap);
    taps where a concrete weight is zero are left out when ``masked``.
    """
    wshape = tuple(weight.shape)
    nsp = len(wshape) - 2
    nb, nc = ishape[:2]
    no, ncg, ksize = wshape[0], wshape[1], wshape[2:]
    nk = math.prod(ksize)
    src = torch.arange(1, math.prod(ishape) + 1, dtype=torch.float64).view(ishape)
    onehot = torch.eye(nk, dtype=torch.float64).view(nk, 1, *ksize).repeat(nc, 1, *[1] * nsp)
    taps = aten.convolution(src, onehot, None, stride, padding, dilation, False, [0] * nsp, nc)
    npos = math.prod(taps.shape[2:])
    taps = taps.reshape(nb, nc, nk, npos)
    if isinstance(weight, Sym) or not masked:
        mask = torch.ones(no, ncg, nk, dtype=torch.bool)
    else:
        mask = weight.reshape(no, ncg, nk) != 0
    o, c, k = mask.nonzero(as_tuple=True)
    tap = taps[:, (o // (no // groups)) * ncg + c, k, :]  # (batch, edge, position)
    b, e, q = (tap > 0).nonzero(as_tuple=True)
    out = (b * no + o[e]) * npos + q
    w = (o[e] * ncg + c[e]) * nk + k[e]
    inn = tap[b, e, q].long() - 1
    return out.numpy(), inn.numpy(), w.numpy(), (nb, no, npos)


def _sel(rows, cols, nrows, sym):
    """``select`` for a Sym operand (None for a concrete one)."""
    if not isinstance(sym, Sym) or sym.p is None:
        return None
    return select(rows, cols, (nrows, sym.numel), sym.p)


def _conv_args(b, pool: bool):
    """(input shape (batched), weight, stride, padding, dilation, groups) of a conv/pool."""
    src = b["self"] if pool else b["input"]
    shape = tuple(src.shape)
    if not pool:
        if b["transposed"]:
            raise NotImplementedError("transposed convolution")
        return shape, b["weight"], b["stride"], b["padding"], b["dilation"], b["groups"]
    k = list(b["kernel_size"])
    nsp = len(k)
    shape = shape if len(shape) == nsp + 2 else (1, *shape)
    pad = b["padding"]
    pad = [pad] * nsp if isinstance(pad, int) else list(pad) * (nsp if len(pad) == 1 else 1)
    stride = list(b["stride"]) or k
    dilation = b.get("dilation") or [1]  # (max pools)
    dilation = list(dilation) * (nsp if len(dilation) == 1 else 1)
    weight = torch.ones(shape[1], 1, *k, dtype=torch.float64)
    return shape, weight, stride, pad, dilation, shape[1]


def convolution(call: Call):
    """convolution / avg_pool: each output sums its window (through nonzero weights)."""
    b = call.bound()
    pool = "pool" in call.op.overloadpacket.__name__
    shape, weight, *rest = _conv_args(b, pool)
    out, inn, w, (nb, no, npos) = _conv_edges(shape, weight, *rest)
    rows = nb * no * npos
    if rows != call.out_meta().numel():
        raise NotImplementedError("output size (ceil_mode)")
    src = b["self"] if pool else b["input"]
    parts = [_sel(out, inn, rows, src)] + ([] if pool else [_sel(out, w, rows, weight)])
    bias = None if pool else b["bias"]
    if isinstance(bias, Sym) and bias.p is not None:
        m = torch.arange(no).view(1, no, 1).expand(nb, no, npos)
        parts.append(take_rows(bias.p, m.reshape(-1).numpy()))
    return union(parts)


def convolution_backward(call: Call):
    """Gradients of a convolution / avg_pool / max_pool: the forward incidence read
    backwards (a max pool's gradient reaches its window, the argmax being unknown)."""
    b = call.bound()
    pool = "pool" in call.op.overloadpacket.__name__
    go = b["grad_output"]
    shape, weight, *rest = _conv_args(b, pool)
    out, inn, w, (nb, no, npos) = _conv_edges(shape, weight, *rest)
    if nb * no * npos != math.prod(go.shape):
        raise NotImplementedError("output size (ceil_mode)")
    n_in = math.prod(shape)
    grad_in = union([_sel(inn, out, n_in, go), _sel(inn, w, n_in, weight)])
    if pool:
        return grad_in
    out, inn, w, _ = _conv_edges(shape, weight, *rest, masked=False)
    n_w = math.prod(weight.shape)
    grad_w = union([_sel(w, out, n_w, go), _sel(w, inn, n_w, b["input"])])
    grad_b = None
    if isinstance(go, Sym) and go.p is not None:
        grad_b = reduce(go, {0, *range(2, len(go.shape))})[0]
    return [grad_in, grad_w, grad_b]


def _adaptive_1d(size: int, out: int) -> sp.csr_array:
    """(out x size) 0/1 matrix of adaptive pooling's windows along one axis."""
    i = np.arange(out)
    start, end = (i * size) // out, -((-(i + 1) * size) // out)
    rows = np.repeat(i, end - start)
    cols = np.concatenate([np.arange(a, b) for a, b in zip(start, end, strict=True)])
    return sp.csr_array((np.ones(len(rows), bool), (rows, cols)), shape=(out, size))


def adaptive_backward(call: Call):
    """Backward of adaptive avg/max pooling: each input element takes the gradients of
    the outputs whose window holds it (for max, the argmax being unknown)."""
    b = call.bound()
    go, shape = b["grad_output"], tuple(b["self"].shape)
    if not isinstance(go, Sym) or go.p is None:
        return None
    k = 3 if "3d" in call.op.overloadpacket.__name__ else 2
    s = sp.identity(math.prod(shape[:-k]), dtype=bool, format="csr")
    for size, out in zip(shape[-k:], go.shape[-k:], strict=True):
        s = sp.kron(s, _adaptive_1d(size, out), format="csr")
    t = sp.csr_array(s.T).tocoo()
    return select(t.row, t.col, (math.prod(shape), go.numel), go.p)
