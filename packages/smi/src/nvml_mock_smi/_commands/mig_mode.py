"""``-mig 0|1`` (``--multi-instance-gpu``): set the MIG mode of the selected GPUs.

The work is :mod:`.mig`'s (imported when the mode runs); this module only declares the flag,
as every top-level mode module is loaded on each run.
"""

from __future__ import annotations

from .._options import Options, bad, common_fields
from .._registry import ID, LIBRARY, Command, Option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .._nvml import Device, Nvml

MIG_MODE = Option(("-mig", "--multi-instance-gpu"), "mig-mode", value=True)


def _build_mode(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
    if values.get("mig-mode") not in ("0", "1"):
        raise bad()
    return Options(
        command="mig-mode",
        extra={"mode": values["mig-mode"]},
        **common_fields(values, environ),
    )


def _run_mode(options: Options, write: Callable[[str], None]) -> int:
    from .._app import each_pass

    def render(nvml: Nvml, devices: list[Device], everything: list[Device]) -> int:
        from .mig import _Mig

        return _Mig(nvml, devices, options, write).set_mode(int(options.extra["mode"]))

    return each_pass(options, render)


COMMANDS = (
    Command(
        "mig-mode",
        select=("mig-mode",),
        options=(MIG_MODE, ID, LIBRARY),
        build=_build_mode,
        run=_run_mode,
    ),
)
