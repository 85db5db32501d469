"""NVIDIA_VISIBLE_DEVICES=MIG-<uuid>: the container sees that MIG device and no other.

As with the NVIDIA container toolkit on real hardware, a container given a MIG device
enumerates its parent GPU (renumbered from 0, MIG mode on) and, among that GPU's MIG
handles, GPU instances and compute instances, only what it was given; the rest of the
layout is not there for it. Each case is its own process through unmodified nvidia-ml-py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import run_with_visible
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render_text
from smi_fixtures.helpers import smi, smi_process

NVML_ERROR_NOT_FOUND = 6

PROBE = textwrap.dedent(
    """
    import ctypes, json, sys
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    import pynvml as n

    n.nvmlInit()
    out = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        migs = []
        for m in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                d = n.nvmlDeviceGetMigDeviceHandleByIndex(h, m)
            except n.NVMLError:
                break
            migs.append([n.nvmlDeviceGetUUID(d), n.nvmlDeviceGetGpuInstanceId(d),
                         n.nvmlDeviceGetComputeInstanceId(d)])
        gis = []
        for gid in range(14):
            try:
                n.nvmlDeviceGetGpuInstanceById(h, gid)
                gis.append(gid)
            except n.NVMLError:
                pass
        out.append({"uuid": n.nvmlDeviceGetUUID(h), "mig": n.nvmlDeviceGetMigMode(h)[0],
                    "migs": migs, "gis": gis})
    found = {}
    for uuid in json.loads(sys.argv[2]):
        try:
            d = n.nvmlDeviceGetHandleByUUID(uuid)
            found[uuid] = n.nvmlDeviceGetUUID(n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(d))
        except n.NVMLError as e:
            found[uuid] = e.value
    print(json.dumps({"gpus": out, "by_uuid": found}))
    """
)


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library_file: Path) -> dict[str, Any]:
    """Two H100s; GPU 1 holds a 3g.40gb and two 1g.10gb (ids 2, 7, 8; each with its compute
    instance)."""
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="mig-visible", profile="h100", count=2)))
    live.create(tmp_path / live.LIVE_FILE_NAME, live.read_board(state))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    assert smi(library_file, "-i", "1", "-mig", "1")[0] == 0
    assert smi(library_file, "mig", "-i", "1", "-cgi", "9,19,19", "-C")[0] == 0
    everything = probe(library_file, None, [])
    return {"library": library_file, "gpus": everything["gpus"]}


def probe(library: Path, visible: str | None, uuids: list[str]) -> dict[str, Any]:
    return run_with_visible(PROBE, [str(library), json.dumps(uuids)], visible)[0]


def test_the_node_without_a_selection(node: dict[str, Any]) -> None:
    gpus = node["gpus"]
    assert [g["mig"] for g in gpus] == [0, 1]
    assert [(gi, ci) for _u, gi, ci in gpus[1]["migs"]] == [(2, 0), (7, 0), (8, 0)]
    assert gpus[1]["gis"] == [2, 7, 8]


def test_one_mig_device_is_all_the_container_sees(node: dict[str, Any]) -> None:
    parent = node["gpus"][1]
    chosen, *others = (u for u, _gi, _ci in parent["migs"])
    result = probe(node["library"], chosen, [chosen, *others])
    assert result["gpus"] == [
        {"uuid": parent["uuid"], "mig": 1, "migs": [parent["migs"][0]], "gis": [2]}
    ]
    assert result["by_uuid"] == {
        chosen: parent["uuid"],
        **{u: NVML_ERROR_NOT_FOUND for u in others},
    }


def test_two_mig_devices_are_renumbered_from_zero(node: dict[str, Any]) -> None:
    parent = node["gpus"][1]
    second, third = parent["migs"][1], parent["migs"][2]
    result = probe(node["library"], f"{third[0].lower()},{second[0]}", [])
    assert result["gpus"][0]["migs"] == [second, third]
    assert result["gpus"][0]["gis"] == [7, 8]


def test_the_whole_gpu_beside_its_mig_device_shows_every_mig_device(
    node: dict[str, Any],
) -> None:
    parent = node["gpus"][1]
    result = probe(node["library"], f"{parent['migs'][0][0]},{parent['uuid']}", [])
    assert result["gpus"][0]["migs"] == parent["migs"]
    result = probe(node["library"], f"0,{parent['migs'][2][0]}", [])
    assert [g["uuid"] for g in result["gpus"]] == [node["gpus"][0]["uuid"], parent["uuid"]]
    assert result["gpus"][1]["migs"] == [parent["migs"][2]]


def test_the_work_alike_in_such_a_container(node: dict[str, Any]) -> None:
    parent = node["gpus"][1]
    chosen = parent["migs"][1][0]
    proc = smi_process(node["library"], ["-L"], {"NVIDIA_VISIBLE_DEVICES": chosen})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {parent['uuid']})",
        f"  MIG 1g.10gb     Device  0: (UUID: {chosen})",
    ]
    proc = smi_process(node["library"], ["mig", "-lgi"], {"NVIDIA_VISIBLE_DEVICES": chosen})
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stdout.splitlines() if "MIG 1g" in line or "MIG 3g" in line] == [
        "|   0  MIG 1g.10gb           19        7          0:1     |"
    ]


def refusal(library: Path, visible: str) -> str:
    """What init says when NVIDIA_VISIBLE_DEVICES names no device (it must fail)."""
    env = dict(os.environ, NVIDIA_VISIBLE_DEVICES=visible)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(library), "[]"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


def test_gpu_colon_mig_index_selects_that_mig_device(node: dict[str, Any]) -> None:
    parent = node["gpus"][1]
    by_index = probe(node["library"], "1:1", [])
    by_uuid = probe(node["library"], parent["migs"][1][0], [])
    assert by_index == by_uuid
    assert by_index["gpus"] == [
        {"uuid": parent["uuid"], "mig": 1, "migs": [parent["migs"][1]], "gis": [7]}
    ]


def test_gpu_colon_mig_entries_mix_with_gpus_and_uuids(node: dict[str, Any]) -> None:
    parent = node["gpus"][1]
    result = probe(node["library"], f"1:2, 0 ,{parent['migs'][0][0]},1:2", [])
    assert [g["uuid"] for g in result["gpus"]] == [node["gpus"][0]["uuid"], parent["uuid"]]
    assert result["gpus"][1]["migs"] == [parent["migs"][0], parent["migs"][2]]
    result = probe(node["library"], "1:0,1", [])
    assert result["gpus"][0]["migs"] == parent["migs"]


def test_the_mig_index_counts_the_layout_at_start(node: dict[str, Any]) -> None:
    """The index is a place in the node's layout when the process starts, as the toolkit
    resolves it at container start: after GPU instance 2 goes, 1:0 is the next one."""
    parent = node["gpus"][1]
    assert smi(node["library"], "mig", "-i", "1", "-dci", "-gi", "2")[0] == 0
    assert smi(node["library"], "mig", "-i", "1", "-dgi", "-gi", "2")[0] == 0
    result = probe(node["library"], "1:0", [])
    assert result["gpus"][0]["migs"] == [parent["migs"][1]]
    assert "1:2: unknown device (GPU 1 has no MIG device 2)" in refusal(node["library"], "1:2")


@pytest.mark.parametrize(
    ("visible", "reason"),
    [
        ("1:3", "1:3: unknown device (GPU 1 has no MIG device 3)"),
        ("0:0", "0:0: unknown device (GPU 0 has no MIG device 0)"),  # MIG off on GPU 0
        ("2:0", "2:0: unknown device (the node has 2 GPUs)"),
        (
            "1:99999999999999999999",
            "1:99999999999999999999: unknown device (GPU 1 has no MIG device 99999999999999999999)",
        ),
        ("0,1:7", "1:7: unknown device (GPU 1 has no MIG device 7)"),
    ],
)
def test_a_mig_index_that_names_no_mig_device_is_refused(
    node: dict[str, Any], visible: str, reason: str
) -> None:
    assert f"nvml-mock: NVIDIA_VISIBLE_DEVICES='{visible}': {reason}" in refusal(
        node["library"], visible
    )
