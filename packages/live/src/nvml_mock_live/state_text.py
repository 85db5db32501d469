"""The rendered state's ``[gpu N]`` sections as text, without the board objects of :mod:`.board`.

What a live layer follows is the state's GPUs in order, each with its UUID; :mod:`.board`
wraps these sections in :class:`~nvml_mock_live.board.BoardGpu` objects. The reading and its
refusals are here, in a module that imports nothing heavy, so a command that only needs the
GPUs' names (``nvml-mock-ctl status`` and ``xid``) applies exactly the writer's rules.
"""

from __future__ import annotations

from nvml_mock_live import _layout as layout
from nvml_mock_live.errors import LiveLayerError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from typing import Final

__all__ = ["gpu_sections", "gpu_values", "read_gpu_sections", "read_gpu_uuids"]


def gpu_sections(text: str) -> list[dict[str, str]]:
    """The ``key=value`` lines of every ``[gpu N]`` section of a rendered state, in order.

    A lenient reader for the files the renderer writes (the library's parser is the strict
    one): tools that only need a GPU's UUID or bus id from the state use it.
    """
    gpus: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("[gpu "):
            current = {}
            gpus.append(current)
        elif line.startswith("["):
            current = None
        elif current is not None and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            current[key.strip()] = value.strip()
    return gpus


def gpu_values(text: str, key: str) -> list[str]:
    """``[gpu.get(key, "") for gpu in gpu_sections(text)]``, without building the sections:
    only the section headers and the lines that hold *key* are looked at (on a rendered
    state, half the time of a walk over every line: ``nvml-mock-ctl status`` and ``xid`` read
    the UUIDs on every start)."""
    if not text.isascii() or any(brk in text for brk in _OTHER_LINE_BREAKS):
        return _gpu_values_by_line(text, key)
    text = "\n" + text  # so that every section header follows a "\n"
    found: list[str] = []
    at = text.find("\n[")
    while at >= 0:
        after = text.find("\n[", at + 1)
        if text.startswith("gpu ", at + 2):
            end = len(text) if after < 0 else after
            line_end = text.find("\n", at + 1, end)  # past the header line
            value = ""
            while line_end >= 0:
                hit = text.find(key, line_end, end)
                if hit < 0:
                    break
                start = text.rfind("\n", 0, hit) + 1
                line_end = text.find("\n", hit, end)
                line = text[start:end] if line_end < 0 else text[start:line_end]
                if "=" in line and not line.startswith("#"):
                    name, _, rest = line.partition("=")
                    if name.strip() == key:
                        value = rest.strip()
            found.append(value)
        at = after
    return found


_OTHER_LINE_BREAKS: Final = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")
"""The ASCII line boundaries of ``str.splitlines`` besides ``\\n``, which rendered states
never hold; a text with any of them is read line by line."""


def _gpu_values_by_line(text: str, key: str) -> list[str]:
    """:func:`gpu_values`, one line at a time (``str.splitlines``' boundaries)."""
    found: list[str] = []
    in_gpu = False
    for line in text.splitlines():
        if line.startswith("["):
            in_gpu = line.startswith("[gpu ")
            if in_gpu:
                found.append("")
        elif in_gpu and key in line and "=" in line and not line.startswith("#"):
            name, _, value = line.partition("=")
            if name.strip() == key:
                found[-1] = value.strip()
    return found


def _read(state_path: str | os.PathLike[str]) -> str:
    try:
        with open(state_path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise LiveLayerError(f"cannot read the board state {state_path}: {exc}") from None


def _check(state_path: str | os.PathLike[str], uuids: list[str]) -> None:
    if len(uuids) > layout.LIVE_GPU_SLOTS or not all(uuids):
        raise LiveLayerError(f"{state_path}: not a board state the live layer can follow")


def read_gpu_sections(state_path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The GPU sections of the state file at *state_path*. Raises :class:`LiveLayerError`
    naming the file when it cannot be read or is no board a live layer can follow (over the
    GPU slots, a GPU without a UUID)."""
    gpus = gpu_sections(_read(state_path))
    _check(state_path, [values.get("uuid", "") for values in gpus])
    return gpus


def read_gpu_uuids(state_path: str | os.PathLike[str]) -> list[str]:
    """The UUIDs of the GPUs of the state file at *state_path*, in index order, refused as
    :func:`read_gpu_sections` refuses a state."""
    uuids = gpu_values(_read(state_path), "uuid")
    _check(state_path, uuids)
    return uuids
