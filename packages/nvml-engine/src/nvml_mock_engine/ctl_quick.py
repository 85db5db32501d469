"""``nvml-mock-ctl status`` and ``xid`` in the time the interpreter takes to start.

Scripts poll ``status`` and send ``xid`` in loops; through the full command line each call
paid for ``argparse``, ``logging``, the settings tables and the live writer before it read a
byte (about 70 ms of imports). This path answers the plain forms of those two verbs with
what they need only:

- a reader of exactly their flags, spelled as ``--help`` shows them (``--flag VALUE``,
  ``--flag=VALUE``), before or after the verb, with the env twins and precedence of the
  settings declaration (the flag after the verb, then before it, then the env twin); the
  table below is held equal to that declaration and to the argparse parser by tests;
- the live file checked with the writer's own rules (:mod:`nvml_mock_live.header`, the
  board from :mod:`nvml_mock_live.state_text`), values taken under the records' sequence
  locks with plain reads (:mod:`nvml_mock_live.plain_reads`: ``status`` loads neither
  ``ctypes`` nor the library) and decoded by :mod:`nvml_mock_live.slots`, the Xid appended
  to the event ring with the library's ``nvml_mock_live_event_on`` (which wakes the
  waiters' futex; bound alone, without the ``ctypes`` package:
  :func:`nvml_mock_live.library.event_sender`) under the writers' lock of
  :mod:`nvml_mock_live.lock_files`, exactly as :class:`nvml_mock_live.LiveLayer` does;
- every line printed by :mod:`nvml_mock_engine.ctl_report`, the full command line's printer.

Whatever this path does not take as plainly right (an abbreviated, unknown or repeated-verb
argument, ``--help``, a value in another spelling than the canonical one, a kernel-log sink,
``--gi``/``--ci``, a file that is missing, foreign, torn or retired, a GPU that is not the
node's, an Xid outside ``1..4294967295``) goes, before anything is written, to the full
command line (:mod:`nvml_mock_engine.ctl_cli`), which explains it: every refusal keeps one
author, its message and its exit code.
"""

from __future__ import annotations

import os
import stat

from nvml_mock_protocol import names

from nvml_mock_engine.ctl import EXIT_FAILURE, EXIT_OK

TYPE_CHECKING = False
if TYPE_CHECKING:
    import mmap
    from collections.abc import Mapping, Sequence
    from typing import Final

    from nvml_mock_live import Allocation
    from nvml_mock_live.library import EventSender

__all__ = ["COMMAND_OPTIONS", "ENV_KERNEL_LOG", "VERB_OPTIONS", "read_argv", "run"]

_LOCATIONS: Final = ("overlay_path", "live_file", "state_file")
"""``settings.LOCATION_FIELDS`` (a test holds them equal)."""
ENV_KERNEL_LOG: Final = "NVML_MOCK_KERNEL_LOG"
"""``settings.ENV_KERNEL_LOG`` (a test holds them equal)."""
COMMAND_OPTIONS: Final = (
    ("log_format", "--log-format", names.ENV_LOG_FORMAT),
    ("log_level", "--log-level", names.ENV_LOG_LEVEL),
    ("overlay_path", "--overlay-path", names.ENV_OVERLAY_HOST_PATH),
    ("live_file", "--live-file", names.ENV_MOCK_NVML_LIVE),
    ("state_file", "--state-file", names.ENV_MOCK_NVML_CONFIG),
    ("kernel_log", "--kernel-log", ENV_KERNEL_LOG),
)
"""``(field, flag, env twin)`` of the options every verb takes before or after its name:
``settings.LOG_OPTIONS`` and ``CTL_OPTIONS`` (a test holds them equal)."""
VERB_OPTIONS: Final[Mapping[str, Mapping[str, str]]] = {
    "status": {"-i": "gpu", "--gpu": "gpu", "--json": "json"},
    "xid": {"-i": "gpu", "--gpu": "gpu"},
}
"""The verbs this path answers, and the flags of each it reads, by spelling (a test holds
them equal to the parser's; ``xid``'s ``--gi``/``--ci``, and the trigger flags it refuses, are
left to the full command line)."""
_SWITCHES: Final = frozenset({"json"})
_POSITIONALS: Final = {"status": 0, "xid": 1}
_GPU_DEFAULT: Final = {"status": "all"}
_COMMAND_FLAGS: Final = {flag: field for field, flag, _env in COMMAND_OPTIONS}
_XID_MAX: Final = (1 << 32) - 1
_NO_INSTANCE: Final = 0xFFFFFFFF
_LOGGER: Final = "nvml_mock_engine.ctl"


class Request:
    """What the argv reader found: the verb, the command options as given (flag, else env
    twin), the verb's own flags and its positional arguments."""

    __slots__ = ("options", "positionals", "verb", "verb_values")

    def __init__(
        self,
        verb: str,
        options: dict[str, str],
        verb_values: dict[str, str],
        positionals: list[str],
    ) -> None:
        self.verb = verb
        self.options = options
        self.verb_values = verb_values
        self.positionals = positionals


def read_argv(argv: Sequence[str], environ: Mapping[str, str]) -> Request | None:
    """*argv* as ``argparse`` would read it, when every word is one this path knows in its
    plain spelling; None for anything else (the full command line reads it then)."""
    before: dict[str, str] = {}
    after: dict[str, str] = {}
    verb_values: dict[str, str] = {}
    positionals: list[str] = []
    verb: str | None = None
    at = 0
    while at < len(argv):
        token = argv[at]
        at += 1
        if not token.startswith("-"):
            if verb is None:
                if token not in VERB_OPTIONS:
                    return None
                verb = token
            else:
                positionals.append(token)
            continue
        # "-i0" (a short flag's attached value), "--", "-" and abbreviations: argparse's
        flag, eq, value = token.partition("=")
        field = _COMMAND_FLAGS.get(flag)
        verb_field = VERB_OPTIONS[verb].get(flag) if verb is not None else None
        if verb_field is not None and verb_field in _SWITCHES:
            if eq:
                return None
            verb_values[verb_field] = "true"
            continue
        if field is None and verb_field is None:
            return None
        if not eq:
            if at >= len(argv) or argv[at].startswith("-"):
                return None  # a missing value, or one argparse may take for a flag
            value = argv[at]
            at += 1
        if not value:
            return None
        if verb_field is not None:
            verb_values[verb_field] = value
        else:
            (after if verb is not None else before)[field or ""] = value
    if verb is None or len(positionals) != _POSITIONALS[verb]:
        return None
    options: dict[str, str] = {}
    # the flag wins across the three location options too (settings.located_by_flags)
    located = any(f in after or f in before for f in _LOCATIONS)
    for field, _flag, env in COMMAND_OPTIONS:
        if field in after:
            options[field] = after[field]
        elif field in before:
            options[field] = before[field]
        elif located and field in _LOCATIONS:
            ignored = environ.get(env, "")
            if ignored.strip() and not (_plain(ignored) and ignored.startswith("/")):
                return None  # the full command line checks it (and refuses a bad one)
            continue
        elif environ.get(env, "").strip():
            options[field] = environ[env]
    return Request(verb, options, verb_values, positionals)


def _plain(path: str) -> bool:
    """Whether *path* is spelled as ``pathlib`` spells it (so every line shows it alike)."""
    return (
        path == path.strip()
        and path not in ("", ".")
        and "//" not in path
        and "/./" not in path
        and not path.startswith("./")
        and not path.endswith("/.")
        and (path == "/" or not path.endswith("/"))
    )


def _paths(options: Mapping[str, str]) -> tuple[str, str] | None:
    """The live file and the board state (``CtlSettings.live_path`` / ``state_path``), when
    every option is in its canonical spelling; None otherwise."""
    if options.get("log_format", names.LOG_FORMATS[0]) not in names.LOG_FORMATS:
        return None
    if options.get("log_level", "info") not in names.LOG_LEVELS:
        return None
    if options.get("kernel_log", "off") != "off":
        return None
    for field in ("overlay_path", "live_file", "state_file"):
        if field in options and not _plain(options[field]):
            return None
    overlay = options.get("overlay_path", names.OVERLAY_HOST_PATH)
    live_file, state_file = options.get("live_file"), options.get("state_file")
    if not overlay.startswith("/"):
        return None
    if live_file is not None:
        live = live_file
    elif state_file is not None:
        live = os.path.join(os.path.dirname(state_file), names.LIVE_FILE_NAME)
    else:
        live = os.path.join(overlay, names.OVERLAY_CONFIG_DIR, names.LIVE_FILE_NAME)
    return live, state_file or os.path.join(os.path.dirname(live), names.STATE_FILE_NAME)


class _Live:
    """The live file mapped and checked as :meth:`nvml_mock_live.LiveLayer.open` checks it."""

    __slots__ = ("_fd", "map", "path", "sender", "uuids")

    def __init__(
        self, path: str, fd: int, mapped: mmap.mmap, sender: EventSender | None, uuids: list[str]
    ) -> None:
        self.path = path
        self._fd = fd
        self.map = mapped
        self.sender = sender
        self.uuids = uuids

    def close(self) -> None:
        self.map.close()
        os.close(self._fd)


def _open(live: str, state: str, *, writable: bool, options: Mapping[str, str]) -> _Live | None:
    """The live file, when the full command line would open it without a word; else None.
    A writer's (``xid``) comes with the library's event primitive bound; a reader's
    (``status``) without."""
    import mmap

    from nvml_mock_live import header
    from nvml_mock_live.errors import LiveLayerError
    from nvml_mock_live.state_text import read_gpu_uuids

    if not os.path.isfile(state):
        return None
    if (
        writable
        and "live_file" not in options
        and "state_file" in options
        and not os.path.exists(live)
    ):
        return None  # the full command line makes it, and says so
    try:
        uuids = read_gpu_uuids(state)
        sender = _event_sender() if writable else None
    except LiveLayerError:
        return None
    flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(live, flags)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != header.SIZE:
            os.close(fd)
            return None
        access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_COPY
        mapped = mmap.mmap(fd, header.SIZE, access=access)
    except OSError:
        os.close(fd)
        return None
    opened = _Live(live, fd, mapped, sender, uuids)
    if (
        header.header_problem(mapped) is not None
        or header.header_field(mapped, "retired") != 0
        or any(header.record_uuid(mapped, i) != uuid for i, uuid in enumerate(uuids))
    ):
        opened.close()
        return None
    return opened


def _event_sender() -> EventSender:
    from nvml_mock_live.library import event_sender

    return event_sender(_library_file())


def _library_file() -> str:
    """The library :func:`nvml_mock_engine.library.library_file` names (a test holds them to
    one file), without importing that module and the engine's error classes it defines its
    own on, and without resolving links (``dlopen`` follows them)."""
    import nvml_mock_engine

    package = os.path.dirname(nvml_mock_engine.__file__)
    return os.path.join(package, "_lib", names.LIBRARY_NAME)


def run(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int | None:
    """Answer *argv* on the quick path: the exit code, or None when the full command line
    must (nothing was printed or written then)."""
    environ = os.environ if environ is None else environ
    request = read_argv(argv, environ)
    if request is None:
        return None
    paths = _paths(request.options)
    if paths is None:
        return None
    if request.verb == "status":
        return _status(request, *paths)
    return _xid(request, *paths)


def _status(request: Request, live_path: str, state_path: str) -> int | None:
    import struct

    from nvml_mock_live import _layout as layout
    from nvml_mock_live import header
    from nvml_mock_live.errors import LiveValueError
    from nvml_mock_live.plain_reads import gpu_snapshot
    from nvml_mock_live.slots import MASK_WORDS, keys_in_mask, values_of

    from nvml_mock_engine import ctl_report
    from nvml_mock_engine.gpu_select import select_indices

    live = _open(live_path, state_path, writable=False, options=request.options)
    if live is None:
        return None
    try:
        try:
            gpus = select_indices(
                live.uuids, request.verb_values.get("gpu", _GPU_DEFAULT["status"])
            )
        except LiveValueError:
            return None
        rows = []
        for index in gpus:
            snapshot = gpu_snapshot(live.map, index)
            if snapshot is None:
                return None  # the full command line names the torn record
            mask, slots = snapshot
            armed_at = header.record_offset(index) + layout.LIVE_RECORD_ARMED
            armed = keys_in_mask(struct.unpack_from(f"<{MASK_WORDS}Q", live.map, armed_at))
            rows.append(ctl_report.gpu_row(index, live.uuids[index], values_of(mask, slots), armed))
        records = ctl_report.holding(_records(live), gpus)
        generation = header.header_field(live.map, "generation")
    finally:
        live.close()
    if "json" in request.verb_values:
        import json

        document = ctl_report.status_document(live.path, generation, rows, records, live.uuids)
        print(json.dumps(document, indent=2))
    else:
        ctl_report.print_status(live.path, generation, rows, records)
    return EXIT_OK


def _records(live: _Live) -> list[Allocation]:
    """The allocation records in use, in slot order, each a consistent copy (as
    :meth:`nvml_mock_live.LiveLayer.list` takes them through the library)."""
    from nvml_mock_live import _layout as layout
    from nvml_mock_live import header
    from nvml_mock_live.plain_reads import process_record

    high = min(header.header_field(live.map, "process_high"), layout.LIVE_PROCESS_SLOTS)
    found = []
    for slot in range(high):
        record = process_record(live.map, slot)
        if record is not None:
            from nvml_mock_live.allocations import unpack  # only with a record to show

            found.append(unpack(record))
    return found


def _xid(request: Request, live_path: str, state_path: str) -> int | None:
    from nvml_mock_live import header, lock_files
    from nvml_mock_live.errors import LiveLayerError, LiveValueError
    from nvml_mock_live.kinds import EVENTS

    from nvml_mock_engine import ctl_report
    from nvml_mock_engine.gpu_select import select_indices

    text = request.positionals[0]
    # int(text, 0) as the full command line reads it, for plain decimal digits only
    if not (text.isascii() and text.isdigit()) or text.startswith("0"):
        return None
    code = int(text)
    spec = request.verb_values.get("gpu")
    if not 1 <= code <= _XID_MAX or spec is None:
        return None
    live = _open(live_path, state_path, writable=True, options=request.options)
    if live is None:
        return None
    sender = live.sender
    assert sender is not None  # a writer's file comes with the library's primitive
    sent: list[int] = []
    refused: int | None = None
    try:
        try:
            gpus = select_indices(live.uuids, spec)
            lock = lock_files.open_lock(
                lock_files.lock_file("live", lock_files.guarded_directory(live_path))
            )
        except (LiveLayerError, LiveValueError):
            return None
        try:
            with lock_files.HeldLock(lock):
                # a record a dead writer left is the full command line's to repair (and report)
                if header.torn_records(live.map, len(live.uuids)):
                    return None
                for index in gpus:
                    seq = sender.send(
                        live.map,
                        index,
                        EVENTS["xid"],
                        code,
                        gpu_instance=_NO_INSTANCE,
                        compute_instance=_NO_INSTANCE,
                    )
                    if seq == 0:
                        if not sent:
                            return None  # nothing written: the full command line reports it
                        refused = index
                        break
                    sent.append(index)
        finally:
            os.close(lock)
    finally:
        live.close()
    for index in sent:
        print(
            ctl_report.change_line(
                index, live.uuids[index], events=[(EVENTS["xid"], code, None, None)]
            )
        )
    if refused is not None:
        _log_error(request.options, f"GPU {refused}: the library refused the event for {live_path}")
        return EXIT_FAILURE
    return EXIT_OK


def _log_error(options: Mapping[str, str], message: str) -> None:
    """Log *message* as the full command line logs its errors (same handler, same logger)."""
    import logging

    from nvml_mock_protocol.logs import DEFAULT_LOG_FORMAT, configure_logging

    configure_logging(
        options.get("log_level", "info"), options.get("log_format", DEFAULT_LOG_FORMAT)
    )
    logging.getLogger(_LOGGER).error("%s", message)
