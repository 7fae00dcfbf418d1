"""What a backend differentiates: ``f`` as a function of a flat tuple of leaves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _checks, _config
from .._arrays import numpy_dtype
from .._tree import tree_map, unflatten
from . import outputs


class Problem:
    """One operator call: ``f``, the tree structure of ``x``, and the checks on f(x).

    ``flat()`` builds ``g(xs, *contexts) = f(unflatten(xs), *contexts)``, which
    checks that the output is an array (and a scalar when required). With ``aux``, f
    returns ``(out, aux)``: g returns ``out`` and puts ``aux`` in the open sink; a
    pytree output of the operators that take one is raveled (see ``core.outputs``).
    """

    __slots__ = (
        "aux",
        "backend",
        "f",
        "fns",
        "impl",
        "op",
        "prepared",
        "scalar",
        "single",
        "treedef",
    )

    def __init__(self, op, backend, impl, f, treedef, single, scalar, aux=False):
        self.op = op
        self.backend = backend
        self.impl = impl
        self.f = f
        self.treedef = treedef
        self.single = single
        self.scalar = scalar
        self.aux = aux
        self.fns: dict = {}  # compiled functions (and choices) memoized on the problem
        self.prepared = False  # a Prep's problem: worth one-time work

    def named(self) -> Named:
        """What a runner held weakly under f keeps of this problem: see ``Named``."""
        return Named(self)

    def without_f(self) -> Problem:
        """This problem without f (for a function built once for many objects of f's
        code, which gets each object through ``flat(fget)``)."""
        return Problem(
            self.op,
            self.backend,
            self.impl,
            None,
            self.treedef,
            self.single,
            self.scalar,
            self.aux,
        )

    def key(self, *extra: Any) -> tuple:
        return (self.op, self.backend, self.treedef, self.scalar, self.aux, *extra)

    def flat(self, fget: Callable[[], Callable] | None = None) -> Callable:
        """``g(xs, *ctx)``; with ``fget`` it holds ``f`` only through ``fget()``."""
        treedef, single, protect = self.treedef, self.single, self.impl.protect
        f = self.f
        check = self.output_check(fget or (lambda: f))
        if fget is None:
            if single:

                def g(xs, *ctx):
                    if protect is not None:
                        xs = protect(xs)
                    return check(f(xs[0], *ctx), xs, ctx)
            else:

                def g(xs, *ctx):
                    if protect is not None:
                        xs = protect(xs)
                    return check(f(unflatten(treedef, xs), *ctx), xs, ctx)
        else:

            def g(xs, *ctx):
                if protect is not None:
                    xs = protect(xs)
                x = xs[0] if single else unflatten(treedef, xs)
                return check(fget()(x, *ctx), xs, ctx)

        return g

    def output_check(self, fget: Callable) -> Callable:
        """``check(y, xs, ctx)``: f's output as the backend differentiates it (it holds f
        only through ``fget``, and never the problem)."""
        op, backend, impl = self.op, self.backend, self.impl
        check = _output_check(op, backend, impl, self.scalar)
        aux, trees = self.aux, op in outputs.TREE_OPS
        if not aux and not trees:
            return check
        is_output = impl.is_output

        def leaf_check(a: Any) -> None:
            if _discrete(a):
                raise _checks.integer_output(op, backend, a.dtype)
            if not is_output(a):
                raise _checks.not_array(op, backend, a, impl.traits.output_kind, trees)

        own = impl.own_output

        def finish(y: Any, xs: tuple, ctx: tuple) -> Any:
            if aux:
                y = outputs.unpack(op, backend, y)
            if own is not None:
                y = own(y) if is_output(y) or not trees else tree_map(own, y)
            if trees:
                if not is_output(y):
                    y = outputs.ravel_output(op, backend, impl, fget(), leaf_check, y, xs, ctx, aux)
                elif outputs.SEEN[0] and outputs.returns_tree(fget()):  # one array here
                    sig = outputs.signature(xs, ctx, aux, impl.leaf_signature, op)
                    outputs.record(fget(), sig, None)
            return check(y, xs, ctx)

        return finish


class Named:
    """What a runner kept under f (held weakly) needs of its problem: the names its
    errors give, the compiled functions, never f (``f`` is None)."""

    __slots__ = ("aux", "backend", "fns", "op", "single")
    f = None

    def __init__(self, prob: Problem) -> None:
        self.op, self.backend, self.aux = prob.op, prob.backend, prob.aux
        self.fns, self.single = prob.fns, prob.single


def _output_check(op: str, backend: Any, impl: Any, scalar: bool) -> Callable:
    """``check(y, xs, ctx)``: f(x) is an array of the framework, and a scalar when
    ``scalar`` (a NumPy output once per kind; ``connected`` every time)."""
    is_output, connected, is_complex = impl.is_output, impl.connected, impl.is_complex
    jacobian = "jacobian" in op
    trees = op in outputs.TREE_OPS
    own = impl.own_output

    passed = [None]  # the kind of the last NumPy output that passed

    def check(y: Any, xs: tuple, ctx: tuple) -> Any:
        if own is not None:
            y = own(y)
        # the kind of a NumPy output, on which the checks below depend alone: an output of
        # the kind that passed last is not checked again (finite differences evaluate f
        # many times per call); any other output is checked every time
        kind = None
        if type(y) is np.ndarray or isinstance(y, np.generic):
            kind = (type(y), y.dtype, y.shape)
        if kind is None or kind != passed[0]:
            if _discrete(y):  # also a NumPy bool or integer scalar, which is no output
                raise _checks.integer_output(op, backend, y.dtype)
            if not is_output(y):
                raise _checks.not_array(op, backend, y, impl.traits.output_kind, trees)
            if scalar and tuple(getattr(y, "shape", ())) != ():
                raise _checks.not_scalar(op, backend, tuple(y.shape))
            if scalar and is_complex(y):
                raise _checks.complex_output(op, backend)
            if jacobian and is_complex(y):
                raise _checks.complex_jacobian(op, backend)
            passed[0] = kind
        if connected(xs, y) is False:
            _checks.disconnected(op, backend, _config.strict())
        return y

    return check


def _discrete(y: Any) -> bool:
    """y holds integers or booleans (NumPy, JAX or torch dtype)."""
    dtype = getattr(y, "dtype", None)
    if dtype is None:
        return False
    floating = getattr(dtype, "is_floating_point", None)  # a torch dtype
    if floating is not None:
        return not (floating or dtype.is_complex)
    dtype = numpy_dtype(dtype)
    return dtype is not None and dtype.kind in "iub"
