"""The default view (no mode flag): the driver/CUDA header, one block per GPU, the
processes. Every GPU shown must answer; a lost one ends the run as on the real tool."""

from __future__ import annotations

from .._options import Options, common_fields
from .._registry import FILENAME, ID, LIBRARY, LOOP, LOOP_MS, Command

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Device, Nvml


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    return Options(command="table", **common_fields(values, environ))


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._app import each_pass, require_present
    from .._table import render as table

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        require_present(devices)
        write(table(nvml, devices))
        return 0

    return each_pass(options, render)


COMMANDS = (
    Command("table", options=(ID, LIBRARY, FILENAME, LOOP, LOOP_MS), build=_build, run=_run),
)
