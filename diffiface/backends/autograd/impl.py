"""autograd (HIPS) backend: make_vjp for reverse mode, make_jvp for forward mode."""

from __future__ import annotations

import functools
import numbers
from typing import Any

import autograd.numpy as anp
import numpy as np
from autograd.builtins import tuple as ag_tuple
from autograd.core import JVPNode
from autograd.numpy.numpy_boxes import ArrayBox
from autograd.tracer import Box

from ... import _checks
from ..._backend_types import AutoAutograd
from ..._cache import weak_callable
from ..._tree import TooDeep, flatten, tree_map
from ...core import direction, outputs
from ...core.backend import BackendImpl, Traits
from ...core.convert import is_masked
from ...core.operator import OPS
from ...core.registry import register
from . import rows, runners
from .runners import link_out
from .traces import make_jvp, make_vjp, open_traces


@register(AutoAutograd)
class AutogradImpl(BackendImpl):
    traits = Traits(
        "autograd",
        native_kind="NumPy arrays",
        output_kind="an array (autograd.numpy)",
        keeps_plans=True,  # f is traced anew on every call: nothing to go stale
        cheap_forward=False,  # a jvp traces f again, a pullback walks the recorded graph
        runs_trees=True,  # they take f's pytree output per call (``trees``)
    )

    def concat(self, arrays: list, axis: int = 0) -> Any:
        if len(arrays) == 1:
            return arrays[0]
        out = anp.concatenate(arrays, axis=axis)
        return rows.joined(out, arrays) if axis == 0 else out

    def value_and_jacobian(self, prob, xs, ctx):
        if not self.prefers_reverse(prob, xs, ctx):
            return super().value_and_jacobian(prob, xs, ctx)
        y, (jac,) = self.reverse_jacobian(prob, xs, ctx)
        return y, jac

    def reverse_jacobian(self, prob, xs, ctx):
        """One trace of f, one pullback per output element, each through the graph of
        its own part of a joined (pytree) output (``rows``)."""
        if not prob.single:
            return super().reverse_jacobian(prob, xs, ctx)
        fn, x = prob.flat(), xs[0]
        y, got = call_f(prob, lambda: rows.jacobian_rows(lambda x: link_out(fn((x,), *ctx), x), x))
        y = _array(y)
        shape = (*np.shape(y), *x.shape)
        if not got:
            return y, (np.zeros(shape, dtype=x.dtype),)
        return y, (self.reshape(self.stack([like_x(g, x) for g in got], 0), shape),)

    def prefers_reverse(self, prob, xs, ctx):
        """A jvp traces f again for every column, a pullback only walks the recorded graph
        (about 3 times cheaper, measured on elementwise f): reverse up to 3 outputs per
        input, unless the mode or f fixes the direction."""
        if self.mode is not None or direction.only(prob) is not None:
            return super().prefers_reverse(prob, xs, ctx)
        n = sum(int(np.size(x)) for x in xs)
        return self.memo_output_size(prob, xs, ctx) <= runners.FORWARD_COST * n

    def settle(self, tree: Any, result: Any) -> Any:
        open_ = open_traces()  # the traces of this call are closed: their boxes are its own

        def lower(a: Any) -> Any:
            while isinstance(a, Box) and a._trace not in open_:
                a = a._value
            return a

        return tree_map(lower, tree)

    def standin(self, tree: Any) -> Any:
        def value(a: Any) -> Any:
            while isinstance(a, Box):
                a = a._value
            return a

        return tree_map(value, tree)

    @staticmethod
    def own_output(y: Any) -> Any:
        """An object array of boxes as one box: NumPy functions on boxes (np.concatenate,
        np.stack, and autograd.numpy.concat, the Array API's name, which autograd does not
        wrap as concatenate) build one element by element, each element traced."""
        if type(y) is not np.ndarray or y.dtype != object or not y.size:
            return y
        if not all(isinstance(e, Box | numbers.Number) for e in y.flat):
            return y  # (refused by is_output: no array of numbers)
        return anp.array(y.tolist())

    def is_output(self, y: Any) -> bool:
        return self.is_native(y) and not (type(y) is np.ndarray and y.dtype == object)

    def is_native(self, leaf: Any) -> bool:
        if isinstance(leaf, np.ndarray):  # a masked array is refused at the boundary
            return not is_masked(leaf)
        return isinstance(leaf, ArrayBox) or (
            isinstance(leaf, np.generic) and not isinstance(leaf, np.bool_)
        )

    def open(self, tree: Any) -> Any:
        leaves = flatten(tree)[0]  # no Python recursion: a deep tree of arrays is opened as is
        if not any(isinstance(a, Box) and isinstance(a._value, _CONTAINERS) for a in leaves):
            return tree
        try:
            return open_boxes(tree)
        except RecursionError:
            raise TooDeep() from None

    def stack(self, arrays: list, axis: int) -> Any:
        if any(isinstance(a, Box) for a in arrays):  # inside an outer pass
            return anp.stack(arrays, axis=axis)
        return np.stack(arrays, axis=axis)  # (autograd's stack wraps each array first)

    def from_numpy(self, a: np.ndarray) -> Any:
        return a

    def default_float(self, value: float) -> Any:
        return np.asarray(value, dtype=np.float64)

    def forward_unsupported(self, exc):
        return isinstance(exc, NotImplementedError) and str(exc).startswith("JVP of ")

    def reverse_unsupported(self, exc):
        return isinstance(exc, NotImplementedError) and str(exc).startswith("VJP of ")

    def is_traced(self, a: Any) -> bool:
        return isinstance(a, Box)

    def is_complex(self, y):
        while isinstance(y, Box):  # a box's own dtype attribute is slow (microseconds)
            y = y._value
        return np.iscomplexobj(y)

    def connected(self, xs, y):
        """y is a box of the trace that differentiates x."""
        traces = [x._trace for x in xs if isinstance(x, Box)]
        if not traces:
            return None
        return isinstance(y, Box) and y._trace in traces

    def can_run_rule(self, xs, ctx):
        """Not under an outer forward-mode trace (the rules define vjps only)."""
        leaves = [*xs, *flatten(ctx)[0]]
        return not any(isinstance(getattr(a, "_node", None), JVPNode) for a in leaves)

    def ones_like(self, a: Any) -> Any:
        return np.ones(np.shape(a), dtype=a.dtype)

    @staticmethod
    def protect(xs: tuple) -> tuple:
        """f gets copies of the caller's NumPy arrays (boxes are autograd's own)."""
        return tuple(np.array(x, copy=True) if type(x) is np.ndarray else x for x in xs)

    def value_and_gradient(self, prob, xs, ctx):
        """diffiface's convention for complex x is df/dRe + i df/dIm: autograd gives its
        conjugate."""
        y, pb = self.value_and_pullback(prob, xs, ctx)
        gs = pb(np.ones(np.shape(y), dtype=y.dtype))
        if any(np.iscomplexobj(x) for x in xs):
            gs = tuple(anp.conj(g) if np.iscomplexobj(g) else g for g in gs)
        return y, gs

    def runner(self, prob, form, combo=None, weak=False):
        """For a plain gradient, jvp, vjp and a plain backend's hvp at one float array or
        native leaves, and a jacobian at one float array (``runners``); for an unprepared
        call (``weak``) it calls f through a weak reference (the plan table holds f
        weakly)."""
        run = self.code_runner(prob, form) if combo is None else None
        if run is None and _plain_jacobian(prob, form):  # (it reads prob's memo: per f)
            decl = OPS[prob.op]
            run = runners.jacobian(prob.fns, self.mode, len(decl.returns) > 1)
        f = None if run is None else weak_callable(prob.f, weak)
        return None if f is None else functools.partial(run, f)

    def code_runner(self, prob, form):
        """``run(f, x[, t])`` (``run(f, *leaves)`` for native leaves) for any object of
        f's code: autograd traces f anew on every call (a closure made per call is run as
        it is, nothing kept of another object)."""
        if prob.op not in runners.TAKES:
            return None
        if form == "leaves":
            return runners.leaves(prob.op, prob.treedef, prob.single)
        return runners.runner(prob.op) if form == "array" and prob.single else None

    # A single array is differentiated directly (no tuple container to box).
    def value_and_pullback(self, prob, xs, ctx):
        fn = prob.flat()
        if not xs:  # an empty pytree: nothing to differentiate (autograd cannot box it)
            return _array(call_f(prob, lambda: fn((), *ctx))), lambda w: ()
        if prob.single:
            pb, y = call_f(prob, lambda: make_vjp(lambda x: link_out(fn((x,), *ctx), x), xs[0]))
            return _array(y), lambda w: (like_x(pb(w), xs[0]),)
        pb, y = call_f(prob, lambda: make_vjp(lambda xs: link_out(fn(xs, *ctx), xs[0]), xs))
        return _array(y), lambda w: tuple(like_x(g, x) for g, x in zip(pb(w), xs, strict=True))

    def value_and_jvp(self, prob, xs, vs, ctx):
        fn = prob.flat()
        if not xs:  # an empty pytree: no direction to move in (autograd cannot box it)
            y = _array(call_f(prob, lambda: fn((), *ctx)))
            return y, np.zeros(np.shape(y), dtype=self.standin(y).dtype)
        if prob.single:
            y, t = call_f(
                prob, lambda: make_jvp(lambda x: link_out(fn((x,), *ctx), x), xs[0])(vs[0])
            )
        else:
            y, t = call_f(prob, lambda: make_jvp(lambda xs: link_out(fn(xs, *ctx), xs[0]), xs)(vs))
        return _array(y), like_x(t, y)

    # ---- second order ------------------------------------------------------------
    def gradient_and_hvp(self, prob, xs, vs, ctx, combo):
        g, (hv,) = self.gradient_and_hvps(prob, xs, [vs], ctx, combo)
        return g, hv

    def gradient_and_hvps(self, prob, xs, vss, ctx, combo):
        """The gradient and H v for each direction. Outer reverse mode traces the
        gradient once and pulls each v back (H is symmetric); outer forward mode traces
        it once per v. A plain backend's combination: ``runners.hvp_outer``."""
        outer, inner = combo or (runners.hvp_outer(len(vss)), "reverse")
        fn = prob.flat()
        if not xs:  # an empty pytree: no gradient (autograd cannot box it)
            call_f(prob, lambda: fn((), *ctx))
            return (), [() for _ in vss]
        if prob.single:  # differentiate the array itself, not a 1-tuple
            x, vss = xs[0], [vs[0] for vs in vss]
            gf = grad_fn(lambda x: fn((x,), *ctx), inner)
        else:
            if inner == "forward":
                raise _checks.not_single_array(prob.op, prob.backend, len(xs))
            x = xs
            gf = grad_fn(lambda xs: fn(xs, *ctx), inner)
        if outer == "reverse":
            pb, g = call_f(prob, lambda: make_vjp(gf, x))
            hvs = [pb(v) for v in vss]
        else:
            hvs = []
            for v in vss:
                g, hv = call_f(prob, lambda v=v: make_jvp(gf, x)(v))
                hvs.append(hv)
        return self._leaves(prob, g, xs), [self._leaves(prob, hv, xs) for hv in hvs]

    @staticmethod
    def _leaves(prob, out, xs) -> tuple:
        out = (out,) if prob.single else out
        return tuple(like_x(a, x) for a, x in zip(out, xs, strict=True))

    def value_gradient_and_hessian(self, prob, xs, ctx, combo):
        # default: reverse over reverse, one trace and one pullback per row
        outer, inner = combo or ("reverse", "reverse")
        fn = prob.flat()
        (x,) = xs
        f1 = lambda x: fn((x,), *ctx)  # noqa: E731
        values: list = []  # f(x), as the gradient's trace computed it (f runs once)
        gf = grad_fn(f1, inner, values)
        basis = np.eye(x.size, dtype=x.dtype).reshape((x.size, *x.shape))
        if outer == "reverse":
            pb, g = call_f(prob, lambda: make_vjp(gf, x))
            rows = [pb(e) for e in basis]
        else:
            jvp = make_jvp(gf, x)
            g, rows = None, []
            for e in basis:
                g, col = call_f(prob, lambda e=e: jvp(e))
                rows.append(col)  # columns of a symmetric matrix
            g = gf(x) if g is None else g
        y = values[0] if values else f1(x)
        if not rows:
            return _array(y), (like_x(g, x),), np.zeros((*x.shape, *x.shape), dtype=x.dtype)
        h = anp.reshape(anp.stack(rows), (*x.shape, *x.shape))  # boxes inside an outer pass
        return _array(y), (like_x(g, x),), like_x(h, np.empty((*x.shape, *x.shape), x.dtype))

    def value_derivative_and_second_derivative(self, prob, xs, ctx):
        fn = prob.flat()
        (x,) = xs
        one = np.ones_like(x)

        values: list = []  # f(x), as the inner trace computed it (f runs once)

        def d(x):
            y, d1 = make_jvp(lambda x: fn((x,), *ctx), x)(one)
            values.append(off_trace(y, x))
            return touch(d1, x)

        d1, d2 = call_f(prob, lambda: make_jvp(d, x)(one))
        y = _array(values[0])
        return y, like_x(d1, y), like_x(d2, y)


def grad_fn(fn, inner: str, values: list | None = None):
    """x -> gradient of the scalar fn, by reverse mode or by forward mode (n jvps);
    ``values`` (a list) gets fn(x) as each trace computed it."""
    if inner == "forward":

        def grad_fwd(x):
            basis = np.eye(x.size, dtype=x.dtype).reshape((x.size, *x.shape))
            cols = []
            for e in basis:
                y, col = make_jvp(fn, x)(e)
                cols.append(col)
                if values is not None:
                    values.append(off_trace(y, x))
            return touch(anp.reshape(anp.stack(cols), np.shape(x)), x)

        return grad_fwd

    def grad_rev(x):
        pb, y = make_vjp(fn, x)
        if values is not None:
            values.append(off_trace(y, x))
        return touch(pb(np.ones(np.shape(y), dtype=y.dtype)), x)

    return grad_rev


def _plain_jacobian(prob, form: str) -> bool:
    """A jacobian (or value_and_jacobian) of one array x and one array output, without
    aux, in the direction f supports: its runner (``runners.jacobian``)."""
    if OPS[prob.op].family != "jacobian":
        return False
    if form != "array" or not prob.single or prob.aux or outputs.returns_tree(prob.f):
        return False
    return direction.only(prob) in (None, direction.REVERSE)


def off_trace(y: Any, x: Any) -> Any:
    """y without the box of x's trace (a value computed on x's trace, as that trace's
    caller sees it); an outer pass's box stays."""
    if isinstance(y, Box) and isinstance(x, Box) and y._trace == x._trace:
        return y._value
    return y


def touch(g: Any, x: Any) -> Any:
    """``g + 0 x``: a derivative that is constant in x (f linear) still depends on x for
    autograd, which would otherwise warn "Output seems independent of input" when it
    differentiates it again; the next derivative is then an exact zero. A derivative
    already on x's trace is returned as it is (the two extra operations would run in
    every later pass)."""
    if isinstance(g, Box) and isinstance(x, Box) and g._trace == x._trace:
        return g
    if isinstance(getattr(x, "_value", x), tuple):  # a tuple of leaves, maybe boxed
        return ag_tuple([g[i] + 0 * x[i] for i in range(len(x))])  # stays one box
    return g + 0 * x


_CONTAINERS = (dict, list, tuple)


def open_boxes(v: Any) -> Any:
    """Containers boxed by an outer autograd pass (a dict or tuple passed to
    ``autograd.grad``) opened into containers of boxed arrays."""
    if isinstance(v, Box):
        inner = v._value
        if isinstance(inner, dict):
            return {k: open_boxes(v[k]) for k in inner}
        if isinstance(inner, list | tuple):
            return type(inner)(open_boxes(v[i]) for i in range(len(inner)))
        return v
    if isinstance(v, dict):
        return {k: open_boxes(a) for k, a in v.items()}
    if isinstance(v, list | tuple) and not hasattr(v, "_fields"):
        return type(v)(open_boxes(a) for a in v)
    return v


def _array(y: Any) -> Any:
    return y if isinstance(y, Box) else np.asarray(y)


def like_x(g: Any, ref: Any) -> Any:
    """Keep the reference dtype and shape (autograd promotes and returns scalars)."""
    dtype = ref.dtype
    if isinstance(g, Box):
        return g if g.dtype == dtype else g.astype(dtype)
    g = np.asarray(g)
    if g.dtype != dtype:
        g = g.astype(dtype)
    return g.reshape(np.shape(ref))


def call_f(prob, thunk):
    try:
        return thunk()
    except TypeError as exc:
        clear = _checks.framework_error(prob.op, prob.backend, exc)  # (None for diffiface's)
        if clear is not None:
            raise clear from exc
        if "Box" in str(exc) and not isinstance(exc, _checks.DiffifaceTypeError):
            raise _checks.left_framework(prob.op, prob.backend, exc) from exc
        raise
