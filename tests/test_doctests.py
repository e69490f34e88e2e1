"""Run the Examples sections of the modules' docstrings (they are documentation that must stay true)."""

import doctest
import importlib
import pkgutil

import pytest

import models
import sim


def _modules():
    for package in (sim, models):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name not in ("sim.__main__",):
                yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0
