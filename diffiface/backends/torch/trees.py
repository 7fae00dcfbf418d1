"""f's pytree output in torch's runners, taken per call as it comes.

torch runs f anew on every call, so nothing fixes the output's structure: a runner
flattens f(x) on each call and takes it only when every leaf is a real floating tensor
on x's graph (the general path ravels such an output, differentiates the vector and
splits it back: the same numbers, leaf by leaf). Anything else (a Python number, an
integer or complex leaf, a leaf that does not depend on x, a cotangent unlike the
output) returns None, and the runner hands the call to the general path, which
checks f's output and explains.
"""

from __future__ import annotations

import functools

import optree
import torch
import torch.autograd.forward_ad as fwAD

from ..._tree import NAMESPACE, unflatten

# diffiface's flatten without its check for a framework's own node types (JAX's): a
# tensor is a leaf, and a node optree does not know stays one, which no runner takes
# (it is not a tensor).
flatten = functools.partial(optree.tree_flatten, none_is_leaf=False, namespace=NAMESPACE)


def on_graph(y) -> tuple | None:
    """(leaves, treedef) of a pytree output whose every leaf is a real floating tensor
    that depends on x (reverse mode: it has a graph), else None."""
    leaves, treedef = flatten(y)
    if not leaves:
        return None
    for a in leaves:  # (a loop: no frame per leaf)
        if type(a) is not torch.Tensor or a.grad_fn is None or not a.is_floating_point():
            return None
    return leaves, treedef


def cotangents(y, w) -> tuple | None:
    """(output leaves, their cotangents, treedef) for a vjp of a pytree output ``y``
    along ``w``: w of y's structure, each leaf a plain tensor of its output leaf's shape,
    dtype and device; else None."""
    got = on_graph(y)
    if got is None:
        return None
    leaves, treedef = got
    ws, w_tree = flatten(w)
    if w_tree != treedef:
        return None
    for a, v in zip(leaves, ws, strict=True):
        if (
            type(v) is not torch.Tensor
            or v.requires_grad
            or v.shape != a.shape
            or v.dtype != a.dtype
            or v.device != a.device
        ):
            return None
    return leaves, ws, treedef


def duals(y) -> tuple | None:
    """(f's values, their tangents), each a pytree like y, for a pytree output of dual
    tensors (forward mode, inside the dual level); None where a leaf is not a real
    floating tensor or carries no tangent (it does not depend on x)."""
    leaves, treedef = flatten(y)
    if not leaves:
        return None
    values, tangents = [], []
    for a in leaves:
        if type(a) is not torch.Tensor or not a.is_floating_point():
            return None
        primal, tangent = fwAD.unpack_dual(a)
        if tangent is None:
            return None
        values.append(primal)
        tangents.append(tangent)
    return unflatten(treedef, values), unflatten(treedef, tangents)


def floats(y) -> bool:
    """y is a pytree of real floating tensors (a jacobian's, or f's value, per leaf)."""
    leaves = flatten(y)[0]
    return bool(leaves) and all(type(a) is torch.Tensor and a.is_floating_point() for a in leaves)


def detached(leaves: list, treedef, attached: bool):
    """f's output leaves as the caller gets them: kept on the graph when an outer pass
    sees the call (``attached``), else detached."""
    return unflatten(treedef, leaves if attached else [a.detach() for a in leaves])
