"""The key tables are the declaration's: every row, slot and bound of keys.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

import nvml_mock_live
from nvml_mock_live.keys import GPU_KEYS, LIVE_GPU_KEYS, SYSTEM_KEYS, check_integer

DECLARATION = Path(nvml_mock_live.__file__).parent / "keys.toml"


def test_tables_hold_every_declared_key_with_its_slot() -> None:
    data = tomllib.loads(DECLARATION.read_text(encoding="utf-8"))
    assert [r["name"] for r in data["system"]] == list(SYSTEM_KEYS)
    assert [r["name"] for r in data["gpu"]] == list(GPU_KEYS)
    declared_live = {r["name"]: r["live"] for r in data["gpu"] + data["live"] if "live" in r}
    assert {k: s.live_slot for k, s in LIVE_GPU_KEYS.items()} == declared_live


def test_integer_check_uses_the_declared_bounds() -> None:
    spec = LIVE_GPU_KEYS["util_pattern_level"]
    assert check_integer(spec, 100) == 100
    try:
        check_integer(spec, 101)
    except ValueError as exc:
        assert "0..100" in str(exc)
    else:
        raise AssertionError("101 % passed the bound")
