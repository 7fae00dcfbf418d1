"""diffiface's settings: ``config`` (process-wide) and ``options(...)`` (a ``with``
block, per thread or task)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from ._errors import DiffifaceTypeError

DEFAULT_MAX_DENSE_BYTES = 2**30


@dataclasses.dataclass
class Config:
    """diffiface's settings, read at call time.

    Attributes:
        nested_ad: route inner calls on a FixedParams through the nested-AD
            rules (default True; the environment variable
            ``DIFFIFACE_NESTED_AD=0`` starts it off). ``di.nested_ad(False)``
            overrides it inside a ``with`` block.
        check_finite: raise when an input (``x``, a tangent or a Constant) holds
            NaN or inf, naming its path and index (default False: NaN and inf
            propagate as in the frameworks).
        strict: an f whose output does not depend on x (constant, or off the
            framework's graph) is an error rather than a ``DisconnectedWarning``
            with zero derivatives (default False).
        max_dense_bytes: the largest dense Jacobian or Hessian (in bytes) that
            ``jacobian``, ``hessian`` and ``batched_jacobian`` build without
            ``chunk_size`` (default 1 GiB; None for no limit).
        max_compiled_shapes: AutoJax keeps the compilations of at most this many
            input shapes per function and operator (default 64); past it they are
            dropped and compiled again on use, so a new shape per call does not
            grow memory without bound (None: no limit).

    Examples:
        >>> import diffiface as di
        >>> di.config.nested_ad, di.config.check_finite
        (True, False)
    """

    nested_ad: bool = os.environ.get("DIFFIFACE_NESTED_AD", "1").lower() not in (
        "0",
        "false",
        "off",
    )
    check_finite: bool = False
    strict: bool = False
    max_dense_bytes: int | None = DEFAULT_MAX_DENSE_BYTES
    max_compiled_shapes: int | None = 64

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _CHECKS and globals().get("config") is self:  # (di.config's alone)
            CHECKING[0] = self.check_finite or self.strict or self.max_dense_bytes != _DEFAULT


_CHECKS = ("check_finite", "strict", "max_dense_bytes")  # the settings checking() reads
_DEFAULT = DEFAULT_MAX_DENSE_BYTES
# checking() outside any options block, kept as di.config's settings are set (its
# defaults check nothing); read on every call
CHECKING = [False]


config = Config()
OPTIONS: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "diffiface_options", default=None
)
_NAMES = tuple(f.name for f in dataclasses.fields(Config))


@contextlib.contextmanager
def options(**settings: Any) -> Iterator[None]:
    """Override settings of :data:`config` inside a ``with`` block (this thread or task).

    Args:
        **settings: ``nested_ad``, ``check_finite``, ``strict``,
            ``max_dense_bytes`` and ``max_compiled_shapes``, as in :class:`Config`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> try:
        ...     with di.options(check_finite=True):
        ...         di.gradient(lambda x: (x**2).sum(), di.AutoFiniteDifferences(),
        ...                     np.array([1.0, np.nan]))
        ... except ValueError as err:
        ...     print(str(err).split(": ", 1)[1][:31])
        x holds nan at index (1,) and c
    """
    unknown = sorted(set(settings) - set(_NAMES))
    if unknown:
        raise DiffifaceTypeError(
            f"di.options() takes {', '.join(_NAMES)}; got {', '.join(unknown)}."
        )
    token = OPTIONS.set({**(OPTIONS.get() or {}), **settings})
    try:
        yield
    finally:
        OPTIONS.reset(token)


def get(name: str) -> Any:
    """The setting ``name``: the innermost ``options`` block's, else ``config``'s."""
    over = OPTIONS.get()
    value = getattr(config, name)
    return value if over is None else over.get(name, value)


def check_finite() -> bool:
    return get("check_finite")


def strict() -> bool:
    return get("strict")


def max_dense_bytes() -> int | None:
    return get("max_dense_bytes")


def checking() -> bool:
    """True when a per-call check is on or the size limit differs from its default
    (the fast paths, built under the defaults, then hand over to the general path)."""
    if OPTIONS.get() is None:
        return CHECKING[0]
    return check_finite() or strict() or max_dense_bytes() != DEFAULT_MAX_DENSE_BYTES
