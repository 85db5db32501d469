"""``nvidia-smi -r`` / ``--gpu-reset``: a GPU reset clears the faults the node injected.

On the mock a reset is what it is on a real GPU from the outside: the GPU comes back with
its board values, so every live value of the GPU (faults, counters, a lost GPU) is cleared
in the node's live layer. Only a caller that may write the live layer may reset (on the node,
as root; inside a container the overlay is read-only), as only root may reset a real GPU.
The messages and exit codes are the real tool's: ``GPU 00000000:1A:00.0 was successfully
reset.`` (and ``All done.`` after a reset of every GPU), or ``The following GPUs could not be
reset:`` with one line per GPU and its reason (exit 4 for ``Insufficient Permissions``).
"""

from __future__ import annotations

import os

from ._app import _same_bus
from ._board import board_gpus, live_path, loaded_library, state_path
from ._errors import EXIT_NO_PERMISSION, EXIT_NOT_FOUND, EXIT_OTHER, NO_DEVICES_MESSAGE, SmiError
from ._nvml import LibraryNotFoundError, Nvml
from ._options import Options

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

EXIT_NOT_SUPPORTED = 3


def _library(options: Options) -> str | None:
    if options.library:
        return options.library
    try:
        Nvml(None)
    except LibraryNotFoundError:
        return None
    return loaded_library()


def _targets(gpus: list[dict[str, str]], ids: tuple[str, ...]) -> list[int]:
    if not ids:
        return list(range(len(gpus)))
    chosen: list[int] = []
    for ident in ids:
        found = None
        if ident.isdigit() and int(ident) < len(gpus):
            found = int(ident)
        else:
            for index, gpu in enumerate(gpus):
                if gpu.get("uuid", "").upper() == ident.upper() or (
                    ":" in ident and _same_bus(gpu.get("pci_bus_id", ""), ident.upper())
                ):
                    found = index
                    break
        if found is None:
            raise SmiError(NO_DEVICES_MESSAGE, EXIT_NOT_FOUND)
        if found not in chosen:
            chosen.append(found)
    return chosen


def _refused(gpus: list[dict[str, str]], targets: list[int], reason: str, code: int) -> SmiError:
    lines = ["The following GPUs could not be reset:"]
    lines += [f"  GPU {gpus[i].get('pci_bus_id', '')}: {reason}" for i in targets]
    return SmiError("\n".join(lines), code)


def reset(options: Options, write: Callable[[str], None]) -> int:
    """Clear the live values of the GPUs of ``-i`` (default all); return the exit code."""
    state = state_path(_library(options), os.environ)
    gpus = board_gpus(state)
    if not gpus:
        raise SmiError(NO_DEVICES_MESSAGE, EXIT_NOT_FOUND)
    targets = _targets(gpus, options.ids)
    live = live_path(state, os.environ)
    if not live or not os.path.isfile(live):
        raise _refused(gpus, targets, "Not Supported", EXIT_NOT_SUPPORTED)
    if not os.access(live, os.W_OK):
        raise _refused(gpus, targets, "Insufficient Permissions", EXIT_NO_PERMISSION)
    from nvml_mock_engine.errors import NvmlEngineError
    from nvml_mock_engine.live import LiveLayer

    try:
        with LiveLayer.open(live, state=state) as layer:
            for index in targets:
                layer.clear(index)
                layer.reset_mig(index)  # a pending MIG mode takes effect; instances are gone
    except PermissionError:
        raise _refused(gpus, targets, "Insufficient Permissions", EXIT_NO_PERMISSION) from None
    except (NvmlEngineError, OSError) as exc:
        if "Read-only" in str(exc) or "Permission" in str(exc):
            raise _refused(gpus, targets, "Insufficient Permissions", EXIT_NO_PERMISSION) from None
        raise _refused(gpus, targets, "Unknown Error", EXIT_OTHER) from None
    for index in targets:
        write(f"GPU {gpus[index].get('pci_bus_id', '')} was successfully reset.\n")
    if not options.ids:
        write("All done.\n")
    return 0
