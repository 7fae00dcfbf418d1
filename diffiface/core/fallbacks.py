"""Second-order operators derived from the primitives, written once.

A backend that gives only ``value_and_jvp`` and/or ``value_and_pullback`` (see
``core.backend``) gets hvp, hessian and second_derivative from them: the
gradient is one pullback (or n jvps), and its derivative another jvp (forward
over reverse) or pullback (reverse over reverse, ``combo[0] == "reverse"``; the
Hessian is symmetric, so ``Hᵀ v = H v``). This works wherever the primitives
nest, as every AD framework's do; a backend overrides a method where its native
version is faster.
"""

from __future__ import annotations

import math
from typing import Any

from .._tree import flatten
from . import convert
from .problem import Problem


class DerivedSecondOrder:
    """The second-order methods of ``BackendImpl`` in terms of its first-order ones."""

    def gradient_and_hvp(self, prob, xs: tuple, vs: tuple, ctx: tuple, combo):
        """(gradient leaves, H v leaves)."""
        gprob = self._gradient_problem(prob)
        v = self.concat([self.reshape(a, (-1,)) for a in vs])
        if combo is not None and combo[0] == "reverse":
            g, pb = self.value_and_pullback(gprob, xs, ctx)
            hv = pb(v)
            return self._split(g, xs), tuple(self.cast(a, x) for a, x in zip(hv, xs, strict=True))
        g, hv = self.value_and_jvp(gprob, xs, vs, ctx)
        return self._split(g, xs), self._split(hv, xs)

    def value_gradient_and_hessian(self, prob, xs: tuple, ctx: tuple, combo):
        """(f(x), gradient leaves, H) at one array x: the Jacobian of the gradient, by
        rows of pullbacks for a reverse ``combo``, else as ``value_and_jacobian`` picks."""
        (x,) = xs
        gprob = self._gradient_problem(prob)
        n = math.prod(tuple(x.shape))
        if not n:  # no basis to run over
            y, g = self.value_and_gradient(prob, xs, ctx)
            return y, g, convert.zeros(self, (*x.shape, *x.shape), x)
        if combo is not None and combo[0] == "reverse":
            g, pb = self.value_and_pullback(gprob, xs, ctx)
            rows = [pb(self.basis(g, i))[0] for i in range(n)]
            h = self.stack(rows, 0)
        else:
            g, h = self.value_and_jacobian(gprob, xs, ctx)
        y = prob.flat()(xs, *ctx)
        return y, self._split(g, xs), self.reshape(h, (*x.shape, *x.shape))

    def value_derivative_and_second_derivative(self, prob, xs: tuple, ctx: tuple):
        """(f(x), f'(x), f''(x)) at a scalar x: a jvp of a jvp."""
        one = (self.ones_like(xs[0]),)

        def d(x, *c):
            return self.value_and_jvp(prob, (x,), one, c)[1]

        dprob = Problem(prob.op, prob.backend, self, d, prob.treedef, True, False)
        d1, d2 = self.value_and_jvp(dprob, xs, one, ctx)
        return prob.flat()(xs, *ctx), d1, d2

    def _gradient_problem(self, prob) -> Problem:
        """f's gradient as one flat vector, a Problem on the same x."""
        single = prob.single

        def grad(x, *ctx):
            xs = (x,) if single else tuple(flatten(x)[0])
            g = self.value_and_gradient(prob, xs, ctx)[1]
            return self.concat([self.reshape(a, (-1,)) for a in g])

        return Problem(prob.op, prob.backend, self, grad, prob.treedef, single, False)

    def _split(self, flat: Any, xs: tuple) -> tuple:
        """A flat vector cut into leaves shaped like xs."""
        out, start = [], 0
        for x in xs:
            n = math.prod(tuple(x.shape))
            out.append(self.cast(self.reshape(flat[start : start + n], tuple(x.shape)), x))
            start += n
        return tuple(out)
