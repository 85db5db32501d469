"""The IMEX channel check: are the channel device nodes there, and may this process open them?

A multi-node workload of a ComputeDomain opens ``/dev/nvidia-caps-imex-channels/channelN``.
What makes a channel usable is decided outside the workload: that the node (or the DRA
driver's kubelet plugin) created the node with the right numbers, and that the runtime
put it into the container with a device cgroup rule that allows it. Both show from
inside the container, so this check looks at each ``channel<N>`` entry:

- it is a character device, with minor N (the driver's numbering);
- its major is the one the node lists for ``nvidia-caps-imex-channels``: first in the
  substitute ``proc-devices`` that nvml-mock stages for the DRA driver (a GPU-less node's
  ``/proc/devices`` has no NVIDIA entry), else in ``/proc/devices``;
- ``open(O_RDONLY)`` is permitted. Success is usable, and so are ``ENXIO`` and ``ENODEV``:
  the kernel allowed the open and found no driver behind the major, which is what a node
  without NVIDIA's driver answers. ``EACCES``/``EPERM`` mean the device cgroup (or the
  mode) refuses it: the channel was not injected. ``ENOENT`` means it went away.

No channel directory, or no channel in it, is "not supported" (exit 2), as a GPU without
fabric info is; anything wrong with a channel that is there is an error (exit 1).
Only the standard library is used: this runs in every workload container that asks.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from nvml_mock_protocol.names import (
    IMEX_CHANNELS_DIR,
    IMEX_PROC_DEVICES_FILE,
    OVERLAY_IMEX_DIR,
    OVERLAY_MOUNT_PATH,
)

from check_fabric.model import ExitCode

DEFAULT_IMEX_DIR: Final = f"/dev/{IMEX_CHANNELS_DIR}"
"""Where a container sees its IMEX channels."""
SUBSTITUTE_PROC_DEVICES: Final = f"{OVERLAY_MOUNT_PATH}/{OVERLAY_IMEX_DIR}/{IMEX_PROC_DEVICES_FILE}"
"""The substitute ``/proc/devices`` in the overlay, as a container sees it."""
PROC_DEVICES: Final = "/proc/devices"
DEFAULT_PROC_DEVICES_CHAIN: Final = (SUBSTITUTE_PROC_DEVICES, PROC_DEVICES)
"""Read in order when ``--proc-devices`` is not given; the first readable file decides."""
MAJOR_NAME: Final = IMEX_CHANNELS_DIR
"""The name the driver registers the channels' character major under."""

USABLE_OPEN_ERRORS: Final = frozenset({errno.ENXIO, errno.ENODEV})
"""The kernel let the open through and found no driver bound to the major: usable."""

_CHANNEL = re.compile(r"channel(0|[1-9][0-9]*)")
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_USABLE_NAMES: Final = frozenset(errno.errorcode[e] for e in USABLE_OPEN_ERRORS)
_DENIED_NAMES: Final = frozenset({"EACCES", "EPERM"})


@dataclass(frozen=True, slots=True)
class Channel:
    """One ``channel<N>`` entry as the check found it."""

    number: int
    path: str
    kind: str
    """``char``, or what it is instead: ``block``, ``file``, ``directory``, ``fifo``,
    ``socket``, ``other``, ``missing`` (a dangling link), ``unreadable``."""
    major: int | None = None
    minor: int | None = None
    open: str | None = None
    """``ok``, the errno name of a failed open, or None when not tried (not a char device)."""
    problems: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        """The channel's stdout line (after ``IMEX channel N: ``)."""
        if self.kind != "char":
            what = {"file": "regular file", "missing": "dangling link"}.get(self.kind, self.kind)
            return f"{what}, not a character device"
        text = f"char {self.major}:{self.minor}, open {self.open}"
        if self.open in _USABLE_NAMES:
            return text + " (no driver bound: usable)"
        return text + " (denied)" if self.open in _DENIED_NAMES else text


@dataclass(frozen=True, slots=True)
class ImexReport:
    """The outcome of the channel check over one directory."""

    directory: str
    channels: tuple[Channel, ...] = ()
    major: int | None = None
    """The major the channels must have, when a proc-devices file named one."""
    major_source: str | None = None
    """The proc-devices file that was read (whether or not it listed the major)."""
    not_supported: str | None = None
    """Why there is nothing to check (no directory, no channel in it); None otherwise."""
    problems: tuple[str, ...] = field(default=())
    """Everything that makes the check fail, each naming its channel or file."""

    @property
    def passed(self) -> bool | None:
        """True when every channel is usable, False on any problem, None when none is there."""
        if self.problems:
            return False
        return None if self.not_supported is not None else True

    @property
    def exit_code(self) -> ExitCode:
        if self.problems:
            return ExitCode.ERROR
        return ExitCode.NOT_SUPPORTED if self.not_supported is not None else ExitCode.OK

    def detail(self) -> str:
        """One line for the ``imex: …`` check line and the JSON ``checks[]`` entry."""
        if self.problems:
            return "; ".join(self.problems)
        if self.not_supported is not None:
            return self.not_supported
        return (
            f"{len(self.channels)} channel(s) in {self.directory}, major {self.major} "
            f"({MAJOR_NAME} in {self.major_source}), all usable"
        )


def parse_proc_devices(text: str) -> dict[str, int]:
    """The character majors of a ``/proc/devices`` text, by name.

    Lines that are not ``<major> <name>`` inside the ``Character devices:`` section are
    skipped, as the kernel's own readers do; a text without that section is refused.
    """
    majors: dict[str, int] = {}
    section: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":"):
            section = stripped
            continue
        if section != "Character devices:" or not stripped:
            continue
        number, _, name = stripped.partition(" ")
        if number.isdigit() and name.strip():
            majors.setdefault(name.strip(), int(number))
    if section is None:
        raise ValueError("has no 'Character devices:' section")
    return majors


def _expected_major(
    chain: Sequence[str], explicit: bool
) -> tuple[int | None, str | None, str | None]:
    """``(major, file read, problem)``: the first readable file of ``chain`` decides.

    A missing file moves on to the next unless it was named explicitly; a file that is
    there but cannot be read or parsed, or does not list the channels' major, is a problem.
    """
    for path in chain:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except FileNotFoundError:
            if explicit:
                return None, path, f"cannot read {path}: it does not exist"
            continue
        except OSError as exc:
            return None, path, f"cannot read {path}: {exc.strerror or exc}"
        try:
            majors = parse_proc_devices(text)
        except ValueError as exc:
            return None, path, f"{path} {exc}"
        if MAJOR_NAME not in majors:
            return None, path, f"{path} lists no {MAJOR_NAME} major, so no channel can be checked"
        return majors[MAJOR_NAME], path, None
    return None, None, "no proc-devices file to read: " + ", ".join(chain) + " are all missing"


_KINDS: Final = (
    (stat.S_ISCHR, "char"),
    (stat.S_ISBLK, "block"),
    (stat.S_ISREG, "file"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
)


def _open_result(path: str) -> str:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, f"errno {exc.errno}")
    os.close(fd)
    return "ok"


def check_channel(number: int, path: str, major: int | None, source: str | None) -> Channel:
    """Stat, compare and open one channel; never raises for what it finds."""
    name = f"channel{number}"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return Channel(number, path, "missing", problems=(f"{name}: dangling link (ENOENT)",))
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        return Channel(number, path, "unreadable", problems=(f"{name}: cannot stat ({code})",))
    kind = next((k for test, k in _KINDS if test(info.st_mode)), "other")
    if kind != "char":
        what = "a regular file" if kind == "file" else f"a {kind}"
        return Channel(number, path, kind, problems=(f"{name}: {what}, not a character device",))
    dev_major, dev_minor = os.major(info.st_rdev), os.minor(info.st_rdev)
    problems = []
    if dev_minor != number:
        problems.append(f"{name}: minor {dev_minor}, but a channel's minor is its number")
    if major is not None and dev_major != major:
        problems.append(f"{name}: major {dev_major}, but {source} lists {MAJOR_NAME} as {major}")
    opened = _open_result(path)
    if opened in _DENIED_NAMES:
        problems.append(
            f"{name}: open denied ({opened}): the device cgroup or the mode refuses it "
            "(not injected into this container?)"
        )
    elif opened != "ok" and opened not in _USABLE_NAMES:
        problems.append(f"{name}: open failed ({opened})")
    return Channel(number, path, kind, dev_major, dev_minor, opened, tuple(problems))


def check_channels(directory: str, proc_devices: str | None = None) -> ImexReport:
    """Check every ``channel<N>`` in ``directory``; ``proc_devices`` None = the default chain."""
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return ImexReport(directory, not_supported=f"{directory} does not exist: no IMEX channel")
    except NotADirectoryError:
        return ImexReport(directory, problems=(f"{directory} is not a directory",))
    except OSError as exc:
        return ImexReport(directory, problems=(f"cannot list {directory}: {exc.strerror or exc}",))
    numbers = sorted(int(m.group(1)) for e in entries if (m := _CHANNEL.fullmatch(e)))
    if not numbers:
        return ImexReport(directory, not_supported=f"no channel<N> in {directory}")
    chain = DEFAULT_PROC_DEVICES_CHAIN if proc_devices is None else (proc_devices,)
    major, source, problem = _expected_major(chain, explicit=proc_devices is not None)
    channels = tuple(
        check_channel(n, os.path.join(directory, f"channel{n}"), major, source) for n in numbers
    )
    problems = ([problem] if problem else []) + [p for c in channels for p in c.problems]
    return ImexReport(directory, channels, major, source, problems=tuple(problems))


def combine(fabric: ExitCode, imex: ExitCode) -> ExitCode:
    """One exit status for both checks: error, then mismatch, then not supported, then ok."""
    order = (ExitCode.ERROR, ExitCode.MISMATCH, ExitCode.NOT_SUPPORTED, ExitCode.OK)
    return min(fabric, imex, key=order.index)
