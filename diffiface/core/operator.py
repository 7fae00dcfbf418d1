"""Every public operator, declared once: the one home of per-operator facts.

Other modules ask these declarations (``OPS[name].tangent``, ``names(...)``) instead
of keeping tables keyed by operator names. A new operator is one line here, its
``run`` in ``operators/`` and its public function.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Declared:
    """The facts of one operator.

    Attributes:
        name: its public name.
        family: the ``prepare_<family>`` that prepares it.
        returns: what it returns, in order ("value", "gradient", "jvp", ...).
        tangent: "v" (a tangent like x), "w" (a cotangent like f(x)) or None.
        scalar: f must return a scalar.
        second: it takes ``second_order(outer, inner)``.
        tree_output: f may return a pytree (the result follows its structure).
        complex_x: x may be complex (the gradient's conjugate convention).
        forward: computed by forward-mode products (no nested-AD rule replaces it).
        method: the backend method a nested-AD rule replaces, or None.
        sparse: AutoSparse computes it as a sparse matrix.
        computed_by: the backend methods that compute it natively (a backend that
            defines none of them derives it from its jvp or vjp).
        several: (the backend method for a ``Tangents`` of several, the method it
            runs once per tangent), or None.
        scalar_x: x must be a scalar (the derivative operators).
        one_array_x: x must be one array, not a pytree (its result is a matrix of x's
            entries).
    """

    name: str
    family: str
    returns: tuple
    tangent: str | None = None
    scalar: bool = False
    second: bool = False
    tree_output: bool = False
    complex_x: bool = False
    forward: bool = False
    method: str | None = None
    sparse: bool = False
    computed_by: tuple = ()
    several: tuple | None = None
    scalar_x: bool = False
    one_array_x: bool = False


def _family(family: str, *ops: tuple, **facts) -> list[Declared]:
    """The operators of one family: ``(name, returns, own facts)`` each."""
    return [Declared(name, family, returns, **facts, **own) for name, returns, own in ops]


_G, _J, _H, _GH = "gradient", "jacobian", "hessian", "gradient_and_hvp"
OPS: dict[str, Declared] = {
    d.name: d
    for d in (
        *_family(
            "gradient",
            ("gradient", (_G,), {"method": "gradient"}),
            ("value_and_gradient", ("value", _G), {"method": "value_and_gradient"}),
            scalar=True,
            complex_x=True,
            computed_by=(_G, "value_and_gradient"),
        ),
        *_family(
            "jvp",
            ("jvp", ("jvp",), {}),
            ("value_and_jvp", ("value", "jvp"), {}),
            tangent="v",
            tree_output=True,
            forward=True,
            computed_by=("value_and_jvp",),
            several=("value_and_jvps", "value_and_jvp"),
        ),
        *_family(
            "vjp",
            ("vjp", ("vjp",), {}),
            ("value_and_vjp", ("value", "vjp"), {}),
            tangent="w",
            tree_output=True,
            method="value_and_vjp",
            computed_by=("value_and_vjp", "value_and_pullback"),
            several=("value_and_vjps", "value_and_vjp"),
        ),
        *_family(
            "jacobian",
            ("jacobian", (_J,), {"method": "jacobian"}),
            ("value_and_jacobian", ("value", _J), {"method": "value_and_jacobian"}),
            tree_output=True,
            sparse=True,
            computed_by=(_J, "value_and_jacobian"),
            one_array_x=True,
        ),
        *_family(
            "derivative",
            ("derivative", ("derivative",), {}),
            ("value_and_derivative", ("value", "derivative"), {}),
            tree_output=True,
            forward=True,
            computed_by=("value_and_jvp",),
            scalar_x=True,
        ),
        *_family(
            "hvp",
            ("hvp", ("hvp",), {"method": "hvp"}),
            (_GH, (_G, "hvp"), {"method": _GH}),
            ("value_gradient_and_hvp", ("value", _G, "hvp"), {}),
            tangent="v",
            scalar=True,
            second=True,
            computed_by=(_GH, "hvp"),
            several=(_GH + "s", _GH),
        ),
        *_family(
            "hessian",
            ("hessian", (_H,), {}),
            ("value_gradient_and_hessian", ("value", _G, _H), {}),
            scalar=True,
            second=True,
            sparse=True,
            computed_by=("value_gradient_and_hessian", _H),
            one_array_x=True,
        ),
        *_family(
            "second_derivative",
            ("second_derivative", ("second_derivative",), {}),
            (
                "value_derivative_and_second_derivative",
                ("value", "derivative", "second_derivative"),
                {},
            ),
            second=True,
            forward=True,
            computed_by=("value_derivative_and_second_derivative",),
            scalar_x=True,
        ),
        *_family(
            "batched_jacobian",
            ("batched_jacobian", ("batched_jacobian",), {"method": "batched_jacobian"}),
            (
                "value_and_batched_jacobian",
                ("value", "batched_jacobian"),
                {"method": "value_and_batched_jacobian"},
            ),
            tree_output=True,
            computed_by=("batched_jacobian", "value_and_batched_jacobian"),
            one_array_x=True,
        ),
    )
}

FAMILY = {name: d.family for name, d in OPS.items()}
# the parts of a result shaped like f(x) (a pytree where f returns one)
SHAPED_LIKE_F = frozenset(("value", "derivative", "jacobian", "jvp", "batched_jacobian"))


def names(**facts) -> frozenset:
    """The operators whose declarations have these facts, e.g. ``names(sparse=True)``."""
    return frozenset(
        name for name, d in OPS.items() if all(getattr(d, k) == v for k, v in facts.items())
    )


def of_family(family: str) -> tuple:
    """The operators a ``prepare_<family>`` prepares, in declaration order."""
    return tuple(name for name, d in OPS.items() if d.family == family)


def pick(op: str, parts: dict):
    """The result of ``op`` from its named parts ("value", "gradient", "hvp", ...)."""
    returns = OPS[op].returns
    return parts[returns[0]] if len(returns) == 1 else tuple(parts[r] for r in returns)


def backend_methods() -> tuple:
    """Every backend method that computes an operator natively (``computed_by``), and
    those for a ``Tangents`` of several (``several``), in declaration order."""
    out = [m for d in OPS.values() for m in d.computed_by]
    out += [d.several[0] for d in OPS.values() if d.several]
    return tuple(dict.fromkeys(out))
