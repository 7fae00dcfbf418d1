"""Sparse Jacobians and Hessians: detection, coloring, compressed passes (AutoSparse).

A pattern is a ``scipy.sparse.csr_array`` of bools, rows = outputs (flattened
f(x)), columns = inputs (flattened x), in canonical form (sorted, no duplicates).
"""
