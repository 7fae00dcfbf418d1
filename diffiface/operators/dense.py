"""Dense Jacobians and Hessians: a size limit checked before any work, and building
them ``chunk_size`` rows (or columns) at a time.

The limit is ``config.max_dense_bytes`` (1 GiB by default). A Jacobian whose dense
result would exceed it is an error that names its size and the ways out: products
(jvp, vjp, hvp) or ``chunk_size=k``, which bounds the working memory to ``k``
products at a time (the result itself is still dense).

A chunked result equals the dense one. Finite differences build both the same way
(the backend's ``chunked_jacobian`` and ``chunked_hessian``: each column with its own
coordinate's step, the Hessian symmetrized as ``(H + H.T) / 2``), so they are bitwise
equal; finite differences over an AD gradient (``second_order(AutoFiniteDifferences(),
inner)``) likewise. The AD backends compute the same products batched differently
(or by rows where the dense Hessian takes columns), which changes the rounding only:
equal on torch in every measurement, within 3 * eps * max|entry| on JAX and autograd
(the largest difference measured over random points; tests allow 16 * eps).
"""

from __future__ import annotations

from typing import Any

from .. import _checks, _config
from .._arrays import numpy_dtype
from ..core.backend import size
from ..core.convert import zeros


def itemsize(x: Any) -> int:
    dtype = x.dtype  # NumPy, jax and torch (>= 2.1) dtypes have itemsize; MLX's by name
    return dtype.itemsize if hasattr(dtype, "itemsize") else numpy_dtype(dtype).itemsize


def check_limit(op: str, backend: Any, rows: int, cols: int, x: Any, what: str) -> None:
    """Raise when a dense ``rows x cols`` result of x's dtype exceeds the limit."""
    limit = _config.max_dense_bytes()
    if limit is None:
        return
    nbytes = rows * cols * itemsize(x)
    if nbytes <= limit:
        return
    products = "hvp" if what == "Hessian" else "jvp or vjp"
    raise _checks.DiffifaceValueError(
        f"{_checks.call_form(op, backend)}: the dense {what} would take {_gib(nbytes)} "
        f"({rows} x {cols} x {itemsize(x)} bytes), over di.config.max_dense_bytes = "
        f"{_gib(limit)}. Use {products} for products with it, pass chunk_size=k to build it "
        "k products at a time (bounded working memory), or raise di.config.max_dense_bytes."
    )


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def jacobian(impl, prob, xs: tuple, ctx: tuple, k: int):
    """(f(x), J) from vjps (reverse) or jvps (forward), k basis vectors at a time
    (x is not empty: the caller handles that)."""
    own = getattr(type(impl), "chunked_jacobian", None)  # finite differences
    if own is not None:
        return own(impl, prob, xs, ctx, k)
    (x,) = xs
    if impl.prefers_reverse(prob, xs, ctx):
        y = prob.flat()(xs, *ctx)
        m = size(y)
        if not m:
            return y, zeros(impl, (*y.shape, *x.shape), x)
        rows = []
        for start in range(0, m, k):
            ws = [impl.basis(y, i) for i in range(start, min(m, start + k))]
            rows += [gs[0] for gs in impl.value_and_vjps(prob, xs, ws, ctx, _same)[1]]
        jac = impl.stack(rows, 0)
    else:
        n, cols = size(x), []
        for start in range(0, n, k):
            vss = [(impl.basis(x, i),) for i in range(start, min(n, start + k))]
            y, ts = impl.value_and_jvps(prob, xs, vss, ctx)
            cols += list(ts)
        jac = impl.stack(cols, -1)
    return y, impl.reshape(jac, (*y.shape, *x.shape))


def hessian(impl, prob, xs: tuple, ctx: tuple, combo, k: int):
    """(f(x), g, H) from hvps along k basis vectors at a time (x is not empty)."""
    own = getattr(type(impl), "chunked_hessian", None)  # finite differences (over any)
    if own is not None:
        return own(impl, prob, xs, ctx, combo, k)
    (x,) = xs
    n, cols = size(x), []
    for start in range(0, n, k):
        vss = [(impl.basis(x, i),) for i in range(start, min(n, start + k))]
        g, hvs = impl.gradient_and_hvps(prob, xs, vss, ctx, combo)
        cols += [hv[0] for hv in hvs]
    h = impl.reshape(impl.stack(cols, 0), (*x.shape, *x.shape))
    return prob.flat()(xs, *ctx), g, h


def _same(y, w):
    return w
