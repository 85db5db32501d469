"""``nvlink -s`` (each link's speed), ``-c`` (its capabilities), ``-e`` (its error counters),
``-R`` (its far end) and ``-gt d|r`` (its throughput counters); a GPU without NVLink prints the
real tool's line."""

from __future__ import annotations

from .._options import Options, bad, common_fields
from .._registry import FILENAME, ID, LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Device, Nvml

STATUS = Option(("-s", "--status"), "status")
CAPABILITIES = Option(("-c", "--capabilities"), "capabilities")
ERRORS = Option(("-e", "--errorcounters"), "errors")
REMOTE = Option(("-R", "--remotelinkinfo"), "remote")
THROUGHPUT = Option(("-gt", "--getthroughput"), "throughput", value=True)
_MODES = {
    "status": "nvlink-status",
    "capabilities": "nvlink-caps",
    "errors": "nvlink-errors",
    "remote": "nvlink-remote",
    "throughput": "nvlink-throughput",
}


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    asked = [mode for key, mode in _MODES.items() if key in values]
    if len(asked) != 1:
        raise bad()
    extra = {}
    if "throughput" in values:
        if values["throughput"] not in ("d", "r"):
            raise bad()
        extra["kind"] = values["throughput"]
    return Options(command="nvlink", mode=asked[0], extra=extra, **common_fields(values, environ))


def _view(options: Options) -> Callable[[list[Device]], str]:
    from .._links import error_counters, per_gpu, remote_links, throughput
    from .._topology import nvlink_capabilities, nvlink_status

    if options.mode == "nvlink-errors":
        return error_counters
    if options.mode == "nvlink-remote":
        return remote_links
    if options.mode == "nvlink-throughput":
        return lambda devices: throughput(devices, options.extra["kind"])
    view = nvlink_status if options.mode == "nvlink-status" else nvlink_capabilities
    return lambda devices: per_gpu(devices, view)


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._app import each_pass, require_present

    view = _view(options)

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        require_present(devices)
        write(view(devices))
        return 0

    return each_pass(options, render)


COMMANDS = (
    Command(
        "nvlink",
        word="nvlink",
        options=(STATUS, CAPABILITIES, ERRORS, REMOTE, THROUGHPUT, ID, LIBRARY, FILENAME),
        build=_build,
        run=_run,
    ),
)
