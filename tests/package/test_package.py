"""Formalities: the public surface is exported, listed and documented."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import diffiface as di
from diffiface import testing


def test_all_matches_the_exports():
    # subpackages (backends, core, operators, ...) are attributes once imported, not names
    public = {n for n, v in vars(di).items() if not n.startswith("_") and not inspect.ismodule(v)}
    assert set(di.__all__) == public
    assert sorted(di.__all__) == list(di.__all__)


@pytest.mark.parametrize("name", di.__all__)
def test_every_public_name_is_documented(name):
    obj = getattr(di, name)
    doc = inspect.getdoc(obj)
    assert doc and len(doc) > 20, name
    if inspect.isfunction(obj):
        assert "Examples:" in doc or "Same arguments as" in doc, name


@pytest.mark.parametrize(
    "backend",
    [di.AutoJax(), di.AutoTorch(mode="forward"), di.AutoAutograd(), di.AutoFiniteDifferences()],
    ids=repr,
)
def test_backends_are_frozen_and_repr_like_the_call(backend):
    assert eval(repr(backend), vars(di)) == backend
    with pytest.raises(dataclasses.FrozenInstanceError):
        backend.mode = "reverse"  # type: ignore[misc]
    assert hash(backend) == hash(eval(repr(backend), vars(di)))


@pytest.mark.parametrize("name", [n for n in testing.__all__ if n != "OPERATORS"])
def test_every_testing_name_is_documented(name):
    doc = inspect.getdoc(getattr(testing, name))
    assert doc and len(doc) > 20, name
