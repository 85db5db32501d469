"""The live layer's vocabulary: the words that drive it and the values its keys store.

Declared once, in ``keys.toml`` ``[vocabulary]`` (tables generated into :mod:`._vocabulary`,
the C library's numbers into ``live_layout.h``), and parsed here once: ``nvml-mock-ctl``, the
node agent, the scenario documents the topology service validates, the NRI plugin's
annotations and the work-alike's set commands all call these functions, so a value one of
them accepts is a value every other applies the same way.

- **durations** (:func:`parse_duration_ms`): one grammar everywhere: parts of a number
  (decimals allowed) and a unit, largest unit first, each unit at most once (``500ms``,
  ``1.5s``, ``90s``, ``1m30s``, ``2h``), or a bare number of seconds;
- **utilization** (:func:`parse_utilization_words`, :func:`parse_utilization`): a
  percentage, or a declared pattern with its level, period and seed; :func:`utilization_values`
  turns one into the live keys it sets;
- **triggers** (:func:`trigger_values`, :func:`arm_tag`): when armed values and armed events
  take effect;
- **fault recipes** (:data:`FAULTS`): their names and the keys and events each may write
  (their plans are the engine's, ``nvml_mock_engine.faults``);
- **live values** (:func:`check_live_value`): a ``KEY=VALUE`` as every writer takes it.

Every parser raises :class:`~nvml_mock_live.errors.LiveValueError` naming the word and
what is accepted.
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from nvml_mock_live import _vocabulary as declared
from nvml_mock_live.errors import LiveValueError
from nvml_mock_live.keys import LIVE_GPU_KEYS, Kind, check_integer
from nvml_mock_live.kinds import EVENTS, TRIGGER_KEYS, TRIGGERS, UTIL_PATTERNS

__all__ = [
    "DURATION_MAX_MS",
    "EVENTS",
    "FAULTS",
    "PATTERNS",
    "PATTERN_KEYS",
    "TRIGGERS",
    "TRIGGER_KEYS",
    "UTIL_PATTERNS",
    "Fault",
    "Pattern",
    "Utilization",
    "arm_tag",
    "check_live_value",
    "parse_duration_ms",
    "parse_live_value",
    "parse_memory",
    "parse_time_ms",
    "parse_utilization",
    "parse_utilization_words",
    "trigger_values",
    "utilization_grammar",
    "utilization_values",
]

_U32: Final = (1 << 32) - 1
_U64: Final = (1 << 64) - 1


# --- the declared tables ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pattern:
    """A utilization pattern as ``[vocabulary] patterns`` declares it."""

    name: str
    number: int
    level: str
    """``required``, ``optional`` or ``none``: whether the pattern takes a level."""
    default_level: int
    period_ms: int
    """Its period when none is given (0: the pattern has none)."""
    doc: str


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault recipe as ``[vocabulary] faults`` declares it: the live keys its plan may set
    and the events it may send."""

    name: str
    keys: tuple[str, ...]
    events: tuple[str, ...]
    doc: str


PATTERNS: Final[Mapping[str, Pattern]] = {row[0]: Pattern(*row) for row in declared.PATTERN_ROWS}
"""The utilization patterns, by name."""
_ALIASES: Final[Mapping[str, tuple[str, int]]] = {
    name: (pattern, level) for name, pattern, level, _doc in declared.PATTERN_ALIAS_ROWS
}
FAULTS: Final[Mapping[str, Fault]] = {
    row[0]: Fault(row[0], tuple(row[1]), tuple(row[2]), row[3]) for row in declared.FAULT_ROWS
}
"""The fault recipes ``nvml-mock-ctl fail`` and a scenario's ``fault`` name, in order."""
PATTERN_KEYS: Final = (
    "util_pattern",
    "util_pattern_level",
    "util_pattern_period_ms",
    "util_pattern_seed",
    "util_pattern_epoch_ms",
)
"""The live keys one pattern occupies (cleared together when a percentage replaces it)."""


# --- durations -------------------------------------------------------------------------------

DURATION_MAX_MS: Final = 366 * 24 * 3600 * 1000
"""The longest duration any word of the vocabulary takes (a leap year)."""
_DURATION_UNITS: Final = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|h|m|s)")
_NUMBER: Final = re.compile(r"\d+(?:\.\d+)?|\.\d+")


def parse_duration_ms(
    text: str | int | float, *, name: str = "duration", maximum_ms: int = DURATION_MAX_MS
) -> int:
    """Milliseconds of a duration: ``500ms``, ``1.5s``, ``90s``, ``1m30s``, ``2h``, or a bare
    number of seconds (an integer from YAML too). Parts go largest unit first, each at most
    once. Rounds to whole milliseconds, at least 1; at most *maximum_ms*. Raises
    :class:`LiveValueError` naming *name*, the text and what is accepted."""
    if isinstance(text, bool):
        raise LiveValueError(name, text, "is not a duration such as 500ms, 1.5s, 90s or 1m30s")
    if isinstance(text, int | float):
        milliseconds = float(text) * 1000
    else:
        stripped = text.strip().lower()
        if _NUMBER.fullmatch(stripped):
            milliseconds = float(stripped) * 1000
        else:
            milliseconds = 0.0
            position, units = 0, list(_DURATION_UNITS)
            for match in _DURATION_PART.finditer(stripped):
                unit = match.group(2)
                if match.start() != position or unit not in units:
                    break
                units = units[units.index(unit) + 1 :]
                milliseconds += float(match.group(1)) * _DURATION_UNITS[unit]
                position = match.end()
            if not stripped or position != len(stripped):
                raise LiveValueError(
                    name,
                    text,
                    "is not a duration such as 500ms, 1.5s, 90s, 1m30s or 2h "
                    "(or a number of seconds)",
                )
    if not math.isfinite(milliseconds) or milliseconds <= 0:
        raise LiveValueError(name, text, "must be a positive duration")
    value = max(1, round(milliseconds))
    if value > maximum_ms:
        raise LiveValueError(name, text, f"must be at most {_shown_ms(maximum_ms)}")
    return value


def _shown_ms(milliseconds: int) -> str:
    days = milliseconds / 86_400_000
    return f"{days:g} days" if days >= 1 else f"{milliseconds} ms"


# --- utilization -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Utilization:
    """A utilization as the live layer stores it: a pattern (``pattern`` > 0) with its level,
    period (0: the pattern's own) and seed, or a plain percentage (``pattern`` 0, ``level``)."""

    pattern: int
    level: int
    period_ms: int = 0
    seed: int = 0


def utilization_grammar() -> str:
    """The utilization words, as messages and ``--help`` show them (from the declaration)."""
    forms = ["N"] + [name for name in _ALIASES]
    for name, pattern in PATTERNS.items():
        forms.append(
            {"required": f"{name} N", "optional": f"{name} [PEAK]", "none": name}[pattern.level]
        )
    return " | ".join(forms)


def _percent(name: str, text: str, word: str) -> int:
    if not word.isdigit() or not 0 <= int(word) <= 100:
        raise LiveValueError(name, text, f"{word!r} is not a percentage 0..100")
    return int(word)


def parse_utilization_words(
    words: Sequence[str] | str,
    *,
    period: str | int | None = None,
    seed: str | int | None = None,
    name: str = "util",
) -> Utilization:
    """A utilization in ``nvml-mock-ctl util``'s words (a scenario's ``util``): ``N`` (a
    plain percentage), or a declared pattern and its level (:func:`utilization_grammar`),
    with an optional *period* (a duration, for patterns that have one) and *seed*."""
    parts = words.split() if isinstance(words, str) else [w for w in words if w.strip()]
    text = " ".join(parts)
    if not parts:
        raise LiveValueError(name, text, f"give a percentage or a pattern: {utilization_grammar()}")
    first = parts[0].lower()
    if first not in PATTERNS and first not in _ALIASES:
        if len(parts) != 1:
            raise LiveValueError(
                name, text, f"a percentage takes nothing after it: {utilization_grammar()}"
            )
        if period is not None:
            raise LiveValueError("period", period, "is a pattern's; a percentage has none")
        return Utilization(0, _percent(name, text, first))
    if first in _ALIASES:
        target, level = _ALIASES[first]
        pattern = PATTERNS[target]
        if len(parts) != 1:
            raise LiveValueError(name, text, f"{first} takes no level")
    else:
        pattern = PATTERNS[first]
        if pattern.level == "none" and len(parts) != 1:
            raise LiveValueError(name, text, f"{first} takes no level")
        if pattern.level == "required" and len(parts) != 2:
            raise LiveValueError(name, text, f"{first} needs a level, e.g. `{first} 60`")
        if len(parts) > 2:
            raise LiveValueError(name, text, f"unexpected {' '.join(parts[2:])!r}")
        level = _percent(name, text, parts[1]) if len(parts) == 2 else pattern.default_level
    period_ms = 0
    if period is not None and period != "":
        period_ms = parse_duration_ms(period, name="period", maximum_ms=_U32)
    seed_value = 0
    if seed is not None and seed != "":
        seed_text = str(seed).strip()
        if not seed_text.isdigit() or int(seed_text) > _U64:
            raise LiveValueError("seed", seed, "must be an unsigned 64-bit integer")
        seed_value = int(seed_text)
    return Utilization(pattern.number, level, period_ms, seed_value)


def parse_utilization(text: str) -> tuple[int, int, int, int]:
    """A utilization as an annotation or ``nvml-mock-ctl alloc --utilization`` writes it:
    the words of :func:`parse_utilization_words`, optionally followed by ``period=30s`` and
    ``seed=N``. A plain percentage is a steady pattern of that level (a process record holds
    a pattern). Returns (pattern, level, period_ms, seed) as an allocation record stores
    them; raises :class:`LiveValueError` naming what is wrong."""
    words = text.split()
    options = {w.partition("=")[0]: w.partition("=")[2] for w in words if "=" in w}
    unknown = set(options) - {"period", "seed"}
    if unknown:
        raise LiveValueError(
            "utilization", text, f"unknown option {sorted(unknown)[0]}= (period=, seed=)"
        )
    plain = [w for w in words if "=" not in w]
    period = options.get("period") or None
    parsed = parse_utilization_words(plain, seed=options.get("seed"), name="utilization")
    if parsed.pattern == 0:
        parsed = Utilization(PATTERNS["steady"].number, parsed.level, 0, parsed.seed)
    if period is not None:
        parsed = Utilization(
            parsed.pattern,
            parsed.level,
            parse_duration_ms(period, name="period", maximum_ms=_U32),
            parsed.seed,
        )
    return parsed.pattern, parsed.level, parsed.period_ms, parsed.seed


def utilization_values(
    utilization: Utilization, *, now_ms: int
) -> tuple[dict[str, int], list[str]]:
    """The live keys *utilization* sets on a GPU and those it clears: a percentage sets
    ``util_gpu_pct`` and clears the pattern's keys; a pattern sets its keys, its epoch
    *now_ms* (the pattern starts now)."""
    if utilization.pattern == 0:
        return {"util_gpu_pct": utilization.level}, list(PATTERN_KEYS)
    return {
        "util_pattern": utilization.pattern,
        "util_pattern_level": utilization.level,
        "util_pattern_period_ms": utilization.period_ms,
        "util_pattern_seed": utilization.seed,
        "util_pattern_epoch_ms": now_ms,
    }, []


# --- triggers --------------------------------------------------------------------------------


def parse_time_ms(text: str) -> int:
    """A trigger's time: unix seconds, or an ISO 8601 time (without a zone: local time), in
    milliseconds."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise LiveValueError(
                "at", text, "must be unix seconds or an ISO 8601 time such as 2025-05-01T12:00:00Z"
            ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise LiveValueError("at", text, "must be a time after 1970")
    if seconds > _AT_MAX_SECONDS:  # status could not show it (and once tracebacked after writing)
        raise LiveValueError("at", text, "must be a time before the year 10000")
    return round(seconds * 1000)


_AT_MAX_SECONDS = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
"""The last time ``datetime`` (and so ``nvml-mock-ctl status``) can show; a later trigger
time is refused before anything is written."""


def _unsigned(name: str, text: str, high: int = _U64) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise LiveValueError(name, text, "must be an integer") from None
    if not 0 <= value <= high:
        raise LiveValueError(name, text, f"must be in 0..{high}")
    return value


def arm_tag(live: Mapping[str, int]) -> int:
    """The ``fault_trigger_arm`` to write with a trigger on a GPU whose live values are
    *live*: its own while it has one (every fault armed on a GPU waits for its one trigger,
    so their events wait for it too), else a new random tag, so that events armed before a
    reset never match a later arm."""
    return live.get("fault_trigger_arm") or secrets.randbelow(0xFFFFFFFF) + 1


def trigger_values(
    *,
    after_calls: str | None = None,
    probability: str | None = None,
    seed: str | None = None,
    at: str | None = None,
) -> dict[str, int] | None:
    """The ``fault_trigger*`` values for a trigger (at most one of *after_calls*,
    *probability* with its *seed*, *at*); None when none is given (now)."""
    given = [
        n
        for n, v in (("after-calls", after_calls), ("probability", probability), ("at", at))
        if v is not None
    ]
    if len(given) > 1:
        raise LiveValueError("trigger", ", ".join(given), "give one trigger")
    if seed is not None and probability is None:
        raise LiveValueError("seed", seed, "goes with a probability trigger")
    if after_calls is not None:
        return {
            "fault_trigger": TRIGGERS["after-calls"],
            "fault_trigger_param": _unsigned("after-calls", after_calls),
            "fault_trigger_seed": 0,
        }
    if probability is not None:
        try:
            chance = float(probability)
        except ValueError:
            chance = math.nan
        if not 0 < chance <= 1:
            raise LiveValueError("probability", probability, "must be a number in (0, 1]")
        return {
            "fault_trigger": TRIGGERS["probability"],
            "fault_trigger_param": max(1, round(chance * 1_000_000)),
            "fault_trigger_seed": _unsigned("seed", seed or "0"),
        }
    if at is not None:
        return {
            "fault_trigger": TRIGGERS["at"],
            "fault_trigger_param": parse_time_ms(at),
            "fault_trigger_seed": 0,
        }
    return None


# --- live values -----------------------------------------------------------------------------

_TRUE: Final = ("1", "true", "yes", "on")
_FALSE: Final = ("0", "false", "no", "off")


def parse_live_value(key: str, text: str | int | bool) -> object:
    """A ``KEY=VALUE`` value as the writer's check takes it: an integer (decimal or ``0x``
    hex), a flag word (``true``/``yes``/``on``...), or the text itself (which the check then
    refuses by name)."""
    if isinstance(text, bool):
        return int(text)
    if isinstance(text, int):
        return text
    spec = LIVE_GPU_KEYS.get(key)
    lowered = text.strip().lower()
    if spec is not None and spec.kind is Kind.FLAG:
        if lowered in _TRUE:
            return 1
        if lowered in _FALSE:
            return 0
        return text
    try:
        return int(lowered, 0)
    except ValueError:
        return text


def check_live_value(key: str, value: str | int | bool) -> int:
    """*value* for live key *key*, parsed (:func:`parse_live_value`) and checked against the
    declared bounds, as every writer checks it before anything is written (the board's own
    limits, such as memory used within its total, come on top, per GPU). Raises
    :class:`LiveValueError` naming the key and value."""
    spec = LIVE_GPU_KEYS.get(key)
    if spec is None:
        raise LiveValueError(key, value, "is not a live key")
    if key in TRIGGER_KEYS:
        raise LiveValueError(key, value, "is set by a trigger (after-calls, probability, at)")
    try:
        return check_integer(spec, parse_live_value(key, value))
    except ValueError as exc:
        raise LiveValueError(key, value, str(exc)) from None


# --- sizes -----------------------------------------------------------------------------------

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
