"""diffiface: one differentiation API over JAX, PyTorch, autograd and finite differences.

Examples:
    >>> import numpy as np
    >>> import diffiface as di
    >>> di.gradient(lambda x: (x**2).sum(), di.AutoFiniteDifferences(),
    ...             np.array([1.0, 2.0])).round(6)
    array([2., 4.])
"""

from . import backends as backends  # (each framework registers its array hooks)
from ._backend_types import AbstractBackend as AbstractBackend
from ._backend_types import AutoAutograd as AutoAutograd
from ._backend_types import AutoFiniteDifferences as AutoFiniteDifferences
from ._backend_types import AutoJax as AutoJax
from ._backend_types import AutoKeras as AutoKeras
from ._backend_types import AutoMLX as AutoMLX
from ._backend_types import AutoSparse as AutoSparse
from ._backend_types import AutoTorch as AutoTorch
from ._backend_types import SecondOrder as SecondOrder
from ._backend_types import second_order as second_order
from ._cache import clear_caches as clear_caches
from ._checks import DiffifaceTypeError as DiffifaceTypeError
from ._checks import DiffifaceValueError as DiffifaceValueError
from ._checks import DisconnectedWarning as DisconnectedWarning
from ._checks import FrameworkMissingError as FrameworkMissingError
from ._checks import RecompileWarning as RecompileWarning
from ._config import Config as Config
from ._config import config as config
from ._config import options as options
from ._contexts import Constant as Constant
from ._contexts import FixedParams as FixedParams
from ._errors import SparsityWarning as SparsityWarning
from ._tangents import Tangents as Tangents
from ._within import within_gradient as within_gradient
from .bridge.node import differentiate_with as differentiate_with
from .core.plan import MismatchError as MismatchError
from .core.plan import Prep as Prep
from .nested.route import nested_ad as nested_ad
from .nested.route import nested_rule_counts as nested_rule_counts
from .operators.batched import batched_jacobian as batched_jacobian
from .operators.batched import value_and_batched_jacobian as value_and_batched_jacobian
from .operators.first_order import derivative as derivative
from .operators.first_order import gradient as gradient
from .operators.first_order import jvp as jvp
from .operators.first_order import value_and_derivative as value_and_derivative
from .operators.first_order import value_and_gradient as value_and_gradient
from .operators.first_order import value_and_jvp as value_and_jvp
from .operators.first_order import value_and_vjp as value_and_vjp
from .operators.first_order import vjp as vjp
from .operators.jacobian import jacobian as jacobian
from .operators.jacobian import value_and_jacobian as value_and_jacobian
from .operators.prepare import prepare_batched_jacobian as prepare_batched_jacobian
from .operators.prepare import prepare_derivative as prepare_derivative
from .operators.prepare import prepare_gradient as prepare_gradient
from .operators.prepare import prepare_hessian as prepare_hessian
from .operators.prepare import prepare_hvp as prepare_hvp
from .operators.prepare import prepare_jacobian as prepare_jacobian
from .operators.prepare import prepare_jvp as prepare_jvp
from .operators.prepare import prepare_second_derivative as prepare_second_derivative
from .operators.prepare import prepare_vjp as prepare_vjp
from .operators.same_point import SamePoint as SamePoint
from .operators.same_point import prepare_hvp_same_point as prepare_hvp_same_point
from .operators.same_point import prepare_jvp_same_point as prepare_jvp_same_point
from .operators.same_point import prepare_vjp_same_point as prepare_vjp_same_point
from .operators.second_order import gradient_and_hvp as gradient_and_hvp
from .operators.second_order import hessian as hessian
from .operators.second_order import hvp as hvp
from .operators.second_order import second_derivative as second_derivative
from .operators.second_order import (
    value_derivative_and_second_derivative as value_derivative_and_second_derivative,
)
from .operators.second_order import value_gradient_and_hessian as value_gradient_and_hessian
from .operators.second_order import value_gradient_and_hvp as value_gradient_and_hvp
from .sparse.api import coloring as coloring
from .sparse.api import sparsity_pattern as sparsity_pattern

__version__ = "0.1.0"

__all__ = [
    "AbstractBackend",
    "AutoAutograd",
    "AutoFiniteDifferences",
    "AutoJax",
    "AutoKeras",
    "AutoMLX",
    "AutoSparse",
    "AutoTorch",
    "Config",
    "Constant",
    "DiffifaceTypeError",
    "DiffifaceValueError",
    "DisconnectedWarning",
    "FixedParams",
    "FrameworkMissingError",
    "MismatchError",
    "Prep",
    "RecompileWarning",
    "SamePoint",
    "SecondOrder",
    "SparsityWarning",
    "Tangents",
    "batched_jacobian",
    "clear_caches",
    "coloring",
    "config",
    "derivative",
    "differentiate_with",
    "gradient",
    "gradient_and_hvp",
    "hessian",
    "hvp",
    "jacobian",
    "jvp",
    "nested_ad",
    "nested_rule_counts",
    "options",
    "prepare_batched_jacobian",
    "prepare_derivative",
    "prepare_gradient",
    "prepare_hessian",
    "prepare_hvp",
    "prepare_hvp_same_point",
    "prepare_jacobian",
    "prepare_jvp",
    "prepare_jvp_same_point",
    "prepare_second_derivative",
    "prepare_vjp",
    "prepare_vjp_same_point",
    "second_derivative",
    "second_order",
    "sparsity_pattern",
    "value_and_batched_jacobian",
    "value_and_derivative",
    "value_and_gradient",
    "value_and_jacobian",
    "value_and_jvp",
    "value_and_vjp",
    "value_derivative_and_second_derivative",
    "value_gradient_and_hessian",
    "value_gradient_and_hvp",
    "vjp",
    "within_gradient",
]
