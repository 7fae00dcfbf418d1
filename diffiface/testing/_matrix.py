"""consistency_matrix(): operators x backends x array kinds x prep x calling contexts.

Each case calls one operator on one backend, with ``x`` (and the tangent or
cotangent) of one array kind, prepared or not, in one calling context, and
checks the result against closed forms. The function of a matrix scenario is
``f(x, s)``: ``s`` is a scalar that ``f`` closes over (or gets as a
``di.Constant`` or through ``di.FixedParams``); an outer pass differentiates
the inner call with respect to ``s``, or with respect to the tangent itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._backend_types import AbstractBackend, AutoSparse, SecondOrder
from .._errors import DiffifaceValueError
from ..core.operator import FAMILY
from . import _matrix_builtins
from ._calls import BASES, TREE_FAMILIES
from ._check import SPARSE, available_backends, short_name
from ._kit import of
from ._matrix_case import NODE_OPS, TANGENT, MatrixCase, Spec
from ._report import Report, Result
from ._scenario import SECOND

# array kinds of x (and of its tangent / cotangent)
KINDS = ("C", "F", "T", "strided", "0d", "float", "numpy", "numpy_F", "node")
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
    "plain+aux",
    "plain+tree",
    "di_outer+aux",
    "fw_outer+aux",
    "fw_outer+tree",
    "plain+module",
)
# the families a pytree output goes through ("+tree"), and the operators every array kind
# and every way of passing s runs for (without full=True): the base one of each family
TREE_OPS, CORE = TREE_FAMILIES, BASES
_S0 = 0.8


def _builtins() -> list:
    m = _matrix_builtins
    return [
        Spec.make(
            "sin_quad", m.sin_quad, m.QX, _S0, m.quad_closed, lambda s: m.quad_closed(s, True)
        ),
        Spec.make(
            "sin_matmul",
            m.sin_matmul,
            m.MX,
            _S0,
            m.matmul_closed,
            lambda s: m.matmul_closed(s, True),
        ),
        Spec.make(
            "sin_scaled",
            m.sin_scaled,
            np.asarray(0.35),
            _S0,
            m.scaled_closed,
            lambda s: m.scaled_closed(s, True),
        ),
    ]


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
    its F. ``node``: x inside a pytree node registered with optree (gradient, jacobian,
    jvp, vjp and hvp, whose x-shaped results must come back as that node).

    Calling contexts: ``plain`` (``f`` closes over ``s``), ``plain+const`` (``s`` passed
    as ``di.Constant(s)``), ``plain+params`` (``di.FixedParams(f, s)``); ``di_outer``
    (``di.gradient`` with the same backend differentiates ``<u, op(...)>`` with respect
    to ``s``), ``fw_outer`` (the same by ``jax.grad``, ``torch.autograd.grad`` or
    ``autograd.grad``), each also ``+const`` and ``+params``; ``plain+aux`` /
    ``di_outer+aux`` / ``fw_outer+aux`` (f returns ``(out, {"value": out})``, called with
    ``has_aux=True``), ``plain+tree`` / ``fw_outer+tree`` (f returns ``(out, 2 * out)``),
    ``plain+module`` (torch: ``di.FixedParams(model)``, s a parameter of the module);
    ``di_tangent`` and
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
        f: ``f(x, s)``, written with the Array API: ``xp = array_namespace(s * x)``
            (``s`` may be a float, a JAX tracer, a torch tensor, an autograd box or an
            MLX array).
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
            raise DiffifaceValueError("consistency_matrix(f, x, closed): give x and closed with f.")
        specs = [Spec.make(name, f, x, s, closed, d_closed)]
    backends = available_backends() if backends is None else list(backends)
    for b in backends:
        if isinstance(b, AutoSparse) and isinstance(b.backend, SecondOrder):
            b = b.backend  # (refused below)
        if not isinstance(b, AbstractBackend) or isinstance(b, SecondOrder):
            raise DiffifaceValueError(
                f"consistency_matrix(backends=...): {b!r} is no backend of one framework, such "
                "as AutoJax(), AutoTorch(), AutoAutograd(), AutoFiniteDifferences() (a "
                "SecondOrder picks no array kind)."
            )
    for label, given, known in (("kinds", kinds, KINDS), ("contexts", contexts, CONTEXTS)):
        unknown = set(given or ()) - set(known)
        if unknown:
            raise DiffifaceValueError(
                f"consistency_matrix({label}=...): unknown {sorted(unknown)}."
            )
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
                if isinstance(b, AutoSparse) and op not in SPARSE:
                    continue  # (the other operators are its backend's)
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


def run_matrix(cases: list) -> Report:
    """Run the cases of :func:`consistency_matrix` and gather them in a :class:`Report`.

    ``str(report)`` has a row per (backend, scenario) and a column per operator, each
    cell the largest error against the closed forms over the array kinds, preparations
    and calling contexts of its cases: one function's derivatives, backend by backend.
    A failing case is named by its id in ``report.failures()`` and
    ``report.raise_on_failure()``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> from diffiface import testing
        >>> def f(x, s):
        ...     return (s * x**3).sum()
        >>> x = np.array([1.0, 2.0])
        >>> def closed(s):
        ...     return {"jac": [3 * s * x**2], "hess": np.diag(6 * s * x)}
        >>> cases = testing.consistency_matrix(
        ...     f, x, closed, backends=[di.AutoFiniteDifferences()], operators=("gradient",))
        >>> print(testing.run_matrix(cases))  # doctest: +ELLIPSIS
        backend            scenario  gradient
        FiniteDifferences  f         ok ...
        12 runs, 0 failing
    """
    results = []
    for case in cases:
        got = case.run()
        status = "pass" if got.ok else "error" if got.raised else "fail"
        name, why = short_name(case.backend), got.message
        results.append(
            Result(name, case.id, case.spec.name, case.op, status, got.error, got.tolerance, why)
        )
    return Report(results, group="scenario")


def _runs(backend: Any, spec: Spec) -> bool:
    return spec.x.dtype != np.float64 or of(backend).float64_note() is None


def _kinds(backend: Any, spec: Spec) -> tuple:
    arrays, nd = of(backend), spec.x.ndim
    out = ["0d", "float"] if nd == 0 else ["C", *arrays.kinds]
    if not arrays.numpy_native:
        out += ["numpy", "numpy_F"] if nd >= 2 else ["numpy"]
    if not isinstance(backend, AutoSparse):
        out.append("node")  # x in a registered pytree node
    return tuple(k for k in out if nd >= 2 or k not in ("F", "T"))


def _contexts(backend: Any, spec: Spec, op: str, kind: str, full: bool, first: bool) -> tuple:
    """The calling contexts of one (backend, scenario, operator, kind)."""
    fd = backend.framework == "finite_differences"
    out = []
    for context in CONTEXTS:
        where = context.partition("+")[0]
        if where != "plain" and isinstance(backend, AutoSparse):
            continue  # a sparse result is no array an outer pass reduces
        if where != "plain" and fd and op in SECOND:
            continue  # a third difference keeps no digits
        if where.endswith("outer") and spec.dref is None:
            continue  # no closed form for the outer derivative
        if where.startswith("fw_") and not of(backend).outer_pass:
            continue  # finite differences have no outer pass of their own
        if where.endswith("tangent") and op not in TANGENT:
            continue
        if context.endswith("+module") and not of(backend).has_modules:
            continue  # FixedParams(model) of a model object (a torch.nn.Module)
        if kind == "node" and FAMILY[op] not in NODE_OPS:
            continue  # an operator of one array x
        if context.endswith("+tree") and FAMILY[op] not in TREE_OPS:
            continue  # scalar-output operators take no pytree output
        if context.endswith(("+tree", "+aux")) and isinstance(backend, AutoSparse):
            continue  # AutoSparse takes one array out (its detection traces it)
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
