"""A sparse plan: the pattern, its coloring, the seeds and the gather, made once per
prepared problem; a call runs the compressed passes and one gather."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._arrays import numpy_dtype
from .._cache import weak_callable
from .._errors import DiffifaceValueError
from ..core import convert, direction
from ..core.backend import SLOW, size
from ..core.problem import Problem
from . import coloring as col
from . import detect
from .formats import Format, framework_module, native_index, take

KEY = "sparse plan"
_NUMBERS = itertools.count()  # its key in the problem's memo (a prepared problem keeps it)


class SparsePlan:
    """What a sparse Jacobian or Hessian of one f at x's shape needs, framework-ready.

    ``kind``: "column" (jvps along the colors' seeds), "row" (vjps), "bidirectional"
    (jvps and vjps of a bicoloring), "star" (hvps of a symmetric Hessian, read
    directly) or "acyclic" (hvps, H recovered by substitution)."""

    def __init__(self, sparse, d, prob, x, ctx, combo, y=None, fmt_kind="native"):
        self.sparse, self.d, self.combo = sparse, d, combo
        self.number = next(_NUMBERS)  # names this plan's compiled passes (never reused)
        self.kept = prob.prepared  # kept for later calls: worth compiling its passes
        self.code_runs: dict = {}  # (op, form, cells' key) -> its code runner (SparseImpl's)
        self.contexts = len(ctx)  # (runners take calls without contexts)
        n = size(x)
        m = n if prob.scalar else size(y)
        self.y_shape = None if y is None else tuple(y.shape)
        self.x_shape = tuple(x.shape)
        self.pattern = p = detect.pattern(sparse, d, prob, x, ctx, m, combo)
        self._ways: dict = {}
        self._colors: dict = {}  # kind -> colors (both directions, when mode picks none)
        self.x_like, self.y_like = x, y
        if prob.scalar:
            self.kind = "acyclic" if sparse.decompression == "substitution" else "star"
        elif sparse.bidirectional and direction.only(prob) is None:
            self.kind = "bidirectional"
        elif sparse.mode == "forward" or direction.only(prob) == direction.FORWARD:
            self.kind = "column"
        elif sparse.mode == "reverse" or direction.only(prob) == direction.REVERSE:
            self.kind = "row"
        else:  # the direction with fewer colors; on a tie forward, unless it is dear
            cc, rc = _count(self.colored("column")), _count(self.colored("row"))
            self.kind = "row" if rc < cc or (rc == cc and not d.traits.cheap_forward) else "column"
        self.way(self.kind)
        shape = (*self.x_shape, *self.x_shape) if prob.scalar else (*self.y_shape, *self.x_shape)
        if sparse.dense:
            fmt = "dense"
        elif fmt_kind == "native" and framework_module(d.traits.arrays) is not None:
            fmt = "native"
        else:
            fmt = "numpy"
        self.format = Format(fmt, p, x, shape, d)

    def way(self, kind: str) -> tuple:
        """(seeds, the seeds stacked, gather, colors) for one compression, made on first
        use."""
        got = self._ways.get(kind)
        if got is not None:
            return got
        p, d, colors = self.pattern, self.d, self.colored(kind)
        if kind == "bidirectional":
            return self._bidirectional(colors)
        if kind == "acyclic":
            gather, like = _Substitution(d, col.Substitution(p, colors), self.x_like), self.x_like
        elif kind == "column":
            gather, like = (
                _seed_major(col.column_gather(p, colors), colors, p.shape[0]),
                self.x_like,
            )
        elif kind == "row":
            gather, like = col.row_gather(p, colors), self.y_like
        else:
            gather, like = _seed_major(col.star_gather(p, colors), colors, p.shape[0]), self.x_like
        k, shape = _count(colors), tuple(like.shape)
        stacked = d.cast(d.from_numpy(col.seeds(colors, k).reshape(k, *shape)), like)
        seeds = [(stacked[i],) for i in range(k)]
        if kind != "acyclic":
            gather = native_index(d, gather, like)
        got = self._ways[kind] = (seeds, stacked, gather, colors)
        return got

    def _bidirectional(self, colors: tuple) -> tuple:
        """``way("bidirectional")``: ((column seeds, row seeds), None, gather, colors)."""
        d, p = self.d, self.pattern
        gather = col.bicolor_gather(p, *colors)
        seeds = []
        for c, like in zip(colors, (self.x_like, self.y_like), strict=True):
            k, shape = _count(c), tuple(like.shape)
            stacked = d.cast(d.from_numpy(col.seeds(c, k).reshape(k, *shape)), like)
            seeds.append([stacked[i] for i in range(k)])
        got = self._ways["bidirectional"] = (
            seeds,
            None,
            native_index(d, gather, self.x_like),
            colors,
        )
        return got

    def colored(self, kind: str) -> Any:
        """The coloring of one kind, computed once."""
        got = self._colors.get(kind)
        if got is None:
            color = {
                "column": col.column_coloring,
                "row": col.row_coloring,
                "bidirectional": col.bicoloring,
                "acyclic": col.acyclic_coloring,
            }
            got = color.get(kind, col.star_coloring)(self.pattern, self.sparse.coloring)
            self._colors[kind] = got
        return got

    @property
    def colors(self) -> int:
        """The number of compressed products (forward and reverse: their sum)."""
        c = self.way(self.kind)[3]
        return sum(map(_count, c)) if isinstance(c, tuple) else _count(c)

    def coloring(self) -> np.ndarray:
        """The colors of the plan's kind (of the columns, or of the rows for "row"), a
        copy."""
        return self.way(self.kind)[3].copy()

    # ---- the compressed passes ----------------------------------------------
    def jacobian(self, prob, xs, ctx, chunk=None) -> tuple:
        """(f(x), the nonzeros in the pattern's order): where f lacks the direction of
        the plan's kind (a custom_vjp, a lax.while_loop), the other kind from now on.
        ``chunk``: at most that many products at a time."""

        def kind(k):
            def run():
                self.kind = k
                return self.run(prob, xs, ctx, k, None, chunk)

            return run

        return direction.run(
            self.d,
            prob,
            lambda: self.run(prob, xs, ctx, self.kind, None, chunk),
            forward=kind("column"),
            reverse=kind("row"),
            fixed=(self.sparse.mode,),
        )

    def hessian(self, prob, xs, ctx, combo, chunk=None) -> tuple:
        """(the gradient, or None for the Hessian alone; the Hessian's nonzeros in the
        pattern's order)."""
        return self.run(prob, xs, ctx, self.kind, combo, chunk)

    def run(self, prob, xs, ctx, kind, combo=None, chunk=None):
        """The compressed products and the gather: the backend's own ``compressed``
        passes (JAX: one compiled call; torch: the rows' batched backward) where it
        gives them, else its batched jvps, vjps or hvps; with ``chunk`` (a call's
        ``chunk_size``) those, at most ``chunk`` products at a time."""
        d = self.d
        seeds, stacked, gather, _ = self.way(kind)
        if kind == "bidirectional":
            return self._both(prob, xs, ctx, *seeds, gather)
        if not seeds:
            if prob.scalar:
                return d.gradient(prob, xs, ctx), convert.zeros(d, (0,), xs[0])
            y = prob.flat()(xs, *ctx)
            return y, convert.zeros(d, (0,), y)
        hess = kind in ("star", "acyclic")  # (hvps)
        gradient = hess and prob.op != "hessian"  # (the Hessian alone: no g)
        values = getattr(d, "sparse_hessian_nonzeros", None) if hess else None
        if values is not None:  # (finite differences: from f's values, per nonzero)
            out = values(prob, xs, ctx, self.pattern, gradient)
            if out is not None:
                return out
        own = getattr(d, "compressed", None)
        if chunk is not None and chunk < len(seeds):  # (the compiled passes take all)
            own = None
        if own is not None and self.kept:  # (compiled once per plan: kept plans only)
            value = gradient or not hess
            run = own(prob, ctx, _products(kind), stacked, gather, combo, self.number, value)
            out = None if run is None else run(xs)
            if out is not None:
                return out
        y, b, step = None, [], len(seeds) if chunk is None else chunk
        for start in range(0, len(seeds), step):
            part = seeds[start : start + step]
            if kind == "column":
                out, ts = d.value_and_jvps(prob, xs, part, ctx)
                b += ts
            elif kind == "row":
                out, gss = d.value_and_vjps(prob, xs, [s for (s,) in part], ctx, _as_is)
                b += [g[0] for g in gss]
            else:
                out, hvs = d.gradient_and_hvps(prob, xs, part, ctx, combo)  # the gradient
                b += [h[0] for h in hvs]
            y = out if y is None else y
        if kind == "acyclic":
            return y, gather(d.concat([d.reshape(a, (-1,)) for a in b], 0))
        return y, take(d, d.stack([d.reshape(a, (-1,)) for a in b], 0), gather)  # (colors, .)

    def direct(self, prob, combo=None, value=True, weak=False):
        """``run(x) -> (f(x) or the gradient, nonzeros)`` for a prepared call on one
        native array without contexts: the backend's compiled passes called as they
        are (without the value where the operator returns none), else ``run``.
        ``weak`` (an unprepared call's kept plan): the compiled passes, or ``run`` on
        a problem, each holding f weakly (None where f cannot be)."""
        kind, d = self.kind, self.d
        own = getattr(d, "compressed", None) if kind != "bidirectional" else None
        if own is not None and self.way(kind)[0]:
            _, stacked, gather, _ = self.way(kind)
            run = own(prob, (), _products(kind), stacked, gather, combo, self.number, value, weak)
            if run is not None and weak:  # (holds no problem: f only weakly)
                return lambda x: _or_slow(run((x,)))
            if run is not None:

                def direct(x):
                    out = run((x,))  # (None: the passes hand over, as under an outer pass)
                    return out if out is not None else self.run(prob, (x,), (), kind, combo)

                return direct
        if weak:  # the general passes on a problem that holds f weakly
            f = _weakly(prob.f)
            if f is None:
                return None
            prob = Problem(
                prob.op, prob.backend, prob.impl, f, prob.treedef, True, prob.scalar, prob.aux
            )
        return lambda x: self.run(prob, (x,), (), kind, combo)

    def _both(self, prob, xs, ctx, forward: list, reverse: list, gather) -> tuple:
        """A bicoloring's products: jvps along the column seeds, vjps along the row
        seeds, flattened one after the other, and the gather."""
        d, y, parts = self.d, None, []
        if forward:
            y, ts = d.value_and_jvps(prob, xs, [(s,) for s in forward], ctx)
            parts = [d.reshape(t, (-1,)) for t in ts]
        if reverse:  # f's value from the first pass that runs: f runs once
            y_r, gss = d.value_and_vjps(prob, xs, reverse, ctx, _as_is)
            y = y_r if y is None else y
            parts += [d.reshape(g[0], (-1,)) for g in gss]
        if y is None:
            y = prob.flat()(xs, *ctx)
        if not parts:
            return y, convert.zeros(d, (0,), y)
        return y, take(d, d.concat(parts, 0), gather)

    # ---- strict: no nonzero outside the pattern ------------------------------
    def check(self, prob, xs, ctx, data, combo) -> None:
        """One product along a random direction against the sparse matrix's: a nonzero
        outside the pattern shows as a difference beyond both results' errors
        (``_tolerance``)."""
        p = self.pattern
        rng = np.random.default_rng(1)
        vals = np.asarray(self.d.to_numpy(data), dtype=np.float64)
        mat = sp.csr_array((vals, p.indices, p.indptr), shape=p.shape)
        if self.kind == "row":
            mat = mat.T.tocsr()  # (a product wᵀJ: the rows of Jᵀ)
        v = rng.standard_normal(mat.shape[1])
        got = self._product(self.d, prob, xs, ctx, v, combo)
        want = mat @ v
        tol = _tolerance(self, prob, xs, ctx, v, combo, mat, got, want)
        bad = np.flatnonzero(~(np.abs(got - want) <= tol))
        if bad.size:
            what = "Hessian" if prob.scalar else "Jacobian"
            i = int(bad[np.argmax(np.abs(got - want)[bad] / tol[bad])])
            raise DiffifaceValueError(
                f"{prob.op}(f, {prob.backend!r}, x): the {what} has a nonzero outside the "
                f"sparsity pattern (a random product differs at element {i}: {got[i]:.6g} "
                f"against {want[i]:.6g} from the pattern, beyond the tolerance {tol[i]:.3g}). "
                "The pattern is too small: use sparsity_detector='global', or pass a "
                "pattern that holds every nonzero."
            )

    def _product(self, d, prob, xs, ctx, v, combo) -> np.ndarray:
        """Jv (``v`` like x), vᵀJ (for a row plan, ``v`` like f(x)) or Hv by ``d``, as
        float64."""
        x = xs[0]
        if self.kind == "row":
            wy = d.cast(d.from_numpy(v.reshape(self.y_shape)), self.y_like)
            _, (got,) = d.value_and_vjp(prob, xs, wy, ctx, _as_is)
        else:
            vx = (d.cast(d.from_numpy(v.reshape(self.x_shape)), x),)
            if prob.scalar:
                got = d.gradient_and_hvp(prob, xs, vx, ctx, combo)[1][0]
            else:
                got = d.value_and_jvp(prob, xs, vx, ctx)[1]
        return np.asarray(d.to_numpy(got), dtype=np.float64).reshape(-1)


def _tolerance(plan, prob, xs, ctx, v, combo, mat, got, want) -> np.ndarray:
    """How far the random product and the pattern's may differ, per element: the rounding
    of both (64 eps of the data's dtype times the sizes summed); and for a backend with
    a truncation error (finite differences: ``coarser``, ``rounding``), 10 times the
    product's error estimate (its change at twice the step, and the rounding of f's
    values over the steps), once for the product and once per nonzero of the pattern's
    row (each comes from a difference of its own)."""
    d = plan.d
    dtype = numpy_dtype(xs[0].dtype) or np.dtype(np.float64)
    eps = float(np.finfo(np.result_type(dtype, np.float32)).eps)
    scale = np.abs(mat) @ np.abs(v)
    tol = 64 * eps * (scale + np.abs(got) + np.abs(want)) + np.finfo(np.float64).tiny
    coarser = getattr(d, "coarser", None)
    if coarser is not None:
        coarse = coarser(prob, dtype, prob.scalar)
        noise = np.abs(plan._product(coarse, prob, xs, ctx, v, combo) - got)
        noise = noise + d.rounding(prob, xs, ctx, prob.scalar, scale)
        tol = tol + 10 * (1 + np.diff(mat.indptr)) * noise
    return tol


class _Substitution:
    """:class:`~diffiface.sparse.coloring.Substitution` in the framework's arrays (each
    array type's own ``cumsum``: differentiable and traceable where the framework is)."""

    def __init__(self, d: Any, sub: Any, like: Any):
        self.d = d
        self.idx = {k: native_index(d, getattr(sub, k), like) for k in _SUB_INDEX}
        self.sign = d.cast(d.from_numpy(sub.sign), like)
        self.edge_sign = d.cast(d.from_numpy(sub.edge_sign), like)
        self.zero = d.cast(d.from_numpy(np.zeros(1)), like)

    def __call__(self, bflat: Any) -> Any:
        d, idx = self.d, self.idx
        diag = take(d, bflat, idx["diagonal"])
        s = self.sign * take(d, bflat, idx["take"])
        if s.shape[0] == 0:  # no off-diagonal entries
            return take(d, diag, idx["assemble"])
        prefix = d.concat([self.zero, s.cumsum(0)], 0)
        e = self.edge_sign * (take(d, prefix, idx["end"]) - take(d, prefix, idx["start"]))
        return take(d, d.concat([e, diag], 0), idx["assemble"])


_SUB_INDEX = ("take", "start", "end", "diagonal", "assemble")


def _products(kind: str) -> str:
    """The products a backend's ``compressed`` passes run for a kind: an acyclic
    coloring's are a star coloring's (hvps), with a callable gather, the substitution."""
    return "star" if kind == "acyclic" else kind


def _weakly(f: Any) -> Any:
    """``f`` held weakly by a function of this runner's own, or None where f cannot be:
    the facts a backend keeps per function object (torch's first-call watch of f) stick
    to it, where a weak proxy cannot be keyed and every call would look again."""
    proxy = weak_callable(f)
    if proxy is None:
        return None
    return lambda *args: proxy(*args)


def _or_slow(out: Any) -> Any:
    return SLOW if out is None else out


def _seed_major(gather: np.ndarray, colors: np.ndarray, rows: int) -> np.ndarray:
    """Indices into B (rows, colors) as indices into its transpose (colors, rows): the
    products come stacked one per seed, and gathering them so skips a transposition."""
    k = _count(colors)
    return (gather % k) * rows + gather // k if k else gather


def _count(colors: np.ndarray) -> int:
    return int(colors.max()) + 1 if colors.size else 0


def _as_is(y: Any, w: Any) -> Any:
    return w
