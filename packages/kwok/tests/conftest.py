"""Shared helpers: a field-by-field diff of JSON-shaped values."""

from __future__ import annotations

from typing import Any


def field_diff(got: Any, want: Any, path: str = "") -> list[str]:
    """Every leaf path where ``got`` and ``want`` differ (missing, extra or changed)."""
    if isinstance(got, dict) and isinstance(want, dict):
        out: list[str] = []
        for key in sorted(set(got) | set(want), key=str):
            where = f"{path}.{key}"
            if key not in got:
                out.append(f"{where}: missing")
            elif key not in want:
                out.append(f"{where}: extra")
            else:
                out.extend(field_diff(got[key], want[key], where))
        return out
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items, want {len(want)}"]
        out = []
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            out.extend(field_diff(a, b, f"{path}[{index}]"))
        return out
    return [] if got == want and type(got) is type(want) else [f"{path}: {got!r} != {want!r}"]
