"""Run by test_jax_sharded.py in a subprocess: JAX on 8 simulated CPU devices (the flag
is set before jax is imported, in ``main``: importing this module does nothing). Each
operator on arrays sharded over the mesh equals the same call on unsharded arrays, and
the result keeps the input's sharding; the same under jax.jit with in/out shardings and
inside shard_map with a psum loss."""

from __future__ import annotations

import os

import numpy as np


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)


def main():
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import diffiface as di

    jax.config.update("jax_enable_x64", True)
    assert len(jax.devices()) == 8
    mesh = Mesh(np.array(jax.devices()), ("d",))
    sharded = NamedSharding(mesh, P("d"))
    b = di.AutoJax()

    def f(x):
        return jnp.sum(jnp.sin(x) ** 2 * x)

    def g(x):
        return jnp.sin(x) * x[::-1]

    def spec(a):
        return a.sharding.spec if isinstance(a.sharding, NamedSharding) else None

    plain = jnp.linspace(0.1, 1.0, 16)
    x = jax.device_put(plain, sharded)
    v = jax.device_put(jnp.cos(plain), sharded)
    cases = [
        ("gradient", f, ()),
        ("jvp", g, (v,)),
        ("vjp", g, (v,)),
        ("hvp", f, (v,)),
    ]
    for op, fn, args in cases:
        for prep in (False, True):
            kw = {"prep": getattr(di, f"prepare_{op}")(fn, b, x, *args)} if prep else {}
            got = getattr(di, op)(fn, b, x, *args, **kw)
            close(got, getattr(di, op)(fn, b, plain, *(np.asarray(a) for a in args)))
            assert spec(got) == P("d"), (op, prep, got.sharding)
    jac = di.jacobian(g, b, x)
    close(jac, jax.jacobian(g)(plain))
    assert spec(jac)[-1] == "d", jac.sharding  # the input axis keeps its sharding
    close(di.hessian(f, b, x), jax.hessian(f)(plain))
    xb = jax.device_put(plain.reshape(16, 1), NamedSharding(mesh, P("d", None)))
    bj = di.batched_jacobian(lambda x: jnp.sin(x) * x, b, xb)
    close(bj[:, 0, 0], jnp.sin(plain) + plain * jnp.cos(plain))
    assert spec(bj)[0] == "d", bj.sharding

    # under jax.jit with in/out shardings
    jitted = jax.jit(lambda x: di.gradient(f, b, x), in_shardings=sharded, out_shardings=sharded)
    got = jitted(x)
    close(got, jax.grad(f)(plain))
    assert spec(got) == P("d")

    # inside shard_map: a psum loss, differentiated by diffiface and by jax.grad
    def loss(x):
        local = lambda xl: jax.lax.psum(jnp.sum(jnp.sin(xl) ** 2), "d")  # noqa: E731
        return jax.shard_map(local, mesh=mesh, in_specs=P("d"), out_specs=P())(x)

    got = di.gradient(loss, b, x)
    close(got, jax.grad(loss)(x))
    close(got, 2 * jnp.sin(plain) * jnp.cos(plain))
    _tangents_and_rules(di, b, jax, jnp, mesh, sharded, spec, x, plain, f, g)
    print("mesh ok", flush=True)


def _tangents_and_rules(di, b, jax, jnp, mesh, sharded, spec, x, plain, f, g):
    """Tangents (one batched pass) keep each direction's sharding; a gradient penalty
    with FixedParams over sharded weights, differentiated by jax.grad (eager and jitted),
    equals the native double grad for every strategy."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    vs = di.Tangents(jax.device_put(jnp.cos(plain), sharded), jax.device_put(plain, sharded))
    ps = di.Tangents(jnp.cos(plain), plain)
    for op, fn in (("jvp", g), ("vjp", g), ("hvp", f)):
        got = getattr(di, op)(fn, b, x, vs)
        for a, want in zip(got, getattr(di, op)(fn, b, plain, ps), strict=True):
            close(a, want)
            assert spec(a) == P("d"), (op, a.sharding)
    w = jax.device_put(jnp.linspace(-1, 1, 32).reshape(16, 2), NamedSharding(mesh, P("d", None)))

    def model(x, w):
        return jnp.sum(jnp.tanh(x @ w))

    def native(w):
        return jnp.sum(jax.grad(model)(x, w) ** 2)

    want = jax.grad(native)(w)
    for strategy in ("auto", "reverse_over_reverse", "forward_over_reverse"):

        def penalty(w, strategy=strategy):
            gx = di.gradient(di.FixedParams(model, w, strategy=strategy), b, x)
            return jnp.sum(gx**2)

        got = jax.grad(penalty)(w)
        close(got, want)
        assert spec(got)[0] == "d", (strategy, got.sharding)  # (P("d") is P("d", None))
        close(jax.jit(jax.grad(penalty))(w), want)


if __name__ == "__main__":
    main()
