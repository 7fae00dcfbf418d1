"""The support matrix, generated from the backend classes and the rule registry:
which operators each backend computes natively and which nested-AD rules exist."""

from __future__ import annotations

import importlib.util

from .core.backend import BackendImpl
from .core.operator import OPS
from .core.registry import FRAMEWORKS, load, rule_methods
from .nested.route import METHOD

# operator family -> the backend methods that compute it (from the declarations)
METHODS = {d.family: d.computed_by for d in OPS.values()}
METHODS["several tangents (Tangents)"] = tuple(
    dict.fromkeys(d.several[0] for d in OPS.values() if d.several)
)
BACKENDS = tuple(FRAMEWORKS.items())  # (backend type, framework or None)
NESTED = tuple(dict.fromkeys(METHOD.values()))  # the inner operators a rule can replace


def support_table() -> str:
    """Markdown: per operator and backend, "native" (the backend's own method) or
    "generic" (derived from its jvp / vjp in ``core.backend`` and ``core.fallbacks``)."""
    impls = _impls()
    head = "| operator | " + " | ".join(b.__name__ for b, _ in BACKENDS) + " |"
    lines = [head, "| --- |" + " --- |" * len(BACKENDS)]
    for op, methods in METHODS.items():
        cells = []
        for backend, _ in BACKENDS:
            cls = impls.get(backend)
            if cls is None:
                cells.append("not installed")
                continue
            native = any(_defines(cls, m) for m in methods)
            cells.append("native" if native else "generic")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def nested_table() -> str:
    """Markdown: per inner operator and framework, whether a forward-over-reverse rule
    is registered (reverse over reverse, the framework's own nesting, always works)."""
    _impls()
    frameworks = [m for _, m in BACKENDS if m]
    lines = ["| inner operator | " + " | ".join(frameworks) + " |"]
    lines.append("| --- |" + " --- |" * len(frameworks))
    for method in NESTED:
        cells = ["rule" if method in rule_methods(fw) else "own nesting" for fw in frameworks]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _impls() -> dict:
    out = {}
    for backend, module in BACKENDS:
        if module is None or importlib.util.find_spec(module) is not None:
            out[backend] = load(backend)
    return out


def _defines(cls: type, method: str) -> bool:
    """True when ``cls`` (or a base other than BackendImpl) defines ``method``."""
    for klass in cls.__mro__:
        if klass is BackendImpl:
            return False
        if method in vars(klass):
            return True
    return False
