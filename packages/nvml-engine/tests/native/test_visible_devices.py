"""NVIDIA_VISIBLE_DEVICES: the GPUs NVML enumerates, as the NVIDIA container toolkit chooses them.

Each case runs in its own Python process with the variable in its environment before
nvmlInit, as in a container, through unmodified nvidia-ml-py bound to the built library.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import StateWriter, gpu_entry, run_with_visible
from smi_fixtures.helpers import smi_process

NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVLINK_TYPE_GPU = 0
NVLINK_TYPE_SWITCH = 2
NVLINK_TYPE_UNKNOWN = 0xFF
XID = 0x8

UUIDS = [
    "GPU-0a3b5c7d-1111-2222-3333-000000000000",
    "GPU-0a3b9f00-1111-2222-3333-000000000001",
    "GPU-7c1d2e3f-1111-2222-3333-000000000002",
    "GPU-e5f60718-1111-2222-3333-000000000003",
]
BUS = [f"00000000:{0x18 + i:02X}:00.0" for i in range(4)]
SWITCH = "00000000:05:00.0"

# The probe: init, then every view-dependent answer as JSON (errors as their codes).
PROBE = textwrap.dedent(
    """
    import ctypes, json, sys
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    import pynvml as n

    def code(call, *args):
        try:
            return call(*args)
        except n.NVMLError as e:
            return {"error": e.value}

    try:
        n.nvmlInit()
    except n.NVMLError as e:
        print(json.dumps({"init": e.value, "text": n.nvmlErrorString(e.value)}))
        sys.exit(0)
    board = json.loads(sys.argv[2])
    count = n.nvmlDeviceGetCount()
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    index = lambda h: h if isinstance(h, dict) else n.nvmlDeviceGetIndex(h)
    out = {
        "count": count,
        "gpus": [
            {
                "index": n.nvmlDeviceGetIndex(h),
                "uuid": n.nvmlDeviceGetUUID(h),
                "serial": n.nvmlDeviceGetSerial(h),
                "bus": n.nvmlDeviceGetPciInfo(h).busId,
                "minor": n.nvmlDeviceGetMinorNumber(h),
            }
            for h in handles
        ],
        "by_uuid": [index(code(n.nvmlDeviceGetHandleByUUID, g["uuid"])) for g in board],
        "by_serial": [index(code(n.nvmlDeviceGetHandleBySerial, g["serial"])) for g in board],
        "by_bus": [index(code(n.nvmlDeviceGetHandleByPciBusId, g["pci_bus_id"])) for g in board],
        "by_index_past_view": index(code(n.nvmlDeviceGetHandleByIndex, count)),
        "cpu0_gpu_set": [index(h) for h in n.nvmlSystemGetTopologyGpuSet(0)] if count else [],
        "nearest": [
            [index(x) for x in n.nvmlDeviceGetTopologyNearestGpus(h, n.NVML_TOPOLOGY_SYSTEM)]
            for h in handles
        ],
        "links": [
            [
                (
                    n.nvmlDeviceGetNvLinkRemoteDeviceType(h, link),
                    n.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId,
                    n.nvmlDeviceGetNvLinkRemotePciInfo(h, link).pciDeviceId,
                )
                for link in range(2)
            ]
            for h in handles
        ],
        "temperature": [n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU) for h in handles],
    }
    print(json.dumps(out))
    """
)


@pytest.fixture
def board(write_state: StateWriter) -> list[dict[str, Any]]:
    """Four GPUs, two per NUMA node; GPU 0's two NVLinks reach GPU 1 and GPU 2, GPU 1's
    both reach GPU 0, GPU 2's GPU 0 and an NVSwitch, GPU 3's an NVSwitch and GPU 0."""
    remotes = [
        f"{BUS[1]},{BUS[2]}",
        f"{BUS[0]},{BUS[0]}",
        f"{BUS[0]},{SWITCH}",
        f"{SWITCH},{BUS[0]}",
    ]
    gpus = [
        gpu_entry(
            i,
            uuid=UUIDS[i],
            numa_node=i // 2,
            cpu_affinity="0-7" if i < 2 else "8-15",
            nvlink_count=2,
            nvlink_remote_bus_ids=remotes[i],
            gpu_group=i // 2,
        )
        for i in range(4)
    ]
    write_state(gpus=gpus)
    return gpus


def probe(library_file: Path, board: list[dict[str, Any]], visible: str | None) -> dict[str, Any]:
    result, stderr = run_with_visible(PROBE, [str(library_file), json.dumps(board)], visible)
    result["stderr"] = stderr
    return result


def board_indices(result: dict[str, Any]) -> list[int]:
    return [UUIDS.index(g["uuid"]) for g in result["gpus"]]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        ("2", [2]),
        ("3,1", [1, 3]),
        ("1,1, 1", [1]),
        (",0,,2,", [0, 2]),
        (" 2 ", [2]),
        ("002", [2]),
        (UUIDS[2], [2]),
        (UUIDS[3].lower(), [3]),
        (UUIDS[1].upper().replace("GPU-", "gpu-"), [1]),
        ("GPU-7c", [2]),
        ("GPU-0a3b9", [1]),
        (f"{UUIDS[0]},3", [0, 3]),
        (BUS[3], [3]),
        ("1a:00.0", [2]),
        ("0000:19:00.0", [1]),
    ],
)
def test_value_selects_the_gpus_renumbered_from_zero(
    library_file: Path, board: list[dict[str, Any]], visible: str | None, expected: list[int]
) -> None:
    result = probe(library_file, board, visible)
    assert result["count"] == len(expected)
    assert board_indices(result) == expected
    for view_index, gpu in enumerate(result["gpus"]):
        source = board[expected[view_index]]
        assert gpu["index"] == view_index
        assert (gpu["uuid"], gpu["serial"], gpu["bus"], gpu["minor"]) == (
            source["uuid"],
            source["serial"],
            source["pci_bus_id"],
            source["minor_number"],
        )


def test_all_and_unset_show_every_gpu_and_a_list_narrows(
    library_file: Path, board: list[dict[str, Any]]
) -> None:
    for visible in (None, "all", "ALL", "1,all"):
        assert board_indices(probe(library_file, board, visible)) == [0, 1, 2, 3]
    assert board_indices(probe(library_file, board, "1")) == [1]


@pytest.mark.parametrize("visible", ["none", "void", "", "  ", " none "])
def test_no_gpu_values_leave_nvml_without_gpus(
    library_file: Path, board: list[dict[str, Any]], visible: str
) -> None:
    result = probe(library_file, board, visible)
    assert result["init"] == NVML_ERROR_GPU_NOT_FOUND
    assert f"NVIDIA_VISIBLE_DEVICES='{visible}' makes no GPU visible" in result["text"]


@pytest.mark.parametrize(
    ("toolkit", "mock", "expected"),
    [
        ("void", "all", [0, 1, 2, 3]),
        ("void", "2", [2]),
        ("0", "all", [0, 1, 2, 3]),
        (None, "3", [3]),
    ],
)
def test_the_mocks_own_variable_is_read_first(
    library_file: Path,
    board: list[dict[str, Any]],
    toolkit: str | None,
    mock: str,
    expected: list[int],
) -> None:
    """A driver component given the driver surfaces keeps the toolkit's ``void`` (so the
    toolkit leaves it alone) and still sees the node's GPUs, as through real NVML."""
    result, _ = run_with_visible(
        PROBE, [str(library_file), json.dumps(board)], toolkit, mock_visible=mock
    )
    assert board_indices(result) == expected


def test_a_bad_mock_variable_fails_init_naming_it(
    library_file: Path, board: list[dict[str, Any]]
) -> None:
    result, stderr = run_with_visible(
        PROBE, [str(library_file), json.dumps(board)], "all", mock_visible="9"
    )
    assert result["init"] == NVML_ERROR_INVALID_STATE
    assert "MOCK_NVML_VISIBLE_DEVICES='9': 9: unknown device" in result["text"]
    assert "MOCK_NVML_VISIBLE_DEVICES='9'" in stderr
    empty, _ = run_with_visible(
        PROBE, [str(library_file), json.dumps(board)], "all", mock_visible="none"
    )
    assert empty["init"] == NVML_ERROR_GPU_NOT_FOUND
    assert "MOCK_NVML_VISIBLE_DEVICES='none' makes no GPU visible" in empty["text"]


def test_the_librarys_variable_names_are_the_protocols() -> None:
    from nvml_mock_protocol import names

    header = (Path(__file__).parents[2] / "native" / "src" / "visible.h").read_text()
    assert f'#define ENV_VISIBLE_DEVICES "{names.ENV_NVIDIA_VISIBLE_DEVICES}"' in header
    assert f'#define ENV_MOCK_VISIBLE_DEVICES "{names.ENV_MOCK_NVML_VISIBLE_DEVICES}"' in header


@pytest.mark.parametrize(
    ("visible", "entry", "reason"),
    [
        ("4", "4", "unknown device (the node has 4 GPUs, indices 0-3)"),
        ("0,9", "9", "unknown device"),
        ("99999999999999999999", "99999999999999999999", "unknown device"),
        ("-1", "-1", "unknown device (not an index"),
        ("gpu0", "gpu0", "unknown device (not an index"),
        ("GPU-ffff", "GPU-ffff", "unknown device (no GPU of the node has this UUID)"),
        (UUIDS[0] + "0", UUIDS[0] + "0", "unknown device (no GPU of the node has this UUID)"),
        (
            "GPU-0a3b",
            "GPU-0a3b",
            f"ambiguous GPU UUID prefix (2 GPUs match, {UUIDS[0]} and {UUIDS[1]})",
        ),
        ("GPU-", "GPU-", "unknown device (not an index"),
        (
            "0000:40:00.0",
            "0000:40:00.0",
            "unknown device (no GPU of the node is at this PCI address)",
        ),
        (
            "MIG-0a3b5c7d-1111-2222-3333-000000000000",
            "MIG-0a3b5c7d",
            "unknown device (no MIG device of the node has this UUID)",
        ),
        ("0:1", "0:1", "unknown device (GPU 0 has no MIG device 1)"),
        ("1,none", "none", "unknown device"),
    ],
)
def test_an_invalid_value_fails_init_naming_the_entry(
    library_file: Path, board: list[dict[str, Any]], visible: str, entry: str, reason: str
) -> None:
    result = probe(library_file, board, visible)
    assert result["init"] == NVML_ERROR_INVALID_STATE
    assert result["text"].startswith(f"Invalid state: NVIDIA_VISIBLE_DEVICES='{visible}': {entry}")
    assert reason in result["text"]
    assert f"nvml-mock: NVIDIA_VISIBLE_DEVICES='{visible}'" in result["stderr"]


def test_lookups_outside_the_view_are_not_found(
    library_file: Path, board: list[dict[str, Any]]
) -> None:
    result = probe(library_file, board, f"{UUIDS[3]},1")
    missing = {"error": NVML_ERROR_NOT_FOUND}
    assert result["by_uuid"] == [missing, 0, missing, 1]
    assert result["by_serial"] == [missing, 0, missing, 1]
    assert result["by_bus"] == [missing, 0, missing, 1]
    assert result["by_index_past_view"] == {"error": 2}  # INVALID_ARGUMENT, as past the count


def test_topology_follows_the_view(library_file: Path, board: list[dict[str, Any]]) -> None:
    whole = probe(library_file, board, None)
    assert whole["cpu0_gpu_set"] == [0, 1]
    assert whole["nearest"][0] == [1, 2, 3]
    assert whole["links"][0] == [
        [NVLINK_TYPE_GPU, BUS[1], int(board[1]["pci_device_id"], 16)],
        [NVLINK_TYPE_GPU, BUS[2], int(board[2]["pci_device_id"], 16)],
    ]
    view = probe(library_file, board, "0,3")
    assert view["cpu0_gpu_set"] == [0]  # GPU 1 shares CPU 0 but is outside the view
    assert view["nearest"] == [[1], [0]]
    # GPU 0's peers (board GPUs 1 and 2) are outside the view: not reported as GPUs, and
    # not as NVSwitches either; the address stays, so link counts between visible GPUs hold.
    assert view["links"][0] == [[NVLINK_TYPE_UNKNOWN, BUS[1], 0], [NVLINK_TYPE_UNKNOWN, BUS[2], 0]]
    switch = int("0x22A310DE", 16)
    assert view["links"][1] == [
        [NVLINK_TYPE_SWITCH, SWITCH, switch],
        [NVLINK_TYPE_GPU, BUS[0], int(board[0]["pci_device_id"], 16)],
    ]


def test_live_values_and_events_follow_the_board_gpu(
    library_file: Path, cnvml: ctypes.CDLL, board: list[dict[str, Any]]
) -> None:
    # cnvml: the library under test holds the soname in this process before the live
    # writer loads the packaged one, as the in-process library tests expect.
    state = Path(os.environ["MOCK_NVML_CONFIG"])
    path = state.parent / live.LIVE_FILE_NAME
    live.create(path, live.read_board(state))
    with live.LiveLayer.open(path) as layer:
        layer.set(2, {"temperature_c": 77})
        layer.set(3, {"temperature_c": 55})
    result = probe(library_file, board, "3,2")
    assert result["temperature"] == [77, 55]

    script = textwrap.dedent(
        """
        import ctypes, json, sys
        ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
        import pynvml as n
        import nvml_mock_live as live
        n.nvmlInit()
        handle = n.nvmlDeviceGetHandleByIndex(0)
        events = n.nvmlEventSetCreate()
        n.nvmlDeviceRegisterEvents(handle, 0x8, events)
        with live.LiveLayer.open(sys.argv[2]) as layer:
            layer.event(0, 0x8, 13)  # board GPU 0: outside this view
            layer.event(2, 0x8, 79)  # board GPU 2: view GPU 0
        data = n.nvmlEventSetWait(events, 2000)
        got = [n.nvmlDeviceGetUUID(data.device), data.eventData]
        try:
            n.nvmlEventSetWait(events, 0)
            got.append("more")
        except n.NVMLError_Timeout:
            pass
        print(json.dumps(got))
        """
    )
    env = dict(os.environ, NVIDIA_VISIBLE_DEVICES="2")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(library_file), str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [UUIDS[2], 79]


def test_the_work_alike_lists_and_maps_only_the_visible_gpus(
    library_file: Path, board: list[dict[str, Any]]
) -> None:
    env = {"NVIDIA_VISIBLE_DEVICES": f"{UUIDS[2]},0"}
    listed = smi_process(library_file, ["-L"], env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[0]})",
        f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[2]})",
    ]
    topo = smi_process(library_file, ["topo", "-m"], env)
    assert topo.returncode == 0, topo.stderr
    lines = topo.stdout.splitlines()
    assert lines[0].startswith("\t\x1b[4mGPU0\tGPU1\tCPU Affinity")
    assert lines[1].split("\t")[:3] == ["GPU0", " X ", "NV1"]
    assert lines[2].split("\t")[:3] == ["GPU1", "NV1", " X "]
    assert lines[2].split("\t")[3:5] == ["8-15", "1"]
    nvlink = smi_process(library_file, ["nvlink", "-s", "-i", "1"], env)
    assert nvlink.returncode == 0, nvlink.stderr
    assert nvlink.stdout.splitlines()[0] == f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[2]})"


def test_the_work_alike_reports_an_invalid_value(
    library_file: Path, board: list[dict[str, Any]]
) -> None:
    nothing = smi_process(library_file, ["-L"], {"NVIDIA_VISIBLE_DEVICES": "none"})
    assert (nothing.returncode, nothing.stdout.strip()) == (6, "No devices were found")
    bad = smi_process(library_file, ["-L"], {"NVIDIA_VISIBLE_DEVICES": "7"})
    assert bad.returncode != 0
    assert "NVIDIA_VISIBLE_DEVICES='7': 7: unknown device" in bad.stdout + bad.stderr


def test_no_gpus_flag_accepts_an_empty_view_and_an_empty_node_names_itself(
    library_file: Path, board: list[dict[str, Any]], write_state: StateWriter
) -> None:
    script = textwrap.dedent(
        """
        import ctypes, sys
        ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
        import pynvml as n
        n.nvmlInitWithFlags(n.NVML_INIT_FLAG_NO_GPUS)
        print(n.nvmlDeviceGetCount())
        """
    )
    env = dict(os.environ, NVIDIA_VISIBLE_DEVICES="none")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(library_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout.strip()) == (0, "0"), proc.stderr
    write_state(count=0)
    result = probe(library_file, [], "0")
    assert result["init"] == NVML_ERROR_INVALID_STATE
    assert result["text"].endswith("0: unknown device (the node has no GPUs)")
