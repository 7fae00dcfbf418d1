"""Crossing between frameworks: a layer above the operators."""
