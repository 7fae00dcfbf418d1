"""Run by test_transfers.py in a subprocess: JAX on two simulated CPU devices (the flag
is set before jax is imported, in ``main``). x lives on the second device, the default
is the first: every operator's warm call, prepared and unprepared, under
``jax.transfer_guard("disallow")``, returns its results on the second device, and so do
AutoSparse and FixedParams under jax.grad. An array diffiface made on the default
device would have to move, and the guard would stop it."""

from __future__ import annotations

import os
import pathlib
import sys


def main():
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    sys.path.insert(0, str(pathlib.Path(__file__).parents[1]))
    import jax
    import jax.numpy as jnp
    import numpy as np
    from device_cases import cases, check, devices_of, jax_on, ready

    import diffiface as di

    jax.config.update("jax_enable_x64", True)
    first, second = jax.devices("cpu")[:2]  # (the default device may be a GPU)
    jax.config.update("jax_default_device", first)
    place, name = jax_on(second), "cpu:1"
    failures = []
    for s, op in cases(di.AutoJax()):
        for prepared in (True, False):
            try:
                call = ready(di.AutoJax(), s, op, place, prepared)
                call()
                with jax.transfer_guard("disallow"):
                    out = call()
                failures += [f"{s.name} {op} {prepared}: {p}" for p in check(
                    di.AutoJax(), s, op, out, name)]  # fmt: skip
            except Exception as e:
                failures.append(f"{s.name} {op} prepared={prepared}: {type(e).__name__}: {e}")

    def f(x):
        return jnp.sum(x[1:] * x[:-1]) + jnp.sum(x**3)

    x = place(np.linspace(0.5, 1.5, 6))
    for b in (di.AutoSparse(di.AutoJax()),):
        try:
            di.hessian(f, b, x)
            with jax.transfer_guard("disallow"):
                h = di.hessian(f, b, x)
            if devices_of(h.data) != {name} or devices_of(h.indices) != {name}:
                failures.append(f"sparse hessian on {devices_of(h.data)}, {devices_of(h.indices)}")
        except Exception as e:
            failures.append(f"sparse hessian: {type(e).__name__}: {e}")

    def loss(x, w):
        inner = di.FixedParams(lambda x, w: jnp.sum(w * x**2), w)
        return jnp.sum(di.gradient(inner, di.AutoJax(), x) ** 2)

    w = place(np.ones(6))
    g = jax.jit(jax.grad(loss, argnums=(0, 1)))
    g(x, w)
    with jax.transfer_guard("disallow"):
        gx, gw = g(x, w)
    if devices_of((gx, gw)) != {name}:
        failures.append(f"FixedParams under jax.grad on {devices_of((gx, gw))}")
    if failures:
        print("\n".join(failures))
        raise SystemExit(1)
    print("two devices ok")


if __name__ == "__main__":
    main()
