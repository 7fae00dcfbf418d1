"""within_gradient: is this array being differentiated right now?"""

from __future__ import annotations

from typing import Any

from ._arrays import owner


def within_gradient(x: Any) -> bool:
    """True when ``x`` is being differentiated by a supported framework.

    Layers use it to switch training behaviour (dropout, batch norm). It
    imports no framework: only those already imported are asked (each backend
    package answers for its arrays).

    * JAX: a tracer of ``jax.grad``, ``jax.jvp``, ``jax.vjp``, ``jax.linearize``
      (and of ``jax.jacfwd`` / ``jacrev`` / ``hessian``), also under ``jit`` and
      ``vmap`` applied inside or outside the differentiation. Limit: inside a
      ``jit`` that is itself differentiated (``jax.grad(jax.jit(f))``), ``x`` is a
      staging tracer that does not know about the outer ``grad``: False there.
    * torch: a tensor that requires grad while grad mode is on; a
      ``torch.func.grad`` / ``jvp`` / ``vjp`` wrapper (also under ``vmap``); a
      forward-mode dual tensor.
    * autograd: an autograd box.
    * MLX: always False (mlx shows Python no tracer: an array inside ``mx.grad``
      looks like any other; a known gap).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.within_gradient(np.ones(3))
        False
    """
    fw = owner(x)
    return fw is not None and fw.within_gradient(x)
