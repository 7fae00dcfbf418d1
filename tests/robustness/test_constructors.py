"""Every argument check of every public constructor raises diffiface's own error classes
(``di.DiffifaceValueError`` for a wrong value, ``di.DiffifaceTypeError`` for a wrong
type), as the guide promises, with a message that starts with the call written."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di
from diffiface import testing

F = lambda x, p: (p * x**2).sum()  # noqa: E731
F2 = lambda x, s: s * x  # noqa: E731
FD = di.AutoFiniteDifferences()

VALUE = {
    "AutoSparse(pattern shape)": (
        lambda: di.AutoSparse(di.AutoJax(), sparsity_detector=np.ones(3)),
        r"AutoSparse\(backend, sparsity_detector=p\): a sparsity pattern is 2-D",
    ),
    "AutoJax(mode)": (lambda: di.AutoJax(mode="fwd"), r"AutoJax\(mode='fwd'\): mode must"),
    "AutoTorch(mode)": (lambda: di.AutoTorch(mode="rev"), r"AutoTorch\(mode='rev'\): mode"),
    "AutoAutograd(mode)": (lambda: di.AutoAutograd(mode=1), r"AutoAutograd\(mode=1\): mode"),
    "FD(method)": (
        lambda: di.AutoFiniteDifferences(method="centered"),
        r"AutoFiniteDifferences\(method='centered'\): method must",
    ),
    "FD(step)": (
        lambda: di.AutoFiniteDifferences(step=-1e-3),
        r"AutoFiniteDifferences\(step=-0\.001\): step must",
    ),
    "FD(step tiny)": (
        lambda: di.AutoFiniteDifferences(step=1e-20),
        r"AutoFiniteDifferences\(step=1e-20\): step must",
    ),
    "FixedParams(strategy)": (
        lambda: di.FixedParams(F, 1.0, strategy="fastest"),
        r"FixedParams\(f, params, strategy='fastest'\): strategy must",
    ),
    "Tangents()": (lambda: di.Tangents(), r"Tangents\(\): give at least one"),
    "AutoSparse(detector)": (
        lambda: di.AutoSparse(di.AutoJax(), sparsity_detector="everywhere"),
        r"AutoSparse\(sparsity_detector='everywhere'\)",
    ),
    "AutoSparse(coloring)": (
        lambda: di.AutoSparse(di.AutoJax(), coloring="biggest_first"),
        r"AutoSparse\(coloring='biggest_first'\)",
    ),
    "second_order(two AutoSparse)": (
        lambda: di.second_order(
            di.AutoSparse(di.AutoJax(), coloring="natural"), di.AutoSparse(di.AutoJax())
        ),
        r"second_order\(.*\): the two AutoSparse settings differ",
    ),
    "Scenario(jac)": (
        lambda: testing.Scenario("s", "a->a", lambda x: x, np.ones(2), jac=np.ones(3)),
        r"Scenario 's': jac must have shape",
    ),
    "check(operators)": (
        lambda: testing.check([di.AutoFiniteDifferences()], operators=("grad",)),
        r"check\(operators=\.\.\.\): unknown",
    ),
    "check(inputs)": (
        lambda: testing.check([di.AutoFiniteDifferences()], inputs="torch"),
        r"check\(inputs='torch'\)",
    ),
    "consistency_matrix(x)": (
        lambda: testing.consistency_matrix(lambda x, s: s * x, None, lambda s: {}),
        r"consistency_matrix\(f, x, closed\): give x and closed",
    ),
    "consistency_matrix(backends)": (
        lambda: testing.consistency_matrix(backends=[di.second_order(FD, FD)]),
        r"consistency_matrix\(backends=\.\.\.\)",
    ),
    "consistency_matrix(kinds)": (
        lambda: testing.consistency_matrix(kinds=("sparse",)),
        r"consistency_matrix\(kinds=\.\.\.\): unknown",
    ),
    "consistency_matrix(closed keys)": (
        lambda: testing.consistency_matrix(F2, np.ones(2), lambda s: {"grad": 1}),
        r"consistency_matrix\('f'\): closed gave unknown keys",
    ),
    "consistency_matrix(closed jac)": (
        lambda: testing.consistency_matrix(F2, np.ones(2), lambda s: {"y": 1}),
        r"consistency_matrix\('f'\): closed\(s\) must give 'jac'",
    ),
}

TYPE = {
    "AbstractBackend()": (lambda: di.AbstractBackend(), "AbstractBackend cannot be"),
    "SecondOrder(outer)": (
        lambda: di.SecondOrder(3, di.AutoJax()),
        r"second_order\(outer, inner\): outer must be a first-order backend",
    ),
    "second_order(inner)": (
        lambda: di.second_order(di.AutoJax(), di.second_order(di.AutoJax(), di.AutoJax())),
        r"second_order\(outer, inner\): inner must be a first-order backend",
    ),
    "second_order(class)": (
        lambda: di.second_order(di.AutoJax, di.AutoJax()),
        r"outer must be an instance, got the class AutoJax",
    ),
    "AutoSparse(backend)": (lambda: di.AutoSparse("jax"), r"AutoSparse\(backend\): backend"),
    "AutoSparse(class)": (lambda: di.AutoSparse(di.AutoJax), r"Did you mean AutoSparse\("),
    "AutoSparse(pattern)": (
        lambda: di.AutoSparse(di.AutoJax(), sparsity_detector={"a": 1}),
        r"AutoSparse\(backend, sparsity_detector=p\): a sparsity pattern is a scipy.sparse",
    ),
    "AutoSparse(dense)": (
        lambda: di.AutoSparse(di.AutoJax(), dense="yes"),
        r"AutoSparse\(dense='yes'\): dense must be True or False",
    ),
    "AutoSparse(strict)": (
        lambda: di.AutoSparse(di.AutoJax(), strict=1),
        r"AutoSparse\(strict=1\): strict must be True or False",
    ),
    "FixedParams(f)": (lambda: di.FixedParams(3.0, 1.0), r"FixedParams\(f, params\): f must"),
    "FixedParams(no params)": (lambda: di.FixedParams(F), r"FixedParams\(f\): params can"),
    "options(name)": (lambda: di.options(speed=1).__enter__(), r"di\.options\(\) takes"),
}


@pytest.mark.parametrize("name", list(VALUE))
def test_a_wrong_value_is_a_diffiface_value_error(name):
    make, words = VALUE[name]
    with pytest.raises(di.DiffifaceValueError, match=words):
        make()


@pytest.mark.parametrize("name", list(TYPE))
def test_a_wrong_type_is_a_diffiface_type_error(name):
    make, words = TYPE[name]
    with pytest.raises(di.DiffifaceTypeError, match=words):
        make()
