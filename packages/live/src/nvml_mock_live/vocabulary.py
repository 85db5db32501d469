"""The live layer's vocabulary: the words that drive it and the values its keys take.

Every user of the live layer (``nvml-mock-ctl``, the node agent, the topology service's
scenario validation, the NRI plugin's annotations, the work-alike's set commands) parses these
words here, once, so a value one accepts is a value every other applies.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = ["UTIL_PATTERNS", "parse_memory", "parse_utilization"]

UTIL_PATTERNS: Final = {"none": 0, "steady": 1, "busy": 2, "burst": 3, "sine": 4}
"""Utilization patterns by name, as the ``util_pattern`` live key numbers them."""
_U32: Final = (1 << 32) - 1
_U64: Final = (1 << 64) - 1

_MEMORY_UNITS: Final = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
}


def parse_memory(text: str) -> int:
    """A memory size as Kubernetes writes quantities: bytes, or a number with a decimal
    (``k``, ``M``, ``G``, ``T``) or binary (``Ki``, ``Mi``, ``Gi``, ``Ti``) suffix, e.g.
    ``20Gi``, ``512Mi``, ``1.5G``. Raises ValueError naming the value."""
    stripped = text.strip()
    number = stripped.rstrip("kMGTi")
    unit = stripped[len(number) :]
    if unit not in _MEMORY_UNITS or not number:
        raise ValueError(f"{text!r} is not a size such as 20Gi, 512Mi or 1073741824")
    try:
        value = float(number) if "." in number else int(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a size such as 20Gi, 512Mi or 1073741824") from None
    size = int(value * _MEMORY_UNITS[unit])
    if not 0 <= size <= _U64 or math.isnan(value):
        raise ValueError(f"{text!r} is outside 0..{_U64} bytes")
    return size


def _duration_ms(text: str) -> int:
    units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
    for suffix in ("ms", "s", "m", "h"):
        if text.endswith(suffix):
            number, scale = text[: -len(suffix)], units[suffix]
            break
    else:
        number, scale = text, 1000
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"period {text!r} is not a duration such as 500ms, 30s or 2m") from None
    if not 0 < value * scale <= _U32:
        raise ValueError(f"period {text!r} must be a positive duration")
    return max(1, round(value * scale))


def parse_utilization(text: str) -> tuple[int, int, int, int]:
    """A utilization pattern in the live layer's words, as ``nvml-mock-ctl util`` takes it:
    ``N`` (a steady N %), ``idle``, ``steady N``, ``busy``, ``burst [PEAK]``, ``sine [PEAK]``,
    optionally followed by ``period=30s`` and ``seed=N``. Returns (pattern, level, period_ms,
    seed) as the record stores them; raises ValueError naming what is wrong."""
    words = text.split()
    options = {w.partition("=")[0]: w.partition("=")[2] for w in words if "=" in w}
    words = [w for w in words if "=" not in w]
    unknown = set(options) - {"period", "seed"}
    if unknown:
        raise ValueError(f"unknown option {sorted(unknown)[0]}= (period=, seed=)")
    if not words or len(words) > 2:
        raise ValueError("a percentage, or idle | steady N | busy | burst [PEAK] | sine [PEAK]")
    first = words[0].lower()

    def percent(word: str) -> int:
        if not word.isdigit() or not 0 <= int(word) <= 100:
            raise ValueError(f"{word!r} is not a percentage 0..100")
        return int(word)

    if first not in ("idle", "steady", "busy", "burst", "sine"):
        if len(words) != 1:
            raise ValueError(f"unexpected {words[1]!r} after a percentage")
        pattern, level = UTIL_PATTERNS["steady"], percent(first)
    elif first in ("idle", "busy"):
        if len(words) != 1:
            raise ValueError(f"{first} takes no level")
        pattern, level = (
            UTIL_PATTERNS["steady" if first == "idle" else "busy"],
            0 if first == "idle" else 100,
        )
    elif first == "steady":
        if len(words) != 2:
            raise ValueError("steady needs a level, e.g. `steady 60`")
        pattern, level = UTIL_PATTERNS["steady"], percent(words[1])
    else:
        pattern, level = UTIL_PATTERNS[first], percent(words[1]) if len(words) == 2 else 100
    period = _duration_ms(options["period"]) if options.get("period") else 0
    seed_text = options.get("seed", "0") or "0"
    if not seed_text.isdigit() or int(seed_text) > _U64:
        raise ValueError(f"seed {seed_text!r} is not an unsigned 64-bit integer")
    return pattern, level, period, int(seed_text)
