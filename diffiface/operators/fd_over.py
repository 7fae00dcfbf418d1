"""Finite differences over another backend's derivative, on NumPy arrays
(``second_order(AutoFiniteDifferences(), inner)``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _checks
from .._backend_types import SecondOrder
from .._tree import flatten
from ..core import outputs
from ..core.problem import Problem
from .first_order import value_and_derivative, value_and_gradient


class FiniteDifferencesOver:
    """Finite differences (outer) over another backend's derivative (inner), on NumPy arrays.

    It stands in for a backend implementation: array helpers come from the
    finite-differences backend, derivatives of ``f`` from the public operators
    on the inner backend.
    """

    holds_call = True  # a plan of it holds f and the contexts: each call enters anew
    # a sparse Hessian: hvps per color, each one difference of the inner gradients, not
    # the finite-difference backend's Hessian from f's values
    sparse_hessian_nonzeros = None

    def __init__(self, backend: SecondOrder, fd: Any, f: Callable, contexts: tuple):
        self.backend, self.fd, self.inner = backend, fd, backend.inner
        self.f, self.contexts = f, contexts

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fd, name)

    def coarser(self, prob, dtype, second: bool) -> FiniteDifferencesOver:
        """This with the outer differences at twice their step (``strict``'s error
        estimate: the inner derivative is exact, the outer difference is first order)."""
        return FiniteDifferencesOver(
            self.backend, self.fd.coarser(prob, dtype, False), self.f, self.contexts
        )

    def rounding(self, prob, xs: tuple, ctx: tuple, second: bool, scale: np.ndarray):
        """The rounding of one level of differences of the inner gradient (see the
        backend's)."""
        grad = self._inner(prob, value_and_gradient, 1)
        with outputs.Sink():  # (f's aux, if any: not wanted here)
            return self.fd.rounding(grad, xs, (), False, scale)

    def _inner(self, prob, op: Callable, index: int, tree: bool = False) -> Problem:
        """A NumPy problem x -> op(f, inner, x)[index] for the finite differences. Its
        first call (at x itself) puts f's aux in the open sink; for value_gradient_and_hvp
        (``prob.f`` carries f's value as its aux) the value too, as f's own output.
        ``tree``: x is a pytree, and the result (a gradient like x) one flat vector."""
        f, inner, contexts = self.f, self.inner, self.contexts
        valued = isinstance(prob.f, outputs.ValueAsAux)
        aux = prob.f.aux if valued else prob.aux
        called = _checks.call_form(prob.op, self.backend)
        internal = _checks.call_form(op.__name__, inner)

        def g(x, *_):
            try:
                out = op(f, inner, x, *contexts, has_aux=aux)
            except _checks.ERRORS as exc:  # the inner call is diffiface's, not the user's
                _checks.restate(exc, called, internal)
                raise
            if aux:
                out, a = out
            if valued:
                y = np.asarray(out[0])
                outputs.put((y, a) if aux else y)
            elif aux:
                outputs.put(a)
            if tree:
                return np.concatenate([np.ravel(a) for a in flatten(out[index])[0]])
            return np.asarray(out[index])

        return Problem(prob.op, self.backend, self.fd, g, prob.treedef, not tree, False)

    def gradient_and_hvp(self, prob, xs, vs, ctx, combo):
        tree = not prob.single  # a pytree x: the gradient differenced as one vector
        grad = self._inner(prob, value_and_gradient, 1, tree)
        g, hv = self.fd.value_and_jvp(grad, xs, vs, ())
        if not tree:
            return (g,), (hv,)
        return _split(g, xs), _split(hv, xs)

    def hvp(self, prob, xs, vs, ctx, combo):
        return self.gradient_and_hvp(prob, xs, vs, ctx, combo)[1]

    def gradient_and_hvps(self, prob, xs, vss, ctx, combo):
        """The gradient once and an hvp per direction: 1 + 2k inner gradients (central),
        where k hvps would take the gradient at x k times."""
        tree = not prob.single
        grad = self._inner(prob, value_and_gradient, 1, tree)
        g, hvs = self.fd.value_and_jvps(grad, xs, vss, ())
        if not tree:
            return (g,), [(hv,) for hv in hvs]
        return _split(g, xs), [_split(hv, xs) for hv in hvs]

    def hessian(self, prob, xs, ctx, combo):
        return self.value_gradient_and_hessian(prob, xs, ctx, combo)[2]

    def value_gradient_and_hessian(self, prob, xs, ctx, combo):
        y = self._inner(prob, value_and_gradient, 0).flat()(xs)
        g, h = self.fd.value_and_jacobian(self._inner(prob, value_and_gradient, 1), xs, ())
        return y, (g,), h

    def chunked_hessian(self, prob, xs, ctx, combo, k: int):
        """The Hessian built k columns at a time, as the dense one is (for chunk_size)."""
        y = self._inner(prob, value_and_gradient, 0).flat()(xs)
        g, h = self.fd.chunked_jacobian(self._inner(prob, value_and_gradient, 1), xs, (), k)
        return y, (g,), h

    def value_derivative_and_second_derivative(self, prob, xs, ctx):
        y = self._inner(prob, value_and_derivative, 0).flat()(xs)
        dprob = self._inner(prob, value_and_derivative, 1)
        d, d2 = self.fd.value_and_jvp(dprob, xs, (np.ones_like(xs[0]),), ())
        return y, d, d2


def _split(flat: np.ndarray, xs: tuple) -> tuple:
    """A flat vector back into leaves shaped and typed like ``xs``."""
    ends = np.cumsum([x.size for x in xs])[:-1]
    parts = np.split(flat, ends)
    return tuple(
        p.reshape(x.shape).astype(x.dtype, copy=False) for p, x in zip(parts, xs, strict=True)
    )
