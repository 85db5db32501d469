"""Device injection through the double, with real device nodes made by mknod (root only)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeHost, Start, container, pod
from nvml_mock_nri.devices import DeviceNode, DeviceScan, scan_device_nodes
from nvml_mock_nri.settings import load_settings
from nvml_mock_protocol.nri.runtime import RuntimeDouble

OPT_IN = {"nvml-mock.nvidia.com/devices": "TRUE"}

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def make_node(path: Path, major: int, minor: int, mode: int, uid: int = 0, gid: int = 0) -> None:
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chmod(path, mode)
    os.chown(path, uid, gid)


@pytest.fixture
def dev_dir(short_tmp: Path) -> Path:
    """A staged device tree like the overlay's dev/."""
    directory = short_tmp / "overlay" / "dev"
    directory.mkdir(parents=True)
    if os.geteuid() == 0:
        make_node(directory / "nvidia0", 195, 0, 0o666)
        make_node(directory / "nvidia1", 195, 1, 0o660, uid=1000, gid=44)
        make_node(directory / "nvidiactl", 195, 255, 0o666)
        make_node(directory / "nvidia-uvm", 510, 0, 0o666)
        make_node(directory / "fuse", 10, 229, 0o666)
        (directory / "nvidia-caps-imex-channels").mkdir()
        (directory / "nvidia-notes").write_text("not a device")
    return directory


@needs_root
async def test_raw_mode_adds_the_staged_char_devices_as_on_the_host(
    runtime: RuntimeDouble, start_plugin: Start, dev_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(dev_dir.parent))
    caplog.set_level(logging.WARNING)
    result = await runtime.create_container(pod(annotations=OPT_IN), container())
    devices = {d.path: d for d in result.container.linux.devices}
    assert list(devices) == ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]
    for name, device in (
        ("nvidia1", devices["/dev/nvidia1"]),
        ("nvidia-uvm", devices["/dev/nvidia-uvm"]),
    ):
        info = os.stat(dev_dir / name)
        assert device.type == "c"
        assert (device.major, device.minor) == (os.major(info.st_rdev), os.minor(info.st_rdev))
        assert device.file_mode.value == stat.S_IMODE(info.st_mode)
        assert (device.uid.value, device.gid.value) == (info.st_uid, info.st_gid)
    assert (devices["/dev/nvidia1"].uid.value, devices["/dev/nvidia1"].gid.value) == (1000, 44)
    assert devices["/dev/nvidia1"].file_mode.value == 0o660
    assert devices["/dev/nvidiactl"].minor == 255
    assert list(result.container.CDI_devices) == []
    assert any("nvidia-notes" in r.getMessage() for r in caplog.records), "bad entry reported"
    assert await plugin.metric("nvml_mock_nri_device_injections_total", 'mode="raw"') == 1


@needs_root
async def test_cdi_mode_adds_the_cdi_device_when_the_spec_exists(
    runtime: RuntimeDouble, start_plugin: Start, dev_dir: Path, short_tmp: Path
) -> None:
    spec = short_tmp / "nvml-mock-nri.yaml"
    spec.write_text('cdiVersion: "0.6.0"\nkind: nvml-mock.nvidia.com/gpu\ndevices: []\n')
    plugin = await start_plugin(
        "--overlay-host-path",
        str(dev_dir.parent),
        "--device-injection-mode",
        "cdi",
        "--cdi-spec-host-path",
        str(spec),
    )
    result = await runtime.create_container(pod(annotations=OPT_IN), container())
    assert [d.name for d in result.container.CDI_devices] == ["nvml-mock.nvidia.com/gpu=all"]
    assert list(result.container.linux.devices) == []
    assert await plugin.metric("nvml_mock_nri_device_injections_total", 'mode="cdi"') == 1


@needs_root
async def test_cdi_mode_without_spec_falls_back_to_raw_with_a_warning(
    runtime: RuntimeDouble,
    start_plugin: Start,
    dev_dir: Path,
    short_tmp: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await start_plugin(
        "--overlay-host-path",
        str(dev_dir.parent),
        "--device-injection-mode",
        "cdi",
        "--cdi-spec-host-path",
        str(short_tmp / "missing.yaml"),
    )
    caplog.set_level(logging.WARNING)
    result = await runtime.create_container(pod(annotations=OPT_IN), container())
    assert list(result.container.CDI_devices) == []
    assert len(result.container.linux.devices) == 4
    warnings = [r for r in caplog.records if "falling back to raw" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert warnings[0].__dict__["pod"] == "app"


@pytest.mark.parametrize(
    ("device_paths", "cdi"),
    [(["/dev/nvidia0"], []), ([], ["nvidia.com/gpu=GPU-1234"])],
)
async def test_devices_from_a_device_plugin_suppress_the_mock_ones(
    runtime: RuntimeDouble,
    start_plugin: Start,
    dev_dir: Path,
    caplog: pytest.LogCaptureFixture,
    device_paths: list[str],
    cdi: list[str],
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(dev_dir.parent))
    caplog.set_level(logging.INFO)
    result = await runtime.create_container(
        pod(annotations=OPT_IN), container(devices=device_paths, cdi=cdi)
    )
    assert len(result.adjustment.linux.devices) == 0
    assert len(result.adjustment.CDI_devices) == 0
    assert len(result.adjustment.mounts) == 1, "overlay and env are still injected"
    assert "MOCK_NVML_CONFIG" in result.env()
    assert any("already has NVIDIA devices" in r.getMessage() for r in caplog.records)
    assert await plugin.metric("nvml_mock_nri_devices_suppressed_total") == 1


async def test_missing_device_tree_fails_open_with_a_warning(
    runtime: RuntimeDouble, start_plugin: Start, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await start_plugin("--device-host-path", str(short_tmp / "nowhere"))
    caplog.set_level(logging.WARNING)
    result = await runtime.create_container(pod(annotations=OPT_IN), container())
    assert len(result.adjustment.mounts) == 1
    assert list(result.container.linux.devices) == []
    assert any("cannot read the mock device directory" in r.getMessage() for r in caplog.records)


async def test_empty_device_tree_has_its_own_warning(
    runtime: RuntimeDouble, start_plugin: Start, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (short_tmp / "empty").mkdir()
    await start_plugin("--device-host-path", str(short_tmp / "empty"))
    caplog.set_level(logging.WARNING)
    result = await runtime.create_container(pod(annotations=OPT_IN), container())
    assert list(result.container.linux.devices) == []
    assert any("holds no device nodes" in r.getMessage() for r in caplog.records)


def test_scan_rejects_regular_files_and_directories(short_tmp: Path) -> None:
    (short_tmp / "nvidia0").write_text("")
    (short_tmp / "nvidia-caps").mkdir()
    os.symlink(short_tmp / "gone", short_tmp / "nvidia9")
    scan = scan_device_nodes(str(short_tmp))
    assert scan.nodes == []
    assert any("nvidia0" in p and "not a character device" in p for p in scan.problems)
    assert any("nvidia9" in p and "cannot stat" in p for p in scan.problems)
    assert not any("nvidia-caps" in p for p in scan.problems), "directories are not devices"


async def test_an_unexpected_failure_lets_the_container_start_and_is_counted(
    runtime: RuntimeDouble, start_plugin: Start, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(path: str) -> Any:
        raise RuntimeError("scanner exploded")

    plugin = await start_plugin(scan=broken)
    result = await runtime.create_container(pod(annotations=OPT_IN), container())
    assert result.consulted == ("10-nvml-mock",), "no error status: the creation goes on"
    assert len(result.adjustment.mounts) == 0
    assert await plugin.metric("nvml_mock_nri_create_container_errors_total") == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "starts without the overlay" in errors[0].getMessage()
    assert errors[0].__dict__["pod"] == "app"
    later = await runtime.create_container(pod(), container())
    assert len(later.adjustment.mounts) == 1, "the plugin keeps serving"


def _one_node(path: str) -> DeviceScan:
    # What a staged dev/ yields; the refusals below happen before any look-up.
    return DeviceScan([DeviceNode("/dev/nvidia0", 195, 0, 0o666, 0, 0)])


@pytest.mark.parametrize("mode", ["raw", "cdi"])
async def test_no_devices_on_a_node_with_a_real_driver(
    runtime: RuntimeDouble,
    start_plugin: Start,
    fake_host: FakeHost,
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    fake_host.load_driver()
    caplog.set_level(logging.INFO)
    plugin = await start_plugin(
        "--device-injection-mode", mode, scan=_one_node, spec_exists=lambda _: True
    )
    result = await runtime.create_container(pod(annotations=OPT_IN), container())
    assert len(result.adjustment.mounts) == 1, "the overlay and env are still injected"
    assert list(result.container.linux.devices) == []
    assert list(result.container.CDI_devices) == []
    assert await plugin.metric("nvml_mock_nri_real_driver_present") == 1
    refused = 'reason="real_driver"'
    assert await plugin.metric("nvml_mock_nri_devices_refused_total", refused) == 1
    ready = await plugin.get("/readyz")
    assert ready.status_code == 200
    assert ready.text.startswith(
        "ok (device nodes and IMEX channels refused: a real NVIDIA driver is loaded on "
        f"this node ({fake_host.proc}/driver/nvidia/version: NVRM version"
    ), ready.text
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("device opt-in disabled on this node: a real NVIDIA") for m in messages)
    assert any(m.startswith("device nodes refused: a real NVIDIA driver") for m in messages)


async def test_a_driver_loaded_after_start_closes_the_door(
    runtime: RuntimeDouble, start_plugin: Start, fake_host: FakeHost
) -> None:
    plugin = await start_plugin(scan=_one_node)
    before = await runtime.create_container(pod(annotations=OPT_IN), container())
    assert len(before.container.linux.devices) == 1
    assert (await plugin.get("/readyz")).text == "ok\n"
    fake_host.load_driver()
    after = await runtime.create_container(pod(annotations=OPT_IN), container())
    assert list(after.container.linux.devices) == []
    assert await plugin.metric("nvml_mock_nri_real_driver_present") == 1
    assert "device nodes and IMEX channels refused" in (await plugin.get("/readyz")).text


async def test_only_allowed_namespaces_may_opt_in(
    runtime: RuntimeDouble, start_plugin: Start, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = await start_plugin("--device-namespaces", "demo, ml", scan=_one_node)
    caplog.set_level(logging.WARNING)
    refused = await runtime.create_container(pod(annotations=OPT_IN), container())
    assert len(refused.adjustment.mounts) == 1
    assert list(refused.container.linux.devices) == []
    labels = 'reason="namespace_not_allowed"'
    assert await plugin.metric("nvml_mock_nri_devices_refused_total", labels) == 1
    warning = next(r for r in caplog.records if "device nodes refused" in r.getMessage())
    assert "namespace 'default' is not allowed to opt in" in warning.getMessage()
    assert warning.__dict__["pod"] == "app"
    allowed = await runtime.create_container(pod(namespace="ml", annotations=OPT_IN), container())
    assert [d.path for d in allowed.container.linux.devices] == ["/dev/nvidia0"]


async def test_the_device_allow_list_is_empty_by_default(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    await start_plugin("--device-namespaces", "", scan=_one_node)
    result = await runtime.create_container(pod(annotations=OPT_IN), container())
    assert list(result.container.linux.devices) == []
    assert load_settings([], {}).device_namespaces == ()
    env = {"NVML_MOCK_DEVICE_NAMESPACES": "nvml-mock-demo"}
    assert load_settings([], env).device_namespaces == ("nvml-mock-demo",)
