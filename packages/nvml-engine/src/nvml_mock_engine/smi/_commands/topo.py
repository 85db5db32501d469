"""``topo -m``: the GPU connection matrix with CPU and NUMA affinity."""

from __future__ import annotations

from .._options import Options, bad, common_fields
from .._registry import FILENAME, ID, LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Device, Nvml

MATRIX = Option(("-m", "--matrix"), "matrix")


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    if "matrix" not in values:
        raise bad()
    return Options(command="topo", **common_fields(values, environ))


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._app import each_pass, require_present
    from .._topology import matrix

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        require_present(devices)
        write(matrix(devices))
        return 0

    return each_pass(options, render)


COMMANDS = (
    Command("topo", word="topo", options=(MATRIX, ID, LIBRARY, FILENAME), build=_build, run=_run),
)
