"""The work-alike over the live layer: changes show in every view, a lost GPU reads as the
real tool prints it, and ``-r`` clears a GPU's faults when the caller may write the layer.

Lost-GPU output needs the library to answer ``NVML_ERROR_GPU_IS_LOST`` for a GPU whose
``gpu_lost`` key is set; where the library does not (yet) do that, those tests skip and say so.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import nvml_mock_live as live
import pytest
from conftest import StateWriter, needs_mount_namespaces, read_only_bind
from smi_fixtures.helpers import smi

LOST = (
    "Unable to determine the device handle for GPU0000:19:00.0: GPU is lost.  "
    "Reboot the system to recover this GPU"
)


@pytest.fixture
def live_file(write_state: StateWriter) -> Path:
    state = write_state()
    return live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))


def set_live(path: Path, gpu: int, values: dict[str, int]) -> None:
    with live.LiveLayer.open(path) as layer:
        layer.set(gpu, values)


def live_values(path: Path, gpu: int) -> dict[str, int]:
    with live.LiveLayer.open(path) as layer:
        return layer.values(gpu)


def test_live_values_show_in_the_table_the_report_and_the_csv(
    library_file: Path, live_file: Path
) -> None:
    set_live(live_file, 1, {"temperature_c": 93, "util_gpu_pct": 57, "pstate": 2})
    rc, out = smi(
        library_file,
        "--query-gpu=index,temperature.gpu,utilization.gpu,pstate",
        "--format=csv,noheader",
    )
    assert rc == 0
    assert out.splitlines() == ["0, 31, 0 %, P0", "1, 93, 57 %, P2"]
    rc, out = smi(library_file, "-q", "-i", "1", "-d", "TEMPERATURE")
    assert rc == 0 and "GPU Current Temp" in out and ": 93 C" in out
    rc, out = smi(library_file)
    assert rc == 0
    assert any("93C" in line and "P2" in line for line in out.splitlines())
    assert any("57%" in line for line in out.splitlines())


def _library_answers_lost(cnvml: ctypes.CDLL, live_file: Path) -> bool:
    set_live(live_file, 1, {"gpu_lost": 1})
    assert cnvml.nvmlInit_v2() == 0
    try:
        handle = ctypes.c_void_p()
        return int(cnvml.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(handle))) == 15
    finally:
        cnvml.nvmlShutdown()


@pytest.fixture
def lost_gpu(cnvml: ctypes.CDLL, live_file: Path) -> Path:
    if not _library_answers_lost(cnvml, live_file):
        pytest.skip("this library does not answer NVML_ERROR_GPU_IS_LOST for gpu_lost yet")
    return live_file


def test_a_lost_gpu_in_the_table_and_the_report(library_file: Path, lost_gpu: Path) -> None:
    for args in ((), ("-q",), ("-q", "-x")):
        rc, out = smi(library_file, *args)
        assert (rc, out) == (15, LOST + "\n"), args
    rc, out = smi(library_file, "-i", "0")  # the other GPU still reads
    assert rc == 0 and "GPU is lost" not in out


def test_a_lost_gpu_in_csv_fields_and_the_list(library_file: Path, lost_gpu: Path) -> None:
    rc, out = smi(library_file, "--query-gpu=index,name,temperature.gpu", "--format=csv,noheader")
    assert rc == 15
    assert out.splitlines()[1] == "[GPU is lost], [GPU is lost], [GPU is lost]"
    assert out.splitlines()[0].startswith("0, NVIDIA H100 80GB HBM3, 31")
    rc, out = smi(library_file, "-L")
    assert rc == 15
    assert out.splitlines() == [
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-01000100-1111-2222-3333-000000000000)",
        LOST,
    ]


def test_reset_clears_one_gpu(library_file: Path, live_file: Path) -> None:
    set_live(live_file, 0, {"temperature_c": 95})
    set_live(live_file, 1, {"gpu_lost": 1, "ecc_volatile_uncorrected": 4})
    rc, out = smi(library_file, "-r", "-i", "1")
    assert (rc, out) == (0, "GPU 00000000:19:00.0 was successfully reset.\n")
    assert live_values(live_file, 1) == {}
    assert live_values(live_file, 0) == {"temperature_c": 95}
    rc, out = smi(library_file, "--gpu-reset")
    assert (rc, out) == (
        0,
        "GPU 00000000:18:00.0 was successfully reset.\n"
        "GPU 00000000:19:00.0 was successfully reset.\n"
        "All done.\n",
    )
    assert live_values(live_file, 0) == {}


def test_reset_by_uuid_or_bus_id_and_unknown_ids(library_file: Path, live_file: Path) -> None:
    set_live(live_file, 1, {"temperature_c": 95})
    rc, _ = smi(library_file, "-r", "-i", "GPU-01000100-1111-2222-3333-000000000001")
    assert rc == 0 and live_values(live_file, 1) == {}
    set_live(live_file, 1, {"temperature_c": 95})
    rc, _ = smi(library_file, "-r", "-i", "0000:19:00.0")
    assert rc == 0 and live_values(live_file, 1) == {}
    assert smi(library_file, "-r", "-i", "5") == (6, "No devices were found\n")
    assert smi(library_file, "-r", "-q")[0] == 2


def test_reset_without_a_live_layer_is_not_supported(
    library_file: Path, write_state: StateWriter
) -> None:
    write_state()
    rc, out = smi(library_file, "-r", "-i", "0")
    assert (rc, out) == (
        3,
        "The following GPUs could not be reset:\n  GPU 00000000:18:00.0: Not Supported\n",
    )


@needs_mount_namespaces
def test_reset_from_a_read_only_overlay_fails_for_permission(
    library_file: Path, live_file: Path, tmp_path: Path
) -> None:
    """Inside a container the overlay is read-only: the reset fails as the real tool's does
    for a caller without permission, and nothing changes."""
    set_live(live_file, 0, {"temperature_c": 95})
    mount = tmp_path / "mnt"
    mount.mkdir()
    host = live_file.parent
    command = f"{sys.executable} -m nvml_mock_smi -r -i 0 --nvml-lib {library_file}"
    script = read_only_bind(host, mount) + f"exec {command}"
    env = dict(os.environ, MOCK_NVML_CONFIG=str(mount / "state.nvmlmock"))
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 4, proc.stderr
    assert (
        proc.stdout == "The following GPUs could not be reset:\n"
        "  GPU 00000000:18:00.0: Insufficient Permissions\n"
    )
    assert live_values(live_file, 0) == {"temperature_c": 95}
