"""The board GPUs a live layer follows, read from the rendered state beside it, and the
names that select them.

A live file is bound to the board it was staged for: record N carries board GPU N's UUID,
and every writer checks that binding before it writes. Writers name GPUs as users do, by
index, ``GPU-`` UUID (in full or a unique prefix) or PCI bus id (:func:`resolve_gpus`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nvml_mock_live.state_text import gpu_sections, read_gpu_sections

__all__ = ["BoardGpu", "gpu_sections", "read_board", "resolve_gpus"]


@dataclass(frozen=True, slots=True)
class BoardGpu:
    """One board GPU: its index, UUID and the state's values (live values must fit them)."""

    index: int
    uuid: str
    values: Mapping[str, str]

    def number(self, key: str) -> int:
        """A board value as an integer (0 when the key is absent or not a number)."""
        text = self.values.get(key, "0")
        try:
            return int(text, 0) if text else 0
        except ValueError:
            return 0

    @property
    def bus_id(self) -> str:
        """The GPU's PCI bus id as the state spells it (empty when absent)."""
        return self.values.get("pci_bus_id", "")

    @property
    def memory_total_bytes(self) -> int:
        """The GPU's framebuffer size (an allocation's default share is taken of it)."""
        return self.number("memory_total_bytes")


def read_board(state_path: Path | str) -> list[BoardGpu]:
    """The GPUs of a rendered state file. Raises :class:`LiveLayerError` naming the file
    when it cannot be read or is no board a live layer can follow (over the GPU slots, a GPU
    without a UUID)."""
    return [
        BoardGpu(i, values.get("uuid", ""), values)
        for i, values in enumerate(read_gpu_sections(state_path))
    ]


def _bus_key(bus_id: str) -> str:
    """A PCI bus id without its domain's width: ``0000:3b:00.0`` = ``00000000:3B:00.0``."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    if domain and all(c in "0123456789abcdef" for c in domain):
        domain = str(int(domain, 16))
    return f"{domain}:{rest}"


def resolve_gpus(
    tokens: Iterable[str], board: Sequence[BoardGpu]
) -> tuple[tuple[int, ...], list[str]]:
    """The board indices *tokens* name (indices, ``GPU-`` UUIDs in full or a unique prefix,
    case-insensitive, or PCI bus ids), in order and without repeats, and the tokens that name
    no GPU of *board* (the caller reports them)."""
    found: list[int] = []
    unknown: list[str] = []
    for token in tokens:
        text = token.strip()
        match: list[int] = []
        if text.isdigit():
            match = [int(text)] if int(text) < len(board) else []
        elif text.lower().startswith("gpu-"):
            match = [g.index for g in board if g.uuid.lower().startswith(text.lower())]
        elif ":" in text:
            match = [g.index for g in board if g.bus_id and _bus_key(g.bus_id) == _bus_key(text)]
        if len(match) != 1:
            unknown.append(text)
        elif match[0] not in found:
            found.append(match[0])
    return tuple(found), unknown
