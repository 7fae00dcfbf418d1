"""Tangents: several directions at once for jvp, vjp and hvp."""

from __future__ import annotations

from typing import Any

from ._errors import DiffifaceValueError


class Tangents:
    """Several tangents (or cotangents) passed together: one batched pass where the
    framework has vmap (JAX, torch), a loop otherwise (autograd, finite differences).

    ``di.jvp(f, backend, x, di.Tangents(v1, v2))`` returns
    ``di.Tangents(jvp(v1), jvp(v2))``; likewise ``vjp``, ``hvp`` and their
    ``value_and_`` variants (the value is returned once).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> t = di.jvp(lambda x: x**2, di.AutoFiniteDifferences(), np.array([1.0, 2.0]),
        ...            di.Tangents(np.array([1.0, 0.0]), np.array([0.0, 1.0])))
        >>> len(t), t[1].round(6)
        (2, array([0., 4.]))
    """

    __slots__ = ("_values",)

    def __init__(self, *values: Any) -> None:
        if not values:
            raise DiffifaceValueError(
                "Tangents(): give at least one tangent, e.g. Tangents(v1, v2)."
            )
        self._values = tuple(values)

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self):
        return iter(self._values)

    def __getitem__(self, i: int) -> Any:
        return self._values[i]

    def __repr__(self) -> str:
        return f"Tangents({', '.join(map(repr, self._values))})"


def one_by_one(run: Any, value: bool, slow: Any) -> Any:
    """A runner ``run(x, t)`` of one tangent that also takes a ``Tangents`` of k: one
    call per tangent (the framework's native loop), the value given once (``value``);
    ``slow`` (the runners' SLOW) as soon as one call hands over to the general path."""

    def run_all(x: Any, t: Any) -> Any:
        if type(t) is not Tangents:
            return run(x, t)
        outs = []
        for v in t._values:
            out = run(x, v)
            if out is slow:
                return slow
            outs.append(out)
        if value:
            return outs[0][0], Tangents(*(o[1] for o in outs))
        return Tangents(*outs)

    return run_all
