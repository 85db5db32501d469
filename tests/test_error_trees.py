"""One error tree per package, drawn in its errors module; no name shared with another meaning.

Every exception class a package defines (in any of its modules) must descend from the
package's base class and appear in the tree its errors module's docstring draws. Across
packages a name may repeat only where it means the same thing in each (``SAME_MEANING``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

PACKAGES = {
    # import name: (errors module, base class)
    "nvml_mock_protocol": ("nvml_mock_protocol.errors", "ProtocolPackageError"),
    "nvml_mock_live": ("nvml_mock_live.errors", "LiveError"),
    "nvml_mock_engine": ("nvml_mock_engine.errors", "NvmlEngineError"),
    "nvml_mock_topology": ("nvml_mock_topology.errors", "TopologyServiceError"),
    "nvml_mock_nri": ("nvml_mock_nri.errors", "NriPluginError"),
    "check_fabric": ("check_fabric.errors", "CheckFabricError"),
    "nvml_mock_exporter": ("nvml_mock_exporter.errors", "ExporterError"),
    "nvml_mock_kwok": ("nvml_mock_kwok.errors", "KwokError"),
    "nvml_mock_cuda": ("nvml_mock_cuda.errors", "CudaMockError"),
}
SAME_MEANING = {
    "ConfigError": "a setting or config value is invalid (exit 3), in every command",
}
# Exceptions that never leave their module (private, leading underscore) are not part of a
# package's surface. The nvidia-smi work-alike is a separate program inside the engine
# package with its own small tree, drawn in its own errors module.
SUBTREES = {"nvml_mock_smi": ("nvml_mock_smi._errors", "WorkAlikeError")}


def _modules(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    found = [root]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if info.name.endswith("__main__") or "._pb2" in info.name or info.name.endswith("_pb2"):
            continue
        found.append(importlib.import_module(info.name))
    return found


def _exceptions(package: str) -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in _modules(package):
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[f"{module.__name__}.{name}"] = obj
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_exception_descends_from_the_base_and_is_drawn(package: str) -> None:
    errors_name, base_name = PACKAGES[package]
    errors = importlib.import_module(errors_name)
    base = getattr(errors, base_name)
    tree = errors.__doc__ or ""
    subtrees = {
        prefix: (importlib.import_module(mod), cls)
        for prefix, (mod, cls) in SUBTREES.items()
        if prefix.startswith(package)
    }
    for qualified, cls in _exceptions(package).items():
        home = next((p for p in subtrees if qualified.startswith(p + ".")), None)
        if home is not None:
            sub, sub_base = subtrees[home]
            assert issubclass(cls, getattr(sub, sub_base)), qualified
            drawn = sub.__doc__ or ""
            assert cls.__name__ in drawn, f"{qualified} is not drawn in {sub.__name__}"
            continue
        assert issubclass(cls, base), f"{qualified} does not descend from {base_name}"
        assert cls.__name__ in tree, f"{qualified} is not drawn in {errors_name}'s tree"


def test_no_name_means_two_things_across_packages() -> None:
    owners: dict[str, set[str]] = {}
    for package in PACKAGES:
        for cls in _exceptions(package).values():
            owners.setdefault(cls.__name__, set()).add(package)
    shared = {name: sorted(pkgs) for name, pkgs in owners.items() if len(pkgs) > 1}
    assert set(shared) <= set(SAME_MEANING), shared
