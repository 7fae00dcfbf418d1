"""JAX backend: jax.jvp / jax.vjp / jax.value_and_grad, jit-compiled and cached."""

from __future__ import annotations

import functools
import math
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ... import _checks, _config
from ..._backend_types import AutoJax
from ..._cache import CodeFacts, FunctionCache
from ..._reads import fingerprint
from ..._tree import tree_map
from ...core import direction, outputs
from ...core.backend import BackendImpl, Traits
from ...core.registry import register
from ...core.signature import leaf_signature
from . import closures, directions, runners, running
from .aux import WithAux
from .contexts import join_contexts, split_contexts
from .running import TANGENTS, call, dense

CACHE = FunctionCache()


def under_eager_transform(x) -> bool:
    """x is a tracer of an outer transform that runs eagerly (``jax.grad`` outside jit:
    its tracers hold values)."""
    return isinstance(x, jax.core.Tracer) and x.to_concrete_value() is not None


_COMPILED = CodeFacts(strict=False)  # f's code -> an object of it compiled under eager
_MET = ("run once uncompiled",)  # a CACHE key: the object was met


def _liftable(prob) -> bool:
    """An unprepared call without aux of the user's f (the value carried as aux is the
    operator's own): a closure made per call may run its code's compilation (see
    ``closures``)."""
    return not prob.prepared and (not prob.aux or closures.own(prob.f)[1] is not None)


def _eager_outer(prob, xs: tuple) -> bool:
    """A call to run uncompiled: unprepared, under an outer transform that runs eagerly,
    the first call of a function object whose code another object already compiled (an
    inner function made anew on every call: compiled once, then run op by op; an object
    that comes again is compiled from its second call)."""
    if prob.prepared or prob.aux or not xs or not under_eager_transform(xs[0]):
        return False
    if CACHE.entries(prob.f):
        return False  # met before: compile it, or use its compilation
    if _COMPILED.get(prob.f):
        CACHE.put(prob.f, _MET, True)
        return True
    _COMPILED.put(prob.f, True)
    return False


_FLOATS = frozenset(np.dtype(t) for t in ("float16", "float32", "float64"))


@register(AutoJax)
class JaxImpl(BackendImpl):
    traits = Traits(
        "jax",
        native_kind="jax arrays",
        output_kind="a jax array",
        keeps_plans=True,
        bakes_reads=True,
        runs_aux=True,  # the compiled function restores f's aux into the sink (WithAux)
    )

    array_key = staticmethod(operator.attrgetter("aval"))  # (read in 50 ns, shape in 200)

    def is_native(self, leaf: Any) -> bool:
        return isinstance(leaf, jax.Array)

    def is_float(self, leaf: Any) -> bool:
        dtype = leaf.dtype
        return dtype in _FLOATS or jnp.issubdtype(dtype, jnp.floating)

    def from_numpy(self, a: np.ndarray) -> Any:
        return jax.device_put(dense(a))  # jnp.asarray would compile a copy program per shape

    def default_float(self, value: float) -> Any:
        return jnp.asarray(value, dtype=jnp.result_type(float))

    def forward_unsupported(self, exc):
        msg = str(exc)
        return (isinstance(exc, TypeError) and "forward-mode autodiff" in msg) or (
            isinstance(exc, NotImplementedError) and "custom_lin" in msg
        )

    def reverse_unsupported(self, exc):
        return isinstance(exc, ValueError) and "Reverse-mode differentiation does not work" in str(
            exc
        )

    def is_traced(self, a: Any) -> bool:
        return isinstance(a, jax.core.Tracer)

    def connected(self, xs, y):
        """y is a tracer of the trace that differentiates x (stop_gradient, a constant
        or a closure-only output are not)."""
        traces = [t for x in xs if (t := getattr(x, "_trace", None)) is not None]
        if not traces:
            return None
        trace = getattr(y, "_trace", None)
        return trace is not None and any(trace is t for t in traces)

    def check_numpy_dtype(self, dtype: np.dtype) -> str | None:
        if dtype in (np.float64, np.complex128) and not jax.config.jax_enable_x64:
            small = "float32" if dtype == np.float64 else "complex64"
            return (
                f"JAX has x64 disabled and would silently truncate it to {small}. Enable x64 "
                "with jax.config.update('jax_enable_x64', True) at start-up, or convert it "
                f"to {small} first (a.astype(np.{small}) for NumPy, t.to(torch.{small}) for "
                "torch)."
            )
        return None

    def ones_like(self, a: Any) -> Any:
        return running.ones_like(a)

    def leaf_signature(self, a: Any) -> Any:
        if isinstance(a, jax.Array):  # an array or a tracer
            return (a.shape, a.dtype, a.weak_type)
        if isinstance(a, np.ndarray | np.generic | float):  # a Python float: weakly typed
            t = jax.typeof(a)
            return (t.shape, t.dtype, t.weak_type)
        return leaf_signature(a)

    def concat(self, arrays: list, axis: int = 0) -> Any:
        return _concat(tuple(arrays), axis) if len(arrays) > 1 else arrays[0]

    def reshape(self, a: Any, shape: tuple) -> Any:
        """``a`` itself where it has the shape already (a vector raveled: no dispatch)."""
        if (shape == (-1,) and a.ndim == 1) or a.shape == shape:
            return a
        return a.reshape(shape)

    def stack(self, arrays: list, axis: int) -> Any:
        return jnp.stack(arrays, axis=axis)

    # ---- operators, each one jitted function per (f, op, structure) ----------
    # A single-array x is passed as the array itself and dynamic contexts as
    # trailing arguments, so a plain call dispatches like the native jit call.
    def _compiled(self, prob, tag: tuple, ctx: tuple, make, xs: tuple = ()):
        """The cached jitted ``run(x, ..., *dyn_ctx)`` and the dynamic contexts. Under an
        outer transform that runs eagerly (``xs`` hold tracers with values), a function
        made anew on each call (an inner function written inside the loss) is compiled
        for its first object only; later objects of its code run op by op, like the
        framework's own nested call, not a compilation per call."""
        dyn, static = split_contexts(prob, ctx)
        single = prob.single

        def with_ctx_of(g):
            def with_ctx(dyn_leaves):
                c = join_contexts(static, dyn_leaves)
                if single:
                    return lambda x: g((x,), *c)
                return lambda xs: g(xs, *c)

            return with_ctx

        def build(fget):
            if not CACHE.entries(prob.f):
                _checks.compiled_new_function(prob.f)
            with_ctx = with_ctx_of(prob.flat(fget))
            if prob.aux:
                return WithAux(make(with_ctx))
            return jax.jit(make(with_ctx))

        if _config.strict():  # the disconnected check runs at trace time: trace anew
            tag = (*tag, "strict")
        run = prob.fns.get((tag, static))  # the rest of the key is fixed for prob
        if run is None:
            if _eager_outer(prob, xs):
                return make(with_ctx_of(prob.flat())), dyn
            if _liftable(prob) and not CACHE.entries(prob.f):  # a closure made per call
                bare = prob.without_f()
                run = closures.compiled(
                    prob,
                    prob.key(*tag, static),
                    lambda g: make(with_ctx_of(bare.flat(g))),
                    _checks.compiled_new_function,
                )
                if run is not None:
                    prob.fns[tag, static] = run
                    prob.fns[closures.KEY] = prob.key(*tag, static)
                    return run, dyn
            # keyed on what f reads now (compiled anew when a value f reads is rebound),
            # the same for a preparation and an unprepared call: they share the function
            key = prob.key(*tag, static, fingerprint(prob.f))
            run = prob.fns[tag, static] = CACHE.get(prob.f, key, build)
        return run, dyn

    def gradient(self, prob, xs, ctx):
        run, dyn = self._compiled(prob, ("grad",), ctx, _make_grad, xs)
        return _tuple(prob, call(prob, run, _arg(prob, xs), *dyn))

    def value_and_gradient(self, prob, xs, ctx):
        run, dyn = self._compiled(prob, ("value_and_grad",), ctx, _make_value_and_grad, xs)
        y, g = call(prob, run, _arg(prob, xs), *dyn)
        return y, _tuple(prob, g)

    compile = staticmethod(jax.jit)

    def standin(self, tree):
        def one(a):  # a traced value has none to read: a constant of its shape and dtype
            if not isinstance(a, jax.core.Tracer):
                return a
            fill = 0.5 if jnp.issubdtype(a.dtype, jnp.inexact) else 0
            return jnp.full(a.shape, fill, a.dtype)

        return tree_map(one, tree)

    def block(self, result):
        return jax.block_until_ready(result)

    def peak_bytes(self, fn, args):
        """What XLA plans to allocate beyond the arguments: temporaries and outputs."""
        stats = jax.jit(fn).lower(*args).compile().memory_analysis()
        if stats is None:
            return None
        return stats.temp_size_in_bytes + stats.output_size_in_bytes

    def runner(self, prob, form, combo=None, weak=False):
        """The compiled function, called as is (see ``BackendImpl.runner``): every JAX
        runner holds f weakly (through the cache), so a preparation and an unprepared
        call get the same one."""
        if form == "leaves":
            return runners.leaves(prob)
        if form == "python":
            return runners.python_float(prob)
        return runners.single(prob, form == "numpy")

    def code_runner(self, prob, form):
        """For a closure made anew per call (compiled once per code, see ``closures``):
        ``runner(f, x, *t)`` for any object of f's code, on its own cells."""
        key = runners.source(prob).fns.get(closures.KEY)
        if key is None or form not in ("array", "numpy"):
            return None
        return runners.per_code(prob, key, form == "numpy")

    def value_and_jvp(self, prob, xs, vs, ctx):
        drop = prob.op == "jvp"  # f(x) not returned: no buffer for it (it shows at 1e6)

        def make(with_ctx):
            def run(x, v, *dyn):
                y, t = outputs.values(jax.jvp, with_ctx(dyn), (x,), (v,))
                return (None if drop else y), t

            return run

        run, dyn = self._compiled(prob, ("jvp",), ctx, make)
        return call(prob, run, _arg(prob, xs), _arg(prob, vs), *dyn)

    def value_and_vjp(self, prob, xs, w, ctx, check_w):
        loose, drop = isinstance(w, float), prob.op == "vjp"

        def make(with_ctx):
            def run(x, w, *dyn):
                y, pb = outputs.values(jax.vjp, with_ctx(dyn), x)
                w = check_w(y, w.astype(y.dtype) if loose else w)
                return (None if drop else y), pb(w)[0]

            return run

        run, dyn = self._compiled(prob, ("vjp", loose), ctx, make)
        y, g = call(prob, run, _arg(prob, xs), w, *dyn)
        return y, _tuple(prob, g)

    # several directions: one compiled call, the k tangents passed and returned as k
    # arrays (stacked and split inside it: no eager stack or slice per call)
    def value_and_jvps(self, prob, xs, vss, ctx):
        drop = prob.op == "jvp"

        def make(with_ctx):
            def run(x, vs, *dyn):
                y, lin = outputs.values(jax.linearize, with_ctx(dyn), x)
                ts = jax.vmap(lin)(directions.stacked(vs))
                return (None if drop else y), directions.split(ts, vs)

            return run

        run, dyn = self._compiled(prob, ("jvps",), ctx, make)
        prob.fns[TANGENTS] = len(vss)
        return call(prob, run, _arg(prob, xs), directions.each(prob, vss), *dyn)

    def value_and_vjps(self, prob, xs, ws, ctx, check_w):
        loose, drop = all(isinstance(w, float) for w in ws), prob.op == "vjp"
        ws = [jnp.asarray(w) if isinstance(w, float) else w for w in ws]
        for w in ws[1:]:
            check_w(ws[0], w)  # every cotangent like the first; the first like f(x) below

        def make(with_ctx):
            def run(x, ws, *dyn):
                y, pb = outputs.values(jax.vjp, with_ctx(dyn), x)
                if not isinstance(ws, list | tuple):  # a stacked Tangents' array
                    return (None if drop else y), jax.vmap(lambda w: pb(check_w(y, w))[0])(ws)
                ws = [check_w(y, w.astype(y.dtype) if loose else w) for w in ws]
                gs = jax.vmap(lambda w: pb(w)[0])(jnp.stack(ws))
                return (None if drop else y), directions.split(gs, ws)

            return run

        run, dyn = self._compiled(prob, ("vjps", loose), ctx, make)
        prob.fns[TANGENTS] = len(ws)
        y, gs = call(prob, run, _arg(prob, xs), tuple(ws), *dyn)
        return y, [_tuple(prob, g) for g in gs]

    def gradient_and_hvps(self, prob, xs, vss, ctx, combo):
        outer, inner = combo or ("forward", "reverse")
        grad = prob.op != "hvp"  # H v alone compiles to a faster program

        def make(with_ctx):
            def run(x, vs, *dyn):
                gf = _grad_fn(with_ctx(dyn), inner)
                if outer == "reverse":
                    g, pb = outputs.values(jax.vjp, gf, x)
                    hvs = jax.vmap(lambda v: pb(v)[0])(directions.stacked(vs))
                else:
                    g, lin = outputs.values(jax.linearize, gf, x)
                    hvs = jax.vmap(lin)(directions.stacked(vs))
                return (g if grad else None), directions.split(hvs, vs)

            return run

        run, dyn = self._compiled(prob, ("hvps", outer, inner, grad), ctx, make)
        prob.fns[TANGENTS] = len(vss)
        g, hvs = call(prob, run, _arg(prob, xs), directions.each(prob, vss), *dyn)
        return (None if g is None else _tuple(prob, g)), [_tuple(prob, hv) for hv in hvs]

    def compressed(
        self, prob, ctx, kind, seeds, gather, combo=None, plan=0, value=True, weak=False
    ):
        """A sparse plan's passes as one compiled call: ``run(xs) -> (f(x), or the gradient
        leaves for "star", or None without ``value``; and the nonzeros B.ravel()[gather])``
        where B holds one product per seed (the seeds S stacked on the first axis): Jv
        ("column"), wᵀJ ("row") or Hv ("star"). The seeds and the gather are compiled in
        as constants (``plan``: their plan's unique number). It holds f weakly: any
        ``weak`` (a kept plan of unprepared calls) takes it."""
        outer, inner = combo or ("forward", "reverse")
        s, idx = seeds, gather

        def make(with_ctx):
            def run(x, *dyn):
                fn = with_ctx(dyn)
                if kind == "star":
                    fn = _grad_fn(fn, inner)
                if kind == "row" or (kind == "star" and outer == "reverse"):
                    y, pb = outputs.values(jax.vjp, fn, x)
                    b = jax.vmap(lambda w: pb(w)[0])(s)
                else:
                    b = outputs.mapped(
                        jax.vmap, lambda v: outputs.values(jax.jvp, fn, (x,), (v,))[1], "out_axes"
                    )(s)
                    y = fn(x) if value else None
                b = b.reshape(-1)
                return y, idx(b) if callable(idx) else b[idx]  # (a substitution: callable)

            return run

        tag = ("compressed", kind, outer, inner, plan, value)
        run, dyn = self._compiled(prob, tag, ctx, make)
        named = prob.named()  # (a kept plan's runner holds f weakly: not the problem)
        if kind != "star" or not value:
            return lambda xs: call(named, run, xs[0], *dyn)

        def gradient_and_data(xs):
            g, data = call(named, run, xs[0], *dyn)
            return (g,), data

        return gradient_and_data

    def value_and_pullback(self, prob, xs, ctx):
        fn = prob.flat()
        y, pb = outputs.values(jax.vjp, lambda xs: fn(xs, *ctx), xs)
        return y, lambda w: pb(w)[0]

    def value_and_jacobian(self, prob, xs, ctx, value=True):
        mode = self.mode or direction.only(prob)  # None: by sizes, at trace time

        def make(with_ctx):
            def run(x, *dyn):
                fn = with_ctx(dyn)
                n_out = 0 if mode else jax.eval_shape(outputs.discard(fn), x).size
                jac = jax.jacrev if _reverse(mode, n_out, x.size) else jax.jacfwd
                if not value:
                    return outputs.function(jac, fn)(x)
                j, y = outputs.function(jac, lambda x: _twice(fn(x)), own_aux=True)(x)
                return y, j

            return run

        run, dyn = self._compiled(prob, ("jac", mode, value), ctx, make)
        return call(prob, run, xs[0], *dyn)

    jacobian = functools.partialmethod(value_and_jacobian, value=False)

    def prefers_reverse(self, prob, xs, ctx):
        """A chunked Jacobian's direction: the compiled Jacobians' (``_reverse``)."""
        mode, n_in = self.mode or direction.only(prob), sum(math.prod(np.shape(x)) for x in xs)
        return _reverse(mode, 0 if mode else self.memo_output_size(prob, xs, ctx), n_in)

    def output_size(self, prob, xs, ctx):
        """The size of f(x) from jax.eval_shape, cached like a compiled function."""
        dyn, static = split_contexts(prob, ctx)
        x, single = _arg(prob, xs), prob.single
        avals = tuple((np.shape(a), getattr(a, "dtype", type(a))) for a in (*xs, *dyn))

        def build(fget):
            g = prob.flat(fget)

            def fn(x, *dyn):
                return g((x,) if single else x, *join_contexts(static, dyn))

            return math.prod(jax.eval_shape(outputs.discard(fn), x, *dyn).shape)

        return CACHE.get(prob.f, prob.key("size", static, avals), build)

    def output_of(self, prob, xs, ctx):
        """f(x)'s shape and dtype from jax.eval_shape (f is traced, not run op by op)."""
        fn = prob.flat()
        return jax.eval_shape(outputs.discard(lambda xs: fn(xs, *ctx)), xs)

    def value_and_batched_jacobian(self, prob, xs, ctx, value=True):
        mode, op, backend = self.mode or direction.only(prob), prob.op, prob.backend

        def make(with_ctx):
            def run(x, *dyn):
                fn = with_ctx(dyn)
                b, rest = x.shape[0], x.shape[1:]
                out = jax.eval_shape(outputs.discard(fn), x)
                _checks.check_batch_of(op, backend, x.shape, out.shape)
                n_in, n_out = x.size // max(b, 1), out.size // max(b, 1)
                if _reverse(mode, n_out, n_in):  # n_out vjps, each a basis vector per sample
                    y, pb = outputs.values(jax.vjp, fn, x)
                    w = jnp.broadcast_to(jnp.eye(n_out, dtype=y.dtype)[:, None], (n_out, b, n_out))
                    rows = jax.vmap(lambda w: pb(w.reshape(y.shape))[0])(w)
                    jac = jnp.moveaxis(rows.reshape(n_out, b, n_in), 0, 1)
                else:  # n_in jvps
                    y, lin = outputs.values(jax.linearize, fn, x)
                    v = jnp.broadcast_to(jnp.eye(n_in, dtype=x.dtype)[:, None], (n_in, b, n_in))
                    cols = jax.vmap(lambda v: lin(v.reshape(x.shape)))(v)
                    jac = jnp.moveaxis(cols.reshape(n_in, b, n_out), 0, 2)
                jac = jac.reshape((*y.shape, *rest))  # (alone: one fusion; with y, three)
                return (y, jac) if value else jac

            return run

        run, dyn = self._compiled(prob, ("batched_jac", mode, value), ctx, make)
        return call(prob, run, xs[0], *dyn)

    batched_jacobian = functools.partialmethod(value_and_batched_jacobian, value=False)

    # ---- second order ------------------------------------------------------------
    def gradient_and_hvp(self, prob, xs, vs, ctx, combo, grad=True):
        outer, inner = combo or ("forward", "reverse")

        def make(with_ctx):
            def run(x, v, *dyn):
                gf = _grad_fn(with_ctx(dyn), inner)
                if outer == "reverse":  # the Hessian is symmetric: vjp of the gradient
                    g, pb = outputs.values(jax.vjp, gf, x)
                    g, hv = g, pb(v)[0]
                else:
                    g, hv = outputs.values(jax.jvp, gf, (x,), (v,))
                return (g if grad else None), hv  # H v alone compiles to a faster program

            return run

        run, dyn = self._compiled(prob, ("hvp", outer, inner, grad), ctx, make)
        g, hv = call(prob, run, _arg(prob, xs), _arg(prob, vs), *dyn)
        return (None if g is None else _tuple(prob, g)), _tuple(prob, hv)

    def hvp(self, prob, xs, vs, ctx, combo):
        return self.gradient_and_hvp(prob, xs, vs, ctx, combo, grad=False)[1]

    def value_gradient_and_hessian(self, prob, xs, ctx, combo, value=True):
        outer, inner = combo or ("forward", "reverse")

        def make(with_ctx):
            def run(x, *dyn):
                fn = with_ctx(dyn)
                jac = jax.jacrev if outer == "reverse" else jax.jacfwd
                if not value:  # the Hessian alone compiles to a faster program
                    return outputs.function(jac, _grad_fn(fn, inner))(x)

                def vg(x):
                    if inner == "forward":
                        y, g = fn(x), outputs.function(jax.jacfwd, fn)(x)
                    else:
                        y, g = _vg(fn, x)
                    return g, (y, g)

                h, (y, g) = outputs.function(jac, vg, own_aux=True)(x)
                return y, g, h

            return run

        run, dyn = self._compiled(prob, ("hessian", outer, inner, value), ctx, make)
        out = call(prob, run, xs[0], *dyn)
        if not value:
            return None, (None,), out
        y, g, h = out
        return y, (g,), h

    def hessian(self, prob, xs, ctx, combo):
        return self.value_gradient_and_hessian(prob, xs, ctx, combo, value=False)[2]

    def value_derivative_and_second_derivative(self, prob, xs, ctx):
        def make(with_ctx):
            def run(x, *dyn):
                fn = with_ctx(dyn)
                one = jnp.ones_like(x)
                (y, d), (_, d2) = outputs.values(
                    jax.jvp, lambda x: outputs.values(jax.jvp, fn, (x,), (one,)), (x,), (one,)
                )
                return y, d, d2

            return run

        run, dyn = self._compiled(prob, ("d2",), ctx, make)
        return call(prob, run, xs[0], *dyn)


def _reverse(mode: str | None, n_out: int, n_in: int) -> bool:
    """Reverse for wide Jacobians only, dense or per sample (square: jacrev 1.4-21x jacfwd)."""
    return mode == "reverse" if mode is not None else n_out < n_in


@functools.partial(jax.jit, static_argnums=1)
def _concat(arrays: tuple, axis: int):
    """One compiled call (``jnp.concatenate`` itself costs about four times the dispatch
    in Python before it runs: a cotangent raveled per call)."""
    return jnp.concatenate(arrays, axis=axis)


def _vg(fn, x):
    if not outputs.active():
        return jax.value_and_grad(fn)(x)
    y, pb = outputs.values(jax.vjp, fn, x)  # value_and_grad's own formulation
    return y, pb(jnp.ones_like(y))[0]


def _grad_fn(fn, inner: str):
    return outputs.function(jax.jacfwd if inner == "forward" else jax.grad, fn)


def _arg(prob, xs: tuple):
    return xs[0] if prob.single else xs


def _tuple(prob, g):
    return (g,) if prob.single else g


def _make_grad(with_ctx):
    return lambda x, *dyn: _conj(outputs.function(jax.grad, with_ctx(dyn))(x))


def _make_value_and_grad(with_ctx):
    def run(x, *dyn):
        y, g = _vg(with_ctx(dyn), x)
        return y, _conj(g)

    return run


def _conj(g):
    """diffiface's convention for complex x: df/dRe + i df/dIm (JAX gives its conjugate)."""
    return jax.tree_util.tree_map(lambda a: jnp.conj(a) if jnp.iscomplexobj(a) else a, g)


def _twice(y):
    return y, y
