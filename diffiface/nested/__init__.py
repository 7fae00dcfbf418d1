"""Nested AD: the rules an outer pass runs for an inner call on a FixedParams."""
