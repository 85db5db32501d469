"""The driver version an IMEX daemon reports (``Version:`` in ``nvidia-imex-ctl -N``):
the mock node's, read from its rendered state, as the real daemon reports the loaded
driver's."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

from nvml_mock_protocol import names

__all__ = ["UNKNOWN", "driver_version"]

UNKNOWN: Final = "N/A"


def driver_version(environ: dict[str, str] | None = None) -> str:
    """``driver_version`` of the state file ``MOCK_NVML_CONFIG`` names, else of the overlay
    whose runtime runs this program (the launchers start ``<overlay>/runtime/bin/python3``),
    else of the overlay injected at ``NVML_MOCK_OVERLAY_MOUNT_PATH``; :data:`UNKNOWN` when
    none can be read."""
    env = os.environ if environ is None else environ
    candidates = []
    if env.get(names.ENV_MOCK_NVML_CONFIG):
        candidates.append(Path(env[names.ENV_MOCK_NVML_CONFIG]))
    runtime_root = Path(sys.executable).parent.parent.parent
    candidates.append(runtime_root / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME)
    mount = env.get(names.ENV_OVERLAY_MOUNT_PATH) or names.OVERLAY_MOUNT_PATH
    candidates.append(Path(mount) / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME)
    for path in candidates:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "driver_version" and value.strip():
                return value.strip()
    return UNKNOWN
