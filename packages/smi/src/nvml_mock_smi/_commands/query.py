"""``--query-gpu=`` and ``--query-compute-apps=`` with ``--format=csv[,noheader][,nounits]``:
the CSV views scripts parse. A field name no driver accepts is refused before NVML loads."""

from __future__ import annotations

from .._errors import EXIT_GPU_LOST, EXIT_INVALID_ARGUMENT, SmiError
from .._options import Options, bad, common_fields, csv_format, split_list
from .._registry import FILENAME, ID, LIBRARY, LOOP, LOOP_MS, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Device, Nvml

QUERY_GPU = Option(("--query-gpu",), "query-gpu", value=True)
QUERY_APPS = Option(("--query-compute-apps",), "query-apps", value=True)
FORMAT = Option(("--format",), "format", value=True)
_SHARED = (FORMAT, ID, LIBRARY, FILENAME, LOOP, LOOP_MS)


def _build(key: str, flag: str) -> Callable[[Mapping[str, str], Mapping[str, str]], Options]:
    def build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
        fmt = values.get("format")
        if fmt is None:
            raise SmiError(f'"--format" option is required with "{flag}".', EXIT_INVALID_ARGUMENT)
        header, units = csv_format(fmt)
        fields = split_list(values[key])
        if not fields:
            raise bad()
        return Options(
            command=key,
            query_fields=fields,
            csv_header=header,
            csv_units=units,
            **common_fields(values, environ),
        )

    return build


def _unknown(name: str) -> SmiError:
    return SmiError(f'Field "{name}" is not a valid field to query.', EXIT_INVALID_ARGUMENT)


def _run_gpu(options: Options, write: Callable[[str], None]) -> int:
    from .._fields import Ctx, Field, lookup, refuse_newer

    fields: list[Field] = []
    for name in options.query_fields:
        field = lookup(name)
        if field is None:
            raise _unknown(name)
        fields.append(field)
    from .._app import each_pass
    from .._nvml import ERROR_GPU_IS_LOST

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        refuse_newer(nvml, options.query_fields)
        rows = []
        if options.csv_header:
            rows.append(", ".join(f.header(options.csv_units) for f in fields))
        for device in devices:
            if device.lost:
                cell = f"[{nvml.error_string(ERROR_GPU_IS_LOST)}]"
                rows.append(", ".join(cell for _ in fields))
                continue
            ctx = Ctx(nvml, device, len(everything))
            rows.append(", ".join(f.cell(ctx, options.csv_units) for f in fields))
        write("\n".join(rows) + "\n")
        return EXIT_GPU_LOST if any(d.lost for d in devices) else 0

    return each_pass(options, render)


def _run_apps(options: Options, write: Callable[[str], None]) -> int:
    from .._apps import lookup
    from .._apps import render as apps

    for name in options.query_fields:
        if lookup(name) is None:
            raise _unknown(name)
    from .._app import each_pass, require_present

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        require_present(devices)
        write(
            apps(
                nvml,
                devices,
                options.query_fields,
                header=options.csv_header,
                units=options.csv_units,
            )
        )
        return 0

    return each_pass(options, render)


COMMANDS = (
    Command(
        "query-gpu",
        select=("query-gpu",),
        options=(QUERY_GPU, *_SHARED),
        build=_build("query-gpu", "--query-gpu"),
        run=_run_gpu,
    ),
    Command(
        "query-apps",
        select=("query-apps",),
        options=(QUERY_APPS, *_SHARED),
        build=_build("query-apps", "--query-compute-apps"),
        run=_run_apps,
    ),
)
