"""``-r``/``--gpu-reset`` (with ``-i``): clears the GPUs' live values, as a reset would
(see :mod:`.._reset`); refused without write access to the node's live layer."""

from __future__ import annotations

from .._options import Options, common_fields
from .._registry import ID, LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

RESET = Option(("-r", "--gpu-reset"), "reset")


def _build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    return Options(command="reset", **common_fields(values, environ))


def _run(options: Options, write: Callable[[str], None]) -> int:
    from .._reset import reset

    return reset(options, write)


COMMANDS = (
    Command("reset", select=("reset",), options=(RESET, ID, LIBRARY), build=_build, run=_run),
)
