"""Where the driver side keeps its files: the board state and the live layer beside it.

The work-alike's driver is the overlay. The commands that change GPUs (``-r`` and the set
commands) write the node's live layer, found the way the mock library finds it
(``MOCK_NVML_CONFIG``, else ``../config/state.nvmlmock`` from the library's own directory;
``MOCK_NVML_LIVE``, else ``live.nvmlmock`` beside the state), and find each GPU's record by
its identity (UUID or bus id) as NVML reports it, never by its index: inside an
``NVIDIA_VISIBLE_DEVICES`` view the index NVML gives is not the board's. Against a real driver
there is no state file, and there is nothing to change.
"""

from __future__ import annotations

import os

from nvml_mock_engine._files import gpu_sections

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

STATE_RELATIVE = ("..", "config", "state.nvmlmock")
LIVE_FILE_NAME = "live.nvmlmock"


def loaded_library(name: str = "libnvidia-ml.so") -> str | None:
    """The file of the NVML library this process mapped (``/proc/self/maps``)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").partition("/")[2]
                if path and name in path.rsplit("/", 1)[-1]:
                    return "/" + path
    except OSError:
        return None
    return None


def state_path(library: str | None, environ: Mapping[str, str]) -> str | None:
    explicit = environ.get("MOCK_NVML_CONFIG")
    if explicit:
        return explicit
    if not library:
        return None
    return os.path.normpath(
        os.path.join(os.path.dirname(os.path.realpath(library)), *STATE_RELATIVE)
    )


def live_path(state: str | None, environ: Mapping[str, str]) -> str | None:
    explicit = environ.get("MOCK_NVML_LIVE")
    if explicit:
        return explicit
    return os.path.join(os.path.dirname(state), LIVE_FILE_NAME) if state else None


def board_gpus(state: str | None) -> list[dict[str, str]]:
    """``uuid`` and ``pci_bus_id`` of every ``[gpu N]`` section of the state (empty when
    there is no readable state)."""
    if not state:
        return []
    try:
        with open(state, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return []
    return [
        {key: value.strip() for key, value in gpu.items() if key in ("uuid", "pci_bus_id")}
        for gpu in gpu_sections(text)
    ]
