"""``dmon``: device statistics, one row per GPU per sample (see :mod:`.._monitor`).

Its flags are its own: ``-s`` the column groups, ``-o`` the date/time prefix, ``-c`` the
sample count, ``-d`` the delay in seconds, ``--format csv[,noheader][,nounit]``.
"""

from __future__ import annotations

from .._options import Options, common_fields
from .._registry import FILENAME, ID, LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

SELECT = Option(("-s", "--select"), "select", value=True)
STAMP = Option(("-o", "--options"), "stamp", value=True)
COUNT = Option(("-c", "--count"), "count", value=True)
DELAY = Option(("-d", "--delay"), "delay", value=True)
FORMAT = Option(("--format",), "format", value=True)
_OWN = ("select", "stamp", "count", "delay", "format")


def build(name: str) -> Callable[[Mapping[str, str], Mapping[str, str]], Options]:
    """The ``build`` of a monitor: its own options go to ``extra``, checked when it runs."""

    def make(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
        extra = {k: values[k] for k in _OWN if k in values}
        return Options(command=name, extra=extra, **common_fields(values, environ))

    return make


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._monitor import dmon

    return dmon(options, write)


COMMANDS = (
    Command(
        "dmon",
        word="dmon",
        options=(SELECT, STAMP, COUNT, DELAY, FORMAT, ID, LIBRARY, FILENAME),
        build=build("dmon"),
        run=_run,
    ),
)
