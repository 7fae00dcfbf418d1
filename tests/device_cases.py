"""Every operator of diffiface's default scenarios, called on arrays placed on a chosen
device: shared by the GPU tests (tests/devices/test_gpu.py), the transfer tests that
run on the CPU (tests/devices/test_transfers.py, _jax_two_devices.py) and the GPU
benchmark's checks.

A *place* turns a NumPy leaf into a framework array on one device (``torch_on("cuda")``,
``jax_on(device)``). :func:`cases` lists (scenario, operator) pairs a backend runs;
:func:`ready` builds the warm-able call on placed inputs; :func:`check` compares a
result with the scenario's closed forms and checks that it kept the device and dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import diffiface as di
from diffiface import testing
from diffiface._tree import flatten, unflatten
from diffiface.testing._calls import prepare_of, tangent_args
from diffiface.testing._scenario import flat_result


def cuda_torch() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def gpu_jax() -> Any:
    """JAX's first GPU device, or None."""
    try:
        import jax

        return jax.devices("gpu")[0]
    except (ImportError, RuntimeError):
        return None


def torch_on(device: str) -> Callable:
    import torch

    return lambda a: torch.tensor(np.asarray(a), device=device)


def jax_on(device: Any) -> Callable:
    import jax

    return lambda a: jax.device_put(np.asarray(a), device)


def placed(place: Callable, tree: Any) -> Any:
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [place(a) for a in leaves])


def cases(backend: Any, dtypes=("float32", "float64")) -> list:
    """``(scenario, operator)`` for every default scenario and operator ``backend`` runs."""
    out = []
    for s in testing.default_scenarios(dtypes):
        out += [(s, op) for op in s.operators if testing.skip_reason(backend, s, op) is None]
    return out


def ready(backend: Any, s: Any, op: str, place: Callable, prepared: bool) -> Callable:
    """``op(f, backend, x, [tangent], *contexts, prep=...)`` on placed inputs, as a
    call without arguments (prepared here when ``prepared``)."""
    x = placed(place, s.x)
    tangent = tuple(placed(place, t) for t in tangent_args(op, s.v, s.w))
    ctx = tuple(di.Constant(placed(place, c.value)) for c in s.contexts)
    fn = s.f if s.params is None else di.FixedParams(s.f, placed(place, s.params))
    prep = prepare_of(op)(fn, backend, x, *tangent, *ctx) if prepared else None
    operator = getattr(di, op)
    return lambda: operator(fn, backend, x, *tangent, *ctx, prep=prep)


def devices_of(out: Any) -> set:
    """The devices of a result's arrays, as strings ("cuda:0", "cuda:0" for JAX's
    gpu:0 too, "cpu")."""
    found = set()
    if isinstance(out, di.Tangents):
        out = tuple(out)
    for a in flatten(out)[0]:
        if hasattr(a, "device") and hasattr(a, "detach"):  # torch
            found.add(str(a.device if a.device.type != "cuda" else f"cuda:{a.device.index}"))
        elif hasattr(a, "devices"):  # JAX
            found |= {jax_name(d) for d in a.devices()}
    return found


def jax_name(d: Any) -> str:
    return f"cuda:{d.id}" if d.platform == "gpu" else f"{d.platform}:{d.id}"


def check(backend: Any, s: Any, op: str, out: Any, device: str) -> list:
    """What is wrong with ``out``: its error against the closed forms over the
    backend's tolerance, a result off ``device``, a dtype other than x's."""
    problems = []
    outs = out if len(s.expected(op)) > 1 else (out,)
    tol = testing.tolerance(backend, s.dtype, op)
    for i, (got, want) in enumerate(zip(outs, s.expected(op), strict=True)):
        if want is None:
            continue
        got_flat = flat_result(got)
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        err = float(np.max(np.abs(got_flat - np.ravel(want)), initial=0.0)) / scale
        if not err <= tol:
            problems.append(f"output {i}: error {err:.2e} over {tol:.0e}")
    if devices_of(out) - {device}:
        problems.append(f"results on {sorted(devices_of(out))}, x on {device}")
    dtypes = {str(getattr(a, "dtype", "")).split(".")[-1] for a in flatten(out)[0]}
    if dtypes - {np.dtype(s.dtype).name}:
        problems.append(f"result dtypes {sorted(dtypes)}, x's {np.dtype(s.dtype).name}")
    return problems
