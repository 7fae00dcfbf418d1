"""diffiface.testing: check a function's derivatives across every backend.

``check(backends, scenarios)`` runs every operator of every scenario on every
backend, compares each result with the scenario's references (closed forms, or
computed by a trusted backend), so that the backends agree with each other up
to their tolerances, and returns a :class:`Report`; library authors build
:class:`Scenario` objects for their own functions.

Examples:
    >>> import numpy as np
    >>> import diffiface as di
    >>> from diffiface import testing
    >>> s = testing.Scenario("cube", "array->scalar", lambda x: (x**3).sum(),
    ...                      np.array([1.0, 2.0]))
    >>> s = testing.compute_references(s, di.AutoFiniteDifferences())
    >>> testing.check([di.AutoFiniteDifferences()], [s], operators=("gradient",)).ok
    True
"""

from ._check import available_backends as available_backends
from ._check import benchmark as benchmark
from ._check import check as check
from ._check import skip_reason as skip_reason
from ._check import tolerance as tolerance
from ._defaults import default_scenarios as default_scenarios
from ._matrix import consistency_matrix as consistency_matrix
from ._matrix import run_matrix as run_matrix
from ._report import Report as Report
from ._report import Result as Result
from ._scenario import OPERATORS as OPERATORS
from ._scenario import Scenario as Scenario
from ._scenario import compute_references as compute_references
from ._scenario import namespace as namespace
from ._sparse import sparse_scenarios as sparse_scenarios

__all__ = [
    "OPERATORS",
    "Report",
    "Result",
    "Scenario",
    "available_backends",
    "benchmark",
    "check",
    "compute_references",
    "consistency_matrix",
    "default_scenarios",
    "namespace",
    "run_matrix",
    "skip_reason",
    "sparse_scenarios",
    "tolerance",
]
