"""``topo -m``: the GPU connection matrix with CPU and NUMA affinity; ``topo -p2p r|w|n|a|p``:
the P2P read, write, NVLink, atomics or PCI status of every GPU pair; ``topo -C -i N``: the
NUMA node of the CPUs closest to a GPU; ``topo -n LEVEL -i N``: the GPUs nearest to one (see
:mod:`.._nearest`)."""

from __future__ import annotations

from .._options import Options, bad, common_fields
from .._registry import FILENAME, ID, LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Device, Nvml

MATRIX = Option(("-m", "--matrix"), "matrix")
P2P = Option(("-p2p", "--p2pstatus"), "p2p", value=True)
CPU = Option(("-C", "--get-numa-id-of-nearby-cpu"), "cpu")
NEAREST = Option(("-n", "--nearestgpus"), "nearest", value=True)
_VIEWS = ("matrix", "p2p", "cpu", "nearest")
WITHOUT_ONE_GPU = "The -i command line argument must be used in conjunction with -n or -p."


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    from .._errors import EXIT_INVALID_ARGUMENT, SmiError
    from .._nearest import LEVELS

    asked = [view for view in _VIEWS if view in values]
    if len(asked) != 1:
        raise bad()
    if "p2p" in values and values["p2p"] not in ("r", "w", "n", "a", "p"):
        raise bad()
    if "nearest" in values and values["nearest"] not in LEVELS:
        raise bad()
    fields = common_fields(values, environ)
    one_gpu = len(fields["ids"]) == 1
    if asked[0] in ("cpu", "nearest") and not one_gpu:
        raise bad()
    if asked[0] == "matrix" and fields["ids"]:
        raise SmiError(WITHOUT_ONE_GPU, EXIT_INVALID_ARGUMENT)
    extra = {asked[0]: values[asked[0]]}
    return Options(command="topo", extra=extra, **fields)


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._app import each_pass, require_present
    from .._links import p2p_matrix
    from .._topology import matrix

    kind = options.extra.get("p2p")

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        require_present(devices)
        if "cpu" in options.extra or "nearest" in options.extra:
            from .._nearest import LEVELS, closest_cpu, nearest

            if "cpu" in options.extra:
                write(closest_cpu(devices[0]))
            else:
                write(nearest(devices[0], LEVELS[options.extra["nearest"]], everything))
            return 0
        write(p2p_matrix(devices, kind) if kind else matrix(devices))
        return 0

    return each_pass(options, render)


COMMANDS = (
    Command(
        "topo",
        word="topo",
        options=(MATRIX, P2P, CPU, NEAREST, ID, LIBRARY, FILENAME),
        build=_build,
        run=_run,
    ),
)
