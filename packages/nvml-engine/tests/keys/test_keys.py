"""The key declaration (keys.toml) and what is generated from it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from nvml_mock_engine.schema import GPU_KEYS, LIVE_GPU_KEYS, SYSTEM_KEYS
from nvml_mock_live import _keys
from nvml_mock_live import _layout as _live_layout

PACKAGE = Path(__file__).resolve().parents[2]
SCRIPT = PACKAGE.parent / "live" / "scripts" / "gen_keys.py"
SOURCES = PACKAGE / "native" / "src"
DECLARATION = PACKAGE.parent / "live" / "src" / "nvml_mock_live" / "keys.toml"


def test_the_generated_files_match_the_declaration() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_drift_check_names_a_hand_edited_file(tmp_path: Path) -> None:
    """A copy of the package with one generated file edited must fail the check, naming it."""
    copy = tmp_path / "nvml-engine"
    for sub in ("../live/scripts", "native/src", "native/fuzz", "../live/src/nvml_mock_live"):
        (copy / sub).mkdir(parents=True)
    for rel in (
        "../live/scripts/gen_keys.py",
        "../live/src/nvml_mock_live/keys.toml",
        "../live/src/nvml_mock_live/_keys.py",
        "../live/src/nvml_mock_live/_layout.py",
        "native/src/keys.h",
        "native/src/live_layout.h",
        "native/STATE-FORMAT.md",
        "native/fuzz/state.dict",
        "native/fuzz/live.dict",
    ):
        (copy / rel).write_bytes((PACKAGE / rel).read_bytes())
    keys_h = copy / "native/src/keys.h"
    keys_h.write_text(keys_h.read_text().replace("F_REQUIRED", "0", 1))
    done = subprocess.run(
        [sys.executable, str(copy / "../live/scripts/gen_keys.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "native/src/keys.h differs from what keys.toml generates" in done.stderr


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            (
                'live = 0, nvml = "GetCurrPcieLinkGeneration"',
                'live = 1, nvml = "GetCurrPcieLinkGeneration"',
            ),
            "live slot 1 is also pcie_cur_gen's",
        ),
        (("max = 200, required = true, live = 22", "max = 300, required = true, live = 22"), None),
        (
            ('name = "brand", type = "i32"', 'name = "brand", type = "float"'),
            "type 'float' is not one of",
        ),
        (
            ('default = "4096"', 'default = "4096", required = true'),
            "a required key has no default",
        ),
    ],
)
def test_a_declaration_that_breaks_its_rules_is_refused(
    tmp_path: Path, edit: tuple[str, str], message: str | None
) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gen_keys
    finally:
        sys.path.pop(0)
    text = (DECLARATION).read_text()
    assert edit[0] in text
    bad = tmp_path / "keys.toml"
    bad.write_text(text.replace(edit[0], edit[1], 1))
    if message is None:  # widening a bound is allowed: it changes what is generated
        keys, _ = gen_keys.load(bad)
        assert next(k for k in keys if k.name == "temperature_c").maximum == 300
        return
    with pytest.raises(gen_keys.DeclarationError, match=re.escape(message)):
        gen_keys.load(bad)


def test_every_key_the_c_parser_reads_is_in_the_python_schema() -> None:
    keys_h = (SOURCES / "keys.h").read_text()
    c_keys = set(re.findall(r"^\s+X\((\w+),", keys_h, re.M))
    assert c_keys == set(GPU_KEYS) | set(SYSTEM_KEYS)
    assert len(c_keys) == len(_keys.GPU_ROWS) + len(_keys.SYSTEM_ROWS)


def test_live_slots_are_unique_and_inside_the_record() -> None:
    slots = [spec.live_slot for spec in LIVE_GPU_KEYS.values()]
    assert len(slots) == len(set(slots))
    assert all(s is not None and 0 <= s < _live_layout.LIVE_KEY_SLOTS for s in slots)


def test_no_getter_reads_the_board_value_of_a_live_key_directly() -> None:
    """A live key read as ``d->s.<key>`` would ignore the live layer: getters use live_<key>(d).
    Lines marked ``live-checked`` read the live record themselves; telemetry.c reads the board
    as a pattern's idle baseline and resolves live values from its own snapshot of the record."""
    offenders = []
    for source in sorted(SOURCES.glob("*.c")):
        if source.name in ("init.c", "state_parse.c", "live.c", "telemetry.c"):
            continue
        for number, line in enumerate(source.read_text().splitlines(), start=1):
            if "live-checked" in line:
                continue
            for key in LIVE_GPU_KEYS:
                if re.search(rf"(->s\.|\bs->){key}\b", line):
                    offenders.append(f"{source.name}:{number}: {key}")
    assert offenders == []


def test_the_fuzz_dictionary_holds_every_key() -> None:
    text = (PACKAGE / "native" / "fuzz" / "state.dict").read_text()
    for key in (*GPU_KEYS, *SYSTEM_KEYS):
        assert f'="{key}="' in text


def test_the_renderer_refuses_text_that_cannot_be_utf8() -> None:
    """YAML can carry lone surrogates (``"\\udcff"``); the state format says UTF-8."""
    from nvml_mock_engine.schema import validate_value

    with pytest.raises(ValueError, match="is not valid UTF-8 text"):
        validate_value(GPU_KEYS["board_part_number"], "699-\udcff")
