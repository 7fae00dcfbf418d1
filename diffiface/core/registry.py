"""Backend registry: one ``register(BackendType)`` entry point, lazy imports.

A framework module is imported the first time its backend is used; it
registers its implementation class for its backend type.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any

from .._backend_types import BUILTIN, SecondOrder
from .._checks import FrameworkMissingError

# backend type -> the framework it needs (None: NumPy only), in the order shown to users
FRAMEWORKS = {backend: backend.needs for backend in BUILTIN}
_IMPLS: dict[type, type] = {}
_RULES: dict[tuple[str, str], Any] = {}  # (outer framework, inner operator method) -> rule
_INSTANCES: dict[Any, Any] = {}  # backend value -> implementation, newest last
# backend types whose implementation keeps plans for unprepared calls: the shell looks
# for one only for these (a set of types: the check costs no call and cannot raise)
KEEPS_PLANS: set = set()
MAX_INSTANCES = 256  # distinct backend values kept (AutoFiniteDifferences(step=s) per s)
_LOCK = threading.RLock()  # (reentrant: AutoSparse builds its dense backend inside)


def register(backend_type: type):
    """Class decorator: ``@register(AutoJax)`` makes the class implement AutoJax."""

    def deco(impl_cls: type) -> type:
        _IMPLS[backend_type] = impl_cls
        return impl_cls

    return deco


def register_rule(framework: str, method: str):
    """Decorator: ``@register_rule(framework, "gradient")`` makes the function the
    forward-over-reverse nested-AD rule of that inner operator under that framework.
    A rule takes ``(impl, *args)``, the arguments of the implementation method."""

    def deco(fn):
        _RULES[(framework, method)] = fn
        return fn

    return deco


def arrays(backend: Any) -> str:
    """The framework whose arrays ``backend`` takes: its implementation's ``traits.arrays``
    (a second-order backend's inner one's). The one home of that question."""
    if isinstance(backend, SecondOrder):
        backend = backend.inner
    return implementation(backend).traits.arrays


def rule(framework: str, method: str) -> Any:
    return _RULES.get((framework, method))


def rule_methods(framework: str) -> list[str]:
    return [m for fw, m in _RULES if fw == framework]


def implementation(backend: Any) -> Any:
    """The implementation object for ``backend`` (cached per backend value)."""
    impl = _INSTANCES.get(backend)
    if impl is not None:
        return impl
    with _LOCK:
        impl = _INSTANCES.get(backend)
        if impl is None:
            impl = load(type(backend))(backend)
            _INSTANCES[backend] = impl
            if impl.traits.keeps_plans:
                KEEPS_PLANS.add(type(backend))
            while len(_INSTANCES) > MAX_INSTANCES:  # the oldest first
                del _INSTANCES[next(iter(_INSTANCES))]
    return impl


def load(backend_type: type) -> type:
    module, extra = backend_type.package, backend_type.needs
    # (its package also when the implementation came in alone: the nested rules with it)
    if backend_type not in _IMPLS or (module is not None and module not in sys.modules):
        if module is None:
            raise TypeError(
                f"{backend_type.__name__} has no registered implementation. A new backend "
                "module must call diffiface.core.registry.register on import."
            )
        try:
            importlib.import_module(module)
        except ImportError as exc:
            if extra is None or exc.name is None or not exc.name.startswith(extra):
                raise
            raise FrameworkMissingError(
                f"{backend_type.__name__}() needs {extra}, which is not installed. "
                f'Install it with: pip install "diffiface[{extra}]"'
            ) from exc
    return _IMPLS[backend_type]


def crosses(backend: SecondOrder) -> bool:
    """``second_order(outer, inner)`` whose outer AD framework differentiates a gradient
    on another framework's arrays (a bridge): the arrays each takes decide, not the
    names (loads both backends)."""
    outer = backend.outer.framework
    return outer != "finite_differences" and arrays(backend.outer) != arrays(backend.inner)
