"""The native side of the performance matrix: each framework's best formulation of
each operator, written as a competent user of that framework writes it.

``native(fw, op, f, variant)`` returns a list of calls taking ``(x)`` or ``(x, t)``
(two or more where the framework has several sensible formulations; matrix.py times
them and keeps the fastest). ``variant`` is "plain", "aux" (f returns ``(out, aux)``;
the call returns ``(result, aux)`` like diffiface) or "tangents" (``t`` is a tuple of
k tangents; the call returns the k results, stacked where the framework batches).
JAX calls are jitted unless ``jit=False`` (the closure-per-call form). Finite
differences have no framework native: their reference is a plain NumPy central
difference with diffiface's default step.
"""

from __future__ import annotations

import numpy as np

# ---------------------------------------------------------------- test functions


def functions(xp) -> dict:
    """The matrix's functions in the namespace ``xp`` (jax.numpy, torch,
    autograd.numpy or mlx.core): scalar ``s`` and vector ``v`` (arrays or a dict {"a", "b"}),
    their aux and pytree-output forms, ``make_s(c)`` / ``make_v(c)`` (a new closure
    each call), ``batch`` (per-sample, for batched_jacobian) and ``g`` (scalar x)."""

    def s(x):
        if hasattr(x, "keys"):  # a dict (autograd traces it as a DictBox)
            return xp.sum(xp.sin(x["a"]) * x["b"]) + xp.sum(x["a"] ** 2)
        return xp.sum(xp.sin(x) * x)

    def v(x):
        if hasattr(x, "keys"):
            return xp.sin(x["a"]) * x["b"]
        return xp.sin(x) * x

    return {
        "s": s,
        "v": v,
        "s_aux": lambda x: (s(x), xp.cos(x)),
        "v_aux": lambda x: (v(x), xp.cos(x)),
        "v_tree": lambda x: {"y": xp.sin(x) * x, "z": xp.cos(x)},
        "make_s": lambda c: lambda x: c * xp.sum(xp.sin(x) * x),
        "make_v": lambda c: lambda x: c * (xp.sin(x) * x),
        "batch": lambda x: xp.sin(x) * x[..., :1],
        "g": lambda x: xp.sin(x) * x,
    }


# ---------------------------------------------------------------------------- JAX


def _jax_one(op: str, f, aux: bool):
    import jax

    if op == "gradient":
        return jax.grad(f, has_aux=aux)
    if op == "value_and_gradient":
        return jax.value_and_grad(f)
    if op == "derivative":
        return jax.grad(f)
    if op == "second_derivative":
        return jax.grad(jax.grad(f))
    if op == "hessian":
        return jax.hessian(f)
    if op == "jvp":

        def jvp(x, t):
            out = jax.jvp(f, (x,), (t,), has_aux=aux)
            return (out[1], out[2]) if aux else out[1]

        return jvp
    if op == "vjp":

        def vjp(x, w):
            out = jax.vjp(f, x, has_aux=aux)
            g = out[1](w)[0]
            return (g, out[2]) if aux else g

        return vjp
    if op == "hvp":

        def hvp(x, t):
            out = jax.jvp(jax.grad(f, has_aux=aux), (x,), (t,), has_aux=aux)
            return (out[1], out[2]) if aux else out[1]

        return hvp
    raise KeyError(op)


def jax_native(op: str, f, variant: str = "plain", jit: bool = True) -> list:
    import jax
    import jax.numpy as jnp

    wrap = jax.jit if jit else (lambda g: g)
    if op == "jacobian":
        return [wrap(jax.jacfwd(f)), wrap(jax.jacrev(f))]
    if op == "batched_jacobian":
        return [wrap(jax.vmap(jax.jacfwd(f))), wrap(jax.vmap(jax.jacrev(f)))]
    if variant == "tangents":
        one = _jax_one(op, f, False)
        return [wrap(lambda x, ts: jax.vmap(lambda t: one(x, t))(jnp.stack(ts)))]
    return [wrap(_jax_one(op, f, variant == "aux"))]


# -------------------------------------------------------------------------- torch


def _req(x):
    """x with fresh leaves that require grad, the leaves, and how to rebuild x."""
    if isinstance(x, dict):
        d = {k: a.detach().requires_grad_() for k, a in x.items()}
        return d, list(d.values()), lambda gs: dict(zip(d, gs, strict=True))
    xg = x.detach().requires_grad_()
    return xg, [xg], lambda gs: gs[0]


def _outs(y, w):
    """Output leaves and matching cotangent leaves (dict outputs by key)."""
    if isinstance(y, dict):
        return [y[k] for k in y], [w[k] for k in y]
    return [y], [w]


def _leaves(t):
    return list(t.values()) if isinstance(t, dict) else [t]


def _torch_grad(f, aux):
    import torch

    def grad(x):
        xg, leaves, back = _req(x)
        y = f(xg)
        if aux:
            y, a = y
            return back(torch.autograd.grad(y, leaves)), a.detach()
        return back(torch.autograd.grad(y, leaves))

    return [grad, torch.func.grad(f, has_aux=aux)]


def _torch_value_and_grad(f):
    import torch

    def vg(x):
        xg, leaves, back = _req(x)
        y = f(xg)
        return y.detach(), back(torch.autograd.grad(y, leaves))

    gv = torch.func.grad_and_value(f)
    return [vg, lambda x: gv(x)[::-1]]


def _torch_jvp(f, aux):
    import torch
    import torch.autograd.forward_ad as fwad

    def func_jvp(x, t):
        out = torch.func.jvp(f, (x,), (t,), has_aux=aux)
        return (out[1], out[2]) if aux else out[1]

    def dual(x, t):
        with fwad.dual_level():
            y = f(fwad.make_dual(x, t))
            if aux:
                return fwad.unpack_dual(y[0]).tangent, y[1].detach()
            if isinstance(y, dict):
                return {k: fwad.unpack_dual(a).tangent for k, a in y.items()}
            return fwad.unpack_dual(y).tangent

    return [func_jvp, dual]


def _torch_vjp(f, aux):
    import torch

    def grad_vjp(x, w):
        xg, leaves, back = _req(x)
        y = f(xg)
        a = None
        if aux:
            y, a = y
        ys, ws = _outs(y, w)
        g = back(torch.autograd.grad(ys, leaves, ws))
        return (g, a.detach()) if aux else g

    def func_vjp(x, w):
        out = torch.func.vjp(f, x, has_aux=aux)
        g = out[1](w)[0]
        return (g, out[2]) if aux else g

    return [grad_vjp, func_vjp]


def _torch_hvp(f, aux):
    import torch

    def double(x, t):
        xg, leaves, back = _req(x)
        y = f(xg)
        a = None
        if aux:
            y, a = y
        g = torch.autograd.grad(y, leaves, create_graph=True)
        hv = back(torch.autograd.grad(g, leaves, _leaves(t)))
        return (hv, a.detach()) if aux else hv

    def fwd_rev(x, t):
        out = torch.func.jvp(torch.func.grad(f, has_aux=aux), (x,), (t,), has_aux=aux)
        return (out[1], out[2]) if aux else out[1]

    return [double, fwd_rev]


def _torch_tangents(op, f) -> list:
    import torch

    fn = torch.func
    if op == "jvp":
        one = lambda x, t: fn.jvp(f, (x,), (t,))[1]  # noqa: E731
    elif op == "hvp":
        one = lambda x, t: fn.jvp(fn.grad(f), (x,), (t,))[1]  # noqa: E731
    else:

        def batched(x, ws):
            xg = x.detach().requires_grad_()
            return torch.autograd.grad(f(xg), xg, torch.stack(ws), is_grads_batched=True)[0]

        def looped(x, ws):
            xg = x.detach().requires_grad_()
            y = f(xg)
            return [torch.autograd.grad(y, xg, w, retain_graph=True)[0] for w in ws]

        return [lambda x, ws: fn.vmap(fn.vjp(f, x)[1])(torch.stack(ws))[0], batched, looped]
    loop = [lambda x, ts: [one(x, t) for t in ts]]
    if op == "hvp":

        def retained(x, ts):
            xg = x.detach().requires_grad_()
            (g,) = torch.autograd.grad(f(xg), xg, create_graph=True)
            return [torch.autograd.grad(g, xg, t, retain_graph=True)[0] for t in ts]

        loop.append(retained)
    return [lambda x, ts: fn.vmap(lambda t: one(x, t))(torch.stack(ts)), *loop]


def _torch_scalar(op, f) -> list:
    import torch

    def first(x):
        xg = x.detach().requires_grad_()
        return torch.autograd.grad(f(xg), xg)[0]

    def second(x):
        xg = x.detach().requires_grad_()
        (d,) = torch.autograd.grad(f(xg), xg, create_graph=True)
        return torch.autograd.grad(d, xg)[0]

    if op == "derivative":
        return [first, torch.func.grad(f)]
    return [second, torch.func.grad(torch.func.grad(f))]


def torch_native(op: str, f, variant: str = "plain", dict_x: bool = False) -> list:
    import torch

    aux = variant == "aux"
    fn = torch.func
    if variant == "tangents":
        return _torch_tangents(op, f)
    if op == "gradient":
        return _torch_grad(f, aux)
    if op == "value_and_gradient":
        return _torch_value_and_grad(f)
    if op == "jvp":
        calls = _torch_jvp(f, aux)
        return calls[:1] if dict_x else calls
    if op == "vjp":
        return _torch_vjp(f, aux)
    if op == "hvp":
        return _torch_hvp(f, aux)
    if op == "hessian":
        return [fn.hessian(f), lambda x: torch.autograd.functional.hessian(f, x, vectorize=True)]
    if op == "jacobian":
        return [fn.jacfwd(f), fn.jacrev(f)]
    if op == "batched_jacobian":
        return [fn.vmap(fn.jacfwd(f)), fn.vmap(fn.jacrev(f))]
    return _torch_scalar(op, f)


# ----------------------------------------------------------------------- autograd


def _autograd_aux(op, f) -> list:
    """has_aux: autograd traces no plain tuple output, so the aux rides along as
    ``grad_and_aux``'s aux (gradient, vjp as the gradient of <f, w>, hvp as the
    gradient of <grad f, v>) or as the second half of one concatenated output (jvp)."""
    import autograd
    from autograd.differential_operators import grad_and_aux, make_jvp

    if op == "gradient":
        return [grad_and_aux(f)]
    if op == "jvp":

        def jvp(x, t):
            y, tt = make_jvp(lambda x: anp_concat(f(x)))(x)(t)
            return tt[: x.size], y[x.size :]

        return [jvp]
    if op == "vjp":

        def vjp(x, w):
            return grad_and_aux(lambda x: (lambda y, a: (autograd.numpy.sum(y * w), a))(*f(x)))(x)

        return [vjp]

    def hvp(x, v):
        inner = grad_and_aux(f)
        return grad_and_aux(lambda x: (lambda g, a: (autograd.numpy.sum(g * v), a))(*inner(x)))(x)

    return [hvp]


def anp_concat(pair):
    import autograd.numpy as anp

    return anp.concatenate([anp.ravel(pair[0]), anp.ravel(pair[1])])


def _autograd_tree_out(op, f) -> list:
    """f returns a dict: vjp as the gradient of sum_k <f_k, w_k>; jvp of the outputs
    concatenated, split after (autograd traces no plain dict output)."""
    import autograd
    import autograd.numpy as anp
    from autograd.differential_operators import make_jvp

    if op == "vjp":
        return [lambda x, w: autograd.grad(lambda x: sum(anp.sum(f(x)[k] * w[k]) for k in w))(x)]

    def jvp(x, t):
        keys = ("y", "z")
        tt = make_jvp(lambda x: anp.concatenate([f(x)[k] for k in keys]))(x)(t)[1]
        return {k: tt[i * x.size : (i + 1) * x.size] for i, k in enumerate(keys)}

    return [jvp]


def autograd_native(
    op: str, f, variant: str = "plain", dict_x: bool = False, dict_out: bool = False
) -> list:
    import autograd
    from autograd.differential_operators import make_jvp, make_vjp

    if variant == "aux":
        return _autograd_aux(op, f)
    if dict_out and op in ("jvp", "vjp"):
        return _autograd_tree_out(op, f)
    if variant == "tangents":
        if op == "jvp":
            return [lambda x, ts: [make_jvp(f)(x)(t)[1] for t in ts]]
        inner = f if op == "vjp" else autograd.grad(f)  # the Hessian is symmetric

        def looped(x, ts):
            back = make_vjp(inner)(x)[0]
            return [back(t) for t in ts]

        return [looped]
    simple = {
        "gradient": autograd.grad,
        "value_and_gradient": autograd.value_and_grad,
        "derivative": autograd.grad,
        "second_derivative": lambda g: autograd.grad(autograd.grad(g)),
        "hessian": autograd.hessian,
        "jacobian": autograd.jacobian,
    }
    if op == "jacobian" and dict_out:  # autograd.jacobian takes array outputs only
        parts = {k: autograd.jacobian(lambda x, k=k: f(x)[k]) for k in ("y", "z")}
        return [lambda x: {k: part(x) for k, part in parts.items()}]
    if op in simple:
        return [simple[op](f)]
    if op == "jvp":
        return [lambda x, t: make_jvp(f)(x)(t)[1]]
    if op == "vjp":
        return [lambda x, w: make_vjp(f)(x)[0](w)]
    calls = [
        lambda x, t: make_vjp(autograd.grad(f))(x)[0](t),
        lambda x, t: make_jvp(autograd.grad(f))(x)(t)[1],
    ]
    if not dict_x:
        calls.append(autograd.hessian_vector_product(f))
    return calls


# ------------------------------------------------------------ finite differences


def fd_step(x):
    """diffiface's default central-difference step: cbrt(eps) * max(|x|, 1)."""
    return np.cbrt(np.finfo(x.dtype).eps) * np.maximum(np.abs(x), 1.0)


def fd_native(op: str, f) -> list:
    """Plain NumPy central differences (no framework native exists)."""
    if op == "gradient":

        def grad(x):
            h, xp, g = fd_step(x), x.copy(), np.empty_like(x)
            for i in range(x.size):
                xp[i] = x[i] + h[i]
                up = f(xp)
                xp[i] = x[i] - h[i]
                g[i] = (up - f(xp)) / (2 * h[i])
                xp[i] = x[i]
            return g

        return [grad]

    def jvp(x, t):
        h = np.cbrt(np.finfo(x.dtype).eps) * max(1.0, float(np.max(np.abs(x))))
        h = h / max(float(np.max(np.abs(t))), 1e-300)
        return (f(x + h * t) - f(x - h * t)) / (2 * h)

    return [jvp]
