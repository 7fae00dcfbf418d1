"""torch's side of AutoSparse (imported on use; imports torch): the global sparsity
detector, read from the traced aten graph, and results as sparse CSR tensors;
closed-over tensors kept and compared on their device (``kept``)."""

from .detect import hessian_pattern as hessian_pattern
from .detect import jacobian_pattern as jacobian_pattern
from .formats import Format as Format
from .formats import as_input as as_input
from .formats import index as index
from .formats import scatter as scatter
from .kept import kept_copy as kept_copy
from .kept import same_values as same_values
from .local import local_hessian_pattern as local_hessian_pattern
from .local import local_jacobian_pattern as local_jacobian_pattern
