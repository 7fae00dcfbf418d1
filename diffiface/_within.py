"""within_gradient: is this array being differentiated right now?"""

from __future__ import annotations

import sys
from typing import Any


def within_gradient(x: Any) -> bool:
    """True when ``x`` is being differentiated by a supported framework.

    Layers use it to switch training behaviour (dropout, batch norm). It
    imports no framework: only those already imported are asked.

    * JAX: a tracer of ``jax.grad``, ``jax.jvp``, ``jax.vjp``, ``jax.linearize``
      (and of ``jax.jacfwd`` / ``jacrev`` / ``hessian``), also under ``jit`` and
      ``vmap`` applied inside or outside the differentiation. Limit: inside a
      ``jit`` that is itself differentiated (``jax.grad(jax.jit(f))``), ``x`` is a
      staging tracer that does not know about the outer ``grad``: False there.
    * torch: a tensor that requires grad while grad mode is on; a
      ``torch.func.grad`` / ``jvp`` / ``vjp`` wrapper (also under ``vmap``); a
      forward-mode dual tensor.
    * autograd: an autograd box.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.within_gradient(np.ones(3))
        False
    """
    jax_mod = sys.modules.get("jax")
    if jax_mod is not None and isinstance(x, jax_mod.core.Tracer):
        return _jax_differentiated(x)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return _torch_differentiated(torch, x)
    tracer = sys.modules.get("autograd.tracer")
    return tracer is not None and isinstance(x, tracer.Box)


def _jax_differentiated(t: Any) -> bool:
    from jax._src.interpreters import ad

    tracer_types = tuple(
        cls for cls in (getattr(ad, "JVPTracer", None), getattr(ad, "LinearizeTracer", None)) if cls
    )
    seen = 0
    while t is not None and seen < 64:  # walk nested tracers (vmap of grad, grad of vmap)
        if isinstance(t, tracer_types):
            return True
        t = next(
            (getattr(t, a) for a in ("val", "primal", "tracer") if getattr(t, a, None) is not None),
            None,
        )
        seen += 1
    return False


def _torch_differentiated(torch: Any, x: Any) -> bool:
    from torch._C import _functorch as ft

    if x.requires_grad and torch.is_grad_enabled():
        return True
    fw = sys.modules.get("torch.autograd.forward_ad")
    if fw is not None and fw._current_level >= 0 and fw.unpack_dual(x).tangent is not None:
        return True
    seen = 0
    while ft.is_functorch_wrapped_tensor(x) and seen < 64:
        if ft.is_gradtrackingtensor(x):
            return True
        x = ft.get_unwrapped(x)
        seen += 1
    return bool(x.requires_grad and torch.is_grad_enabled())
