"""``--query-gpu`` against real ``--help-query-gpu`` / ``--query-gpu`` captures of 590, 595, 610.

The captures (``smi_fixtures/exporter``) hold, per driver, the full list of property names the
real tool accepts and one CSV run over all of them. The work-alike must accept the same names
for the driver it emulates, refuse the newer ones with the real message, print the real
headers (units included), and answer the properties that driver deprecated with its text.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import pytest
from nvml_mock_smi._fields import BY_NAME, lookup
from smi_fixtures.helpers import smi

EXPORTER = Path(__file__).resolve().parents[1] / "smi_fixtures" / "exporter"
H100_590 = EXPORTER / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
L40S_595 = EXPORTER / "linux-x86_64__nvidia-l40s__595.80.txt"
RTX_610 = EXPORTER / "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt"


def section(capture: Path, command: str) -> str:
    """The raw output a capture recorded for ``$ nvidia-smi <command>`` (first match)."""
    text = capture.read_text()
    start = text.index(f"# $ nvidia-smi {command}")
    body = text[start:].split("\n", 2)[2]
    return body.split("\n\n\n####", 1)[0]


def help_names(capture: Path) -> list[tuple[str, ...]]:
    """Every property of ``--help-query-gpu``, each with its aliases, in the real order."""
    groups = []
    for line in section(capture, "--help-query-gpu").splitlines():
        names = tuple(re.findall(r'"([^"]+)"', line)) if line.startswith('"') else ()
        if names and ":" not in names[0]:  # not the "0: Default" compute-mode legend
            groups.append(names)
    return groups


def real_csv(capture: Path) -> tuple[str, list[str], list[str]]:
    """The idle ``--query-gpu`` run: the field list asked for, the header and the first row."""
    text = capture.read_text()
    start = text.index("# idle :: query-gpu")
    command = text[start:].splitlines()[1]
    query = command.split("--query-gpu=", 1)[1].split(" ", 1)[0]
    rows = list(
        csv.reader(io.StringIO(section(capture, f"--query-gpu={query}")), skipinitialspace=True)
    )
    return query, rows[0], rows[1]


def driver_state(tmp_path: Path, profile: str, driver: str, write: Path) -> Path:
    """A rendered one-GPU ``profile`` state that reports ``driver``."""
    from smi_fixtures.helpers import render_profile

    out = render_profile(profile, 1, write)
    text = re.sub(r"(?m)^driver_version=.*$", f"driver_version={driver}", out.read_text())
    out.write_text(text)
    return out


@pytest.fixture
def use_driver(library_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    def use(profile: str, driver: str) -> None:
        state = driver_state(tmp_path, profile, driver, tmp_path / f"{profile}-{driver}.nvmlmock")
        monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))

    return use


@pytest.mark.parametrize(
    ("capture", "driver"),
    [(H100_590, (590, 48, 1)), (L40S_595, (595, 80)), (RTX_610, (610, 57, 4))],
)
def test_every_real_name_and_alias_is_accepted_for_its_driver(
    capture: Path, driver: tuple[int, ...]
) -> None:
    groups = help_names(capture)
    assert len(groups) > 200
    for names in groups:
        fields = {lookup(name, driver) for name in names}
        assert None not in fields, f"{names} refused for {driver}"
        assert len(fields) == 1, f"{names} are not aliases of one property"
        field = fields.pop()
        assert field is not None and field.name == names[0]


def test_no_name_is_accepted_that_no_driver_knows() -> None:
    known = {
        name.lower()
        for capture in (H100_590, L40S_595, RTX_610)
        for g in help_names(capture)
        for name in g
    }
    # reset_status.* is what drivers before 590 accepted; 590 dropped it for gpu_recovery_action
    assert set(BY_NAME) - known == {
        "reset_status.reset_required",
        "reset_status.drain_and_reset_recommended",
    }
    assert lookup("reset_status.reset_required", (580, 105, 8)) is not None
    assert lookup("reset_status.reset_required", (590, 48, 1)) is None


@pytest.mark.parametrize(
    ("capture", "profile", "driver"),
    [(H100_590, "h100", "590.48.01"), (L40S_595, "l40s", "595.80"), (RTX_610, "l40s", "610.57.04")],
)
def test_headers_and_answer_kinds_match_the_real_run(
    use_driver: object, library_file: Path, capture: Path, profile: str, driver: str
) -> None:
    use_driver(profile, driver)  # type: ignore[operator]
    query, header, real_row = real_csv(capture)
    rc, out = smi(library_file, f"--query-gpu={query}", "--format=csv")
    assert rc == 0, out
    rows = list(csv.reader(io.StringIO(out), skipinitialspace=True))
    assert rows[0] == header
    mine = dict(zip(header, rows[1], strict=True))
    real = dict(zip(header, real_row, strict=True))
    deprecated = "[Requested functionality has been deprecated]"
    for name in (
        "display_mode",
        "power.management",
        "clocks.applications.graphics [MHz]",
        "clocks.applications.memory [MHz]",
        "clocks.default_applications.graphics [MHz]",
        "clocks.default_applications.memory [MHz]",
    ):
        assert real[name] == mine[name] == deprecated
    # what no modelled board has reads [N/A], as on the real boards
    for name, value in real.items():
        if name.startswith(
            ("power_smoothing.", "vgpu_", "gpu.base.", "bbx.", "module.", "hostname")
        ):
            assert value == mine[name] == "[N/A]", name
    assert mine["gpu_recovery_action"] == real["gpu_recovery_action"] == "None"
    assert mine["clocks_event_reasons_counters.hw_power_brake_slowdown [us]"].endswith(" us")


def test_h100_sram_and_row_remapper_cells(use_driver: object, library_file: Path) -> None:
    use_driver("h100", "590.48.01")  # type: ignore[operator]
    names = [
        "ecc.errors.uncorrected.volatile.sram.parity",
        "ecc.errors.uncorrected.aggregate.sram.secded",
        "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded",
        "ecc.errors.uncorrected.aggregate.sram.l2",
        "ecc.errors.uncorrected.aggregate.sram.other",
        "remapped_rows.sbe",
        "remapped_rows.dbe",
        "remapped_rows.histogram.max",
        "remapped_rows.histogram.none",
        "gpu.power.requested_limit",
        "gpu.power.current_limit",
        "gpu.power.draw.instant",
    ]
    rc, out = smi(library_file, f"--query-gpu={','.join(names)}", "--format=csv")
    assert rc == 0, out
    header, row = list(csv.reader(io.StringIO(out), skipinitialspace=True))
    # an alias is headed by the property's first name, as the real tool does
    assert header[5:7] == ["remapped_rows.correctable", "remapped_rows.uncorrectable"]
    assert header[9:] == ["power.limit [W]", "enforced.power.limit [W]", "power.draw.instant [W]"]
    assert row[:2] == ["0", "0"] and row[2] == "No" and row[3:5] == ["0", "0"]
    assert row[5:7] == ["0", "0"]
    assert int(row[7]) > 0 and row[8] == "0"  # a fresh H100: every bank has its spare rows
    assert re.fullmatch(r"\d+\.\d\d W", row[9])


@pytest.mark.parametrize(
    ("driver", "name"),
    [
        ("590.48.01", "kmd_version"),
        ("590.48.01", "remapped_rows.correctable_inactive"),
        ("595.80", "gpu.base.current"),
        ("595.80", "power_smoothing.enabled"),
        ("590.48.01", "reset_status.reset_required"),
        ("580.105.08", "clocks_event_reasons_counters.hw_power_braking"),
    ],
)
def test_names_the_emulated_driver_lacks_are_refused(
    use_driver: object, library_file: Path, driver: str, name: str
) -> None:
    use_driver("h100", driver)  # type: ignore[operator]
    rc, out = smi(library_file, f"--query-gpu=index,{name}", "--format=csv")
    assert (rc, out) == (2, f'Field "{name}" is not a valid field to query.\n')


def test_580_still_reports_the_values_590_deprecated(
    use_driver: object, library_file: Path
) -> None:
    use_driver("h100", "580.105.08")  # type: ignore[operator]
    rc, out = smi(
        library_file,
        "--query-gpu=display_mode,clocks.applications.graphics,reset_status.reset_required",
        "--format=csv,noheader",
    )
    assert rc == 0, out
    display, clock, reset = [c.strip() for c in out.strip().split(",")]
    assert display in ("Enabled", "Disabled")
    assert re.fullmatch(r"\d+ MHz", clock)
    assert reset == "No"


@pytest.mark.parametrize(
    ("capture", "profile", "driver"),
    [
        (H100_590, "h100", "590.48.01"),
        (L40S_595, "l40s", "595.80"),
        (RTX_610, "l40s", "610.57.04"),
        (L40S_595, "t4", "595.80"),  # T4 has no fabric either; no T4 capture of 595 exists
    ],
)
def test_fabric_cells_match_the_real_run(
    use_driver: object, library_file: Path, capture: Path, profile: str, driver: str
) -> None:
    """A board without an NVLink fabric prints a bare ``N/A`` in every ``fabric.*`` cell (the
    real tool brackets ``[N/A]`` elsewhere); H100 answers its registration."""
    use_driver(profile, driver)  # type: ignore[operator]
    query, header, real_row = real_csv(capture)
    rc, out = smi(library_file, f"--query-gpu={query}", "--format=csv")
    assert rc == 0, out
    rows = list(csv.reader(io.StringIO(out), skipinitialspace=True))
    mine = dict(zip(header, rows[1], strict=True))
    real = dict(zip(header, real_row, strict=True))
    fabric = [name for name in header if name.startswith("fabric.")]
    assert len(fabric) >= 10
    assert {name: mine[name] for name in fabric} == {name: real[name] for name in fabric}


@pytest.mark.parametrize(
    ("capture", "profile", "driver"),
    [
        (H100_590, "h100", "590.48.01"),
        (L40S_595, "l40s", "595.80"),
        (RTX_610, "l40s", "610.57.04"),
    ],
)
def test_help_query_gpu_lists_what_the_real_one_of_its_driver_lists(
    use_driver: Any, library_file: Path, capture: Path, profile: str, driver: str
) -> None:
    """The real tool's ``--help-query-gpu`` is its driver's: the work-alike on that driver
    names the same properties and aliases, none the real one lacks (it used to list every
    property it knows: 31 more than 590's, 41 more than 595.80's)."""
    use_driver(profile, driver)
    rc, out = smi(library_file, "--help-query-gpu")
    assert rc == 0
    listed = {
        name
        for line in out.splitlines()
        if line.startswith('"')
        for name in re.findall(r'"([^"]+)"', line)
    }
    real = {name for names in help_names(capture) for name in names}
    # 590 and 610 list fourteen power-smoothing floor properties that 595.80's list lacks;
    # one property range per name cannot leave a driver out in between, so 595 keeps them
    gap = {
        "power_smoothing.delayed_power_smoothing_supported",
        "power_smoothing.primary_power_floor",
        "power_smoothing.secondary_power_floor",
        "power_smoothing.min_primary_floor_activation_offset",
        "power_smoothing.min_primary_floor_activation_point",
        "power_smoothing.window_multiplier",
        *(
            f"power_smoothing.{part}.{name}"
            for part in ("curr_profile", "admin_override")
            for name in (
                "secondary_power_floor",
                "primary_floor_act_window_multiplier",
                "primary_floor_tar_window_multiplier",
                "primary_floor_act_offset",
            )
        ),
    }
    assert listed - real == (gap if driver.startswith("595") else set())
