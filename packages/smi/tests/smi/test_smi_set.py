"""The commands that change a GPU, on the live layer: each change reads back through NVML
(nvidia-ml-py) and the work-alike's own views, and a caller that may not write the layer gets
the real tool's refusal (message and exit code) with nothing changed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nvml_mock_live as live
import pytest
from conftest import StateWriter, needs_mount_namespaces, read_only_bind
from smi_fixtures.helpers import smi

BUS0, BUS1 = "00000000:18:00.0", "00000000:19:00.0"
TERMINATING = "Terminating early due to previous errors."


@pytest.fixture
def live_file(write_state: StateWriter) -> Path:
    state = write_state()
    return live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))


@pytest.fixture
def gpu(pynvml: Any, live_file: Path) -> Iterator[Any]:
    """GPU 1 through nvidia-ml-py, over the same state and live layer the tool changes."""
    pynvml.nvmlInit()
    try:
        yield pynvml.nvmlDeviceGetHandleByIndex(1)
    finally:
        pynvml.nvmlShutdown()


def query(library: Path, fields: str, gpu: str = "1") -> list[str]:
    rc, out = smi(library, "-i", gpu, f"--query-gpu={fields}", "--format=csv,noheader,nounits")
    assert rc == 0, out
    return [cell.strip() for cell in out.strip().split(",")]


def test_persistence_mode(library_file: Path, live_file: Path, pynvml: Any, gpu: Any) -> None:
    before = pynvml.nvmlDeviceGetPersistenceMode(gpu)
    word, mode = ("Disabled", "0") if before else ("Enabled", "1")
    assert smi(library_file, "-i", "1", "-pm", mode) == (
        0,
        f"{word} persistence mode for GPU {BUS1}.\nAll done.\n",
    )
    assert pynvml.nvmlDeviceGetPersistenceMode(gpu) == int(mode)
    assert query(library_file, "persistence_mode") == [word]
    assert smi(library_file, "-i", "1", f"--persistence-mode={word.upper()}") == (
        0,
        f"Persistence mode is already {word} for GPU {BUS1}.\nAll done.\n",
    )


def test_compute_mode(library_file: Path, live_file: Path, pynvml: Any, gpu: Any) -> None:
    rc, out = smi(library_file, "-c", "3")
    assert (rc, out) == (
        0,
        f"Set compute mode to EXCLUSIVE_PROCESS for GPU {BUS0}.\n"
        f"Set compute mode to EXCLUSIVE_PROCESS for GPU {BUS1}.\nAll done.\n",
    )
    assert pynvml.nvmlDeviceGetComputeMode(gpu) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert query(library_file, "compute_mode", "0") == ["Exclusive_Process"]
    rc, out = smi(library_file, "-i", "1", "--compute-mode=EXCLUSIVE_PROCESS")
    assert rc == 0
    assert out == f"Compute mode is already set to EXCLUSIVE_PROCESS for GPU {BUS1}.\nAll done.\n"
    assert smi(library_file, "-c", "9")[0] == 2


def test_power_limit_within_the_constraints(
    library_file: Path, live_file: Path, pynvml: Any, gpu: Any
) -> None:
    lo, hi = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(gpu)
    old = pynvml.nvmlDeviceGetPowerManagementLimit(gpu)
    watts = (lo + hi) // 2000
    assert smi(library_file, "-i", "1", "-pl", str(watts)) == (
        0,
        f"Power limit for GPU {BUS1} was set to {watts:.2f} W from {old / 1000:.2f} W.\n"
        "All done.\n",
    )
    assert pynvml.nvmlDeviceGetPowerManagementLimit(gpu) == watts * 1000
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(gpu) == watts * 1000
    assert query(library_file, "power.limit,enforced.power.limit") == [f"{watts:.2f}"] * 2
    rc, out = smi(library_file, "-i", "1", "-pl", str(hi // 1000 + 100))
    assert (rc, out) == (
        2,
        f"Provided power limit {hi / 1000 + 100:.2f} W is not a valid power limit which should be"
        f" between {lo / 1000:.2f} W and {hi / 1000:.2f} W for GPU {BUS1}\n{TERMINATING}\n",
    )
    assert pynvml.nvmlDeviceGetPowerManagementLimit(gpu) == watts * 1000


def test_ecc_mode_is_pending_until_a_reset(
    library_file: Path, live_file: Path, pynvml: Any, gpu: Any
) -> None:
    assert pynvml.nvmlDeviceGetEccMode(gpu) == [1, 1]
    assert smi(library_file, "-i", "1", "-e", "0") == (
        0,
        f"Disabled ECC support for GPU {BUS1}.\nAll done.\nReboot required.\n",
    )
    assert pynvml.nvmlDeviceGetEccMode(gpu) == [1, 0]
    assert query(library_file, "ecc.mode.current,ecc.mode.pending") == ["Enabled", "Disabled"]
    rc, out = smi(library_file, "-q", "-i", "1", "-d", "ECC")
    assert (
        rc == 0
        and "Current" in out
        and out.split("Pending", 1)[1].split("\n", 1)[0].endswith("Disabled")
    )
    assert smi(library_file, "-r", "-i", "1")[0] == 0
    assert pynvml.nvmlDeviceGetEccMode(gpu) == [0, 0]
    assert query(library_file, "ecc.mode.current,ecc.mode.pending") == ["Disabled", "Disabled"]
    assert pynvml.nvmlDeviceGetEccMode(pynvml.nvmlDeviceGetHandleByIndex(0)) == [1, 1]


def test_applications_clocks_set_and_reset(
    library_file: Path, live_file: Path, pynvml: Any, gpu: Any
) -> None:
    mem = pynvml.nvmlDeviceGetSupportedMemoryClocks(gpu)[-1]
    graphics = pynvml.nvmlDeviceGetSupportedGraphicsClocks(gpu, mem)[-1]
    default = pynvml.nvmlDeviceGetApplicationsClock(gpu, pynvml.NVML_CLOCK_GRAPHICS)
    assert graphics != default
    assert smi(library_file, "-i", "1", "-ac", f"{mem},{graphics}") == (
        0,
        f'Applications clocks set to "(MEM {mem}, SM {graphics})" for GPU {BUS1}\nAll done.\n',
    )
    assert pynvml.nvmlDeviceGetApplicationsClock(gpu, pynvml.NVML_CLOCK_GRAPHICS) == graphics
    assert pynvml.nvmlDeviceGetApplicationsClock(gpu, pynvml.NVML_CLOCK_MEM) == mem
    assert query(library_file, "clocks.applications.graphics") == [str(graphics)]
    rc, out = smi(library_file, "-i", "1", "-ac", f"{mem},{graphics + 1}")
    assert rc == 2
    assert out.startswith(f'Specified clock combination "(MEM {mem}, SM {graphics + 1})"')
    assert smi(library_file, "-i", "1", "-rac") == (0, "All done.\n")
    assert pynvml.nvmlDeviceGetApplicationsClock(gpu, pynvml.NVML_CLOCK_GRAPHICS) == default


def test_locked_gpu_and_memory_clocks_hold_the_current_clocks(
    library_file: Path, live_file: Path, pynvml: Any, gpu: Any
) -> None:
    sm = pynvml.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_SM)
    mem = pynvml.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_MEM)
    lo = sm + 300
    rc, out = smi(library_file, "-i", "1", "-lgc", f"{lo},{lo + 200}")
    assert rc == 0
    assert out.startswith(f'GPU clocks set to "(gpuClkMin {lo}, gpuClkMax {lo + 200})" for GPU')
    assert out.endswith("All done.\n")
    assert pynvml.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_SM) == lo
    assert pynvml.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_GRAPHICS) == lo
    assert query(library_file, "clocks.sm,clocks.gr") == [str(lo)] * 2
    locked_mem = mem - 100
    rc, out = smi(library_file, "-i", "1", "--lock-memory-clocks", str(locked_mem))
    assert rc == 0
    assert f'Memory clocks set to "(memClkMin {locked_mem}, memClkMax {locked_mem})"' in out
    assert pynvml.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_MEM) == locked_mem
    assert smi(library_file, "-i", "1", "-rgc") == (0, "All done.\n")
    assert pynvml.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_SM) == sm
    assert smi(library_file, "-i", "1", "-rmc") == (0, "All done.\n")
    assert pynvml.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_MEM) == mem
    assert smi(library_file, "-lgc", "1500,1000")[0] == 2


def test_persistence_warning_after_a_clock_lock(library_file: Path, live_file: Path) -> None:
    assert smi(library_file, "-i", "0", "-pm", "0")[0] == 0
    rc, out = smi(library_file, "-i", "0", "-lgc", "1500")
    assert rc == 0
    assert out == (
        f'GPU clocks set to "(gpuClkMin 1500, gpuClkMax 1500)" for GPU {BUS0}\n\n'
        f"Warning: persistence mode is disabled on device {BUS0}. See the Known Issues section"
        " of the nvidia-smi(1) man page for more information. Run with [--help | -h] switch to"
        " get more information on how to enable persistence mode.\nAll done.\n"
    )


def test_auto_boost_default_is_a_warning_on_boards_without_auto_boost(
    library_file: Path, live_file: Path
) -> None:
    assert smi(library_file, "-i", "0", "--auto-boost-default=0") == (
        0,
        f"Setting auto boosted clocks default is not supported for GPU {BUS0}.\n"
        "Treating as warning and moving on.\nAll done.\n",
    )


def test_without_a_live_layer_nothing_can_be_changed(
    library_file: Path, write_state: StateWriter
) -> None:
    write_state()
    assert smi(library_file, "-i", "0", "-pm", "1") == (
        3,
        f"Unable to set persistence mode for GPU {BUS0}: Not Supported\n{TERMINATING}\n",
    )


@needs_mount_namespaces
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-pm", "1"), f"Unable to set persistence mode for GPU {BUS0}: Insufficient Permissions"),
        (("-c", "2"), f"Unable to set the compute mode for GPU {BUS0}: Insufficient Permissions"),
        (
            ("-lgc", "1500"),
            f"The current user does not have permission to change clocks for GPU {BUS0}.",
        ),
    ],
)
def test_from_a_read_only_overlay_every_change_fails_for_permission(
    library_file: Path, live_file: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    """Inside a container the overlay is read-only, as a non-root caller's driver is."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    smi_args = ["-i", "0", *args, "--nvml-lib", str(library_file)]
    command = " ".join([sys.executable, "-m", "nvml_mock_smi", *smi_args])
    script = read_only_bind(live_file.parent, mount) + f"exec {command}"
    env = dict(os.environ, MOCK_NVML_CONFIG=str(mount / "state.nvmlmock"))
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (4, f"{message}\n{TERMINATING}\n"), proc.stderr
    with live.LiveLayer.open(live_file) as layer:
        assert layer.values(0) == {}


@pytest.mark.parametrize(
    "args",
    [
        ("-lgc", "4294967296"),
        ("-lgc", "100,4294967296"),
        ("-lmc", "99999999999"),
        ("--lock-memory-clocks", "18446744073709551616"),
        ("-ac", "99999999999,1000"),
    ],
)
def test_clocks_wider_than_unsigned_32_bit_are_invalid_arguments(
    library_file: Path, live_file: Path, args: tuple[str, ...]
) -> None:
    """They ended in a traceback (rc 1); NVML takes unsigned int MHz and the real tool
    refuses a wider number as any bad argument."""
    rc, out = smi(library_file, "-i", "0", *args)
    assert rc == 2
    assert "Invalid combination of input arguments" in out
    assert "Traceback" not in out
