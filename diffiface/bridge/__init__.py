"""Crossing between frameworks: a layer above the operators.

Nothing below imports it: the operator shell decides that a call crosses
(``core.crossing``) before converting anything, and runs it here.
"""
