"""The rows of the performance matrix: which (framework, operator, input kind, call
form, size) are measured, and for each a diffiface call and its native twin.

``build(row)`` returns ``(native, ours)``, two calls taking no arguments that return
comparable results (JAX calls block until ready), or raises ``Skip`` with a reason.
The native side is the fastest of the framework's sensible formulations
(matrix_natives.py), chosen once per row by a short timing.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from matrix_mlx import mlx_compiled, mlx_native
from matrix_natives import autograd_native, fd_native, functions, jax_native, torch_native
from timing import median_us

import diffiface as di

CORE = ("gradient", "jvp", "vjp", "hvp")
SCALAR_OUT = ("gradient", "value_and_gradient", "hvp", "hessian")
TAKES_T = ("jvp", "vjp", "hvp")
EXTRA = {
    "gradient": ("f per call", "has_aux"),
    "jvp": ("f per call", "Tangents(4)", "Tangents(4) stacked", "has_aux", "pytree out"),
    "vjp": ("f per call", "Tangents(4)", "Tangents(4) stacked", "has_aux", "pytree out"),
    "hvp": ("f per call", "Tangents(4)", "Tangents(4) stacked", "has_aux"),
}
KINDS = {
    "jax": ("array", "numpy", "pytree"),
    "torch": ("array", "numpy", "pytree"),
    "autograd": ("array", "pytree"),
    "mlx": ("array", "numpy", "pytree"),  # float32: MLX's own dtype (float64: CPU only)
}
BACKENDS = {
    "jax": di.AutoJax,
    "torch": di.AutoTorch,
    "autograd": di.AutoAutograd,
    "fd": di.AutoFiniteDifferences,
    "mlx": di.AutoMLX,
}
PREPARE = {
    "gradient": di.prepare_gradient,
    "value_and_gradient": di.prepare_gradient,
    "jvp": di.prepare_jvp,
    "vjp": di.prepare_vjp,
    "hvp": di.prepare_hvp,
    "hessian": di.prepare_hessian,
    "jacobian": di.prepare_jacobian,
    "derivative": di.prepare_derivative,
    "second_derivative": di.prepare_second_derivative,
    "batched_jacobian": di.prepare_batched_jacobian,
}
K = 4  # tangents per Tangents row
# where the rows' framework arrays live: the CPU unless benchmarks/gpu.py moves them
DEVICE: dict = {"torch": "cpu", "jax": None}
C = 2.0  # the constant a closure made per call captures


class Row(NamedTuple):
    fw: str
    op: str
    kind: str
    form: str
    n: int

    @property
    def name(self) -> str:
        return f"{self.fw} {self.op} {self.kind} {self.form} n={_size(self.n)}"


class Skip(Exception):
    pass


def _size(n: int) -> str:
    return f"1e{len(str(n)) - 1}" if n >= 10_000 and str(n).strip("0") == "1" else str(n)


def plan(quick: bool) -> list[Row]:
    """The measured combinations: every call form on every backend for the core
    operators, input kinds with and without preparation, the other operators at the
    sizes where their result is not n x n beyond 1e3, and the sparse rows."""
    sizes = (10, 1000) if quick else (10, 1000, 10**6)
    rows = []
    for fw, kinds in KINDS.items():
        for op in CORE:
            for n in sizes:
                rows += [Row(fw, op, k, f, n) for k in kinds for f in ("prepared", "unprepared")]
                rows += [
                    Row(fw, op, "array", f, n)
                    for f in EXTRA[op]
                    if n < 10**6 or f.startswith("Tangents")
                ]
        for n in (10, 1000):
            for op in ("value_and_gradient", "hessian", "jacobian", "batched_jacobian"):
                if op == "batched_jacobian" and fw == "autograd":
                    continue  # autograd has no vmap: no native to compare with
                arrays = [k for k in kinds if k != "pytree"]
                rows += [Row(fw, op, k, f, n) for k in arrays for f in ("prepared", "unprepared")]
            rows.append(Row(fw, "jacobian", "array", "pytree out", n))
        for op in ("derivative", "second_derivative"):
            rows += [
                Row(fw, op, k, f, 1) for k in ("array", "float") for f in ("prepared", "unprepared")
            ]
    for n in (10, 1000):
        rows += [
            Row("fd", op, "array", f, n)
            for op in ("gradient", "jvp")
            for f in ("prepared", "unprepared")
        ]
        rows.append(Row("jax", "gradient", "array", "f per call (hoisted jit)", n))
    for n in sizes:  # what mx.compile would change (diffiface never compiles f)
        rows += [Row("mlx", op, "array", "prepared (vs mx.compile)", n) for op in CORE]
    for n in (2000,) if quick else (2000, 10**4, 10**5):
        for fw in ("jax", "torch") if n <= 10**4 else ("jax",):
            rows += [
                Row(fw, f"sparse {op}", "array", "unprepared", n) for op in ("jacobian", "hessian")
            ]
    for op in ("jacobian", "hessian"):  # torch's dense calls take a second each: JAX only
        rows.append(Row("jax", f"sparse {op}", "array", "prepared (vs dense)", 2000))
    return rows


# --------------------------------------------------------------------- inputs


def _xs(row: Row):
    """NumPy x, tangent (or cotangent) and the K tangents of a row."""
    n = row.n
    if row.op in ("derivative", "second_derivative"):
        return 0.7, None, None
    if row.op == "batched_jacobian":
        return np.linspace(-1, 1, 4 * n).reshape(n, 4), None, None
    x = np.linspace(-1.0, 1.0, n)
    ts = tuple(np.cos(np.arange(n) * (i + 1.0)) for i in range(K))
    if row.kind == "pytree":
        half = n // 2
        split = lambda a: {"a": a[:half], "b": a[half:]}  # noqa: E731
        t = split(ts[0]) if row.op != "vjp" else ts[0][:half]
        return split(x), t, None
    if row.form == "pytree out" and row.op == "vjp":
        return x, {"y": ts[0], "z": ts[1]}, None
    return x, ts[0], ts


def _convert(fw: str, kind: str, a):
    """A NumPy value (or dict, tuple) as the row's input kind."""
    if fw == "mlx":
        return _mlx_convert(kind, a)
    if a is None or kind in ("numpy", "float") or fw in ("autograd", "fd"):
        if kind == "array" and isinstance(a, float):
            return np.asarray(a)
        return a
    if isinstance(a, dict):
        return {k: _convert(fw, kind, v) for k, v in a.items()}
    if isinstance(a, tuple):
        return tuple(_convert(fw, kind, v) for v in a)
    if fw == "jax":
        import jax
        import jax.numpy as jnp

        return jnp.asarray(a) if DEVICE["jax"] is None else jax.device_put(a, DEVICE["jax"])
    import torch

    return torch.tensor(a, dtype=torch.float64, device=DEVICE["torch"])


def _mlx_convert(kind: str, a):
    """MLX rows run float32, MLX's own dtype (its float64 is CPU only): NumPy float32
    for the numpy kind, mx.array otherwise (a float stays a float)."""
    import mlx.core as mx

    if a is None or (isinstance(a, float) and kind == "float"):
        return a
    if isinstance(a, dict):
        return {k: _mlx_convert(kind, v) for k, v in a.items()}
    if isinstance(a, tuple):
        return tuple(_mlx_convert(kind, v) for v in a)
    a = np.asarray(a, dtype=np.float32)
    return a if kind == "numpy" else mx.array(a)


def _f(row: Row, F: dict):
    if row.op in ("derivative", "second_derivative"):
        return F["g"]
    if row.op == "batched_jacobian":
        return F["batch"]
    base = "s" if row.op in SCALAR_OUT else "v"
    if row.form == "has_aux":
        return F[base + "_aux"]
    if row.form == "pytree out":
        return F["v_tree"]
    return F[base]


# --------------------------------------------------------------------- calls


def _xp(fw: str):
    if fw == "jax":
        import jax.numpy as jnp

        return jnp
    if fw == "torch":
        import torch

        return torch
    if fw == "autograd":
        import autograd.numpy as anp

        return anp
    if fw == "mlx":
        import mlx.core as mx

        return mx
    return np


def _natives(row: Row, f, jit: bool = True) -> list:
    variant = {"has_aux": "aux", "Tangents(4)": "tangents", "Tangents(4) stacked": "tangents"}
    variant = variant.get(row.form, "plain")
    if row.fw == "jax":
        return jax_native(row.op, f, variant, jit=jit)
    if row.fw == "torch":
        return torch_native(row.op, f, variant, dict_x=row.kind == "pytree")
    if row.fw == "autograd":
        tree = row.kind == "pytree"
        return autograd_native(row.op, f, variant, dict_x=tree, dict_out=row.form == "pytree out")
    if row.fw == "mlx" and row.form == "prepared (vs mx.compile)":
        return mlx_compiled(row.op, f)
    if row.fw == "mlx":
        variant = "tangents k" if row.form == "Tangents(4)" else variant
        return mlx_native(row.op, f, variant, tree_out=row.form == "pytree out")
    return fd_native(row.op, f)


def _boundary(row: Row, call):
    """The native call as its user writes it for the row's input kind: NumPy in and
    out (jit on NumPy then np.asarray; torch.from_numpy then .numpy()), a float in
    and out, or the framework's arrays as they are."""
    if row.fw == "torch" and row.kind == "numpy":
        import torch

        return lambda *a: _to_numpy(call(*(torch.from_numpy(v) for v in a)))
    if row.fw == "torch" and row.kind == "float":
        import torch

        return lambda x: call(torch.tensor(x)).item()  # diffiface makes a default-dtype tensor
    if row.fw == "jax" and row.kind == "numpy":
        return lambda *a: _to_numpy(call(*a))
    if row.fw == "jax" and row.kind == "float":
        return lambda x: float(call(x))
    if row.fw == "mlx" and row.kind == "numpy":
        import mlx.core as mx

        return lambda *a: _to_numpy(call(*(mx.array(v) for v in a)))
    if row.fw == "mlx" and row.kind == "float":
        import mlx.core as mx

        return lambda x: call(mx.array(x, dtype=mx.float32)).item()
    return call


def _to_numpy(r):
    if isinstance(r, dict):
        return {k: _to_numpy(v) for k, v in r.items()}
    if isinstance(r, (tuple, list)):
        return type(r)(_to_numpy(v) for v in r)
    return r.detach().numpy() if hasattr(r, "detach") else np.asarray(r)


def _blocking(fw: str, call, stacked: bool = False):
    """``call`` that waits for its JAX results, or evaluates its MLX ones (of a stacked
    Tangents: its one array)."""
    if fw == "mlx":
        return _evaluated(call, stacked)
    if fw == "torch" and DEVICE["torch"] != "cpu":
        return _synchronised(call)
    if fw != "jax":
        return call
    import jax

    def blocked():
        r = call()
        if isinstance(r, di.Tangents):
            jax.block_until_ready(r.stack if stacked else tuple(r))
        else:
            jax.block_until_ready(r)
        return r

    return blocked


def _synchronised(call):
    """``call`` that waits for its CUDA kernels."""
    import torch

    def synchronised():
        r = call()
        torch.cuda.synchronize()
        return r

    return synchronised


def _evaluated(call, stacked: bool):
    """``call`` that evaluates its lazy MLX results (MLX computes nothing until then)."""
    import mlx.core as mx

    def evaluated():
        r = call()
        if isinstance(r, di.Tangents):
            mx.eval(r.stack if stacked else list(r))
        elif not isinstance(r, (float, np.ndarray)):
            mx.eval(r)
        return r

    return evaluated


def _fastest(calls: list):
    """The fastest of several no-argument calls of the same result (short timing)."""
    if len(calls) == 1:
        return 0
    for c in calls:
        c()
    cost = [median_us(c, 3) for c in calls]
    reps = max(3, min(30, int(2e5 / max(min(cost), 1.0))))
    return min(range(len(calls)), key=lambda i: median_us(calls[i], reps))


def build(row: Row):
    """The row's (native, ours) calls, each taking no arguments."""
    if row.op.startswith("sparse"):
        return _sparse(row)
    b = BACKENDS[row.fw]()
    F = functions(_xp(row.fw))
    x, t, ts = (_convert(row.fw, row.kind, a) for a in _xs(row))
    f = _f(row, F)
    args = (x, t) if row.op in TAKES_T else (x,)
    if row.form.startswith("Tangents(4)"):
        args = (x, ts)
    natives = [_boundary(row, c) for c in _natives(row, f)]
    stacked = row.form == "Tangents(4) stacked"
    best = _fastest([_blocking(row.fw, lambda c=c: c(*args), stacked) for c in natives])
    native = lambda: natives[best](*args)  # noqa: E731
    call = getattr(di, row.op)
    aux = {"has_aux": True} if row.form == "has_aux" else {}
    ours_args = (x, di.Tangents(*ts)) if row.form == "Tangents(4)" else args
    if row.form == "Tangents(4) stacked":  # the K tangents as one (K, n) array
        ours_args = (x, di.Tangents.stacked(_convert(row.fw, row.kind, np.stack(_xs(row)[2]))))
    if row.form.startswith("f per call"):
        make = F["make_s"] if row.op in SCALAR_OUT else F["make_v"]
        ours = lambda: call(make(C), b, *ours_args)  # noqa: E731
        native = _per_call(row, make, best, args, F)
    elif row.form == "unprepared":
        ours = lambda: call(f, b, *ours_args, **aux)  # noqa: E731
    else:
        prep = PREPARE[row.op](f, b, *ours_args, **aux)
        ours = lambda: call(f, b, *ours_args, prep=prep, **aux)  # noqa: E731
    return _blocking(row.fw, native, stacked), _blocking(row.fw, ours, stacked)


def _per_call(row: Row, make, best: int, args: tuple, F: dict):
    """The native twin of a closure made anew each call: the same closure style
    (JAX: the un-jitted transform, since jit of a new closure compiles every call),
    or for "(hoisted jit)" the JAX user's better habit: one jit taking the constant
    as an argument."""
    if row.form == "f per call (hoisted jit)":
        import jax

        s = F["s"]
        hoisted = jax.jit(jax.grad(lambda x, c: c * s(x)))
        return lambda: hoisted(*args, C)
    if row.fw == "jax":
        return lambda: jax_native(row.op, make(C), jit=False)[0](*args)
    return lambda: _natives(row, make(C))[best](*args)


# --------------------------------------------------------------------- sparse


def _sparse(row: Row):
    """AutoSparse rows: unprepared against the prepared sparse call (the issue's
    reference), or the prepared call against the framework's dense Jacobian or
    Hessian."""
    from diffiface.testing._sparse import brusselator, rosenbrock

    hessian = row.op.endswith("hessian")
    f = rosenbrock if hessian else brusselator
    n = row.n if hessian else 2 * round((row.n / 2) ** 0.5) ** 2
    x0 = np.random.default_rng(0).uniform(0.5, 1.5, n)
    x = _convert(row.fw, "array", x0)
    b = di.AutoSparse(BACKENDS[row.fw]())
    call, prepare = (
        (di.hessian, di.prepare_hessian) if hessian else (di.jacobian, di.prepare_jacobian)
    )
    fp = lambda x: f(x)  # noqa: E731  (its own function: no plan shared with the unprepared f)
    prep = prepare(fp, b, x)
    prepared = _blocking(row.fw, lambda: call(fp, b, x, prep=prep))
    if row.form == "unprepared":
        return prepared, _blocking(row.fw, lambda: call(f, b, x))
    natives = _natives(row._replace(op="hessian" if hessian else "jacobian"), f)
    calls = [_blocking(row.fw, lambda c=c: c(x)) for c in natives]
    return calls[_fastest(calls)], prepared
