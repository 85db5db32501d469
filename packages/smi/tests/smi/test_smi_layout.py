"""The ``-q`` layout table: one declaration that both views and every driver read."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvml_mock_smi._layout import DISPLAY_TYPES, GPU, Entry
from smi_fixtures.helpers import render_profile, smi

DRIVERS = ("550.54.14", "565.57.01", "570.148.08", "580.105.08", "580.173.02", "595.91.07")


def _walk(entries: tuple[Entry, ...]) -> list[Entry]:
    out: list[Entry] = []
    for entry in entries:
        for one in entry.alternatives or (entry,):
            out.append(one)
            out += _walk(one.children or ())
    return out


def test_sections_are_declared_on_top_level_entries_only() -> None:
    nested = [e for top in GPU for e in _walk(top.children or ()) if e.section]
    assert nested == []
    assert "MEMORY" in DISPLAY_TYPES and "FABRIC" in DISPLAY_TYPES


@pytest.mark.parametrize("profile", ["a100", "h100", "gb200", "t4"])
def test_every_entry_has_a_reading_on_every_driver(
    profile: str, library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a layout entry with no reading behind it fails the whole report (KeyError)
    for driver in DRIVERS:
        state = render_profile(profile, 1, tmp_path / f"{driver}.nvmlmock", driver=driver)
        monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
        for args in (("-q",), ("-q", "-x")):
            rc, out = smi(library_file, *args)
            assert rc == 0, (driver, args, out[-300:])
