"""``-q``/``--query`` (``-x`` for XML, ``-d`` for some sections): the full report per GPU."""

from __future__ import annotations

from .._errors import EXIT_INVALID_ARGUMENT, INVALID_ARGS_MESSAGE, SmiError
from .._options import Options, common_fields, split_list
from .._registry import FILENAME, ID, LIBRARY, LOOP, LOOP_MS, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Device, Nvml

QUERY = Option(("-q", "--query"), "query")
XML = Option(("-x", "--xml-format"), "xml")
DISPLAY = Option(("-d", "--display"), "display", value=True)


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    display = split_list(values["display"].upper()) if "display" in values else ()
    return Options(
        command="report",
        mode="query",
        xml="xml" in values,
        display=display,
        **common_fields(values, environ),
    )


def _run(options: Options, write: Callable[[str], None]) -> int:
    if options.display:
        from .._layout import DISPLAY_TYPES

        if any(d not in DISPLAY_TYPES for d in options.display):
            raise SmiError(INVALID_ARGS_MESSAGE, EXIT_INVALID_ARGUMENT)
    from .._app import each_pass, require_present
    from .._document import render as document

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        require_present(devices)
        write(document(nvml, devices, len(everything), xml=options.xml, display=options.display))
        return 0

    return each_pass(options, render)


COMMANDS = (
    Command(
        "report",
        select=("query",),
        options=(QUERY, XML, DISPLAY, ID, LIBRARY, FILENAME, LOOP, LOOP_MS),
        build=_build,
        run=_run,
    ),
)
