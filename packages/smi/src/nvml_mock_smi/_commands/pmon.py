"""``pmon``: process statistics, one row per process (or a row of ``-``) per GPU per sample.

Its flags are its own, as ``dmon``'s: ``-s u|m|um``, ``-o D|T|DT``, ``-c``, ``-d``. The
processes are what NVML lists on each GPU (see :mod:`.._monitor`).
"""

from __future__ import annotations

from .._registry import FILENAME, ID, LIBRARY, Command
from .dmon import COUNT, DELAY, SELECT, STAMP, build

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .._options import Options


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._monitor import pmon

    return pmon(options, write)


COMMANDS = (
    Command(
        "pmon",
        word="pmon",
        options=(SELECT, STAMP, COUNT, DELAY, ID, LIBRARY, FILENAME),
        build=build("pmon"),
        run=_run,
    ),
)
