"""Counters files in dcgm-exporter's CSV format: which families are served, typed how.

A line is ``DCGM FIELD, Prometheus metric type, help message``; ``#`` starts a comment and
blank lines are skipped, exactly as dcgm-exporter reads ``default-counters.csv``, so the same
file selects the same families here. The type and HELP text a line gives are the ones served.
A line naming a field this exporter does not know, a type other than ``gauge``, ``counter`` or
``label``, or a label field typed as a value (or the reverse) is refused with the file and
line named; :class:`CountersFile` then keeps serving the last good set.
"""

from __future__ import annotations

import csv
import logging
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nvml_mock_exporter.errors import CountersFileError
from nvml_mock_exporter.fields import DEFAULT_COUNTERS, FIELDS, KINDS, Field, Kind

__all__ = ["Counter", "CountersFile", "default_counters", "parse_counters", "read_counters"]

logger = logging.getLogger(__name__)
_MAX_BYTES = 1 << 20
_SHOWN = 200
"""Characters of a refused line quoted in its error (a 128 KiB cell is not logged whole)."""


@dataclass(frozen=True, slots=True)
class Counter:
    """One served family: the field, and the type and HELP text its line gave."""

    field: Field
    kind: Kind
    help: str

    @property
    def name(self) -> str:
        return self.field.name


def default_counters() -> tuple[Counter, ...]:
    """dcgm-exporter's default set, with its own types and HELP texts."""
    return tuple(Counter(FIELDS[n], FIELDS[n].kind, FIELDS[n].help) for n in DEFAULT_COUNTERS)


def parse_counters(lines: Iterable[str], source: str = "<counters>") -> tuple[Counter, ...]:
    """The counters a file's lines select; :class:`CountersFileError` names the first bad line."""
    found: dict[str, Counter] = {}
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue

        def bad(why: str, number: int = number, raw: str = raw) -> CountersFileError:
            shown = raw.strip()
            if len(shown) > _SHOWN:
                shown = shown[:_SHOWN] + f"… ({len(shown)} characters)"
            return CountersFileError(f"{source} line {number}: {why}: {shown!r}")

        try:
            cells = next(csv.reader([text], skipinitialspace=True))
        except csv.Error as exc:  # a cell past the csv module's field limit (128 KiB)
            raise bad(f"not a CSV line ({exc})") from None
        if len(cells) != 3:
            raise bad(f"expected 3 comma-separated fields (name, type, help), got {len(cells)}")
        name, kind, help_text = (cell.strip() for cell in cells)
        field = FIELDS.get(name)
        if field is None:
            raise bad(f"unknown field {name!r}")
        if kind not in KINDS:
            raise bad(f"type {kind!r} is not one of {', '.join(KINDS)}")
        if (kind == "label") != (field.kind == "label"):
            want = "label" if field.kind == "label" else "gauge or counter"
            raise bad(f"{name} is a {'label' if field.kind == 'label' else 'value'}: type {want}")
        if name in found:
            raise bad(f"{name} is selected twice (first on an earlier line)")
        found[name] = Counter(field, kind, help_text)
    if not found:
        raise CountersFileError(f"{source}: selects no field")
    return tuple(found.values())


def read_counters(path: Path) -> tuple[Counter, ...]:
    """Read and parse a counters file; :class:`CountersFileError` says why it cannot be used."""
    try:
        # O_NONBLOCK: a FIFO put in the file's place must not hold the collections in open()
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise CountersFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CountersFileError(f"{path}: not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise CountersFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        raise CountersFileError(f"{path}: larger than {_MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CountersFileError(f"{path}: not UTF-8 (byte {exc.start})") from None
    return parse_counters(text.splitlines(), str(path))


class CountersFile:
    """A counters file followed on change; a bad new version is refused and the last good set
    keeps serving (the refusal is logged once per version, with the line named)."""

    def __init__(self, path: Path | None, counters: Sequence[Counter]) -> None:
        self.path = path
        self.counters: tuple[Counter, ...] = tuple(counters)
        self.error: str | None = None
        self._seen = self._signature()

    @classmethod
    def open(cls, path: Path | None) -> CountersFile:
        """The default set without a path; else the file, which must be good at start."""
        if path is None:
            return cls(None, default_counters())
        return cls(path, read_counters(path))

    def _signature(self) -> tuple[int, int, int] | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def poll(self) -> bool:
        """Reload when the file changed; True when a new set is now served."""
        if self.path is None:
            return False
        signature = self._signature()
        if signature == self._seen:
            return False
        self._seen = signature
        try:
            counters = read_counters(self.path)
        except CountersFileError as exc:
            self.error = str(exc)
            logger.error("counters file refused, the last good set keeps serving: %s", exc)
            return False
        self.counters, self.error = counters, None
        logger.info("counters file %s loaded: %d fields", self.path, len(counters))
        return True
