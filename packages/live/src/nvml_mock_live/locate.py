"""Where the live file is: the library's rule, written once for every Python reader and writer.

The mock library finds its files at ``nvmlInit`` so (``native/src/init.c``): the board state
is ``MOCK_NVML_CONFIG``, else ``../config/state.nvmlmock`` from the library's own directory;
the live layer is ``MOCK_NVML_LIVE``, else ``live.nvmlmock`` beside the state. A writer that
looked elsewhere would write a file no NVML client reads, so ``nvml-mock-ctl``, the node agent
and the work-alike's set commands all ask here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from nvml_mock_protocol import names

__all__ = ["STATE_FROM_LIBRARY", "live_beside", "live_path", "state_path"]

STATE_FROM_LIBRARY: Final = ("..", names.OVERLAY_CONFIG_DIR, names.STATE_FILE_NAME)
"""The state's place relative to the library's directory, in an overlay."""


def live_beside(state: Path | str) -> Path:
    """The live file that goes with the board state *state*."""
    return Path(state).parent / names.LIVE_FILE_NAME


def state_path(library: Path | str | None, environ: Mapping[str, str]) -> Path | None:
    """The board state a process that loaded *library* reads (None: none can be found)."""
    explicit = environ.get(names.ENV_MOCK_NVML_CONFIG)
    if explicit:
        return Path(explicit)
    if not library:
        return None
    return Path(
        os.path.normpath(
            os.path.join(os.path.dirname(os.path.realpath(library)), *STATE_FROM_LIBRARY)
        )
    )


def live_path(state: Path | str | None, environ: Mapping[str, str]) -> Path | None:
    """The live file beside the board *state*, unless ``MOCK_NVML_LIVE`` names one."""
    explicit = environ.get(names.ENV_MOCK_NVML_LIVE)
    if explicit:
        return Path(explicit)
    return live_beside(state) if state else None
