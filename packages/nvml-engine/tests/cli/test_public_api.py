"""The package's public names: each one ``__all__`` lists resolves, loaded on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys

import nvml_mock_engine
import pytest


def test_every_exported_name_resolves_to_what_it_names() -> None:
    # Every submodule loaded first: a package attribute named like a submodule would now be
    # that submodule, whatever the lazy table says.
    for module in set(nvml_mock_engine._LAZY.values()):
        importlib.import_module(module)
    for name in nvml_mock_engine.__all__:
        value = getattr(nvml_mock_engine, name)
        if name != "__version__":
            assert value.__name__ == name
            assert value.__module__ == nvml_mock_engine._LAZY[name]


def test_exports_are_exactly_the_lazy_names_and_the_version() -> None:
    lazy = set(nvml_mock_engine._LAZY)
    assert set(nvml_mock_engine.__all__) == lazy | {"__version__"}


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        nvml_mock_engine.nope  # noqa: B018


def test_importing_the_package_loads_none_of_its_modules() -> None:
    code = (
        "import sys, nvml_mock_engine; "
        "print(sorted(m for m in sys.modules if m.startswith('nvml_mock_engine.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "['nvml_mock_engine._version']"
