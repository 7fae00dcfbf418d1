"""The same gradient, jacobian, jvp, vjp and hvp with all four backends, side by side."""

import jax
import numpy as np

import diffiface as di

jax.config.update("jax_enable_x64", True)  # the demo works in float64 on every backend

BACKENDS = [di.AutoJax(), di.AutoTorch(), di.AutoAutograd(), di.AutoFiniteDifferences()]


def loss(x):
    """R^3 -> R: a Rosenbrock-like sum (only + - * ** and .sum: runs on every array kind)."""
    return ((1 - x[:-1]) ** 2 + 10 * (x[1:] - x[:-1] ** 2) ** 2).sum()


def field(x):
    """R^3 -> R^2."""
    return x[:2] * x[1:] ** 2


x = np.array([0.5, -1.0, 2.0])
v = np.array([1.0, 0.0, -1.0])
w = np.array([1.0, 2.0])

rows = []
for b in BACKENDS:
    rows.append(
        (
            repr(b),
            di.gradient(loss, b, x),
            di.jacobian(field, b, x),
            di.jvp(field, b, x, v),
            di.vjp(field, b, x, w),
            di.hvp(loss, b, x, v),
        )
    )

np.set_printoptions(precision=6, suppress=True)
for name, g, j, t, c, h in rows:
    print(name)
    print("  gradient:", g)
    print("  jacobian:", j.tolist())
    print("  jvp:     ", t)
    print("  vjp:     ", c)
    print("  hvp:     ", h)

ref = rows[0]
for name, *res in rows[1:]:
    tol = 1e-4 if "Finite" in name else 1e-12
    ok = all(np.allclose(a, b, rtol=tol, atol=tol) for a, b in zip(res, ref[1:], strict=True))
    print(f"{name} agrees with {ref[0]}: {ok}")
    assert ok
