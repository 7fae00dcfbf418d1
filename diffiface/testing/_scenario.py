"""Scenarios: a function, a point, tangents and closed-form references.

A scenario's function is written once with the Array API and runs on every
backend's arrays: ``xp = array_namespace(x)`` (array-api-compat) is NumPy,
``jax.numpy``, torch, autograd's or MLX's namespace. References are dense and flat (``f`` of
the flattened point): the value ``y``, the Jacobian ``jac`` (m, n), for a
scalar output the Hessian ``hess`` (n, n), and for a scalar point the second
derivative ``second`` (m,); every operator's expected result is derived
from them.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .._arrays import framework_of, named
from .._errors import DiffifaceValueError
from .._tree import flatten, unflatten
from ..core.operator import OPS

# every operator, first order then second order (from the declarations)
SECOND = tuple(name for name, d in OPS.items() if d.second)
FIRST = tuple(name for name in OPS if name not in SECOND)
OPERATORS = FIRST + SECOND


def namespace(a: Any) -> Any:
    """Deprecated: write f with the Array API, ``xp = array_namespace(x)`` (from
    ``array_api_compat``), which every backend's arrays answer (see the Array API page).

    Still the array module of ``a`` (a pytree's first leaf): jax.numpy, torch,
    autograd.numpy, mlx.core or NumPy, as before; it imports no framework.

    Examples:
        >>> import warnings
        >>> import numpy as np
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", DeprecationWarning)
        ...     namespace(np.ones(2)).__name__
        'numpy'
    """
    warnings.warn(
        "diffiface.testing.namespace(x) is deprecated and will be removed: write f with the "
        "Array API, `from array_api_compat import array_namespace; xp = array_namespace(x)` "
        "(for a pytree x, array_namespace(*its leaves)); it runs on every backend's arrays. "
        "On autograd its linalg is NumPy's own, which autograd cannot differentiate: call "
        "autograd.numpy.linalg there. See docs/array-api.md.",
        DeprecationWarning,
        stacklevel=2,
    )
    leaf = flatten(a)[0][0] if not hasattr(a, "shape") else a
    framework = named(framework_of(leaf))
    return np if framework is None else sys.modules[framework.numpy_module]


@dataclasses.dataclass(frozen=True, eq=False)
class Scenario:
    """One function at one point, with references for the operators it applies to.

    Args:
        name: a short unique name.
        family: the group shown in the report (e.g. "array->scalar").
        f: ``f(x, *contexts)`` (or ``f(x, params, *contexts)`` with ``params``),
            written with the Array API (``xp = array_namespace(x)``) so that it runs
            on every backend.
        x: the point: a NumPy array, a Python float, or a pytree of arrays.
        contexts: ``di.Constant`` values (NumPy leaves) passed after ``x``.
        params: when not None, the function is ``di.FixedParams(f, params)``.
        v: a tangent like ``x`` (jvp, hvp); w: a cotangent like ``f(x)`` (vjp).
        y, jac, hess, second: flat references (see the module docstring);
            None where unknown (see :func:`compute_references`).
        operators: the operators that apply; by default all that fit the shapes
            (found by calling ``f`` once on NumPy, as is a default ``w``).
        reference: the backend that computed the references (None: closed
            forms); results are then held to that backend's accuracy at most.

    Examples:
        >>> import numpy as np
        >>> s = Scenario("square", "array->scalar", lambda x: (x**2).sum(), np.ones(2))
        >>> s.operators[:3]
        ('gradient', 'value_and_gradient', 'jvp')
    """

    name: str
    family: str
    f: Callable
    x: Any
    contexts: tuple = ()
    params: Any = None
    v: Any = None
    w: Any = None
    y: Any = None
    jac: Any = None
    hess: Any = None
    second: Any = None
    operators: tuple = ()
    reference: Any = None

    def __post_init__(self) -> None:
        leaves = flatten(self.x)[0]
        if self.v is None:
            rng = np.random.default_rng(len(self.name))
            v = [np.asarray(rng.uniform(-1, 1, np.shape(a)), dtype=_dtype(a)) for a in leaves]
            object.__setattr__(self, "v", unflatten(flatten(self.x)[1], v))
        if self.w is None:
            y = np.asarray(self.call(self.x))
            w = np.random.default_rng(len(self.name) + 1).uniform(-1, 1, y.shape)
            object.__setattr__(self, "w", w.astype(y.dtype))
        if not self.operators:
            object.__setattr__(self, "operators", applicable(self))
        self._check_references()

    def _check_references(self) -> None:
        """References of the wrong shape are an error here, not a NumPy error later."""
        n = sum(int(np.size(a)) for a in flatten(self.x)[0])
        m = int(np.size(self.w))  # w is built like f(x): f is not called again
        want = {"y": (m,), "jac": (m, n), "hess": (n, n), "second": (m,)}
        for name, shape in want.items():
            ref = getattr(self, name)
            if ref is None:
                continue
            got = np.shape(ref)
            if got != shape and not (name in ("y", "second") and np.size(ref) == m):
                raise DiffifaceValueError(
                    f"Scenario {self.name!r}: {name} must have shape {shape} (flat references: "
                    f"f(x) has {m} entries, x has {n}), got {got}. See the Scenario docstring."
                )

    def function(self, params: Any = None) -> Callable:
        """The function an operator is given: ``f``, or ``di.FixedParams(f, params)``."""
        if self.params is None:
            return self.f
        from .._contexts import FixedParams

        return FixedParams(self.f, self.params if params is None else params)

    def call(self, x: Any) -> Any:
        """``f(x, ...)`` on NumPy arrays."""
        ctx = [c.value for c in self.contexts]
        if self.params is not None:
            return self.f(x, self.params, *ctx)
        return self.f(x, *ctx)

    @property
    def dtype(self) -> np.dtype:
        return _dtype(flatten(self.x)[0][0])

    def expected(self, op: str) -> tuple:
        """The flat references of each output of ``op``, in order."""
        y, jac, hess = self.y, self.jac, self.hess
        parts = {
            "value": lambda: y,
            "derivative": lambda: jac[:, 0],
            "gradient": lambda: jac[0],
            "jacobian": lambda: jac.reshape(-1),
            "jvp": lambda: jac @ flat_result(self.v),
            "vjp": lambda: np.ravel(self.w) @ jac,
            "hvp": lambda: None if hess is None else hess @ flat_result(self.v),
            "hessian": lambda: None if hess is None else hess.reshape(-1),
            "second_derivative": lambda: self.second,
            "batched_jacobian": lambda: self._batched(jac),
        }
        names = outputs(op)
        needs_jac = {"value", "hvp", "hessian", "second_derivative"}
        return tuple(None if jac is None and n not in needs_jac else parts[n]() for n in names)

    def _batched(self, jac: np.ndarray) -> np.ndarray:
        x, y = np.asarray(self.x), np.asarray(self.call(self.x))
        b = x.shape[0]
        j4 = jac.reshape(b, y.size // b, b, x.size // b)
        return np.stack([j4[i, :, i, :] for i in range(b)]).reshape(-1)


def outputs(op: str) -> tuple:
    """The names of ``op``'s outputs, in order (``("value", "gradient")``, ...)."""
    d = OPS.get(op)
    return (op,) if d is None else d.returns


def applicable(s: Scenario) -> tuple:
    """The operators that fit the shapes of ``s``."""
    leaves = flatten(s.x)[0]
    single = not isinstance(s.x, dict | list | tuple)
    scalar_x = single and np.ndim(s.x) == 0
    y = np.asarray(s.call(s.x))
    scalar_y = y.ndim == 0
    ops = []
    for op in OPERATORS:
        d = OPS[op]
        if d.scalar_x and not scalar_x:
            continue
        if d.scalar and not scalar_y:
            continue
        if d.one_array_x and not single:
            continue
        if d.family == "batched_jacobian" and not _batch_of(s, single, y, leaves):
            continue
        ops.append(op)
    return tuple(ops)


def _batch_of(s: Scenario, single: bool, y: np.ndarray, leaves: list) -> bool:
    """f(x) has x's leading (batch) axis."""
    if not (single and y.ndim >= 1 and np.ndim(s.x) >= 1):
        return False
    return y.shape[:1] == np.shape(leaves[0])[:1]


def _dtype(a: Any) -> np.dtype:
    return np.asarray(a).dtype if not isinstance(a, float) else np.dtype(np.float64)


def is_sparse(a: Any) -> bool:
    """A sparse matrix of one of the frameworks (BCOO, torch sparse, scipy.sparse)."""
    layout = getattr(a, "layout", None)
    if layout is not None:  # torch: a layout other than strided (dense)
        return str(layout).rpartition(".")[2] != "strided"
    return type(a).__name__ == "BCOO" or hasattr(a, "tocsr")


def dense(a: Any) -> Any:
    """A sparse matrix as a dense array (anything else as it is)."""
    if not is_sparse(a):
        return a
    if hasattr(a, "to_dense"):  # torch
        return a.to_dense()
    return a.toarray() if hasattr(a, "toarray") else a.todense()


def flat_result(tree: Any) -> np.ndarray:
    """A result (array, float or pytree of them, any framework) as one float64 vector."""
    out = []
    if is_sparse(tree):  # a BCOO is a JAX pytree node: its nonzeros, not its leaves
        tree = dense(tree)
    for a in flatten(tree)[0]:
        a = dense(a)
        if hasattr(a, "detach"):
            a = a.detach().cpu().numpy()
        out.append(np.ravel(np.asarray(a, dtype=np.float64)))
    return np.concatenate(out) if out else np.zeros(0)


def compute_references(scenario: Scenario, backend: Any) -> Scenario:
    """``scenario`` with ``y``, ``jac``, ``hess`` and ``second`` computed by ``backend``
    (for a function without closed forms; pick a trusted backend in float64).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> s = Scenario("cube", "array->scalar", lambda x: (x**3).sum(), np.array([1.0, 2.0]))
        >>> compute_references(s, di.AutoFiniteDifferences()).jac.round(4)
        array([[ 3., 12.]])
    """
    from ..operators import second_order as _second_order
    from ..operators.jacobian import jacobian

    leaves, tree = flatten(scenario.x)
    sizes = [int(np.size(a)) for a in leaves]
    shapes = [np.shape(a) for a in leaves]
    dtype = scenario.dtype

    def unflat(z):
        parts, start = [], 0
        for n, shape in zip(sizes, shapes, strict=True):
            parts.append(z[start : start + n].reshape(shape))
            start += n
        return unflatten(tree, parts)

    fn = scenario.function()
    ctx = tuple(scenario.contexts)

    def flat_f(z, *c):
        return fn(unflat(z), *c).reshape(-1)

    z = flat_result(scenario.x).astype(dtype)
    y = np.asarray(scenario.call(scenario.x))
    jac = np.asarray(jacobian(flat_f, backend, z, *ctx), dtype=np.float64)
    hess = second = None
    if y.ndim == 0:
        hess = _second_order.hessian(lambda z, *c: fn(unflat(z), *c), backend, z, *ctx)
        hess = np.asarray(hess, dtype=np.float64)
    if not isinstance(scenario.x, dict | list | tuple) and np.ndim(scenario.x) == 0:
        x0 = np.asarray(scenario.x, dtype=dtype)
        second = _second_order.second_derivative(fn, backend, x0, *ctx)
        second = np.ravel(np.asarray(second, dtype=np.float64))
    return dataclasses.replace(
        scenario,
        y=np.ravel(y).astype(np.float64),
        jac=jac,
        hess=hess,
        second=second,
        reference=backend,
    )
