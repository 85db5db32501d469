"""The commands that change a GPU (``-pm``, ``-c``, ``-pl``, ``-e``, ``-ac``/``-rac``,
``-lgc``/``-rgc``, ``-lmc``/``-rmc``, ``--auto-boost-default``), acting on the live layer.

On a real node these calls go to the driver and need root; on the mock the driver's state is
the node's live layer, so a caller may change a GPU exactly when it may write that file (on the
node, as root; inside a container the overlay is mounted read-only). Each value lands in the
live key NVML reads it back from, so ``nvidia-smi -q``, ``--query-gpu`` and any NVML client see
it on their next call. The GPUs are read through NVML (their bus ids, current values and
limits) and found in the live layer by UUID, so ``-i`` means what it means in every other view.

The output is the real tool's: one line per GPU, then ``All done.``; the first GPU that cannot
be changed ends the run with its reason and ``Terminating early due to previous errors.``
(exit 4 for ``Insufficient Permissions``, 3 when there is no live layer to change, 2 for a value
the GPU does not accept).
"""

from __future__ import annotations

import errno
import os

from ._errors import (
    EXIT_INVALID_ARGUMENT,
    EXIT_NO_PERMISSION,
    EXIT_NOT_FOUND,
    NO_DEVICES_MESSAGE,
    SmiError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from nvml_mock_live import LiveLayer

    from ._nvml import Device, Nvml
    from ._options import Options

EXIT_NOT_SUPPORTED = 3
_NO_PERMISSION = (errno.EACCES, errno.EPERM, errno.EROFS)
"""The error codes of a live layer this process may not write (a read-only bind mount, not
root): what the real tool reports as Insufficient Permissions."""
TERMINATING = "Terminating early due to previous errors."
ALL_DONE = "All done.\n"
PERSISTENCE_WARNING = (
    "\nWarning: persistence mode is disabled on device {bus}. See the Known Issues section of"
    " the nvidia-smi(1) man page for more information. Run with [--help | -h] switch to get"
    " more information on how to enable persistence mode.\n"
)
COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}


class Target:
    """One GPU a set command changes: its NVML device, bus id and live layer record."""

    __slots__ = ("bus", "device", "gpu")

    def __init__(self, device: Device, bus: str, gpu: int | None) -> None:
        self.device = device
        self.bus = bus
        self.gpu = gpu


class Session:
    """The selected GPUs and the live layer they are changed in, or why they cannot be."""

    def __init__(
        self,
        targets: list[Target],
        layer: LiveLayer | None,
        why: str,
        say: Callable[[str], None],
    ) -> None:
        self.targets = targets
        self.layer = layer
        self.why = why
        """``""`` when :attr:`layer` is open for writing, else the reason the real tool
        prints (``Insufficient Permissions``, ``Not Supported``)."""
        self._say = say

    def say(self, line: str) -> None:
        """Print one line now, so the GPUs done before a failure show as done."""
        self._say(line + "\n")

    def refuse(self, message: str) -> SmiError:
        """``message`` (which names the GPU) with the reason, ending the run."""
        code = EXIT_NO_PERMISSION if self.why == "Insufficient Permissions" else EXIT_NOT_SUPPORTED
        return SmiError(f"{message}: {self.why}\n{TERMINATING}", code)

    def write(self, target: Target, values: Mapping[str, int]) -> None:
        assert self.layer is not None and target.gpu is not None
        self.layer.set(target.gpu, values)

    def clear(self, target: Target, keys: tuple[str, ...]) -> None:
        assert self.layer is not None and target.gpu is not None
        self.layer.clear(target.gpu, keys)


def invalid(message: str) -> SmiError:
    """A value the GPU does not accept (exit 2), as the real tool words it."""
    return SmiError(f"{message}\n{TERMINATING}", EXIT_INVALID_ARGUMENT)


def run(options: Options, write: Callable[[str], None], act: Callable[[Session], str]) -> int:
    """Open NVML and the live layer, let ``act`` change the GPUs of ``-i``, then print
    ``All done.`` and what ``act`` returned (``Reboot required.``); return the exit code."""
    from ._app import all_devices, open_nvml, select

    nvml = open_nvml(options.library)
    layer = None
    try:
        everything = all_devices(nvml)
        if not everything:
            raise SmiError(NO_DEVICES_MESSAGE, EXIT_NOT_FOUND)
        devices = select(everything, options.ids)
        from ._app import lost_error

        for device in devices:
            if device.lost:
                raise lost_error(device)
        layer, why, records = _open_layer(nvml)
        targets = [
            Target(d, d.pci_info().busId.decode(), records.get(d.uuid().upper())) for d in devices
        ]
        if layer is not None and any(t.gpu is None for t in targets):
            why = "Not Supported"
        session = Session(targets, layer if not why else None, why, write)
        tail = act(session)
        write(ALL_DONE + tail)
        return 0
    finally:
        if layer is not None:
            layer.close()
        nvml.shutdown()


def _open_layer(nvml: Nvml) -> tuple[LiveLayer | None, str, dict[str, int]]:
    """The live layer opened for writing, the reason when it cannot be, and the GPU record of
    each UUID; found as the library finds it (``MOCK_NVML_LIVE``, else beside the state)."""
    from ._board import board_gpus, live_path, loaded_library, state_path

    state = state_path(nvml.path or loaded_library(), os.environ)
    live = live_path(state, os.environ)
    records = {gpu.get("uuid", "").upper(): i for i, gpu in enumerate(board_gpus(state))}
    if not live or not os.path.isfile(live):
        return None, "Not Supported", {}
    if not os.access(live, os.W_OK):
        return None, "Insufficient Permissions", {}
    from nvml_mock_engine.errors import LiveLayerError, NvmlEngineError
    from nvml_mock_live import LiveLayer

    try:
        layer = LiveLayer.open(live, state=state)
    except (NvmlEngineError, LiveLayerError, OSError) as exc:
        if getattr(exc, "errno", None) in _NO_PERMISSION:
            return None, "Insufficient Permissions", {}
        return None, "Not Supported", {}
    return layer, "", {uuid: i for uuid, i in records.items() if uuid}


def enable_state(value: str) -> int | None:
    """``0``/``DISABLED`` -> 0, ``1``/``ENABLED`` -> 1 (any case); None for anything else."""
    return {"0": 0, "DISABLED": 0, "1": 1, "ENABLED": 1}.get(value.strip().upper())


CLOCK_MHZ_MAX = 2**32 - 1
"""NVML takes clocks as ``unsigned int`` MHz; the real tool refuses a wider number as it
refuses any bad argument (exit 2)."""


def clock_pair(value: str, *, single: bool) -> tuple[int, int] | None:
    """``"1500,1980"`` -> (1500, 1980); with ``single``, ``"1500"`` -> (1500, 1500).

    None for anything that is not two unsigned 32-bit numbers.
    """
    parts = [p.strip() for p in value.split(",")]
    if single and len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    low, high = int(parts[0]), int(parts[1])
    if max(low, high) > CLOCK_MHZ_MAX:
        return None
    return low, high


def persistence(mode: int) -> Callable[[Session], str]:
    """``-pm``: the persistence mode (live ``persistence_mode``)."""
    word = ("Disabled", "Enabled")[mode]

    def act(s: Session) -> str:
        for t in s.targets:
            if s.why:
                raise s.refuse(f"Unable to set persistence mode for GPU {t.bus}")
            if t.device.persistence_mode() == mode:
                s.say(f"Persistence mode is already {word} for GPU {t.bus}.")
                continue
            s.write(t, {"persistence_mode": mode})
            s.say(f"{word} persistence mode for GPU {t.bus}.")
        return ""

    return act


def compute_mode(mode: int) -> Callable[[Session], str]:
    """``-c``: the compute mode (live ``compute_mode``); EXCLUSIVE_THREAD is gone from NVML."""
    name = COMPUTE_MODES[mode]

    def act(s: Session) -> str:
        for t in s.targets:
            if s.why:
                raise s.refuse(f"Unable to set the compute mode for GPU {t.bus}")
            if mode == 1:
                raise SmiError(
                    f"Unable to set the compute mode for GPU {t.bus}: Not Supported\n{TERMINATING}",
                    EXIT_NOT_SUPPORTED,
                )
            if t.device.compute_mode() == mode:
                s.say(f"Compute mode is already set to {name} for GPU {t.bus}.")
                continue
            s.write(t, {"compute_mode": mode})
            s.say(f"Set compute mode to {name} for GPU {t.bus}.")
        return ""

    return act


def power_limit(watts: float) -> Callable[[Session], str]:
    """``-pl``: the power limit (live ``power_limit_mw``), within the board's constraints."""
    mw = round(watts * 1000)

    def act(s: Session) -> str:
        for t in s.targets:
            lo, hi = t.device.power_limit_constraints()
            if not lo <= mw <= hi:
                raise invalid(
                    f"Provided power limit {watts:.2f} W is not a valid power limit which should"
                    f" be between {lo / 1000:.2f} W and {hi / 1000:.2f} W for GPU {t.bus}"
                )
            if s.why:
                raise s.refuse(f"Failed to set power management limit for GPU {t.bus}")
            old = t.device.power_limit()
            s.write(t, {"power_limit_mw": mw})
            s.say(
                f"Power limit for GPU {t.bus} was set to {mw / 1000:.2f} W from {old / 1000:.2f} W."
            )
        return ""

    return act


def ecc(mode: int) -> Callable[[Session], str]:
    """``-e``: the ECC mode after the next reset (live ``ecc_pending``; ``-r`` applies it)."""
    word = ("Disabled", "Enabled")[mode]

    def act(s: Session) -> str:
        for t in s.targets:
            current, pending = t.device.ecc_mode()
            if s.why:
                raise s.refuse(f"Unable to set the ECC mode for GPU {t.bus}")
            if pending == mode:
                s.say(f"ECC support is already {word} for GPU {t.bus}.")
                continue
            s.write(t, {"ecc_pending": 0 if mode == current else mode + 1})
            s.say(f"{word} ECC support for GPU {t.bus}.")
        return "Reboot required.\n"

    return act


def _clock_refusal(s: Session, t: Target) -> SmiError:
    code = EXIT_NO_PERMISSION if s.why == "Insufficient Permissions" else EXIT_NOT_SUPPORTED
    if code == EXIT_NO_PERMISSION:
        return SmiError(
            f"The current user does not have permission to change clocks for GPU {t.bus}.\n"
            f"{TERMINATING}",
            code,
        )
    return SmiError(f"Setting clocks is not supported for GPU {t.bus}.\n{TERMINATING}", code)


def applications_clocks(mem: int, graphics: int) -> Callable[[Session], str]:
    """``-ac MEM,GRAPHICS``: one of the board's supported pairs (live ``app_clock_*``)."""

    def act(s: Session) -> str:
        from ._nvml import NvmlError

        for t in s.targets:
            try:
                ok = mem in t.device.supported_memory_clocks() and graphics in (
                    t.device.supported_graphics_clocks(mem)
                )
            except NvmlError:
                ok = False
            if not ok:
                raise invalid(
                    f'Specified clock combination "(MEM {mem}, SM {graphics})" is not supported'
                    f" for GPU {t.bus}. Run 'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of"
                    " supported clock combinations"
                )
            if s.why:
                raise _clock_refusal(s, t)
            s.write(t, {"app_clock_mem_mhz": mem, "app_clock_graphics_mhz": graphics})
            s.say(f'Applications clocks set to "(MEM {mem}, SM {graphics})" for GPU {t.bus}')
        return ""

    return act


def locked_clocks(kind: str, lo: int, hi: int) -> Callable[[Session], str]:
    """``-lgc`` (``kind`` ``gpu``) / ``-lmc`` (``mem``): hold the current clocks in [lo, hi]."""
    label = "GPU" if kind == "gpu" else "Memory"
    short = "gpuClk" if kind == "gpu" else "memClk"

    def act(s: Session) -> str:
        for t in s.targets:
            if s.why:
                raise _clock_refusal(s, t)
            s.write(t, {f"locked_{kind}_clock_min_mhz": lo, f"locked_{kind}_clock_max_mhz": hi})
            s.say(f'{label} clocks set to "({short}Min {lo}, {short}Max {hi})" for GPU {t.bus}')
            if not t.device.persistence_mode():
                s.say(PERSISTENCE_WARNING.format(bus=t.bus).rstrip("\n"))
        return ""

    return act


def reset_clocks(keys: tuple[str, ...]) -> Callable[[Session], str]:
    """``-rac`` / ``-rgc`` / ``-rmc``: clear what the matching set command wrote."""

    def act(s: Session) -> str:
        for t in s.targets:
            if s.why:
                raise _clock_refusal(s, t)
            s.clear(t, keys)
        return ""

    return act


def auto_boost_default(enabled: int) -> Callable[[Session], str]:
    """``--auto-boost-default``: no modelled board has auto boost, so every GPU answers with
    the real tool's warning for a board without it, and the run succeeds."""

    del enabled  # no board to set it on

    def act(s: Session) -> str:
        for t in s.targets:
            s.say(
                f"Setting auto boosted clocks default is not supported for GPU {t.bus}.\n"
                "Treating as warning and moving on."
            )
        return ""

    return act
