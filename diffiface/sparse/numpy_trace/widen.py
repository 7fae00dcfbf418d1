"""Functions the detector has no rule for: each output depends on every input (every
pair, for Hessians), sized by running the function on stand-in values."""

from __future__ import annotations

import warnings

import numpy as np

from . import sets as S
from .tracer import Trace, Traced, needs_values


def widen(trace: Trace, func, args: tuple, kwargs: dict):
    name = f"{getattr(func, '__module__', 'numpy')}.{getattr(func, '__name__', func)}"
    trace.warn(
        name,
        "a function the detector does not know: each of its outputs is "
        "taken to depend on every input (and, for Hessians, nonlinearly)",
    )
    return dense(trace, func, args, kwargs, name)


def dense(trace: Trace, func, args: tuple, kwargs: dict, name: str):
    """Every output element depends on every input element, every pair nonlinearly."""
    found: list = []
    stand_args = _stand_ins(args, found)
    stand_kwargs = _stand_ins(kwargs, found)
    got = _sized(func, stand_args, stand_kwargs, name)
    g = S.union(*(t.g for t in found))
    allg = S.all_union(g, 1) if g is not None else None
    h = None
    if trace.second and allg is not None:
        h = S.union(S.all_union(S.union(*(t.h for t in found)), 1), S.self_pairs(allg, trace.n))

    def traced(o):
        o = np.asarray(o)
        m = np.zeros(o.size, np.int64)
        return Traced(
            trace,
            o.shape,
            o.dtype,
            None if allg is None else S.take(allg, m),
            None if h is None else S.take(h, m),
        )

    if isinstance(got, tuple | list):
        return type(got)(traced(o) for o in got)
    return traced(got)


def _stand_ins(obj, found: list):
    if isinstance(obj, Traced):
        found.append(obj)
        return obj
    if isinstance(obj, list | tuple):
        return type(obj)(_stand_ins(o, found) for o in obj)
    if isinstance(obj, dict):
        return {k: _stand_ins(v, found) for k, v in obj.items()}
    return obj


def _sized(func, args, kwargs, name: str):
    """``func`` on stand-in values (random, then the identity): only its output's shape
    and dtype are read."""
    rng = np.random.default_rng(0)
    errors = []
    for make in (lambda t: rng.standard_normal(t.shape), _identity):
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return func(*_swap(args, make), **_swap(kwargs, make))
        except Exception as exc:  # (reported below)
            errors.append(exc)
    raise needs_values(
        f"calls {name}, which the detector has no rule for and could not size on "
        f"stand-in values ({type(errors[-1]).__name__}: {errors[-1]})",
        "pass x's values through functions the detector knows",
    )


def _swap(obj, make):
    """``obj`` with each traced array replaced by ``make(it)``."""
    if isinstance(obj, Traced):
        return make(obj).astype(obj.dtype)
    if isinstance(obj, list | tuple):
        return type(obj)(_swap(v, make) for v in obj)
    if isinstance(obj, dict):
        return {k: _swap(v, make) for k, v in obj.items()}
    return obj


def _identity(t: Traced) -> np.ndarray:
    if t.ndim >= 2 and t.shape[-1] == t.shape[-2]:
        return np.broadcast_to(np.eye(t.shape[-1]), t.shape).copy()
    return np.ones(t.shape)
