"""Adding a pattern or a fault recipe: one declaration, its behaviour in one C unit and one
Python function (CONTRIBUTING.md, "How to add a utilization pattern or a fault recipe").

Adds one of each to a copy of the declaration and checks what the generator makes of it, and
holds the real tables to their behaviour: every declared pattern has its cases in
``telemetry.c``, every declared recipe its plan in ``faults.py`` writing only the keys and
events it declares.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nvml_mock_live as live
import pytest
from conftest import StateWriter
from nvml_mock_engine import faults
from nvml_mock_live import vocabulary

PACKAGE = Path(__file__).resolve().parents[2]
DECLARATION = PACKAGE.parent / "live" / "src" / "nvml_mock_live" / "keys.toml"
TELEMETRY = PACKAGE / "native" / "src" / "telemetry.c"

RAMP = (
    '  { name = "ramp", number = 5, level = "optional", default_level = 100, '
    'period_ms = 30000, doc = "from idle up to the peak over each period" },\n'
)
STUCK = (
    '  { name = "clock-stuck", keys = ["clock_sm_mhz"], events = ["clock"], '
    'doc = "the SM clock stops moving" },\n'
)


@pytest.fixture
def gen_keys() -> object:
    sys.path.insert(0, str(PACKAGE.parent / "live" / "scripts"))
    try:
        import gen_keys as module
    finally:
        sys.path.pop(0)
    return module


def _declaration_with(tmp_path: Path, *rows: tuple[str, str]) -> Path:
    text = DECLARATION.read_text(encoding="utf-8")
    for anchor, row in rows:
        assert anchor in text
        text = text.replace(anchor, anchor + row, 1)
    path = tmp_path / "keys.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_new_pattern_is_one_row(gen_keys: object, tmp_path: Path) -> None:
    declaration = _declaration_with(tmp_path, ("patterns = [\n", RAMP))
    keys, layout = gen_keys.load(declaration)  # type: ignore[attr-defined]
    header = gen_keys.render_live_h(keys, layout)  # type: ignore[attr-defined]
    assert "X(RAMP, 5u, 1, 100u, 30000u)" in header and "#define LIVE_PATTERN_LAST 5u" in header
    tables = gen_keys.render_vocabulary_py(layout)  # type: ignore[attr-defined]
    assert "('ramp', 5, 'optional', 100, 30000," in tables
    # the key that stores it takes its bound from the vocabulary
    assert next(k for k in keys if k.name == "util_pattern").maximum == 5


def test_a_new_recipe_is_one_row_naming_live_keys_and_events(
    gen_keys: object, tmp_path: Path
) -> None:
    declaration = _declaration_with(tmp_path, ("faults = [\n", STUCK))
    _, layout = gen_keys.load(declaration)  # type: ignore[attr-defined]
    tables = gen_keys.render_vocabulary_py(layout)  # type: ignore[attr-defined]
    assert "('clock-stuck', ('clock_sm_mhz',), ('clock',)," in tables
    bad = _declaration_with(tmp_path, ("faults = [\n", STUCK.replace("clock_sm_mhz", "nope")))
    with pytest.raises(gen_keys.DeclarationError, match="not live keys"):  # type: ignore[attr-defined]
        gen_keys.load(bad)  # type: ignore[attr-defined]


def test_a_reused_number_is_refused(gen_keys: object, tmp_path: Path) -> None:
    declaration = _declaration_with(tmp_path, ("patterns = [\n", RAMP.replace("5", "4", 1)))
    with pytest.raises(gen_keys.DeclarationError, match="number 4 is taken"):  # type: ignore[attr-defined]
        gen_keys.load(declaration)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(vocabulary.PATTERNS))
def test_every_declared_pattern_has_its_behaviour_in_the_c_unit(name: str) -> None:
    source = TELEMETRY.read_text(encoding="utf-8")
    case = f"case PATTERN_{name.upper().replace('-', '_')}:"
    for function in ("pattern_util", "pattern_filtered", "pattern_integral2"):
        body = re.search(rf"\n[a-z0-9_ ]+\b{function}\(.*?\n}}\n", source, re.DOTALL)
        assert body is not None, function
        assert case in body.group(0), f"{function} has no {case}"


def test_every_declared_recipe_has_a_plan_writing_what_it_declares(
    write_state: StateWriter,
) -> None:
    assert list(faults.FAULTS) == list(vocabulary.FAULTS)
    bits = {bit: name for name, bit in vocabulary.EVENTS.items()}
    boards = {
        "volta": {"architecture": 5},
        "hopper-fabric": {"architecture": 9, "nvlink_count": 18, "fabric_attached": 1},
    }
    for profile, overrides in boards.items():
        board = live.read_board(write_state(name=f"{profile}.nvmlmock", **overrides))
        for name, recipe in vocabulary.FAULTS.items():
            gpu = faults.GpuView(board[0])
            try:
                plan = faults.plan(name, gpu)
            except live.LiveValueError:
                continue  # a recipe this board cannot take (no fabric, say)
            assert set(plan.values) <= set(recipe.keys), (profile, name)
            assert {bits[e.event_type] for e in plan.events} <= set(recipe.events), (profile, name)
