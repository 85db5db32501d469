"""``-h``/``--help``, ``--help-query-gpu`` and ``--help-query-compute-apps``: texts that work
where NVML does not load (``--help-query-gpu`` then lists every property it knows; with a
library, those of the driver it reports)."""

from __future__ import annotations

from .._options import Options, library
from .._registry import LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

HELP = Option(("-h", "--help"), "help")
HELP_QUERY_GPU = Option(("--help-query-gpu",), "help-query-gpu")
HELP_QUERY_APPS = Option(("--help-query-compute-apps",), "help-query-apps")


def _build(name: str) -> Callable[[Mapping[str, str], Mapping[str, str]], Options]:
    def build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
        return Options(command=name, library=library(values, environ))

    return build


def _help(options: Options, write: Callable[[str], None]) -> int:
    write(TEXT)
    return 0


def _help_query_gpu(options: Options, write: Callable[[str], None]) -> int:
    """The properties the driver NVML reports knows; every property when no library loads."""
    from .._fields import help_text

    write(help_text(_driver(options)))
    return 0


def _driver(options: Options) -> tuple[int, ...] | None:
    from .._app import open_nvml
    from .._errors import SmiError
    from .._generation import parse_driver_version
    from .._nvml import NvmlError

    try:
        nvml = open_nvml(options.library)
    except SmiError:
        return None
    try:
        return parse_driver_version(nvml.driver_version())
    except NvmlError:
        return None
    finally:
        nvml.shutdown()


def _help_query_apps(options: Options, write: Callable[[str], None]) -> int:
    from .._apps import help_text

    write(help_text())
    return 0


COMMANDS = (
    Command("help", select=("help",), options=(HELP, LIBRARY), build=_build("help"), run=_help),
    Command(
        "help-query-gpu",
        select=("help-query-gpu",),
        options=(HELP_QUERY_GPU, LIBRARY),
        build=_build("help-query-gpu"),
        run=_help_query_gpu,
    ),
    Command(
        "help-query-apps",
        select=("help-query-apps",),
        options=(HELP_QUERY_APPS, LIBRARY),
        build=_build("help-query-apps"),
        run=_help_query_apps,
    ),
)

TEXT = """\
NVIDIA System Management Interface work-alike (nvml-mock) -- reads GPUs through NVML.

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print this help and exit.
          --version             Print the tool, NVML, driver and CUDA versions.
    -L,   --list-gpus           One line per GPU: index, name and UUID.
    -r,   --gpu-reset           Reset the GPUs of -i (default all): their faults clear
                                (needs write access to the node's live layer).
    -q,   --query               The full report of every GPU (or those of -i).
    -x,   --xml-format          With -q: the report as XML.
    -d,   --display=            With -q: only these sections, comma separated:
                                MEMORY, UTILIZATION, ECC, TEMPERATURE, POWER,
                                POWER_SMOOTHING, POWER_PROFILES, CLOCK, COMPUTE,
                                PIDS, PERFORMANCE, SUPPORTED_CLOCKS, PAGE_RETIREMENT,
                                ROW_REMAPPER, ACCOUNTING, ENCODER_STATS, FBC_STATS,
                                SUPPORTED_GPU_TARGET_TEMP, VOLTAGE, RESET_STATUS,
                                GSP_FIRMWARE_VERSION, PCIE, FABRIC.
    -i,   --id=                 Only these GPUs: index, UUID, PCI bus id or board
                                serial, comma separated.
    -f,   --filename=           Write the output to this file instead of stdout.
    -l,   --loop=               Repeat every N seconds (default 5) until interrupted.
    -lms, --loop-ms=            Repeat every N milliseconds until interrupted.

    --query-gpu=                Properties to print as CSV, comma separated;
                                see --help-query-gpu.
    --query-compute-apps=       Properties of running compute processes, as CSV;
                                see --help-query-compute-apps.
    --format=                   Required with the two above: csv[,noheader][,nounits].

    topo -m                     The GPU connection matrix with CPU and NUMA affinity.
    nvlink -s                   The speed of every NVLink of every GPU.
    nvlink -c                   The capabilities of every NVLink of every GPU.

Exit codes: 0 success, 2 invalid argument or unsupported command, 4 no permission,
6 no such GPU, 9 driver not loaded, 12 NVML library not found, 15 GPU lost,
18 driver/library version mismatch, 255 other error.
"""
