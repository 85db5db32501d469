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

from nvml_mock_live import locate
from nvml_mock_live.board import gpu_sections

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


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
    """The board state the library of this process reads (the library's rule)."""
    found = locate.state_path(library, environ)
    return None if found is None else str(found)


def live_path(state: str | None, environ: Mapping[str, str]) -> str | None:
    """The live file the library of this process maps (the library's rule)."""
    found = locate.live_path(state, environ)
    return None if found is None else str(found)


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
