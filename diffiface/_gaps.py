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
        "within_gradient(x) is False inside mx.grad, and an f whose output does not depend "
        "on x (a constant, mx.stop_gradient) gives zeros without a DisconnectedWarning (nor a "
        "strict error): mlx 0.32 shows neither its tracers nor its graph to Python (an array "
        "inside mx.grad has the same type, buffer and DLPack device as any other); the "
        "zeros are right.",
        "Pass the training flag yourself inside mx.grad; check a suspect f with "
        "di.gradient on AutoJax or AutoTorch on the same array-API code.",
        (
            "*::test_zeros_and_a_warning[AutoMLX*]",
            "*::test_strict_makes_it_an_error[AutoMLX*]",
            "*::test_a_constant_f_runs_once_with_one_warning[AutoMLX*]",
            "*::test_within_gradient_through_diffiface[AutoMLX(mode=None)]",
            "*::test_within_gradient_mlx",
            "*::test_mlx_output_that_does_not_depend_on_x_warns",
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
        "FixedParams' forward-over-reverse rules never run under mx.grad: every strategy "
        "is MLX's own nesting (same derivatives; has_aux=True, which the rule refuses under "
        "an outer pass, works). A rule would be an mx.custom_function, "
        "which takes the arrays f closes over as constants (their outer derivative came "
        "out 0, measured on mlx 0.32.4), and MLX shows no tracers to find the ones an "
        "outer pass tracks, as JAX's closure_convert and torch's graph do.",
        "None needed for the results; for the rule's memory profile, nest on JAX or torch.",
        (
            "*::test_mlx_forward_over_reverse_rule_runs_under_mx_grad",
            # (no rule, so has_aux under mx.grad is no error: MLX's nesting handles it)
            "*::test_fixed_params_forward_over_reverse_with_aux_is_an_error[AutoMLX*]",
        ),
    ),
)


def gaps_table() -> str:
    """Markdown: the known gaps, one row each."""
    lines = ["| backend | gap | the way around |", "| --- | --- | --- |"]
    for gap in KNOWN_GAPS:
        lines.append(f"| {gap.backend} | {gap.what} | {gap.way_around} |")
    return "\n".join(lines)
