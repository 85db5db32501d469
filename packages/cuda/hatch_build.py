"""Hatch build hook: compile the mock libcuda.so.1 with ``make -C native``.

The Makefile is the single recipe (images and device checks use it too); this hook runs it
with the build environment's Python, so the Makefile can find the ``cuda.h`` that the
``nvidia-cuda-runtime`` build requirement installed. Every library lands in
``src/nvml_mock_cuda/_lib/``, inside the package, so editable installs find them too. Wheels
carry them as artifacts and are tagged ``py3-none-<platform>``: the libraries are native code
but do not link libpython.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

LIBRARIES = "src/nvml_mock_cuda/_lib/*"


class NativeLibraryHook(BuildHookInterface):  # type: ignore[type-arg]
    """Build the native libraries before the wheel (standard or editable) is assembled."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        env = dict(os.environ)
        env.setdefault("PYTHON", sys.executable)
        subprocess.run(["make", "-C", str(Path(self.root) / "native")], check=True, env=env)
        if version == "editable":
            return
        build_data["artifacts"].append(LIBRARIES)
        build_data["pure_python"] = False
        build_data["infer_tag"] = False
        platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        build_data["tag"] = f"py3-none-{platform}"
