"""The global sparsity detector for functions on NumPy arrays (autograd, finite
differences): a traced array carries index sets through NumPy's ``__array_ufunc__``
and ``__array_function__`` protocols, as SparseConnectivityTracer.jl carries them
through Julia's operators. It names no framework: any f that runs on NumPy arrays
(``numpy``, ``autograd.numpy``, ``array_api_compat.numpy``) traces."""

from .detect import as_input as as_input
from .detect import hessian_pattern as hessian_pattern
from .detect import jacobian_pattern as jacobian_pattern
