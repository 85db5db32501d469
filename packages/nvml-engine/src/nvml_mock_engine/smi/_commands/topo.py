"""``topo -m``: the GPU connection matrix with CPU and NUMA affinity; ``topo -p2p r|w|n|a|p``:
the P2P read, write, NVLink, atomics or PCI status of every GPU pair."""

from __future__ import annotations

from .._options import Options, bad, common_fields
from .._registry import FILENAME, ID, LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Device, Nvml

MATRIX = Option(("-m", "--matrix"), "matrix")
P2P = Option(("-p2p", "--p2pstatus"), "p2p", value=True)


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    if ("matrix" in values) == ("p2p" in values):
        raise bad()
    if "p2p" in values and values["p2p"] not in ("r", "w", "n", "a", "p"):
        raise bad()
    extra = {"p2p": values["p2p"]} if "p2p" in values else {}
    return Options(command="topo", extra=extra, **common_fields(values, environ))


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._app import each_pass, require_present
    from .._links import p2p_matrix
    from .._topology import matrix

    kind = options.extra.get("p2p")

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        require_present(devices)
        write(p2p_matrix(devices, kind) if kind else matrix(devices))
        return 0

    return each_pass(options, render)


COMMANDS = (
    Command(
        "topo", word="topo", options=(MATRIX, P2P, ID, LIBRARY, FILENAME), build=_build, run=_run
    ),
)
