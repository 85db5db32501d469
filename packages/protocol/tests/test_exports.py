"""The package's public surface: ``__all__`` resolves, and importing the package stays light."""

from __future__ import annotations

import subprocess
import sys

import nvml_mock_protocol
import pytest


@pytest.mark.parametrize("name", nvml_mock_protocol.__all__)
def test_every_exported_name_resolves(name: str) -> None:
    assert getattr(nvml_mock_protocol, name) is not None


def test_all_lists_exactly_the_lazy_names_and_the_version() -> None:
    lazy = set(nvml_mock_protocol._LAZY)
    assert set(nvml_mock_protocol.__all__) == lazy | {"__version__"}
    assert len(nvml_mock_protocol.__all__) == len(lazy) + 1


def test_exports_come_from_their_modules() -> None:
    from nvml_mock_protocol import identity, topology

    for name, module in nvml_mock_protocol._LAZY.items():
        source = {"topology": topology, "identity": identity}[module]
        assert getattr(nvml_mock_protocol, name) is getattr(source, name), name


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = nvml_mock_protocol.Nope  # type: ignore[attr-defined]


@pytest.mark.parametrize("module", ["names", "logs", "hostgpu", "settings"])
def test_importing_light_modules_does_not_load_pydantic_or_protobuf(module: str) -> None:
    code = (
        f"import sys, nvml_mock_protocol.{module}\n"
        "heavy = [m for m in ('pydantic', 'google.protobuf', 'yaml') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
