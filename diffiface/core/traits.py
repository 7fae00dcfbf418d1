"""What a backend is, as facts the core reads (not behaviour): one frozen dataclass
per implementation class, ``BackendImpl.traits``."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Traits:
    """A backend implementation's facts. Each field says what it means and who reads it.

    >>> Traits("toy", arrays="numpy").arrays  # a backend of its own name on NumPy arrays
    'numpy'
    >>> Traits("toy").arrays  # by default, the arrays of its own framework
    'toy'
    """

    # The backend's own name (its ``Auto*`` type's ``framework``): the key of its nested
    # rules (nested.route), its same-point kit (operators.same_point) and messages.
    framework: str
    # The framework whose arrays it takes (``_arrays.Framework`` name), "" for its own
    # ``framework``: which leaves are foreign (core.convert), the plan's kind (core.plan),
    # the bridge module (bridge.framework_key) and the testing kit (testing._kit).
    arrays: str = ""
    # Its arrays in messages, plural ("jax arrays") and one of f's outputs ("a jax array"):
    # core.convert and core.problem.
    native_kind: str = ""
    output_kind: str = ""
    # The native pullback of a complex output conjugates w (torch): operators.first_order
    # and BackendImpl.value_and_gradient skip their own conjugation.
    hermitian_vjp: bool = False
    # The (outer, inner) directions of second order when the call names none and forward
    # mode is not wanted; None for the plain double backward (operators.second_order).
    reverse_combo: tuple[str, str] | None = ("reverse", "reverse")
    # ``runner(..., weak=True)`` gives runners for unprepared calls: core.shell and
    # core.registry keep plans for it (core.unprepared).
    keeps_plans: bool = False
    # Its compiled runners keep what f read when compiled (JAX): core.unprepared watches
    # f's globals and cells so a rebound one is never stale.
    bakes_reads: bool = False
    # Its runners hand f's aux to the open sink, as the caller sees it (JAX: the compiled
    # function restores it): core.plan and core.unprepared build runners for has_aux.
    runs_aux: bool = False
    # Its runners take f's pytree output as each call gives it, checked per call (torch,
    # which runs f anew on every call): core.plan uses them as they are (``tree_runner``).
    runs_trees: bool = False
    # AutoSparse's implementation (sparse_jacobian, sparse_hessian): operators.jacobian and
    # operators.second_order hand the call to it.
    sparse: bool = False
    # A jvp costs about a vjp (False on torch, whose forward mode costs far more): the
    # sparse plan's choice of rows or columns (sparse.plan).
    cheap_forward: bool = True

    def __post_init__(self) -> None:
        if not self.arrays:
            object.__setattr__(self, "arrays", self.framework)
