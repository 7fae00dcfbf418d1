"""The MLX side of the performance matrix (matrix_natives.py has the others): MLX's
best formulation of each operator, ``mx.grad``, ``mx.value_and_grad``, ``mx.jvp``,
``mx.vjp`` and ``mx.vmap`` of them, and the same under ``mx.compile``.

MLX is lazy: matrix_cases.py evaluates every result (``mx.eval``) inside the timed
call, on both sides. The rows run float32, MLX's own dtype (its float64 is CPU only,
and 1.5x slower than float32 there at n = 1e6).
"""

from __future__ import annotations


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


def _mlx_tangents(op: str, f, separate: bool) -> list:
    """K tangents: mx.vmap over the stacked tangents, or a loop. ``separate``: the K
    results as K arrays (the vmapped stack's rows), as diffiface gives them for K
    separate tangents; MLX evaluates each row as a node of its own (1.2x the stacked
    call's time at n = 1e3)."""
    import mlx.core as mx

    one = _mlx_one(op, f)
    calls = [lambda x, ts: mx.vmap(lambda t: one(x, t))(mx.stack(ts))]
    if op == "hvp":
        g = mx.grad(f)
        calls.append(lambda x, ts: mx.vmap(lambda t: mx.vjp(g, [x], [t])[1][0])(mx.stack(ts)))
    if separate:
        calls = [lambda x, ts, c=c: list(c(x, ts)) for c in calls]
    return [*calls, lambda x, ts: [one(x, t) for t in ts]]


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
    """MLX's formulations of ``op`` (``variant``: "plain", "aux", "tangents" for K
    tangents stacked, "tangents k" for K separate ones)."""
    import mlx.core as mx

    aux = variant == "aux"
    if variant.startswith("tangents"):
        return _mlx_tangents(op, f, separate=variant == "tangents k")
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
