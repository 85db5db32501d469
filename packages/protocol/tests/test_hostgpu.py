"""Real-driver detection on fake host trees, and on this machine's own /proc and /sys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from nvml_mock_protocol import hostgpu

PLAIN_DEVICES = """Character devices:
  1 mem
  4 /dev/vc/0
  5 /dev/tty
136 pts

Block devices:
  7 loop
  8 sd
"""


def fake_host(tmp_path: Path, devices: str | None = PLAIN_DEVICES) -> tuple[str, str]:
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    (sys_ / "module" / "overlay").mkdir(parents=True)
    proc.mkdir()
    if devices is not None:
        (proc / "devices").write_text(devices)
    return str(proc), str(sys_)


def test_a_node_without_the_driver(tmp_path: Path) -> None:
    found = hostgpu.detect(*fake_host(tmp_path))
    assert not found.present
    assert found.reason == "no real NVIDIA driver on this node"


def test_the_driver_version_file_is_evidence(tmp_path: Path) -> None:
    proc, sys_ = fake_host(tmp_path)
    version = Path(proc) / "driver" / "nvidia" / "version"
    version.parent.mkdir(parents=True)
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\nGCC version\n")
    found = hostgpu.detect(proc, sys_)
    assert found.present
    assert found.reason == (
        f"a real NVIDIA driver is loaded on this node ({version}: NVRM version: NVIDIA UNIX "
        "x86_64 Kernel Module  550.54.15)"
    )


def test_the_loaded_module_is_evidence(tmp_path: Path) -> None:
    proc, sys_ = fake_host(tmp_path)
    (Path(sys_) / "module" / "nvidia").mkdir()
    found = hostgpu.detect(proc, sys_)
    assert found.present and found.evidence == (f"{sys_}/module/nvidia exists",)


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("195 nvidia", "nvidia"),
        ("510 nvidia-uvm", "nvidia-uvm"),
        ("234 nvidia-caps", "nvidia-caps"),
    ],
)
def test_a_registered_character_major_is_evidence(tmp_path: Path, line: str, name: str) -> None:
    devices = PLAIN_DEVICES.replace("136 pts\n", f"136 pts\n{line}\n")
    proc, sys_ = fake_host(tmp_path, devices)
    found = hostgpu.detect(proc, sys_)
    assert found.present
    assert found.evidence == (f"{proc}/devices lists {name} (major {line.split(maxsplit=1)[0]})",)


def test_only_character_devices_named_nvidia_count(tmp_path: Path) -> None:
    devices = PLAIN_DEVICES + "195 nvidia\n" + "Character devices:\n 99 nvidiafoo\n"
    assert not hostgpu.detect(*fake_host(tmp_path, devices)).present


def test_detection_fails_closed_when_proc_devices_is_unreadable(tmp_path: Path) -> None:
    found = hostgpu.detect(*fake_host(tmp_path, devices=None))
    assert found.present, "cannot rule a driver out: refuse as if there were one"
    assert found.undetermined is not None and "proc/devices" in found.undetermined
    assert found.reason.startswith("cannot tell whether a real NVIDIA driver is loaded (cannot")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    proc, sys_ = fake_host(tmp_path, devices=None)
    os.mkfifo(Path(proc) / "devices")
    found = hostgpu.detect(proc, sys_)
    assert found.undetermined == f"cannot read {proc}/devices: {proc}/devices is not a regular file"


def test_roots_from_the_environment(tmp_path: Path) -> None:
    proc, sys_ = fake_host(tmp_path)
    (Path(sys_) / "module" / "nvidia").mkdir()
    env = {hostgpu.ENV_HOST_PROC_ROOT: proc, hostgpu.ENV_HOST_SYS_ROOT: sys_}
    assert hostgpu.detect_from_environ(env).present
    assert hostgpu.ENV_HOST_PROC_ROOT == "NVML_MOCK_HOST_PROC_ROOT"
    assert hostgpu.ENV_HOST_SYS_ROOT == "NVML_MOCK_HOST_SYS_ROOT"


def test_this_machine_agrees_with_its_own_proc_and_sys() -> None:
    with open("/proc/devices") as handle:
        listed = any(
            part == "nvidia" or part.startswith("nvidia-")
            for line in handle
            for part in line.split()[1:2]
        )
    expected = (
        listed
        or os.path.exists("/proc/driver/nvidia/version")
        or os.path.exists("/sys/module/nvidia")
    )
    assert hostgpu.detect().present == expected
    assert hostgpu.detect_from_environ({}).present == expected
