"""Products and linear algebra on traced arrays.

A product with a constant 2-D matrix reads the matrix's nonzeros (as the JAX detector
reads a constant operand's zeros): ``A @ x`` with a banded ``A`` is banded. Any other
product (both operands traced, batched constants, einsum) multiplies the operands
broadcast over all the subscripts and sums the contracted ones, exact but of that
size. ``np.linalg``'s factorizations and solves make each output depend on every input.
"""

from __future__ import annotations

import math
import string

import numpy as np
import scipy.sparse as sp

from . import reductions as R
from . import sets as S
from .tracer import PROTOCOLS, Traced
from .widen import dense


def matmul(a, b):
    """``a @ b``; a constant may be a ``scipy.sparse`` matrix."""
    if not isinstance(b, Traced) and np.ndim(b) in (1, 2):
        return _times_constant(a, _constant(b), right=True)
    if not isinstance(a, Traced) and np.ndim(a) in (1, 2):
        return _times_constant(b, _constant(a), right=False)
    a1, b1 = np.ndim(a) == 1, np.ndim(b) == 1
    out = einsum("...ij,...jk->...ik", a[None, :] if a1 else a, b[:, None] if b1 else b)
    if a1:
        out = out[..., 0, :]
    return out[..., 0] if b1 else out


def _constant(c):
    return c if sp.issparse(c) else np.asarray(c)


def _times_constant(t: Traced, c: np.ndarray, right: bool) -> Traced:
    """``t @ c`` (``right``) or ``c @ t``, from c's nonzeros."""
    vector = c.ndim == 1
    c = c[None, :] if vector else c  # (1, k): a row
    if right:  # t @ c = (c.T @ t.T).T over t's last two axes
        flip = t.ndim >= 2
        tt = np.swapaxes(t, -1, -2) if flip else t
        out = _left(c.T if not vector else c, tt)
        if vector:
            return out.reshape(out.shape[:-2] + out.shape[-1:]) if flip else out.reshape(())
        return np.swapaxes(out, -1, -2) if flip else out
    out = _left(c, t)
    if vector:
        return out.reshape(out.shape[:-2] + out.shape[-1:]) if t.ndim >= 2 else out.reshape(())
    return out


def _left(c: np.ndarray, t: Traced) -> Traced:
    """``c @ t`` for a constant 2-D c (m, k) and t of shape (k,) or (..., k, j)."""
    m, k = c.shape
    ci, ck = c.nonzero()  # (an ndarray's, or a scipy.sparse matrix's stored nonzeros)
    if t.ndim == 1:
        shape, out_rows, in_rows = (m,), ci, ck
    else:
        *batch, _, j = t.shape
        b = np.arange(math.prod(batch))[:, None, None]
        jj = np.arange(j)[None, None, :]
        out_rows = ((b * m + ci[None, :, None]) * j + jj).ravel()
        in_rows = ((b * k + ck[None, :, None]) * j + jj).ravel()
        shape = (*batch, m, j)
    size = math.prod(shape)
    dtype = np.result_type(t.dtype, c.dtype)
    h = S.gather_union(t.h, out_rows, in_rows, size) if t.trace.second else None
    return t.like(shape, dtype, S.gather_union(t.g, out_rows, in_rows, size), h)


def einsum(subscripts: str, *operands, **kwargs):
    """``np.einsum``: the operands broadcast over all subscripts, multiplied, summed."""
    ins, out = _parse(subscripts.replace(" ", ""), [np.ndim(o) for o in operands])
    letters = sorted(set("".join(ins)), key=lambda c: "".join(ins).index(c))
    aligned = [_align(o, sub, letters) for o, sub in zip(operands, ins, strict=True)]
    product = aligned[0]
    for a in aligned[1:]:
        product = np.multiply(product, a)
    summed = tuple(i for i, c in enumerate(letters) if c not in out)
    kept = [c for c in letters if c in out]
    if summed:
        product = np.sum(product, axis=summed) if isinstance(product, Traced) else product
    return np.transpose(product, [kept.index(c) for c in out]) if out else product


def _parse(subscripts: str, ndims: list) -> tuple:
    """Input subscripts and output, with each ``...`` spelt out in spare letters."""
    spare = [c for c in string.ascii_letters[::-1] if c not in subscripts]
    lhs, _, rhs = subscripts.partition("->")
    ins = lhs.split(",")
    width = max([nd - len(s.replace("...", "")) for s, nd in zip(ins, ndims, strict=True)] + [0])
    dots = "".join(spare[:width][::-1])
    ins = [
        s.replace("...", dots[width - (nd - len(s.replace("...", ""))) :]) if "..." in s else s
        for s, nd in zip(ins, ndims, strict=True)
    ]
    if "->" in subscripts:
        return ins, rhs.replace("...", dots)
    counts = {c: "".join(ins).count(c) for c in "".join(ins)}
    return ins, dots + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in dots))


def _align(o, sub: str, letters: list):
    """``o`` (subscripts ``sub``) as an array over ``letters`` (size 1 where absent)."""
    uniq = "".join(sorted(set(sub), key=sub.index))
    if uniq != sub:  # a repeated subscript: the diagonal
        o = np.einsum(f"{sub}->{uniq}", o) if not isinstance(o, Traced) else _diagonal(o, sub, uniq)
    order = [c for c in letters if c in uniq]
    o = np.transpose(o, [uniq.index(c) for c in order])
    shape = [o.shape[order.index(c)] if c in order else 1 for c in letters]
    return np.reshape(o, shape)


def _diagonal(t: Traced, sub: str, uniq: str) -> Traced:
    idx = np.einsum(f"{sub}->{uniq}", np.arange(t.size).reshape(t.shape))
    return t[np.unravel_index(idx, t.shape)]


def dot(a, b, out=None):
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return np.multiply(a, b)
    if np.ndim(a) <= 2 and np.ndim(b) <= 2:
        return matmul(a, b)
    return tensordot(a, b, ([-1], [-2]))


def tensordot(a, b, axes=2):
    if isinstance(axes, int):
        axes = (list(range(-axes, 0)), list(range(axes)))
    ax_a, ax_b = ([x] if isinstance(x, int) else list(x) for x in axes)
    ax_a = [x % np.ndim(a) for x in ax_a]
    ax_b = [x % np.ndim(b) for x in ax_b]
    free_a = [i for i in range(np.ndim(a)) if i not in ax_a]
    free_b = [i for i in range(np.ndim(b)) if i not in ax_b]
    sa, sb = np.shape(a), np.shape(b)
    k = math.prod(sa[i] for i in ax_a)
    a2 = np.reshape(np.transpose(a, free_a + ax_a), (-1, k))
    b2 = np.reshape(np.transpose(b, ax_b + free_b), (k, -1))
    return np.reshape(matmul(a2, b2), [sa[i] for i in free_a] + [sb[i] for i in free_b])


def convolve(a, v, mode="full", correlate=False):
    """``np.convolve`` / ``np.correlate``: the products of every pair of elements,
    summed along the output they land on (its window found from NumPy itself)."""
    if correlate:
        v = v[::-1]
    n, m = np.size(a), np.size(v)
    products = np.multiply(np.reshape(a, (n, 1)), np.reshape(v, (1, m)))
    full = (np.arange(n)[:, None] + np.arange(m)[None, :]).ravel()
    rng = np.random.default_rng(0)
    ra, rv = rng.standard_normal(n), rng.standard_normal(m)
    whole, got = np.convolve(ra, rv, "full"), np.convolve(ra, rv, mode)
    start = next(
        s for s in range(len(whole) - len(got) + 1) if np.allclose(whole[s : s + len(got)], got)
    )
    keep = (full >= start) & (full < start + len(got))
    return R.segment_sum(products, full[keep] - start, np.flatnonzero(keep), (len(got),))


def ufunc_product(name: str, inputs: tuple):
    a, b = inputs
    if name == "matmul":
        return matmul(a, b)
    if name == "vecdot":
        return np.sum(np.multiply(np.conjugate(a), b), axis=-1)
    if name == "matvec":
        return matmul(a, np.expand_dims(b, -1))[..., 0]
    return matmul(np.expand_dims(a, -2), b)[..., 0, :]


def norm(trace, x, ord=None, axis=None, keepdims=False):
    """Vector and Frobenius norms from their formulas; any other, every input."""
    vector = axis is None or isinstance(axis, int) or len(axis) == 1
    if ord in (None, 2, "fro") and (ord != 2 or vector):
        return np.sqrt(np.sum(np.square(np.absolute(x)), axis=axis, keepdims=keepdims))
    if vector and ord == 1:
        return np.sum(np.absolute(x), axis=axis, keepdims=keepdims)
    if vector and ord in (np.inf, -np.inf):
        return R.reduce(np.absolute(x), axis, keepdims)
    return dense(trace, np.linalg.norm, (x, ord, axis, keepdims), {}, "np.linalg.norm")


def _dense(func):
    def rule(trace, *args, **kwargs):
        return dense(trace, func, args, kwargs, f"np.linalg.{func.__name__}")

    return rule


RULES: dict = {
    np.dot: lambda tr, a, b, out=None: dot(a, b),
    np.vdot: lambda tr, a, b: matmul(np.conjugate(np.reshape(a, -1)), np.reshape(b, -1)),
    np.inner: lambda tr, a, b: (
        tensordot(a, b, ([-1], [-1])) if np.ndim(a) and np.ndim(b) else np.multiply(a, b)
    ),
    np.outer: lambda tr, a, b, out=None: np.multiply(np.reshape(a, (-1, 1)), np.reshape(b, -1)),
    np.tensordot: lambda tr, a, b, axes=2: tensordot(a, b, axes),
    np.einsum: lambda tr, subscripts, *ops, **k: einsum(subscripts, *ops),
    np.trace: lambda tr, a, offset=0, axis1=0, axis2=1, dtype=None, out=None: np.sum(
        np.diagonal(a, offset, axis1, axis2), axis=-1
    ),
    np.linalg.norm: norm,
    np.convolve: lambda tr, a, v, mode="full": convolve(a, v, mode),
    np.correlate: lambda tr, a, v, mode="valid": convolve(a, v, mode, correlate=True),
    np.linalg.multi_dot: lambda tr, arrays, out=None: _chain(arrays),
}
for _name in (
    "inv solve det slogdet pinv lstsq eig eigh eigvals eigvalsh cholesky qr svd "
    "matrix_power cond tensorsolve tensorinv svdvals matrix_norm"
).split():
    _f = getattr(np.linalg, _name, None)
    if _f is not None:
        RULES[_f] = _dense(_f)


def _chain(arrays):
    out = arrays[0]
    for a in arrays[1:]:
        out = matmul(out, a)
    return out


PROTOCOLS["matmul"] = matmul
