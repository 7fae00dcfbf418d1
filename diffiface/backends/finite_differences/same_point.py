"""Same-point preparations by finite differences (see ``diffiface.operators.same_point``).

hvp keeps the gradient at x: each direction is one more gradient, differenced one-sidedly
with a relative step sqrt(eps / inner step), which balances the outer truncation error
against the noise of the inner gradient (about 1e-5 relative error in float64 with the
default central inner step; ``hvp`` differences centrally, two gradients a direction).
jvp keeps f(x): each tangent is one more value of f (forward or backward method) or two
(central). vjp keeps the Jacobian: each cotangent is a product with it.
"""

from __future__ import annotations

import numpy as np


def _at(value, gradient):
    return lambda: (value, gradient)


def _loop(one):
    return lambda many: [one(v) for v in many]


def _step(impl, prob, xs: tuple, vs: tuple, rel: float) -> float:
    """The step along vs: ``rel`` relative to x's size, over vs's largest entry."""
    scale = max((float(np.max(np.abs(v), initial=0)) for v in vs), default=0.0)
    size = max((float(np.max(np.abs(x), initial=0)) for x in xs), default=0.0)
    return rel * max(1.0, size) / scale if scale else 0.0


def hvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    y, g = impl.value_and_gradient(prob, xs, ctx)
    dtype = np.result_type(*xs)
    if impl.step is not None:
        rel = impl._checked_step(prob, dtype)
    else:
        rel = float(np.sqrt(np.finfo(dtype).eps / impl._rel_step(prob, dtype)))

    def one(vs: tuple) -> tuple:
        h = _step(impl, prob, xs, vs, rel)
        if h == 0.0:
            return tuple(np.zeros_like(x) for x in xs)
        moved = tuple(x + h * v for x, v in zip(xs, vs, strict=True))
        plus = impl.gradient(prob, moved, ctx)
        return tuple(
            np.asarray((p - q) / h, dtype=x.dtype) for p, q, x in zip(plus, g, xs, strict=True)
        )

    return _at(y, g), one, _loop(one)


def jvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    fn = prob.flat()
    y = impl._eval(fn, xs, ctx)
    dtype = np.result_type(*xs)

    def one(vs: tuple):
        h = _step(impl, prob, xs, vs, impl._rel_step(prob, dtype))
        if h == 0.0:
            return np.zeros_like(y)
        t = impl._difference(fn, xs, ctx, y, vs, h)
        return np.asarray(t, dtype=np.result_type(y, np.float32))

    return _at(y, None), one, _loop(one)


def vjp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    y, pb = impl.value_and_pullback(prob, xs, ctx)
    return _at(y, None), pb, _loop(pb)
