"""Hatch build hook: compile the mock libnvidia-ml.so.1 with ``make -C native``.

The Makefile is the single recipe (it also serves images and GPU checks); this hook only
runs it with the build environment's Python, so the Makefile can find the ``nvml.h`` that
the ``nvidia-nvml-dev`` build requirement installed. The library lands in
``src/nvml_mock_engine/_lib/``, inside the package, so editable installs find it too.
Wheels carry it as an artifact and are tagged ``py3-none-<platform>``: the library is
native code but does not link libpython.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

LIBRARY = "src/nvml_mock_engine/_lib/libnvidia-ml.so.1"


class NativeLibraryHook(BuildHookInterface):  # type: ignore[type-arg]
    """Build the native library before the wheel (standard or editable) is assembled."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        env = dict(os.environ)
        env.setdefault("PYTHON", sys.executable)
        subprocess.run(["make", "-C", str(Path(self.root) / "native")], check=True, env=env)
        if version == "editable":
            return
        build_data["artifacts"].append(LIBRARY)
        build_data["pure_python"] = False
        build_data["infer_tag"] = False
        platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        build_data["tag"] = f"py3-none-{platform}"
