"""CSV queries, ``-L``, ``-i`` and the default table, on a rendered H100 node."""

from __future__ import annotations

import csv
import datetime
import io
import re
from pathlib import Path

import pytest
from nvml_mock_smi._fields import FIELDS, lookup
from smi_fixtures.helpers import read_state, render_profile, smi


@pytest.fixture(scope="module")
def h100_state(library_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render_profile("h100", 8, tmp_path_factory.mktemp("smi-query") / "h100.nvmlmock")


@pytest.fixture
def node(h100_state: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(h100_state))
    return read_state(h100_state)[1]


def parse_csv(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in row]
        for row in csv.reader(io.StringIO(text), skipinitialspace=True)
    ]


def test_every_field_and_alias_is_accepted_and_parses_back(
    library_file: Path, node: list[dict[str, str]]
) -> None:
    # the profile's driver (580.105.08) decides which names its tool accepts
    accepted = [f for f in FIELDS if lookup(f.name, (580, 105, 8)) is not None]
    assert len(accepted) > 200
    names = [name for field in accepted for name in field.names]
    rc, out = smi(library_file, f"--query-gpu={','.join(names)}", "--format=csv")
    assert rc == 0, out
    rows = parse_csv(out)
    assert len(rows) == 1 + len(node)
    header = rows[0]
    assert len(header) == len(names)
    # The header names each property by its first name, with its unit.
    expected = [field.header(True) for field in accepted for _ in field.names]
    assert header == expected
    for row in rows[1:]:
        assert len(row) == len(names)
        # only the chassis serial of a board without platform info is empty, as in the captures
        assert [h for h, cell in zip(header, row, strict=True) if not cell] in (
            [],
            ["platform.chassis_serial_number"],
        )


def test_values_units_and_nounits(library_file: Path, node: list[dict[str, str]]) -> None:
    query = "--query-gpu=index,name,uuid,pci.bus_id,memory.total,pcie.link.width.max,clocks.max.sm"
    rc, out = smi(library_file, query, "--format=csv")
    assert rc == 0
    rows = parse_csv(out)
    assert rows[0] == [
        "index",
        "name",
        "uuid",
        "pci.bus_id",
        "memory.total [MiB]",
        "pcie.link.width.max",
        "clocks.max.sm [MHz]",
    ]
    for i, (row, gpu) in enumerate(zip(rows[1:], node, strict=True)):
        mib = int(gpu["memory_total_bytes"]) // 1048576
        assert row == [
            str(i),
            gpu["name"],
            gpu["uuid"],
            gpu["pci_bus_id"],
            f"{mib} MiB",
            gpu["pcie_max_width"],
            f"{gpu['max_clock_sm_mhz']} MHz",
        ]
    rc, out = smi(library_file, query, "--format=csv,noheader,nounits")
    assert rc == 0
    rows = parse_csv(out)
    assert len(rows) == len(node)
    assert rows[0][4] == str(int(node[0]["memory_total_bytes"]) // 1048576)
    assert rows[0][6] == node[0]["max_clock_sm_mhz"]


def test_alias_header_uses_the_first_name(library_file: Path, node: list[dict[str, str]]) -> None:
    rc, out = smi(library_file, "--query-gpu=gpu_name,clocks.gr,gpu_bus_id", "--format=csv")
    assert rc == 0
    assert out.splitlines()[0] == "name, clocks.current.graphics [MHz], pci.bus_id"


def test_fabric_fields_follow_the_fabric_env(
    library_file: Path, node: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOCK_FABRIC_CLUSTER_UUID", "6a5f6f1c-51a8-4b8c-9d0e-1f2a3b4c5d6e")
    monkeypatch.setenv("MOCK_FABRIC_CLIQUE_ID", "7")
    rc, out = smi(
        library_file,
        "--query-gpu=fabric.state,fabric.status,fabric.cliqueId,fabric.clusterUuid",
        "--format=csv,noheader",
        "-i",
        "0",
    )
    assert rc == 0
    assert parse_csv(out) == [["Completed", "Success", "7", "6a5f6f1c-51a8-4b8c-9d0e-1f2a3b4c5d6e"]]


@pytest.mark.parametrize("key", ["index", "uuid", "pci_bus_id", "short_bus", "serial"])
def test_select_one_gpu_by_every_kind_of_id(
    library_file: Path, node: list[dict[str, str]], key: str
) -> None:
    gpu = node[3]
    ident = {
        "index": "3",
        "uuid": gpu["uuid"],
        "pci_bus_id": gpu["pci_bus_id"],
        "short_bus": gpu["pci_bus_id"][4:].lower(),
        "serial": gpu["serial"],
    }[key]
    rc, out = smi(library_file, "-i", ident, "--query-gpu=index,uuid", "--format=csv,noheader")
    assert rc == 0, out
    if key == "serial" and sum(g["serial"] == gpu["serial"] for g in node) > 1:
        assert parse_csv(out)[0][1] == next(g["uuid"] for g in node if g["serial"] == gpu["serial"])
    else:
        assert parse_csv(out) == [["3", gpu["uuid"]]]


def test_comma_list_keeps_the_order_given(library_file: Path, node: list[dict[str, str]]) -> None:
    rc, out = smi(library_file, f"--id=5,{node[1]['uuid']},0", "-L")
    assert rc == 0
    assert [line.split(":")[0] for line in out.splitlines()] == ["GPU 5", "GPU 1", "GPU 0"]


def test_timestamp_is_the_local_read_time_to_the_millisecond(
    library_file: Path, node: list[dict[str, str]]
) -> None:
    before = datetime.datetime.now().replace(microsecond=0)
    rc, out = smi(library_file, "--query-gpu=timestamp", "--format=csv,noheader", "-i", "0")
    after = datetime.datetime.now()
    assert rc == 0
    stamp = out.strip()
    assert re.fullmatch(r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}", stamp), stamp
    assert before <= datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f") <= after


def test_list_lines(library_file: Path, node: list[dict[str, str]]) -> None:
    rc, out = smi(library_file, "-L")
    assert rc == 0
    assert out.splitlines() == [
        f"GPU {i}: {g['name']} (UUID: {g['uuid']})" for i, g in enumerate(node)
    ]


def test_compute_apps_with_no_process_prints_the_header_only(
    library_file: Path, node: list[dict[str, str]]
) -> None:
    query = "--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory"
    rc, out = smi(library_file, query, "--format=csv")
    assert rc == 0
    assert out == "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
    rc, out = smi(library_file, query, "--format=csv,noheader")
    assert (rc, out) == (0, "")


def test_table_layout(library_file: Path, node: list[dict[str, str]]) -> None:
    rc, out = smi(library_file)
    assert rc == 0
    lines = out.splitlines()
    boxed = [line for line in lines[1:] if line]
    assert all(len(line) == 91 for line in boxed), [line for line in boxed if len(line) != 91]
    system, _ = read_state(Path(__import__("os").environ["MOCK_NVML_CONFIG"]))
    assert f"Driver Version: {system['driver_version']}" in lines[2]
    assert "CUDA Version: 13.0" in lines[2]
    rows = [
        line
        for line in lines
        if line.startswith("|")
        and line[2:5].strip().isdigit()
        and "MiB" not in line
        and "%" not in line
    ]
    assert len(rows) == len(node)
    for i, (row, gpu) in enumerate(zip(rows, node, strict=True)):
        assert row[1:5].strip() == str(i)
        assert gpu["pci_bus_id"] in row
    mib = int(node[0]["memory_total_bytes"]) // 1048576
    assert f"/  {mib}MiB |" in out
    assert "No running processes found" in out
