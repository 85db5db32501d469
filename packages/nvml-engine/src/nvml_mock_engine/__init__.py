"""nvml-mock-engine: mock GPUs for NVML clients, from board profiles to the mock library.

The package renders a node's GPU state from a profile (``render_text`` here, the
``render`` module for the parts) and ships the mock ``libnvidia-ml.so.1``
(``library_path``); staging that state into an overlay is nvml-mock-node's. The function
``render.render`` is not re-exported: a package attribute named like a submodule becomes
that submodule once it is imported, so the name would change meaning mid-process. This
module stays import-light on purpose: the tools built on it (``nvidia-smi`` among them)
import it on error paths and in loops, so the public names below load on first use.
"""

from __future__ import annotations

from nvml_mock_engine._version import __version__

# Not ``from typing import TYPE_CHECKING``: importing typing (and the re and enum it pulls
# in) cost ``nvidia-smi -L`` about 5 ms, half its own start-up (bench/smi_bench.py); type
# checkers treat this constant as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from nvml_mock_engine.config import EngineConfig, resolve_config
    from nvml_mock_engine.library import library_path
    from nvml_mock_engine.profiles import Profile, load_profile, profile_names
    from nvml_mock_engine.render import render_text

__all__ = [
    "EngineConfig",
    "Profile",
    "__version__",
    "library_path",
    "load_profile",
    "profile_names",
    "render_text",
    "resolve_config",
]

_LAZY = {
    "EngineConfig": "nvml_mock_engine.config",
    "resolve_config": "nvml_mock_engine.config",
    "library_path": "nvml_mock_engine.library",
    "Profile": "nvml_mock_engine.profiles",
    "load_profile": "nvml_mock_engine.profiles",
    "profile_names": "nvml_mock_engine.profiles",
    "render_text": "nvml_mock_engine.render",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nvml_mock_engine' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
