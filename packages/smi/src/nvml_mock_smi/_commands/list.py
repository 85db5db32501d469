"""``-L``/``--list-gpus``: one line per GPU, ``GPU 0: NAME (UUID: GPU-...)``.

Scripts call it in loops, so it is the command the start-up budget is set by: it reads two
strings per GPU and imports nothing beyond ctypes.
"""

from __future__ import annotations

from .._errors import EXIT_GPU_LOST
from .._options import Options, common_fields
from .._registry import FILENAME, ID, LIBRARY, LOOP, LOOP_MS, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Device, Nvml

LIST = Option(("-L", "--list-gpus"), "list")


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    return Options(command="list", **common_fields(values, environ))


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._app import each_pass

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        write(_lines(devices))
        return EXIT_GPU_LOST if any(d.lost for d in devices) else 0

    return each_pass(options, render)


def _lines(devices: list[Device]) -> str:
    from .._app import handle_error, lost_error
    from .._nvml import NvmlError

    lines = []
    for device in devices:
        if device.lost:
            lines.append(lost_error(device).message)
            continue
        try:
            name, uuid = device.name(), device.uuid()
        except NvmlError as exc:
            raise handle_error(device, exc.code, exc.text) from None
        lines.append(f"GPU {device.index}: {name} (UUID: {uuid})")
        if device.mig_capable():
            from .mig import list_rows

            lines += list_rows(device)
    return "\n".join(lines) + "\n"


COMMANDS = (
    Command(
        "list",
        select=("list",),
        options=(LIST, ID, LIBRARY, FILENAME, LOOP, LOOP_MS),
        build=_build,
        run=_run,
    ),
)
