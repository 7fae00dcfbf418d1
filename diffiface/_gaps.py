"""The known gaps: what diffiface does not do yet, on which backend, the way around it,
and the tests that show it.

One table, read by the support matrix in the docs (``diffiface info --support``) and
by the tests: ``tests/conftest.py`` marks every test named here as a strict xfail, so
a gap that closes fails loudly until its row is removed, and a row whose tests are
gone fails too.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Gap:
    """One known gap. ``tests``: patterns of pytest node ids (``*`` is a wildcard;
    brackets are literal), matched against the whole id."""

    backend: str
    what: str
    way_around: str
    tests: tuple[str, ...]

    def matches(self, nodeid: str) -> bool:
        return any(_pattern(p).fullmatch(nodeid) for p in self.tests)


def _pattern(text: str) -> re.Pattern:
    return re.compile(".*".join(re.escape(part) for part in text.split("*")))


KNOWN_GAPS = (
    Gap(
        "AutoJax",
        "An unprepared call does not see a value f closes over that was changed in place "
        "(a dict or list item, a NumPy array written into): the compiled function keeps "
        "the value it was traced with. Rebinding the name is seen.",
        "Pass the value as di.Constant(...), or rebind it to a new object.",
        (
            "*::test_unprepared_call_sees_changed_closure[dict_item]",
            "*::test_unprepared_call_sees_changed_closure[list_item]",
            "*::test_unprepared_call_sees_changed_closure[numpy_inplace]",
        ),
    ),
    Gap(
        "AutoTorch",
        "jacobian of an f that writes into a Constant in place raises 'f changes its "
        "input in place' (gradient, jvp and vjp work).",
        "Write into a clone inside f, or use vjp.",
        ("*::test_jac_inplace_into_constant[*]",),
    ),
    Gap(
        "AutoTorch",
        "A forward jacobian of a forward jacobian gives no DisconnectedWarning when the "
        "result is zero everywhere (the zeros are right).",
        "mode='reverse' warns.",
        (
            "*::test_unrelated_hessian[auto]",
            "*::test_unrelated_hessian[forward]",
        ),
    ),
    Gap(
        "AutoMLX",
        "A NumPy x comes back as NumPy results inside an outer MLX pass (mx.grad of a "
        "function that calls diffiface): MLX has no tracer type that tells diffiface an "
        "outer pass sees the result, so the outer derivative through it is lost.",
        "Inside mx.grad, pass x as an mx.array: the results stay mx.arrays.",
        ("*::test_matrix[*-MLX-numpy-*_outer]",),
    ),
    Gap(
        "AutoMLX",
        "No DisconnectedWarning (nor strict error) for an f whose output does not depend "
        "on x (a constant, mx.stop_gradient): an mx.array shows no graph (no tracer type, "
        "no inputs; mlx 0.32.4), so diffiface cannot tell; the zeros are right.",
        "Check f with AutoJax or AutoTorch on the same array-API code, or test the "
        "gradient for zeros.",
        (
            "*::test_zeros_and_a_warning[AutoMLX*]",
            "*::test_strict_makes_it_an_error[AutoMLX*]",
            "*::test_a_constant_f_runs_once_with_one_warning[AutoMLX*]",
        ),
    ),
    Gap(
        "AutoMLX",
        "float(), .item() and np.asarray inside f run under mx.grad without an error: MLX "
        "evaluates the array, and the derivative through that value is silently lost "
        "(JAX and torch raise or warn, and diffiface names the conversion).",
        "Keep f in mlx.core array ops all the way to its result.",
        ("*::test_converting_to_a_python_float[AutoMLX*]",),
    ),
    Gap(
        "AutoMLX",
        "No bridge yet (diffiface/backends/mlx/bridge.py): differentiate_with between MLX "
        "and another framework, and second_order of MLX with another framework (finite "
        "differences outside included), raise a clear error.",
        "Differentiate MLX code with AutoMLX() on both levels.",
        (
            *(
                f"*::test_an_error_under_a_second_order_of_two_frameworks_names_the_call[{op}-"
                f"{arrays}-AutoMLX(mode=None)]"
                for op in (
                    "hvp",
                    "gradient_and_hvp",
                    "value_gradient_and_hvp",
                    "hessian",
                    "value_gradient_and_hessian",
                    "second_derivative",
                    "value_derivative_and_second_derivative",
                )
                for arrays in ("numpy-other AD", "inner's-*")
            ),
            "*::test_a_foreign_f_names_the_backend_for_it[*-AutoMLX(mode=None)-*]",
        ),
    ),
)


def gaps_table() -> str:
    """Markdown: the known gaps, one row each."""
    lines = ["| backend | gap | the way around |", "| --- | --- | --- |"]
    for gap in KNOWN_GAPS:
        lines.append(f"| {gap.backend} | {gap.what} | {gap.way_around} |")
    return "\n".join(lines)
