"""The table of aten ops and their rules (``rules``, ``elementwise``), by op
packet; ``rule_for`` also reads torch's tags (pointwise, reduction)."""

from __future__ import annotations

import torch

from . import elementwise as E
from .elementwise import fill, no_derivative, pointwise
from .rules import (
    adjoint,
    along,
    layer_norm,
    matmul,
    metadata_only,
    movement,
    prefix,
    reduction,
    scatter_like,
)
from .windows import adaptive_backward, convolution, convolution_backward

aten = torch.ops.aten

RULES: dict = {}


def _register(rule, names: str) -> None:
    for name in names.split():
        packet = getattr(aten, name, None)
        if packet is not None:
            RULES[packet] = rule


_register(
    pointwise,
    "_to_copy softplus_backward elu_backward hardtanh_backward "
    "leaky_relu_backward log_sigmoid_forward log_sigmoid_backward native_dropout "
    "hardswish_backward hardsigmoid_backward mish_backward softshrink_backward "
    "hardshrink_backward logit_backward elu hardtanh leaky_relu softshrink hardshrink "
    "hardswish hardsigmoid mish celu selu silu logit _conj resolve_conj resolve_neg "
    "native_dropout_backward rrelu_with_noise_backward",
)
_register(fill, "fill")
_register(
    movement,
    "view _unsafe_view reshape expand permute transpose t slice select squeeze unsqueeze "
    "flip roll cat stack clone alias lift_fresh_copy constant_pad_nd index index_select "
    "index_copy index_fill masked_select masked_scatter take as_strided split "
    "split_with_sizes unbind chunk diagonal narrow repeat copy slice_scatter select_scatter "
    "diagonal_scatter as_strided_scatter _unsafe_masked_index slice_backward select_backward "
    "diagonal_backward unfold tril triu reflection_pad1d reflection_pad2d reflection_pad3d "
    "replication_pad1d replication_pad2d replication_pad3d movedim contiguous "
    "upsample_nearest1d upsample_nearest2d upsample_nearest3d pixel_shuffle pixel_unshuffle "
    "view_copy _unsafe_view_copy expand_copy permute_copy transpose_copy t_copy slice_copy "
    "select_copy squeeze_copy unsqueeze_copy alias_copy diagonal_copy as_strided_copy "
    "split_copy split_with_sizes_copy unbind_copy narrow_copy unfold_copy _reshape_alias",
)
_register(
    reduction,
    "sum mean prod amax amin max min var std var_mean std_mean logsumexp linalg_vector_norm "
    "norm nansum nanmean median nanmedian mode kthvalue aminmax",
)
_register(
    along,
    "_softmax _log_softmax softmax log_softmax _softmax_backward_data "
    "_log_softmax_backward_data sort topk",
)
_register(layer_norm, "native_layer_norm")
_register(convolution, "convolution avg_pool2d avg_pool3d")
_register(
    convolution_backward,
    "convolution_backward avg_pool2d_backward avg_pool3d_backward "
    "max_pool2d_with_indices_backward max_pool3d_with_indices_backward",
)
_register(prefix, "cumsum cumprod logcumsumexp cummax cummin")
_register(matmul, "mm bmm addmm baddbmm mv addmv dot vdot")
_register(scatter_like, "gather scatter scatter_add scatter_reduce index_put _unsafe_index_put")
_register(scatter_like, "_index_put_impl index_add put _unsafe_masked_index_put_accumulate")
_register(
    adjoint,
    "unfold_backward upsample_nearest1d_backward upsample_nearest2d_backward "
    "upsample_nearest3d_backward _upsample_nearest_exact1d_backward "
    "_upsample_nearest_exact2d_backward _upsample_nearest_exact3d_backward "
    "replication_pad1d_backward replication_pad2d_backward replication_pad3d_backward "
    "reflection_pad1d_backward reflection_pad2d_backward reflection_pad3d_backward",
)
_register(
    metadata_only,
    "zeros_like ones_like full_like empty_like new_zeros new_ones new_full new_empty "
    "new_empty_strided scalar_tensor _shape_as_tensor _new_zeros_with_same_feature_meta",
)
_register(
    adaptive_backward,
    "_adaptive_avg_pool2d_backward _adaptive_avg_pool3d_backward "
    "adaptive_max_pool2d_backward adaptive_max_pool3d_backward",
)
_register(no_derivative, E.FLAT_OPS)
_register(E.power, "pow")
_register(E.first_output, "rrelu_with_noise_functional")
_register(E.copysign, "copysign")
_register(E.division, "div")
_register(E.product, "mul")
_register(E.choice, "where masked_fill")
ELEMENTWISE = {
    pointwise,
    no_derivative,
    E.copysign,
    E.division,
    E.product,
    E.choice,
    E.power,
    E.first_output,
}


def rule_for(op):
    """The rule for ``op`` (an OpOverload), or None when it has none. A prims op (in
    forward-mode graphs) takes the rule of the aten op of its name."""
    if op.namespace == "prims":
        packet = getattr(aten, op.overloadpacket.__name__, None)
        if packet is None:
            return None
        rule = rule_for(getattr(packet, "Tensor", None) or getattr(packet, packet.overloads()[0]))
        if rule in (pointwise, no_derivative, E.product):  # (positional operands only)
            return rule
        return pointwise if rule in ELEMENTWISE else None
    rule = RULES.get(op.overloadpacket)
    if torch.Tag.pointwise in op.tags and rule not in ELEMENTWISE:
        return pointwise
    if rule is None and torch.Tag.reduction in op.tags:
        return reduction
    return rule
