"""Faults on the kernel log: the lines the NVIDIA driver writes for an Xid, to a sink.

Remediation systems and log monitors do not ask NVML about Xids: they read the kernel log,
where the driver (``NVRM``) writes one line per Xid, and match it. The line's shape is::

    NVRM: Xid (PCI:0000:1a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.

``PCI:`` is the GPU's domain:bus:device (lower case, 4:2:2 hex digits), then the Xid, the
process the driver blames (``pid=<pid>, name=<comm>`` when a process holds the GPU, the
quoted ``'<unknown>'`` form when none does) and the Xid's own message. What the common
readers match (this module's lines satisfy all of them):

- ``NVRM: Xid \\(PCI:([0-9a-fA-F:]+)\\): (\\d+),``: NVIDIA's NVSentinel syslog monitor,
  node-problem-detector's NVIDIA rules, most fleet scripts (the Xid and the GPU's bus id);
- ``GPU has fallen off the bus``: a fallen GPU, also on the driver's second line
  ``NVRM: GPU 0000:1a:00.0: GPU has fallen off the bus.``;
- ``NVRM: GPU at PCI:0000:1a:00: GPU-<uuid>``: the driver names the GPU's UUID before the
  first Xid of a GPU (readers join bus ids to UUIDs with it).

A sink is chosen by the operator and is off by default (:func:`open_sink`):

- ``file:PATH``: appends syslog-style lines (``Dec  1 21:40:00 <host> kernel: NVRM: …``, as in
  ``/var/log/kern.log``), for readers that follow a log file;
- ``journald[:SOCKET]``: one entry per line through journald's native socket, with
  ``SYSLOG_IDENTIFIER=kernel`` and ``PRIORITY=3``; journald marks the transport itself, so
  ``journalctl -k`` (``_TRANSPORT=kernel``) does not show them, ``journalctl -t kernel`` does;
- ``kmsg[:PATH]``: writes ``<3>NVRM: …`` to ``/dev/kmsg``, the kernel's own log, where the
  node allows it (root, writable; containers need it mounted): ``dmesg`` and
  ``journalctl -k`` show them as the driver's lines.

Never on a node with a real NVIDIA driver (:mod:`nvml_mock_protocol.hostgpu`): there the
kernel log is the real GPUs' record, and a mock Xid in it would page someone. Opening a sink
there is refused, before anything is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from nvml_mock_live import LiveLayer
from nvml_mock_protocol import hostgpu

from nvml_mock_engine.errors import KernelLogError
from nvml_mock_engine.faults import EVENT_XID, Event

__all__ = [
    "DEFAULT_JOURNAL_SOCKET",
    "DEFAULT_KMSG",
    "SINK_KINDS",
    "Announcer",
    "Culprit",
    "KernelLogSink",
    "driver_lines",
    "open_sink",
    "parse_sink",
    "pci_tag",
]

SINK_KINDS: Final = ("off", "file", "journald", "kmsg")
DEFAULT_JOURNAL_SOCKET: Final = "/run/systemd/journal/socket"
DEFAULT_KMSG: Final = "/dev/kmsg"
_KERN_ERR: Final = 3

# The text after "<xid>, pid=…, name=…, " as the driver writes it for the Xids the mock's
# faults and scenarios raise (NVIDIA's "Xid Errors" catalogue names the rest).
_MESSAGES: Final[dict[int, str]] = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
    "0x7f4c_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000008",
    45: "Ch 00000008",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
    "at partition 0, subpartition 0.",
    61: "Internal micro-controller breakpoint/warning (GSP)",
    62: "Internal micro-controller halt",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to mark row for remapping, reset gpu to activate.",
    74: "NVLink: fatal error detected on link 0(0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
    "(GSP_RM_CONTROL) (0x20801702 0x4).",
    120: "GSP task exception",
    154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
}
_PAGE_RETIREMENT: Final[dict[int, str]] = {
    # before Ampere the same Xids speak of page retirement, not row remapping
    63: "Dynamic Page Retirement: New page retired, reboot to activate.",
    64: "Dynamic Page Retirement: Failed to retire page.",
}
_AMPERE: Final = 7


@dataclass(frozen=True, slots=True)
class Culprit:
    """The process the driver names on an Xid line: a PID and its command name."""

    pid: int
    name: str


def pci_tag(bus_id: str) -> str:
    """``00000000:1A:00.0`` (NVML's bus id) as the driver's ``0000:1a:00``."""
    head, _, _function = bus_id.partition(".")
    domain, bus, device = head.split(":")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"


def driver_lines(
    xid: int,
    *,
    bus_id: str,
    uuid: str,
    architecture: int = _AMPERE,
    culprit: Culprit | None = None,
    first: bool = True,
) -> list[str]:
    """The driver's lines for one Xid on one GPU (``first``: the GPU's first Xid here, which
    the driver precedes with the line naming its UUID)."""
    tag = pci_tag(bus_id)
    who = (
        f"pid={culprit.pid}, name={culprit.name}"
        if culprit is not None
        else "pid='<unknown>', name=<unknown>"
    )
    text = (_PAGE_RETIREMENT.get(xid) if architecture < _AMPERE else None) or _MESSAGES.get(
        xid, "Unknown Error"
    )
    lines = [f"NVRM: GPU at PCI:{tag}: {uuid}"] if first else []
    lines.append(f"NVRM: Xid (PCI:{tag}): {xid}, {who}, {text}")
    if xid == 79:
        function = bus_id.partition(".")[2]
        lines.append(f"NVRM: GPU {tag}.{function or '0'}: GPU has fallen off the bus.")
    return lines


class KernelLogSink(Protocol):
    """Where the driver's lines go."""

    def write(self, lines: Sequence[str]) -> None: ...

    def close(self) -> None: ...


class _Off:
    def write(self, lines: Sequence[str]) -> None:
        return None

    def close(self) -> None:
        return None


class _File:
    """Appends syslog-style lines under an exclusive lock (several writers on a node)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError as exc:
            raise KernelLogError(f"kernel log file {path}: {exc.strerror}") from None
        self._host = socket.gethostname().split(".", 1)[0] or "localhost"

    def write(self, lines: Sequence[str]) -> None:
        stamp = time.strftime("%b %e %H:%M:%S", time.localtime(time.time()))
        data = "".join(f"{stamp} {self._host} kernel: {line}\n" for line in lines).encode()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            os.write(self._fd, data)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._fd)


class _Journald:
    """journald's native protocol: ``KEY=value`` lines, one datagram per entry."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            self._socket.connect(address)
        except OSError as exc:
            self._socket.close()
            raise KernelLogError(
                f"journald socket {address}: {exc.strerror} (is systemd-journald running?)"
            ) from None

    def write(self, lines: Sequence[str]) -> None:
        for line in lines:
            fields = {
                "MESSAGE": line,
                "PRIORITY": str(_KERN_ERR),
                "SYSLOG_IDENTIFIER": "kernel",
                "SYSLOG_FACILITY": "0",
                "NVML_MOCK": "1",
            }
            self._socket.send("".join(f"{k}={v}\n" for k, v in fields.items()).encode())

    def close(self) -> None:
        self._socket.close()


class _Kmsg:
    """The kernel's log: one ``write`` per record, each with the driver's level (KERN_ERR)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            raise KernelLogError(
                f"{path}: {exc.strerror} (writing the kernel log needs root, and in a container "
                f"/dev/kmsg mounted)"
            ) from None

    def write(self, lines: Sequence[str]) -> None:
        for line in lines:
            os.write(self._fd, f"<{_KERN_ERR}>{line}\n".encode())

    def close(self) -> None:
        os.close(self._fd)


def parse_sink(text: str) -> tuple[str, str]:
    """``off``, ``file:PATH``, ``journald[:SOCKET]``, ``kmsg[:PATH]`` as (kind, target);
    ``ValueError`` with the reason otherwise (the settings' parser)."""
    kind, _, target = text.strip().partition(":")
    kind = kind.lower()
    if kind not in SINK_KINDS:
        raise ValueError("must be one of off, file:PATH, journald[:SOCKET], kmsg[:PATH]")
    if kind == "off":
        if target:
            raise ValueError("off takes no target")
        return kind, ""
    if kind == "file" and not target:
        raise ValueError("file needs a path: file:/var/log/nvml-mock-kern.log")
    if target and not target.startswith("/"):
        raise ValueError(f"{target!r} is not an absolute path")
    defaults = {"journald": DEFAULT_JOURNAL_SOCKET, "kmsg": DEFAULT_KMSG}
    return kind, target or defaults.get(kind, "")


def open_sink(spec: str, environ: Mapping[str, str] | None = None) -> KernelLogSink:
    """The sink *spec* names, opened; :class:`KernelLogError` says why it cannot be used,
    among others on a node where a real NVIDIA driver is loaded."""
    kind, target = parse_sink(spec)
    if kind == "off":
        return _Off()
    driver = hostgpu.detect_from_environ(environ)
    if driver.present:
        raise KernelLogError(
            "refusing to write mock Xids to the kernel log of a node with a real NVIDIA "
            f"driver: {driver.reason}"
        )
    if kind == "file":
        return _File(Path(target))
    if kind == "journald":
        return _Journald(target)
    return _Kmsg(Path(target))


@dataclass
class Announcer:
    """Writes the driver's lines for each Xid sent to a GPU, once per GPU naming its UUID."""

    sink: KernelLogSink
    _named: set[str] | None = None

    def events(self, layer: LiveLayer, gpu: int, events: Iterable[Event]) -> None:
        """The lines for the Xids among *events* just sent to board GPU *gpu* of *layer*; the
        culprit is the first process an allocation record has on that GPU, as the driver
        names the process whose channel faulted."""
        xids = [e.data for e in events if e.event_type == EVENT_XID]
        if not xids or isinstance(self.sink, _Off):
            return
        board = layer.board[gpu]
        holders = [a for a in layer.list() if gpu in a.gpus]
        culprit = (
            Culprit(holders[0].pid, (holders[0].container_name or "python3")[:15])
            if holders
            else None
        )
        for xid in xids:
            self.xid(
                xid,
                bus_id=board.values.get("pci_bus_id", "00000000:00:00.0"),
                uuid=board.uuid,
                architecture=board.number("architecture"),
                culprit=culprit,
            )

    def xid(
        self,
        xid: int,
        *,
        bus_id: str,
        uuid: str,
        architecture: int,
        culprit: Culprit | None = None,
    ) -> None:
        named = self._named if self._named is not None else set()
        self._named = named
        lines = driver_lines(
            xid,
            bus_id=bus_id,
            uuid=uuid,
            architecture=architecture,
            culprit=culprit,
            first=uuid not in named,
        )
        named.add(uuid)
        self.sink.write(lines)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sink.close()
