"""``make_vjp`` / ``make_jvp`` whose traces nest correctly while other threads use autograd.

autograd numbers a trace by its process-wide count of open traces (``trace_stack.top``),
which every thread moves. A trace opened inside another one can then get a lower or the
same number when another thread closes a trace in between, and autograd mixes the two
(wrong derivatives, ``'VJPNode' object has no attribute 'g'``, a false "does not depend
on x"). diffiface's traces take a number above every trace open in the calling thread,
read off that thread's own stack, so they nest as they do without threads.
"""

from __future__ import annotations

import sys
import warnings

from autograd import tracer
from autograd.core import JVPNode, VJPNode, backward_pass, vspace
from autograd.tracer import isbox, new_box, trace_stack


def make_vjp(fun, x):
    """``autograd.core.make_vjp``, with a thread-safe trace number."""
    end_value, end_node = trace(VJPNode.new_root(), fun, x)
    if end_node is None:
        return lambda g: vspace(x).zeros(), end_value
    return lambda g: backward_pass(g, end_node), end_value


def make_jvp(fun, x):
    """``autograd.core.make_jvp``, with a thread-safe trace number."""

    def jvp(g):
        end_value, end_node = trace(JVPNode.new_root(g), fun, x)
        if end_node is None:
            return end_value, vspace(end_value).zeros()
        return end_value, end_node.g

    return jvp


def trace(start_node, fun, x):
    """``autograd.tracer.trace``; the trace's number ``t`` is above the open ones."""
    with trace_stack.new_trace() as t:
        if t:  # another trace is open somewhere: maybe in this thread, maybe numbered >= t
            t = max(t, max(open_traces(sys._getframe(1)), default=-1) + 1)
        start_box = new_box(x, t, start_node)
        end_box = fun(start_box)
        if isbox(end_box) and end_box._trace == start_box._trace:
            return end_box._value, end_box._node
        warnings.warn("Output seems independent of input.", stacklevel=2)
        return end_box, None


def open_traces(frame=None) -> set:
    """The numbers of the traces open in the calling thread (autograd's and diffiface's)."""
    if trace_stack.top < 0:  # none open in any thread
        return set()
    frame = sys._getframe(1) if frame is None else frame
    found = set()
    while frame is not None:
        if frame.f_code in _TRACE_CODES:
            t = frame.f_locals.get("t")
            if isinstance(t, int):
                found.add(t)
        frame = frame.f_back
    return found


_TRACE_CODES = (tracer.trace.__code__, trace.__code__)
