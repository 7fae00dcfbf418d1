"""Sparsity detection: global (the traced program), local (dense derivatives at a few
points), or the pattern the user gave."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp

from .. import _checks
from .._arrays import named
from .._backend_types import AutoSparse
from .._errors import DiffifaceTypeError, DiffifaceValueError, SparsityWarning
from ..core import direction, registry
from ..core.backend import size
from .formats import framework_module
from .patterns import as_pattern, symmetric

LOCAL_POINTS = 3  # x itself and two random points near it


def everywhere(sparse: AutoSparse) -> bool:
    """The pattern holds at every x (global, or given), not near one x only (local): an
    unprepared call may keep it for other points."""
    det = sparse.sparsity_detector
    return not (isinstance(det, str) and det == "local")


def pattern(sparse: AutoSparse, d: Any, prob: Any, x: Any, ctx: tuple, m=None, combo=None):
    """The pattern of f's Jacobian or, for a scalar f, of its Hessian.

    ``m``: f(x)'s size where the caller has it; else a given pattern's check reads it
    from ``d.output_like`` (JAX traces f for it). A global pattern never runs f: its rows
    come from f's trace, where f's output is checked too. An f of another framework
    fails in its detector: the error that names the backend for it, as the dense
    operators give."""
    try:
        return _pattern(sparse, d, prob, x, ctx, m, combo)
    except TypeError as exc:
        _checks.reraise(prob.op, prob.backend, exc)


def _pattern(sparse: AutoSparse, d: Any, prob: Any, x: Any, ctx: tuple, m, combo):
    hessian, n = prob.scalar, size(x)
    what = "Hessian" if hessian else "Jacobian"
    det = sparse.sparsity_detector
    if not isinstance(det, str):
        p = as_pattern(det)
        if m is None:
            m = size(d.output_like(prob, (x,), ctx))  # (and f's output checked)
        want = (n, n) if hessian else (m, n)
        if p.shape != want:
            raise DiffifaceValueError(
                f"{_form(prob)}: the given sparsity pattern has shape {p.shape}, and the "
                f"{what} of f at x has shape {want} (f(x) and x flattened). Pass a pattern "
                "of that shape, or sparsity_detector='global'."
            )
        return symmetric(p) if hessian else p  # (one triangle of a Hessian: both)
    if det == "local":
        return local(d, prob, x, ctx, combo)
    return global_pattern(_framework(sparse.backend), prob, x, ctx)


def detector(framework: str) -> Any:
    """The global detector of f written on ``framework``'s arrays: the framework's own
    (its sparsity module: JAX's jaxpr, torch's aten graph, MLX's NumPy tracer of an
    Array API f), or, for NumPy's arrays (finite differences, and autograd, whose boxes
    wrap them), the NumPy tracer; None where there is none."""
    fw = named(framework)
    if framework == "numpy" or (fw is not None and fw.arrays_are_numpy):
        return importlib.import_module("diffiface.sparse.numpy_trace")
    module = framework_module(framework)  # (MLX's has formats and no detector)
    return module if hasattr(module, "jacobian_pattern") else None


def global_pattern(framework: str, prob: Any, x: Any, ctx: tuple) -> sp.csr_array:
    """The pattern valid at every x, from the program f traces to."""
    module = detector(framework)
    if module is None:
        raise DiffifaceTypeError(
            f"{_form(prob)}: sparsity detection: sparsity_detector='global' reads the "
            "program f traces to, which JAX, torch, MLX and NumPy (autograd, finite "
            f"differences) expose and {framework} does not. Use "
            "sparsity_detector='local' (the nonzeros at x and two nearby points: valid near "
            "x only), or pass the pattern itself."
        )
    x = module.as_input(x)  # (a NumPy x: finite differences over the framework)
    try:
        fn = _traced(prob, framework, ctx, module)
        if prob.scalar:
            return module.hessian_pattern(fn, x)
        return module.jacobian_pattern(fn, x)
    except (DiffifaceTypeError, DiffifaceValueError) as exc:  # the detectors' own: the call first
        if exc.args and str(exc.args[0]).startswith("sparsity detection"):
            exc.args = (f"{_form(prob)}: {exc.args[0]}", *exc.args[1:])
        raise


def _traced(prob: Any, framework: str, ctx: tuple, module: Any):
    """f of x alone, as the detector traces it (f is never run for real here): f's
    output checked in the trace (a scalar for a Hessian) by the problem's own check
    where the problem is of the detector's framework and the detector traces f on that
    framework's arrays (not on NumPy's traced array: NumPy's checks read values, MLX's
    take MLX arrays)."""
    numpy = getattr(module, "TRACES_NUMPY", False)  # (a framework's own, as MLX's)
    own = module is framework_module(framework) and not numpy
    if own and prob.impl.traits.arrays == framework and not prob.aux:
        flat = prob.flat()
        return lambda x: flat((x,), *ctx)
    if numpy:
        ctx = module.as_contexts(ctx)  # (its arrays as NumPy's)
    f = prob.f  # (finite differences over a JAX f, say: its checks take NumPy arrays)

    def fn(x):
        y = f(x, *ctx)
        if prob.aux:  # (f's output alone: an aux is no part of the pattern)
            y = y[0]
        if not hasattr(y, "shape") and not isinstance(y, int | float | complex | np.generic):
            kind = prob.impl.traits.output_kind  # (a number: a constant f)
            raise _checks.not_array(prob.op, prob.backend, y, kind)
        if prob.scalar and tuple(getattr(y, "shape", ())) != ():
            raise _checks.not_scalar(prob.op, prob.backend, tuple(y.shape))
        return y

    return fn


def local(d: Any, prob: Any, x: Any, ctx: tuple, combo=None) -> sp.csr_array:
    """A superset of the derivative's nonzeros at x (a nonzero elsewhere may be missed).

    JAX and torch read it in one pass: the global detector over f's derivative program
    at x (its branches, masks and zero factors are x's). Other backends take the
    nonzeros of dense derivatives at x and nearby random points."""
    if d.is_traced(x):
        raise DiffifaceValueError(
            f"{_form(prob)}: sparsity_detector='local' needs x's values, and x is traced "
            "by an outer transform. Prepare outside the transform, or pass the pattern."
        )
    module = framework_module(d.framework)
    name = "local_hessian_pattern" if prob.scalar else "local_jacobian_pattern"
    one = getattr(module, name, None) if prob.impl.traits.arrays == d.framework else None
    if one is not None:
        fn = _traced(prob, d.framework, ctx, module)
        found, how = one(fn, x), "the nonzeros at x, read from f's derivative program there"
    else:
        found = _dense_nonzeros(d, prob, x, ctx, combo)
        how = f"the nonzeros at x and {LOCAL_POINTS - 1} nearby points"
    warnings.warn(
        f"{_form(prob)}: the sparsity pattern is local ({how}); a nonzero elsewhere is "
        "missed. Use sparsity_detector='global' (the default) or pass the pattern; "
        "AutoSparse(..., strict=True) checks every call.",
        SparsityWarning,
        stacklevel=6,
    )
    return as_pattern(found)


def _dense_nonzeros(d: Any, prob: Any, x: Any, ctx: tuple, combo=None) -> np.ndarray:
    """The nonzeros of dense derivatives at x and ``LOCAL_POINTS - 1`` random points
    near it (symmetrised for a Hessian)."""
    rng = np.random.default_rng(0)
    base = d.to_numpy(x)
    n = base.size
    found = None
    for k in range(LOCAL_POINTS):
        point = (
            base if k == 0 else base + 0.1 * (1 + np.abs(base)) * rng.standard_normal(base.shape)
        )
        xp = d.cast(d.from_numpy(np.asarray(point, dtype=base.dtype).reshape(base.shape)), x)
        if prob.scalar:
            dense = d.hessian(prob, (xp,), ctx, combo)
        else:
            dense = direction.run(
                d,
                prob,
                lambda: d.value_and_jacobian(prob, (xp,), ctx),  # noqa: B023
                forward=lambda: d.forward_jacobian_of_one(prob, (xp,), ctx),  # noqa: B023
                reverse=lambda: d.reverse_jacobian_of_one(prob, (xp,), ctx),  # noqa: B023
            )[1]
        a = np.asarray(d.to_numpy(dense)).reshape(-1, n)
        nz = (np.abs(a) > _noise(d, a)) | np.isnan(a)
        found = nz if found is None else found | nz
    return found | found.T if prob.scalar else found


def _noise(d: Any, a: np.ndarray) -> float:
    """Entries at most this large count as zero: none for AD (its zeros are exact); for
    finite differences the rounding noise of a difference quotient, 1e-6 of the largest."""
    if d.framework != "finite_differences":
        return 0.0
    return 1e-6 * max(1.0, float(np.nanmax(np.abs(a), initial=0.0)))


def _framework(b: Any) -> str:
    """The framework f is written in: that of the arrays the backend takes."""
    return registry.arrays(b)


def _form(prob: Any) -> str:
    return f"{prob.op}(f, {prob.backend!r}, x)"
