"""The live vocabulary: one grammar per word, the declaration's tables, the refusals."""

from __future__ import annotations

import pytest
from nvml_mock_live import vocabulary
from nvml_mock_live.errors import LiveValueError
from nvml_mock_live.vocabulary import Utilization, parse_duration_ms, parse_utilization_words


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("1.5s", 1500),
        ("90s", 90_000),
        ("1m30s", 90_000),
        ("1h30m", 5_400_000),
        ("2h", 7_200_000),
        ("1m0.5s", 60_500),
        ("90", 90_000),
        ("0.25", 250),
        (60, 60_000),
        ("1h2m3s4ms", 3_723_004),
    ],
)
def test_one_duration_grammar(text: str | int, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "0s", "1d", "m", "30s1m", "1s1s", "-5s", "1 m", "nan", True])
def test_durations_refused_name_the_text(text: str | bool) -> None:
    with pytest.raises(LiveValueError, match="duration"):
        parse_duration_ms(text)  # type: ignore[arg-type]


def test_a_duration_past_its_maximum_is_refused() -> None:
    with pytest.raises(LiveValueError, match="at most 366 days"):
        parse_duration_ms("9000h")
    with pytest.raises(LiveValueError, match="at most"):
        parse_duration_ms("2h", maximum_ms=60_000)


def test_pattern_words_follow_the_declaration() -> None:
    steady, busy, burst, sine = (
        vocabulary.PATTERNS[n].number for n in ("steady", "busy", "burst", "sine")
    )
    assert parse_utilization_words("75") == Utilization(0, 75)
    assert parse_utilization_words("idle") == Utilization(steady, 0)
    assert parse_utilization_words("steady 60") == Utilization(steady, 60)
    assert parse_utilization_words("busy") == Utilization(busy, 100)
    assert parse_utilization_words("burst") == Utilization(burst, 100)
    assert parse_utilization_words(["sine", "80"], period="1m30s", seed="7") == Utilization(
        sine, 80, 90_000, 7
    )
    assert parse_utilization_words("sine 80", period="1.5s").period_ms == 1500


@pytest.mark.parametrize(
    ("words", "period", "expected"),
    [
        ("", None, "give a percentage or a pattern"),
        ("loud", None, "'loud' is not a percentage"),
        ("steady", None, "steady needs a level"),
        ("busy 50", None, "busy takes no level"),
        ("idle 5", None, "idle takes no level"),
        ("sine 101", None, "'101' is not a percentage 0..100"),
        ("sine 80 90", None, "unexpected '90'"),
        ("50", "10s", "a percentage has none"),
        ("sine", "soon", "period='soon'"),
    ],
)
def test_pattern_words_refused(words: str, period: str | None, expected: str) -> None:
    with pytest.raises(LiveValueError, match=expected):
        parse_utilization_words(words, period=period)


def test_annotation_form_takes_options_and_makes_a_percentage_steady() -> None:
    steady = vocabulary.PATTERNS["steady"].number
    assert vocabulary.parse_utilization("40") == (steady, 40, 0, 0)
    sine = vocabulary.PATTERNS["sine"].number
    assert vocabulary.parse_utilization("sine 80 period=1m30s seed=3") == (sine, 80, 90_000, 3)
    with pytest.raises(ValueError, match="unknown option"):
        vocabulary.parse_utilization("busy colour=red")


def test_utilization_values_set_or_clear_the_pattern_keys() -> None:
    values, clear = vocabulary.utilization_values(Utilization(0, 20), now_ms=5)
    assert values == {"util_gpu_pct": 20} and clear == list(vocabulary.PATTERN_KEYS)
    values, clear = vocabulary.utilization_values(Utilization(4, 80, 30_000, 7), now_ms=5)
    assert values["util_pattern_epoch_ms"] == 5 and not clear
    assert set(values) == set(vocabulary.PATTERN_KEYS)


def test_triggers() -> None:
    assert vocabulary.trigger_values() is None
    assert vocabulary.trigger_values(after_calls="100") == {
        "fault_trigger": vocabulary.TRIGGERS["after-calls"],
        "fault_trigger_param": 100,
        "fault_trigger_seed": 0,
    }
    assert vocabulary.trigger_values(probability="0.5", seed="9")["fault_trigger_param"] == 500_000  # type: ignore[index]
    with pytest.raises(LiveValueError, match="one trigger"):
        vocabulary.trigger_values(after_calls="1", at="0")
    with pytest.raises(LiveValueError, match=r"\(0, 1\]"):
        vocabulary.trigger_values(probability="2")


def test_live_values_are_checked_against_the_declared_bounds() -> None:
    assert vocabulary.check_live_value("temperature_c", "91") == 91
    assert vocabulary.check_live_value("gpu_lost", "yes") == 1
    assert vocabulary.check_live_value("clocks_event_reasons", "0x40") == 0x40
    with pytest.raises(LiveValueError, match="is not a live key"):
        vocabulary.check_live_value("temprature_c", 1)
    with pytest.raises(LiveValueError, match="temperature_c"):
        vocabulary.check_live_value("temperature_c", "hot")
    with pytest.raises(LiveValueError, match="trigger"):
        vocabulary.check_live_value("fault_trigger", 1)


def test_the_tables_are_the_declaration() -> None:
    numbers = [p.number for p in vocabulary.PATTERNS.values()]
    assert len(set(numbers)) == len(numbers) and 0 not in numbers
    from nvml_mock_live.keys import LIVE_GPU_KEYS

    assert LIVE_GPU_KEYS["util_pattern"].maximum == max(numbers)
    assert LIVE_GPU_KEYS["fault_trigger"].maximum == max(vocabulary.TRIGGERS.values())
    for fault in vocabulary.FAULTS.values():
        assert set(fault.keys) <= set(LIVE_GPU_KEYS), fault.name
        assert set(fault.events) <= set(vocabulary.EVENTS), fault.name
