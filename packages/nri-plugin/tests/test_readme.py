"""The README's configuration table documents every option, with the right names."""

from __future__ import annotations

from pathlib import Path

from nvml_mock_nri.settings import OPTIONS

README = Path(__file__).parent.parent / "README.md"


def test_every_option_is_in_the_config_table() -> None:
    rows = {
        line.split("|")[1].strip(): line
        for line in README.read_text().splitlines()
        if line.startswith("| `--")
    }
    assert set(rows) == {f"`{option.flag}`" for option in OPTIONS}
    for option in OPTIONS:
        cells = [cell.strip() for cell in rows[f"`{option.flag}`"].split("|")]
        assert cells[2] == f"`{option.env}`"
        key = cells[4].split(" ")[0]
        assert key == (f"`{option.runtime_key}`" if option.runtime_key else "—"), option.flag
