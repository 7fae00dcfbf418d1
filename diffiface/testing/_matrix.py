"""consistency_matrix(): operators x backends x array kinds x prep x calling contexts.

Each case calls one operator on one backend, with ``x`` (and the tangent or
cotangent) of one array kind, prepared or not, in one calling context, and
checks the result against closed forms. The function of a matrix scenario is
``f(x, s)``: ``s`` is a scalar that ``f`` closes over (or gets as a
``di.Constant`` or through ``di.FixedParams``); an outer pass differentiates
the inner call with respect to ``s``, or with respect to the tangent itself.
"""

from __future__ import annotations

import dataclasses
import warnings
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from .._checks import DisconnectedWarning
from .._contexts import Constant, FixedParams
from ..core.plan import FAMILY
from . import _matrix_builtins
from ._check import available_backends, relative_error, short_name, tolerance
from ._matrix_builtins import like
from ._scenario import SECOND, Scenario, outputs

# array kinds of x (and of its tangent / cotangent)
KINDS = ("C", "F", "T", "strided", "0d", "float", "numpy", "numpy_F")
# where the call runs; "+const" / "+params": s reaches f as di.Constant / di.FixedParams
CONTEXTS = (
    "plain",
    "plain+const",
    "plain+params",
    "di_outer",
    "di_outer+const",
    "di_outer+params",
    "fw_outer",
    "fw_outer+const",
    "fw_outer+params",
    "di_tangent",
    "fw_tangent",
)
# the operators every array kind and every way of passing s runs for (without full=True)
CORE = (
    "derivative",
    "second_derivative",
    "gradient",
    "jacobian",
    "jvp",
    "vjp",
    "hvp",
    "hessian",
    "batched_jacobian",
)
_TANGENT = {"jvp": "v", "value_and_jvp": "v", "hvp": "v", "gradient_and_hvp": "v"}
_TANGENT |= {"vjp": "w", "value_and_vjp": "w"}
_NUMPY_NATIVE = ("autograd", "finite_differences")
_S0 = 0.8


def _builtins() -> list:
    m = _matrix_builtins
    return [
        _Spec.make(
            "sin_quad", m.sin_quad, m.QX, _S0, m.quad_closed, lambda s: m.quad_closed(s, True)
        ),
        _Spec.make(
            "sin_matmul",
            m.sin_matmul,
            m.MX,
            _S0,
            m.matmul_closed,
            lambda s: m.matmul_closed(s, True),
        ),
        _Spec.make(
            "sin_scaled",
            m.sin_scaled,
            np.asarray(0.35),
            _S0,
            m.scaled_closed,
            lambda s: m.scaled_closed(s, True),
        ),
    ]


# ---- scenarios and cases ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class _Spec:
    """A matrix scenario: f(x, s) at (x, s0), its references at s0 and their s-derivatives."""

    name: str
    f: Callable
    x: np.ndarray
    s: float
    ref: Scenario  # y, jac, hess, second at s (with the tangent v and cotangent w)
    dref: Scenario | None  # the same, differentiated with respect to s

    @classmethod
    def make(cls, name, f, x, s, closed, d_closed=None) -> _Spec:
        x = np.asarray(x)
        if x.dtype.kind != "f":
            x = x.astype(np.float64)
        s = float(s)
        y = np.asarray(f(x, s))
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        v = rng.uniform(-1, 1, x.shape).astype(x.dtype)
        w = rng.uniform(-1, 1, y.shape).astype(x.dtype)
        refs = _refs(name, "closed", closed(s), y)
        base = Scenario(name, "matrix", f, x, contexts=(Constant(s),), v=v, w=w, **refs)
        ops = tuple(op for op in base.operators if all(e is not None for e in base.expected(op)))
        ref = dataclasses.replace(base, operators=ops)
        dref = None
        if d_closed is not None:
            drefs = _refs(name, "d_closed", d_closed(s), None)
            dref = dataclasses.replace(ref, **drefs)
        return cls(name, f, x, s, ref, dref)


def _refs(name: str, label: str, given: dict, y: np.ndarray | None) -> dict:
    unknown = set(given) - {"y", "jac", "hess", "second"}
    if unknown:
        raise ValueError(f"consistency_matrix({name!r}): {label} gave unknown keys {unknown}.")
    if "jac" not in given or (y is None and "y" not in given):
        need = "'jac'" if y is not None else "'y' and 'jac'"
        raise ValueError(f"consistency_matrix({name!r}): {label}(s) must give {need}.")
    out = {
        k: np.asarray(given[k], dtype=np.float64) for k in ("jac", "hess", "second") if k in given
    }
    out["y"] = np.ravel(np.asarray(given["y"] if "y" in given else y, dtype=np.float64))
    out["jac"] = out["jac"].reshape(out["y"].size, -1)
    if "second" in out:
        out["second"] = np.ravel(out["second"])
    return out


@dataclasses.dataclass(frozen=True)
class MatrixResult:
    """The outcome of one :class:`MatrixCase`: ``ok``, and why not in ``message``."""

    ok: bool
    message: str = ""
    error: float | None = None
    tolerance: float | None = None

    def __bool__(self) -> bool:
        return self.ok


@dataclasses.dataclass(frozen=True, eq=False)
class MatrixCase:
    """One cell of the matrix: ``run()`` calls the operator and checks it.

    ``id`` reads ``scenario-operator-backend-kind-prep|unprep-context``.
    """

    spec: _Spec
    op: str
    backend: Any
    kind: str
    prepared: bool
    context: str

    @property
    def id(self) -> str:
        prep = "prep" if self.prepared else "unprep"
        backend = short_name(self.backend)
        return f"{self.spec.name}-{self.op}-{backend}-{self.kind}-{prep}-{self.context}"

    def __repr__(self) -> str:
        return f"MatrixCase({self.id})"

    def run(self) -> MatrixResult:
        """Run the case; a raised error or a DisconnectedWarning is a failure."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", DisconnectedWarning)
                return self._run()
        except Exception as exc:  # reported, not raised: the caller decides
            text = " ".join(str(exc).split())
            return MatrixResult(False, f"{type(exc).__name__}: {text[:400]}")

    # -- the pieces ----------------------------------------------------------------------------
    @property
    def _where(self) -> str:
        return self.context.partition("+")[0]

    @property
    def _via(self) -> str:
        return self.context.partition("+")[2] or "closure"

    @property
    def _framework(self) -> str:
        return self.backend.framework

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the results: x's, or for a Python float x the framework's default
        float (torch: ``torch.get_default_dtype()``; JAX: float64 under x64)."""
        if self.kind != "float":
            return self.spec.x.dtype
        fw = self._framework
        if fw == "torch":
            import torch

            return np.dtype(str(torch.get_default_dtype()).split(".")[-1])
        if fw == "jax":
            import jax

            return np.dtype(np.float64 if jax.config.jax_enable_x64 else np.float32)
        return np.dtype(np.float64)

    def _tolerance(self) -> float:
        if self._where == "plain":
            return tolerance(self.backend, self.dtype, self.op)
        # a derivative of a derivative: finite differences are held to second order
        return tolerance(self.backend, self.dtype, "hessian")

    def _arrange(self, a: np.ndarray) -> Any:
        return arrange(self.kind, self._framework, np.asarray(a, dtype=self.dtype))

    def _function(self, s: Any) -> tuple:
        """(the function, the contexts) through which ``f`` sees ``s``."""
        f, via = self.spec.f, self._via
        if via == "closure":
            return (lambda z: f(z, s)), ()
        if via == "const":
            return f, (Constant(s),)
        return FixedParams(f, s), ()

    def _prepare(self, s: Any, x: Any, t: Any, fn: Any = None) -> Any:
        """The preparation of this call (None unprepared), for ``fn`` if given."""
        import diffiface as di

        if not self.prepared:
            return None
        fn, ctx = self._function(s) if fn is None else (fn, self._function(s)[1])
        prepare = getattr(di, "prepare_" + FAMILY[self.op])
        return prepare(fn, self.backend, x, *(() if t is None else (t,)), *ctx)

    def _invoke(self, s: Any, x: Any, t: Any, prep: Any = None) -> tuple:
        """The operator's outputs at ``x`` (tangent ``t``), ``f`` seeing ``s``; prepared
        here unless ``prep`` is given."""
        import diffiface as di

        fn, ctx = self._function(s)
        if prep is None:
            prep = self._prepare(s, x, t, fn)
        targs = () if t is None else (t,)
        out = getattr(di, self.op)(fn, self.backend, x, *targs, *ctx, prep=prep)
        return out if len(self.spec.ref.expected(self.op)) > 1 else (out,)

    def _weights(self) -> tuple:
        """Fixed weights ``u`` that reduce each output to a scalar for an outer pass."""
        rng = np.random.default_rng(zlib.crc32(f"{self.spec.name}/{self.op}".encode()))
        return tuple(rng.uniform(-1, 1, shape) for shape in self._shapes())

    def _shapes(self) -> tuple:
        xs, ys = self.spec.x.shape, np.shape(self.spec.ref.call(self.spec.x))
        one = {
            "value": ys,
            "derivative": ys,
            "second_derivative": ys,
            "gradient": xs,
            "jacobian": ys + xs,
            "jvp": ys,
            "vjp": xs,
            "hvp": xs,
            "hessian": xs + xs,
            "batched_jacobian": ys[:1] + ys[1:] + xs[1:],
        }
        return tuple(one[name] for name in outputs(self.op))

    def _run(self) -> MatrixResult:
        spec, op, where = self.spec, self.op, self._where
        tname = _TANGENT.get(op)
        t_np = None if tname is None else getattr(spec.ref, tname)
        tol = self._tolerance()
        x = arrange(self.kind, self._framework, spec.x)  # a float x stays float64
        if where == "plain":
            t = None if t_np is None else self._arrange(t_np)
            outs = self._invoke(spec.s, x, t)
            return self._compare_outputs(outs, x, tol)
        us = self._weights()
        if where in ("di_outer", "fw_outer"):
            t = None if t_np is None else self._arrange(t_np)
            # s is the backend's own 0-d array, whatever the kind of x
            s0 = arrange("0d", self._framework, np.asarray(spec.s, dtype=self.dtype))
            # a Constant or FixedParams call is prepared outside, at the value of s
            prep = None if self._via == "closure" else self._prepare(s0, x, t)

            def outer(s):
                return _reduce(self._invoke(s, x, t, prep), us)

            got = self._outer(outer, s0)
            dexp = spec.dref.expected(op)
            want = np.array([sum(float(np.ravel(u) @ e) for u, e in zip(us, dexp, strict=True))])
        else:  # the tangent or cotangent is differentiated
            t0 = self._arrange(t_np)

            def outer(t):
                return _reduce(self._invoke(spec.s, x, t), us)

            got = self._outer(outer, t0)
            want = _tangent_reference(spec.ref, op, np.ravel(us[-1]))
        err = relative_error(got, want)
        if np.shape(got) != (() if where.endswith("outer") else np.shape(t_np)):
            return MatrixResult(False, f"the outer derivative has shape {np.shape(got)}", err, tol)
        if not err <= tol:
            msg = f"outer derivative error {err:.2e} > {tol:.0e} (got {_show(got)}, want {want})"
            return MatrixResult(False, msg, err, tol)
        return MatrixResult(True, "", err, tol)

    def _outer(self, fn: Callable, at: Any) -> Any:
        """d fn / d at, by diffiface (``di_*``) or by the framework's own reverse mode."""
        import diffiface as di

        if self._where.startswith("di_"):
            return di.gradient(fn, self.backend, at)
        fw = self._framework
        if fw == "jax":
            import jax
            import jax.numpy as jnp

            return jax.jit(jax.grad(fn))(jnp.asarray(at))  # a compiled step, as in training
        if fw == "torch":
            import torch

            if isinstance(at, torch.Tensor):
                a = at.detach().clone()
            else:  # a NumPy array or a float (kinds numpy, float)
                a = torch.tensor(np.asarray(at, dtype=self.dtype))
            a.requires_grad_(True)
            (g,) = torch.autograd.grad(fn(a), a)
            return g
        import autograd

        return autograd.grad(fn)(at)

    def _compare_outputs(self, outs: tuple, x: Any, tol: float) -> MatrixResult:
        expected = self.spec.ref.expected(self.op)
        if len(outs) != len(expected):
            return MatrixResult(False, f"{len(outs)} outputs, expected {len(expected)}")
        problems, worst = [], 0.0
        for i, (out, want, shape) in enumerate(zip(outs, expected, self._shapes(), strict=True)):
            name = outputs(self.op)[i]
            if tuple(np.shape(out) if not hasattr(out, "shape") else out.shape) != shape:
                problems.append(f"{name} has shape {tuple(np.shape(out))}, not {shape}")
                continue
            kind = self._kind_problem(out, x, shape)
            if kind:
                problems.append(f"{name} {kind}")
            err = relative_error(out, want)
            worst = max(worst, err)
            if not err <= tol:
                got = _show(out)
                problems.append(f"{name} error {err:.2e} > {tol:.0e} (got {got}, want {want})")
        return MatrixResult(not problems, "; ".join(problems), worst, tol)

    def _kind_problem(self, out: Any, x: Any, shape: tuple) -> str:
        """Results come back in the kind of x: native, NumPy, or a float when 0-d."""
        if self.kind == "float" and shape == ():
            return "" if type(out) is float else f"is {type(out).__name__}, not float"
        if self.kind in ("float", "numpy", "numpy_F"):
            want = np.ndarray
        else:
            want = type(x) if self._framework != "jax" else _jax_array()
        if not isinstance(out, want):
            return f"is {type(out).__name__}, not {want.__name__}"
        dtype = str(out.dtype).split(".")[-1]
        if dtype != self.dtype.name:
            return f"has dtype {dtype}, not {self.dtype.name}"
        return ""


def _tangent_reference(ref: Scenario, op: str, u: np.ndarray) -> np.ndarray:
    """d/dt <u, op(f, b, x, t)> (the last output; a value does not depend on t)."""
    if FAMILY[op] == "jvp":
        return ref.jac.T @ u  # <u, J v>
    if FAMILY[op] == "vjp":
        return ref.jac @ u  # <u, wᵀ J>
    return ref.hess.T @ u  # <u, H v>


def _reduce(outs: tuple, us: tuple) -> Any:
    """sum_k <u_k, out_k>, in the framework of the outputs."""
    total = None
    for out, u in zip(outs, us, strict=True):
        term = (out * like(u, out)).sum() if hasattr(out, "shape") else out * float(u)
        total = term if total is None else total + term
    return total


def _show(a: Any) -> str:
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.array2string(np.ravel(np.asarray(a, dtype=np.float64)), precision=6, threshold=8)


def _jax_array() -> type:
    import jax

    return jax.Array


def arrange(kind: str, framework: str, a: np.ndarray) -> Any:
    """``a`` (NumPy) as an array of ``kind`` for a backend of ``framework``.

    C / 0d: the backend's own array; F: column-major (NumPy ``asfortranarray``, torch
    ``.mT.contiguous().mT``); T: a transposed view of a C array; strided: ``big[::2]``
    of a twice larger array; float: a Python float when 0-d (NumPy otherwise);
    numpy / numpy_F: a NumPy array (C / Fortran order) for any backend.
    """
    a = np.asarray(a)
    if kind == "float":
        return float(a) if a.ndim == 0 else np.array(a)
    if (kind in ("F", "T", "numpy_F") and a.ndim < 2) or (kind == "strided" and a.ndim < 1):
        kind = {"numpy_F": "numpy"}.get(kind, "C")  # no order to give
    if kind == "numpy":
        return np.array(a)
    if kind == "numpy_F":
        return np.asfortranarray(a)
    if kind == "T":
        base = np.ascontiguousarray(a.T)
        if framework == "torch":
            import torch

            return torch.from_numpy(base).permute(*reversed(range(a.ndim)))
        return base.T
    if kind == "strided":
        big = np.zeros((2 * a.shape[0], *a.shape[1:]), dtype=a.dtype)
        big[::2] = a
        if framework == "torch":
            import torch

            return torch.from_numpy(big)[::2]
        return big[::2]
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray(np.array(a))
    if framework == "torch":
        import torch

        t = torch.from_numpy(np.array(a))
        return t.mT.contiguous().mT if kind == "F" else t
    return np.asfortranarray(a) if kind == "F" else np.array(a)


# ---- the generator ---------------------------------------------------------------------------
def consistency_matrix(
    f: Callable | None = None,
    x: Any = None,
    closed: Callable | None = None,
    *,
    d_closed: Callable | None = None,
    s: float = _S0,
    name: str = "f",
    backends: list | None = None,
    operators: tuple | None = None,
    kinds: tuple | None = None,
    contexts: tuple | None = None,
    prepared: tuple = (False, True),
    full: bool = False,
) -> list:
    """The cases of the consistency matrix: each operator that fits the scenario, on each
    backend, with each array kind of ``x``, prepared or not, in each calling context,
    checked against closed forms.

    Without ``f``, the built-in scenarios run: ``sin_quad`` (array -> scalar, x of shape
    (2, 3), a full Hessian), ``sin_matmul`` (array -> array, independent rows, a
    non-square matrix) and ``sin_scaled`` (scalar -> array). With ``f``, the matrix runs
    on ``f(x, s)`` at ``x`` with the references that ``closed(s)`` gives.

    Array kinds (of ``x`` and of the tangent or cotangent): ``C`` (the backend's own
    array; ``0d`` for a scalar ``x``), ``F`` (column-major), ``T`` (a transposed view),
    ``strided`` (``big[::2]``), ``float`` (a Python float ``x``), ``numpy`` and
    ``numpy_F`` (NumPy arrays, C and Fortran order, given to a JAX or torch backend).
    JAX arrays have no order, so JAX gets no F, T or strided; torch's transposed view is
    its F.

    Calling contexts: ``plain`` (``f`` closes over ``s``), ``plain+const`` (``s`` passed
    as ``di.Constant(s)``), ``plain+params`` (``di.FixedParams(f, s)``); ``di_outer``
    (``di.gradient`` with the same backend differentiates ``<u, op(...)>`` with respect
    to ``s``), ``fw_outer`` (the same by ``jax.grad``, ``torch.autograd.grad`` or
    ``autograd.grad``), each also ``+const`` and ``+params``; ``di_tangent`` and
    ``fw_tangent`` (the tangent of jvp and hvp or the cotangent of vjp is differentiated:
    ``d/dw <u, vjp(f, b, x, w)> = J u``, ``d/dv <u, jvp> = Jᵀ u``, ``d/dv <u, hvp> = H u``).
    ``u`` holds fixed random weights. Finite differences run no ``fw_*`` context, and
    no outer or tangent context over a second-order operator (a third difference keeps
    no digits).

    Tolerances, relative to max(1, the largest reference entry), are
    :func:`~diffiface.testing.tolerance`: 1e-8 for AD in float64; for finite differences
    1e-5 (first order), 1e-3 (second order, and any outer or tangent context).

    Without ``full``, the matrix is pruned (all prepared and unprepared): every
    operator runs plain on the backend's own C (or 0-d) arrays, and in the outer and
    tangent contexts on the first scenario it applies to; the other array kinds (plain,
    and NumPy input also in ``di_outer`` and ``fw_outer``) and the ``+const`` /
    ``+params`` contexts run for the core operators only (those without a value
    variant: derivative, second_derivative, gradient, jacobian, jvp, vjp, hvp, hessian,
    batched_jacobian). JAX is left out when its x64 mode is off.

    Args:
        f: ``f(x, s)``, written with :func:`~diffiface.testing.namespace` of ``s * x``
            (``s`` may be a float, a JAX tracer, a torch tensor or an autograd box).
            None: the built-in scenarios.
        x: the point (a NumPy float array, 0-d for a scalar ``x``).
        closed: ``closed(s)`` gives the flat closed forms at ``x`` as a dict (see
            :class:`~diffiface.testing.Scenario`): ``"jac"`` (m, n), ``"hess"`` (n, n) for
            a scalar ``f``, ``"second"`` (m,) for a scalar ``x``, ``"y"`` (optional).
        d_closed: ``d_closed(s)``: the derivatives with respect to ``s`` of the same
            entries, ``"y"`` included; without it the outer contexts do not run.
        s: the value of ``s``.
        name: the scenario's name in the case ids.
        backends: the backends (default: :func:`~diffiface.testing.available_backends`).
        operators: keep only these operators (default: all that apply).
        kinds: keep only these array kinds (named above; default: all that apply).
        contexts: keep only these calling contexts (named above; default: all that
            apply).
        prepared: which of unprepared (False) and prepared (True) to run.
        full: every operator with every kind and every context (no pruning).

    Returns:
        A list of :class:`MatrixCase`, each with an ``id``
        (``scenario-operator-backend-kind-prep|unprep-context``) and a ``run()`` that
        returns a :class:`MatrixResult` (``ok``, ``message``).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> from diffiface import testing
        >>> def f(x, s):
        ...     return (s * x**3).sum()
        >>> x = np.array([1.0, 2.0])
        >>> def closed(s):
        ...     return {"jac": [3 * s * x**2], "hess": np.diag(6 * s * x)}
        >>> def d_closed(s):
        ...     return {"y": [(x**3).sum()], "jac": [3 * x**2], "hess": np.diag(6 * x)}
        >>> cases = testing.consistency_matrix(
        ...     f, x, closed, d_closed=d_closed, backends=[di.AutoFiniteDifferences()])
        >>> cases[0].id
        'f-gradient-FiniteDifferences-C-unprep-plain'
        >>> [c.id for c in cases if not c.run().ok]
        []
    """
    if f is None:
        specs = _builtins()
    else:
        if x is None or closed is None:
            raise ValueError("consistency_matrix(f, x, closed): give x and closed with f.")
        specs = [_Spec.make(name, f, x, s, closed, d_closed)]
    backends = available_backends() if backends is None else list(backends)
    for b in backends:
        if getattr(b, "framework", None) not in ("jax", "torch", "autograd", *_NUMPY_NATIVE):
            raise ValueError(
                f"consistency_matrix(backends=...): {b!r} is not one of AutoJax(), AutoTorch(), "
                "AutoAutograd(), AutoFiniteDifferences() (a SecondOrder picks no array kind)."
            )
    for label, given, known in (("kinds", kinds, KINDS), ("contexts", contexts, CONTEXTS)):
        unknown = set(given or ()) - set(known)
        if unknown:
            raise ValueError(f"consistency_matrix({label}=...): unknown {sorted(unknown)}.")
    owner: dict = {}  # operator -> the first scenario it applies to
    for spec in specs:
        for op in spec.ref.operators:
            owner.setdefault(op, spec.name)
    cases = []
    for spec in specs:
        for b in backends:
            if not _runs(b, spec):
                continue
            for op in spec.ref.operators:
                if operators is not None and op not in operators:
                    continue
                first = full or owner[op] == spec.name
                for kind in _kinds(b, spec):
                    if kinds is not None and kind not in kinds:
                        continue
                    for context in _contexts(b, spec, op, kind, full, first):
                        if contexts is not None and context not in contexts:
                            continue
                        for prep in prepared:
                            cases.append(MatrixCase(spec, op, b, kind, bool(prep), context))
    return cases


def _runs(backend: Any, spec: _Spec) -> bool:
    if backend.framework == "jax" and spec.x.dtype == np.float64:
        import jax

        return bool(jax.config.jax_enable_x64)
    return True


def _kinds(backend: Any, spec: _Spec) -> tuple:
    fw, nd = backend.framework, spec.x.ndim
    if nd == 0:
        out = ["0d", "float"]
    else:
        out = ["C"]
        if fw != "jax":
            out += ["F", "T", "strided"] if fw in _NUMPY_NATIVE else ["F", "strided"]
    if fw not in _NUMPY_NATIVE:
        out += ["numpy", "numpy_F"] if nd >= 2 else ["numpy"]
    return tuple(k for k in out if nd >= 2 or k not in ("F", "T"))


def _contexts(backend: Any, spec: _Spec, op: str, kind: str, full: bool, first: bool) -> tuple:
    """The calling contexts of one (backend, scenario, operator, kind)."""
    fd = backend.framework == "finite_differences"
    out = []
    for context in CONTEXTS:
        where = context.partition("+")[0]
        if where != "plain" and fd and op in SECOND:
            continue  # a third difference keeps no digits
        if where.endswith("outer") and spec.dref is None:
            continue  # no closed form for the outer derivative
        if where.startswith("fw_") and fd:
            continue  # finite differences have no outer pass of their own
        if where.endswith("tangent") and op not in _TANGENT:
            continue
        if not full and not _kept(context, op, kind, first):
            continue
        out.append(context)
    return tuple(out)


def _kept(context: str, op: str, kind: str, first: bool) -> bool:
    """The pruned matrix: every operator plain on the backend's own C arrays and in the
    outer and tangent contexts (on the first scenario it applies to); the other kinds
    (plain; NumPy input also under the outer passes) and the +const / +params variants
    for the core operators."""
    where, _, via = context.partition("+")
    if where != "plain" and not first:
        return False
    if kind not in ("C", "0d"):
        outer = kind == "numpy" and context in ("di_outer", "fw_outer")
        return op in CORE and (context == "plain" or outer)
    return not via or op in CORE
