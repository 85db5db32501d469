"""Command-line parsing with the real tool's grammar and its error messages.

``argparse`` is not used: the real tool accepts ``--id=3`` and ``--id 3``, ``-i 3``, a
``topo``/``nvlink`` sub-command as the first word, and answers any bad combination with one
fixed message and exit code 2, which scripts match. The result is one frozen
:class:`Options`. The library path has a flag (``--nvml-lib``, not in ``-h``) and an env twin
(``NVML_MOCK_SMI_LIB``); the flag wins.
"""

from __future__ import annotations

from ._errors import EXIT_INVALID_ARGUMENT, INVALID_ARGS_MESSAGE, SmiError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

ENV_LIBRARY = "NVML_MOCK_SMI_LIB"


class Options:
    """Everything one run was asked to do; immutable once built.

    A plain slotted class rather than a dataclass or named tuple: importing ``dataclasses``
    or ``typing`` costs more start-up time than a whole ``-L`` run is allowed.
    """

    __slots__ = (
        "csv_header",
        "csv_units",
        "display",
        "filename",
        "ids",
        "library",
        "loop_seconds",
        "mode",
        "query_fields",
        "xml",
    )

    mode: str
    """table | list | query | query-gpu | query-apps | help | help-query-gpu |
    help-query-apps | version | topo | nvlink-status | nvlink-caps | reset"""
    xml: bool
    display: tuple[str, ...]
    ids: tuple[str, ...]
    query_fields: tuple[str, ...]
    csv_header: bool
    csv_units: bool
    filename: str | None
    loop_seconds: float | None
    library: str | None

    def __init__(
        self,
        *,
        mode: str = "table",
        xml: bool = False,
        display: tuple[str, ...] = (),
        ids: tuple[str, ...] = (),
        query_fields: tuple[str, ...] = (),
        csv_header: bool = True,
        csv_units: bool = True,
        filename: str | None = None,
        loop_seconds: float | None = None,
        library: str | None = None,
    ) -> None:
        values = {
            "mode": mode,
            "xml": xml,
            "display": display,
            "ids": ids,
            "query_fields": query_fields,
            "csv_header": csv_header,
            "csv_units": csv_units,
            "filename": filename,
            "loop_seconds": loop_seconds,
            "library": library,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Options is immutable (tried to set {name})")

    def __repr__(self) -> str:
        return "Options(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"


_VALUE_FLAGS = {
    "-d": "display",
    "--display": "display",
    "-i": "id",
    "--id": "id",
    "-f": "filename",
    "--filename": "filename",
    "-l": "loop",
    "--loop": "loop",
    "-lms": "loop-ms",
    "--loop-ms": "loop-ms",
    "--query-gpu": "query-gpu",
    "--query-compute-apps": "query-apps",
    "--format": "format",
    "--nvml-lib": "library",
}
_SWITCHES = {
    "-h": "help",
    "--help": "help",
    "--version": "version",
    "-r": "reset",
    "--gpu-reset": "reset",
    "-L": "list",
    "--list-gpus": "list",
    "-q": "query",
    "--query": "query",
    "-x": "xml",
    "--xml-format": "xml",
    "--help-query-gpu": "help-query-gpu",
    "--help-query-compute-apps": "help-query-apps",
}


def _bad() -> SmiError:
    return SmiError(INVALID_ARGS_MESSAGE, EXIT_INVALID_ARGUMENT)


def _split_list(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> Options:
    """Parse ``argv`` (without the program name); raise :class:`SmiError` on bad input."""
    args = list(argv)
    values: dict[str, str] = {}
    switches: set[str] = set()
    sub: str | None = None
    sub_flags: set[str] = set()
    if args and args[0] in ("topo", "nvlink"):
        sub = args.pop(0)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        if sub is not None and name in ("-m", "--matrix", "-s", "--status", "-c", "--capabilities"):
            if eq:
                raise _bad()
            sub_flags.add(name.lstrip("-")[0])
            i += 1
            continue
        if name in _VALUE_FLAGS:
            key = _VALUE_FLAGS[name]
            if eq:
                value = inline
            elif key == "loop" and (i + 1 >= len(args) or not args[i + 1].isdigit()):
                value = "5"
            else:
                if i + 1 >= len(args):
                    raise _bad()
                value = args[i + 1]
                i += 1
            if key in values:
                raise _bad()
            values[key] = value
            i += 1
            continue
        if arg in _SWITCHES and not eq:
            switches.add(_SWITCHES[arg])
            i += 1
            continue
        raise _bad()

    library = values.get("library") or environ.get(ENV_LIBRARY) or None
    ids = _split_list(values["id"]) if "id" in values else ()
    if "id" in values and not ids:
        raise _bad()
    loop = _loop(values)
    common = {
        "ids": ids,
        "library": library,
        "filename": values.get("filename"),
        "loop_seconds": loop,
    }

    if sub == "topo":
        if switches or set(values) - {"id", "library", "filename"} or sub_flags != {"m"}:
            raise _bad()
        return Options(mode="topo", **common)  # type: ignore[arg-type]
    if sub == "nvlink":
        if (
            switches
            or set(values) - {"id", "library", "filename"}
            or len(sub_flags) != 1
            or not sub_flags <= {"s", "c"}
        ):
            raise _bad()
        return Options(mode="nvlink-status" if "s" in sub_flags else "nvlink-caps", **common)  # type: ignore[arg-type]

    for only in ("help", "help-query-gpu", "help-query-apps", "version"):
        if only in switches:
            if len(switches) > 1 or set(values) - {"library"}:
                raise _bad()
            return Options(mode=only, library=library)

    if "reset" in switches:
        if switches != {"reset"} or set(values) - {"id", "library"}:
            raise _bad()
        return Options(mode="reset", ids=ids, library=library)

    display = _split_list(values["display"].upper()) if "display" in values else ()
    if display and "query" not in switches:
        raise _bad()
    query_keys = [k for k in ("query-gpu", "query-apps") if k in values]
    if query_keys:
        if len(query_keys) > 1 or switches:
            raise _bad()
        fmt = values.get("format")
        if fmt is None:
            raise SmiError(
                '"--format" option is required with "--'
                + query_keys[0].replace("apps", "compute-apps")
                + '".',
                EXIT_INVALID_ARGUMENT,
            )
        header, units = _format(fmt)
        fields = _split_list(values[query_keys[0]])
        if not fields:
            raise _bad()
        return Options(
            mode=query_keys[0],
            query_fields=fields,
            csv_header=header,
            csv_units=units,
            **common,  # type: ignore[arg-type]
        )
    if "format" in values:
        raise _bad()
    if "list" in switches:
        if switches != {"list"}:
            raise _bad()
        return Options(mode="list", **common)  # type: ignore[arg-type]
    if "query" in switches:
        if switches - {"query", "xml"}:
            raise _bad()
        return Options(mode="query", xml="xml" in switches, display=display, **common)  # type: ignore[arg-type]
    if switches:
        raise _bad()
    return Options(mode="table", **common)  # type: ignore[arg-type]


def _format(value: str) -> tuple[bool, bool]:
    parts = {p.strip().lower() for p in value.split(",") if p.strip()}
    if "csv" not in parts or parts - {"csv", "noheader", "nounits"}:
        raise _bad()
    return "noheader" not in parts, "nounits" not in parts


def _loop(values: Mapping[str, str]) -> float | None:
    if "loop" in values and "loop-ms" in values:
        raise _bad()
    try:
        if "loop" in values:
            seconds = float(int(values["loop"]))
        elif "loop-ms" in values:
            seconds = int(values["loop-ms"]) / 1000
        else:
            return None
    except ValueError:
        raise _bad() from None
    if seconds <= 0:
        raise _bad()
    return seconds


HELP = """\
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
