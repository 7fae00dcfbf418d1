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
    """The matrix's functions in the namespace ``xp`` (jax.numpy, torch or
    autograd.numpy): scalar ``s`` and vector ``v`` (arrays or a dict {"a", "b"}),
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


# --------------------------------------------------------------------------- MLX
# MLX is lazy: matrix.py evaluates every result (mx.eval) inside the timed call.


def _mlx_leaves(x) -> tuple[list, object]:
    """x's arrays as the list MLX's jvp and vjp take (a dict by key), and the function
    that puts a list back in x's shape."""
    if isinstance(x, dict):
        keys = sorted(x)
        return [x[k] for k in keys], lambda a: dict(zip(keys, a, strict=True))
    return [x], lambda a: a[0]


def _mlx_list(y) -> list:
    """f's output as a list of arrays (a dict by key, an (out, aux) pair in order)."""
    if isinstance(y, dict):
        return [y[k] for k in sorted(y)]
    return list(y) if isinstance(y, tuple) else [y]


def _mlx_jvp(f, aux: bool, tree_out: bool):
    import mlx.core as mx

    def jvp(x, t):
        xs, back = _mlx_leaves(x)
        ys, ts = mx.jvp(lambda *a: _mlx_list(f(back(a))), xs, _mlx_leaves(t)[0])
        if aux:
            return ts[0], ys[1]
        return dict(zip(("y", "z"), ts, strict=True)) if tree_out else ts[0]

    return [jvp]


def _mlx_vjp(f, aux: bool):
    import mlx.core as mx

    def vjp(x, w):
        xs, back = _mlx_leaves(x)
        ws = _mlx_list(w)
        if aux:  # f's aux as a second output with a zero cotangent: one pass
            ws = [w, mx.zeros_like(w)]
        ys, gs = mx.vjp(lambda *a: _mlx_list(f(back(a))), xs, ws)
        return (back(gs), ys[1]) if aux else back(gs)

    return [vjp]


def _mlx_grad_leaves(f, aux: bool, back):
    """The gradient as a function of x's leaves returning a list (aux last)."""
    import mlx.core as mx

    if aux:
        vg = mx.value_and_grad(f)

        def grad(*a):
            (_, extra), g = vg(back(a))
            return [*_mlx_leaves(g)[0], extra]

        return grad
    g = mx.grad(f)
    return lambda *a: _mlx_leaves(g(back(a)))[0]


def _mlx_hvp(f, aux: bool):
    """Forward over reverse and reverse over reverse (aux as the gradient's extra
    output, from the same pass)."""
    import mlx.core as mx

    def fwd_rev(x, t):
        xs, back = _mlx_leaves(x)
        ys, ts = mx.jvp(_mlx_grad_leaves(f, aux, back), xs, _mlx_leaves(t)[0])
        return (back(ts[:1]), ys[-1]) if aux else back(ts)

    def rev_rev(x, t):
        xs, back = _mlx_leaves(x)
        ws = _mlx_leaves(t)[0]
        if aux:
            ys, gs = mx.vjp(_mlx_grad_leaves(f, aux, back), xs, [*ws, mx.zeros_like(x)])
            return back(gs), ys[-1]
        return back(mx.vjp(_mlx_grad_leaves(f, aux, back), xs, ws)[1])

    return [fwd_rev, rev_rev]


def _mlx_one(op: str, f):
    """One tangent's jvp, vjp or hvp of an array x (for vmap and loops)."""
    import mlx.core as mx

    if op == "jvp":
        return lambda x, t: mx.jvp(f, [x], [t])[1][0]
    if op == "vjp":
        return lambda x, w: mx.vjp(f, [x], [w])[1][0]
    g = mx.grad(f)
    return lambda x, t: mx.jvp(g, [x], [t])[1][0]


def _mlx_tangents(op: str, f) -> list:
    """K tangents: mx.vmap over the stacked tangents, or a loop."""
    import mlx.core as mx

    one = _mlx_one(op, f)
    calls = [
        lambda x, ts: mx.vmap(lambda t: one(x, t))(mx.stack(ts)),
        lambda x, ts: [one(x, t) for t in ts],
    ]
    if op == "hvp":
        g = mx.grad(f)
        calls.append(lambda x, ts: mx.vmap(lambda t: mx.vjp(g, [x], [t])[1][0])(mx.stack(ts)))
    return calls


def _mlx_jacobians(f) -> list:
    """Rows by a vmapped vjp, or columns by a vmapped jvp, over the identity."""
    import mlx.core as mx

    def rows(x):
        y = f(x)
        eye = mx.eye(y.size, dtype=y.dtype)
        return mx.vmap(lambda w: mx.vjp(f, [x], [w])[1][0])(eye)

    def columns(x):
        eye = mx.eye(x.size, dtype=x.dtype)
        return mx.vmap(lambda v: mx.jvp(f, [x], [v])[1][0], out_axes=1)(eye)

    return [rows, columns]


def _mlx_hessians(f) -> list:
    import mlx.core as mx

    g = mx.grad(f)

    def fwd_rev(x):
        eye = mx.eye(x.size, dtype=x.dtype)
        return mx.vmap(lambda v: mx.jvp(g, [x], [v])[1][0])(eye)

    def rev_rev(x):
        eye = mx.eye(x.size, dtype=x.dtype)
        return mx.vmap(lambda v: mx.vjp(g, [x], [v])[1][0])(eye)

    return [fwd_rev, rev_rev]


def mlx_native(op: str, f, variant: str = "plain", tree_out: bool = False) -> list:
    import mlx.core as mx

    aux = variant == "aux"
    if variant == "tangents":
        return _mlx_tangents(op, f)
    if op in ("gradient", "derivative"):
        if aux:
            vg = mx.value_and_grad(f)
            return [lambda x: (lambda ya, g: (g, ya[1]))(*vg(x))]
        return [mx.grad(f)]
    if op == "value_and_gradient":
        return [mx.value_and_grad(f)]
    if op == "second_derivative":
        return [mx.grad(mx.grad(f))]
    if op == "jvp":
        return _mlx_jvp(f, aux, tree_out)
    if op == "vjp":
        return _mlx_vjp(f, aux)
    if op == "hvp":
        return _mlx_hvp(f, aux)
    if op == "hessian":
        return _mlx_hessians(f)
    if op == "jacobian" and tree_out:  # both outputs' columns from one vmapped jvp

        def columns(x):
            eye = mx.eye(x.size, dtype=x.dtype)
            js = mx.vmap(lambda v: mx.jvp(lambda x: _mlx_list(f(x)), [x], [v])[1], out_axes=1)(eye)
            return dict(zip(sorted(f(x)), js, strict=True))

        return [columns]
    if op == "jacobian":
        return _mlx_jacobians(f)
    if op == "batched_jacobian":
        return [mx.vmap(j) for j in _mlx_jacobians(f)]
    raise KeyError(op)


def mlx_compiled(op: str, f, variant: str = "plain") -> list:
    """The same calls under ``mx.compile`` (what an MLX user adds for speed; diffiface
    never compiles f: it would freeze the arrays f closes over)."""
    import mlx.core as mx

    return [mx.compile(c) for c in mlx_native(op, f, variant)]
