"""``nvml-mock-ctl alloc`` on MIG devices, hostile names, and where the command writes.

``--gpus`` takes a MIG device as a container is given one (``MIG-<uuid>``, ``<gpu>:<mig>``);
the record then holds that device, and NVML lists the process on the MIG device's own handle
and on its parent with the instance ids, as ``nvidia-smi``'s process table does. A name that
is not UTF-8 (a command line is bytes) is refused with exit 3, not a traceback. And the
location flags win over the environment: ``--overlay-path OV2`` works on OV2 whatever
``MOCK_NVML_CONFIG`` names, for ``nvml-mock-ctl`` (both its paths) and for the node agent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import wait_for_line
from mig_board import split_board
from nvml_mock_engine import ctl
from smi_fixtures.helpers import smi

GiB = 1 << 30


@pytest.fixture
def mig_node(pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, Any]:
    """A two-GPU H100 node, GPU 0 in MIG mode with two 1g.10gb MIG devices."""
    return split_board(pynvml, monkeypatch, tmp_path, "ctl-mig")


def run(live_file: Path, *argv: str) -> int:
    return ctl.main(["--live-file", str(live_file), *argv])


def procs(pynvml: Any, handle: Any) -> list[tuple[int, int, int, int]]:
    return [
        (p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    ]


def test_alloc_on_a_mig_uuid_places_the_process_on_that_mig_device(
    pynvml: Any,
    mig_node: tuple[Path, Any],
    library_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    live_file, gpu = mig_node
    second = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 1)
    first = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    uuid = pynvml.nvmlDeviceGetUUID(second)
    gi = pynvml.nvmlDeviceGetGpuInstanceId(second)
    ci = pynvml.nvmlDeviceGetComputeInstanceId(second)
    assert uuid.startswith("MIG-")
    argv = ["alloc", "--pid", "4242", "--gpus", uuid, "--memory", "2Gi", "--name", "train"]
    assert run(live_file, *argv) == ctl.EXIT_OK
    said = capsys.readouterr().out
    assert "pid 4242 on GPU 0 GPU-" in said and f"MIG GI {gi} CI {ci}" in said
    assert procs(pynvml, second) == [(4242, 2 * GiB, gi, ci)]
    assert procs(pynvml, first) == []
    assert procs(pynvml, gpu) == [(4242, 2 * GiB, gi, ci)]
    assert pynvml.nvmlDeviceGetMemoryInfo(second).used == 2 * GiB

    rc, out = smi(library_file)
    assert rc == 0
    (row,) = [line.split() for line in out.splitlines() if "4242" in line]
    assert row[1:6] == ["0", str(gi), str(ci), "4242", "C"]

    assert run(live_file, "status") == ctl.EXIT_OK
    table = capsys.readouterr().out
    assert f" 0:gi{gi}/ci{ci} " in table

    # the process holds the device: the instance cannot be destroyed until it goes
    instance = pynvml.nvmlDeviceGetGpuInstanceById(gpu, gi)
    compute = pynvml.nvmlGpuInstanceGetComputeInstanceById(instance, ci)
    with pytest.raises(pynvml.NVMLError) as caught:
        pynvml.nvmlComputeInstanceDestroy(compute)
    assert caught.value.value == pynvml.NVML_ERROR_IN_USE
    assert run(live_file, "release", "ctl-4242") == ctl.EXIT_OK
    assert procs(pynvml, second) == []
    pynvml.nvmlComputeInstanceDestroy(compute)


def test_alloc_on_the_index_form_and_a_whole_gpu_beside_it(
    pynvml: Any, mig_node: tuple[Path, Any]
) -> None:
    live_file, gpu = mig_node
    first = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    gi = pynvml.nvmlDeviceGetGpuInstanceId(first)
    ci = pynvml.nvmlDeviceGetComputeInstanceId(first)
    assert run(live_file, "alloc", "--pid", "7", "--gpus", "0:0,1") == ctl.EXIT_OK
    assert procs(pynvml, first) == [(7, 0, gi, ci)]
    whole = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert [p[0] for p in procs(pynvml, whole)] == [7]
    with live.LiveLayer.open(live_file) as layer:
        (record,) = layer.list()
    assert record.gpus == (0, 1) and record.mig == ((0, gi, ci),)


@pytest.mark.parametrize(
    "spec",
    ["MIG-00000000-0000-0000-0000-000000000000", "0:7", "1:0"],
)
def test_a_mig_device_the_node_lacks_is_refused_naming_it(
    mig_node: tuple[Path, Any], spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    live_file, _ = mig_node
    assert run(live_file, "alloc", "--pid", "7", "--gpus", spec) == ctl.EXIT_VALUE
    err = capsys.readouterr().err
    assert f"gpus='{spec}'" in err and "no MIG device of this node" in err
    with live.LiveLayer.open(live_file) as layer:
        assert layer.list() == []


# -- names that are not text ------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--name", "--pod", "--namespace", "--id"])
def test_a_name_that_is_not_utf8_is_refused_with_exit_3(
    tmp_path: Path, write_state: Any, flag: str
) -> None:
    """The command line as an attacker types it: raw bytes, run as a real process."""
    state = write_state()
    live_file = live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
    argv = [sys.executable.encode(), b"-m", b"nvml_mock_engine.ctl", b"--live-file"]
    argv += [os.fsencode(live_file), b"alloc", b"--pid", b"5", b"--gpus", b"0"]
    argv += [flag.encode(), b"train\xff\xfe"]
    env = {k: v for k, v in os.environ.items() if k != "MOCK_NVML_CONFIG"}
    proc = subprocess.run(argv, capture_output=True, env=env, timeout=60, check=False)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == ctl.EXIT_VALUE, err
    assert "Traceback" not in err
    assert f"{flag[2:]}='train\\\\xff\\\\xfe'" in err and "is not UTF-8 text" in err
    with live.LiveLayer.open(live_file) as layer:
        assert layer.list() == []


# -- the location flags win over the environment -------------------------------------------


def _overlay(state: Path, root: Path) -> Path:
    config = root / "config"
    config.mkdir(parents=True)
    shutil.copy(state, config / "state.nvmlmock")
    live.create(config / live.LIVE_FILE_NAME, live.read_board(config / "state.nvmlmock"))
    return root


def _values(root: Path) -> dict[str, int]:
    with live.LiveLayer.open(root / "config" / live.LIVE_FILE_NAME) as layer:
        return layer.values(0)


@pytest.mark.parametrize(
    "argv",
    [
        ["temp", "77", "-i", "0"],  # the full command line
        ["xid", "31", "-i", "0"],  # the quick path
    ],
)
def test_overlay_path_wins_over_mock_nvml_config_in_the_env(
    write_state: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    state = write_state()
    first = _overlay(state, tmp_path / "env-named")
    second = _overlay(state, tmp_path / "flag-named")
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(first / "config" / "state.nvmlmock"))
    monkeypatch.setenv("MOCK_NVML_LIVE", str(first / "config" / live.LIVE_FILE_NAME))
    before = {
        root: live.LiveLayer.open(root / "config" / live.LIVE_FILE_NAME).generation
        for root in (first, second)
    }
    assert ctl.main(["--overlay-path", str(second), *argv]) == ctl.EXIT_OK
    after = {
        root: live.LiveLayer.open(root / "config" / live.LIVE_FILE_NAME).generation
        for root in (first, second)
    }
    assert after[first] == before[first]
    assert after[second] > before[second]
    # with no flag, the environment still names the file
    assert ctl.main(["temp", "66", "-i", "0"]) == ctl.EXIT_OK
    assert _values(first) == {"temperature_c": 66}


def test_the_agent_takes_overlay_path_over_mock_nvml_config_in_the_env(
    write_state: Any, tmp_path: Path
) -> None:
    """The node agent as a real process (without a topology service it only keeps the
    surfaces true): its start line names the live layer it follows, the flag's overlay's,
    whatever the environment names."""
    state = write_state()
    first = _overlay(state, tmp_path / "env-named")
    second = _overlay(state, tmp_path / "flag-named")
    env = dict(os.environ)
    env["MOCK_NVML_CONFIG"] = str(first / "config" / "state.nvmlmock")
    env["MOCK_NVML_LIVE"] = str(first / "config" / live.LIVE_FILE_NAME)
    env.pop("NVML_MOCK_TOPOLOGY_URL", None)
    argv = [sys.executable, "-m", "nvml_mock_engine", "--log-format", "json", "agent"]
    argv += ["--overlay-path", str(second), "--probe-addr", ""]
    log = tmp_path / "agent.log"
    with log.open("wb") as sink:
        agent = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
        try:
            started = wait_for_line(log, '"live"', agent)
        finally:
            agent.terminate()
            agent.wait(timeout=30)
    assert agent.returncode == 0
    record = json.loads(started)
    assert record["live"] == str(second / "config" / live.LIVE_FILE_NAME)
    assert str(first) not in log.read_text()
