"""``nvlink -s`` (each link's speed) and ``nvlink -c`` (each link's capabilities)."""

from __future__ import annotations

from .._options import Options, bad, common_fields
from .._registry import FILENAME, ID, LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Device, Nvml

STATUS = Option(("-s", "--status"), "status")
CAPABILITIES = Option(("-c", "--capabilities"), "capabilities")
_MODES = {"status": "nvlink-status", "capabilities": "nvlink-caps"}


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    asked = [mode for key, mode in _MODES.items() if key in values]
    if len(asked) != 1:
        raise bad()
    return Options(command="nvlink", mode=asked[0], **common_fields(values, environ))


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._app import each_pass, require_present
    from .._topology import nvlink_capabilities, nvlink_status

    view = nvlink_status if options.mode == "nvlink-status" else nvlink_capabilities

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        require_present(devices)
        write(view(devices))
        return 0

    return each_pass(options, render)


COMMANDS = (
    Command(
        "nvlink",
        word="nvlink",
        options=(STATUS, CAPABILITIES, ID, LIBRARY, FILENAME),
        build=_build,
        run=_run,
    ),
)
