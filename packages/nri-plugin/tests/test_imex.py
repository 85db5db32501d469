"""IMEX channel injection through the double, with real channel devices made by mknod."""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FakeHost, Start, container, pod
from nvml_mock_nri.devices import scan_imex_channels
from nvml_mock_nri.settings import load_settings
from nvml_mock_protocol import names
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.runtime import CreateContainerResult, RuntimeDouble

CHANNELS = {names.ANNOTATION_IMEX_CHANNELS: "True"}
DEVICES = {names.ANNOTATION_DEVICES: "true"}
BOTH = {**CHANNELS, **DEVICES}

MAJOR = 242
"""A major in Linux's local/experimental range, as the stage picks for the channels."""
CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
STAGED = (0, 1, 2, 10)
"""Channel numbers staged by the fixture: ``channel10`` must come after ``channel2``."""


@dataclass
class Overlay:
    """A staged overlay: GPU nodes in ``dev/``, IMEX channels in their directory."""

    root: Path

    @property
    def channels(self) -> Path:
        return self.root / names.OVERLAY_DEV_DIR / names.IMEX_CHANNELS_DIR


def _mknod(path: Path, major: int, minor: int, mode: int) -> None:
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chmod(path, mode)


@pytest.fixture
def overlay(short_tmp: Path) -> Overlay:
    """Real device nodes, as the stage makes them; skipped where mknod is not permitted."""
    staged = Overlay(short_tmp / "overlay")
    staged.channels.mkdir(parents=True)
    dev = staged.channels.parent
    try:
        _mknod(dev / "nvidia0", 195, 0, 0o666)
    except PermissionError as exc:
        pytest.skip(f"mknod of a character device is not permitted here ({exc.strerror})")
    _mknod(dev / "nvidiactl", 195, 255, 0o666)
    for number in STAGED:
        _mknod(staged.channels / f"channel{number}", MAJOR, number, 0o666 if number else 0o660)
    (staged.channels / "channel7").write_text("a regular file, not a channel")
    (staged.channels / "README").write_text("not named channel*: ignored in silence")
    return staged


def channel_paths(numbers: tuple[int, ...] = STAGED) -> list[str]:
    return [f"{CHANNEL_DIR}/channel{n}" for n in numbers]


def channels_of(result: CreateContainerResult) -> list[api.LinuxDevice]:
    return [d for d in result.container.linux.devices if d.path.startswith(CHANNEL_DIR + "/")]


def cgroup_rules(result: CreateContainerResult) -> list[tuple[bool, str, int, int, str]]:
    return [
        (r.allow, r.type, r.major.value, r.minor.value, r.access)
        for r in result.container.linux.resources.devices
    ]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize("mode", ["raw", "cdi"])
async def test_an_annotated_pod_gets_exactly_the_staged_channels(
    runtime: RuntimeDouble,
    start_plugin: Start,
    overlay: Overlay,
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    plugin = await start_plugin(
        "--overlay-host-path",
        str(overlay.root),
        "--device-injection-mode",
        mode,
        spec_exists=lambda _: True,
    )
    caplog.set_level(logging.WARNING)
    result = await runtime.create_container(pod(annotations=CHANNELS), container())
    devices = list(result.container.linux.devices)
    assert [d.path for d in devices] == channel_paths(), "only the channels, in channel order"
    assert [(d.type, d.major, d.minor) for d in devices] == [("c", MAJOR, n) for n in STAGED]
    assert [d.file_mode.value for d in devices] == [0o660, 0o666, 0o666, 0o666]
    assert cgroup_rules(result) == [(True, "c", MAJOR, n, "rw") for n in STAGED]
    assert list(result.container.CDI_devices) == [], "channels are raw even in cdi mode"
    assert len(result.adjustment.mounts) == 1
    assert "MOCK_NVML_CONFIG" in result.env()
    skipped = [m for m in warnings(caplog) if "channel7" in m]
    assert len(skipped) == 1 and "not a character device" in skipped[0], warnings(caplog)
    assert not any("README" in m for m in warnings(caplog))
    assert await plugin.metric("nvml_mock_nri_imex_channel_injections_total") == 1
    assert await plugin.metric("nvml_mock_nri_device_injections_total", f'mode="{mode}"') == 0


@pytest.mark.parametrize("annotations", [{}, {names.ANNOTATION_IMEX_CHANNELS: "false"}, DEVICES])
async def test_a_pod_without_the_annotation_gets_no_channels(
    runtime: RuntimeDouble,
    start_plugin: Start,
    overlay: Overlay,
    annotations: dict[str, str],
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(overlay.root))
    result = await runtime.create_container(pod(annotations=annotations), container())
    assert channels_of(result) == []
    assert len(result.adjustment.mounts) == 1
    assert await plugin.metric("nvml_mock_nri_imex_channel_injections_total") == 0


async def test_the_annotation_name_is_configurable(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Overlay
) -> None:
    await start_plugin(
        "--overlay-host-path", str(overlay.root), "--imex-channel-annotation", "example.com/imex"
    )
    default = await runtime.create_container(pod(annotations=CHANNELS), container())
    assert channels_of(default) == []
    renamed = await runtime.create_container(
        pod(annotations={"example.com/imex": "true"}), container()
    )
    assert [d.path for d in channels_of(renamed)] == channel_paths()


async def test_a_namespace_outside_the_allow_list_gets_no_channels(
    runtime: RuntimeDouble,
    start_plugin: Start,
    overlay: Overlay,
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugin = await start_plugin(
        "--overlay-host-path", str(overlay.root), "--device-namespaces", "ml"
    )
    caplog.set_level(logging.WARNING)
    refused = await runtime.create_container(pod(annotations=CHANNELS), container())
    assert list(refused.container.linux.devices) == []
    assert len(refused.adjustment.mounts) == 1, "the overlay and env are still injected"
    record = next(r for r in caplog.records if "IMEX channels refused" in r.getMessage())
    assert "namespace 'default' is not allowed to opt in" in record.getMessage()
    assert record.__dict__["pod"] == "app"
    labels = 'reason="namespace_not_allowed"'
    assert await plugin.metric("nvml_mock_nri_imex_channels_refused_total", labels) == 1
    assert await plugin.metric("nvml_mock_nri_devices_refused_total", labels) == 0
    allowed = await runtime.create_container(pod(namespace="ml", annotations=CHANNELS), container())
    assert [d.path for d in channels_of(allowed)] == channel_paths()


async def test_no_namespace_may_opt_in_by_default(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Overlay
) -> None:
    await start_plugin("--overlay-host-path", str(overlay.root), "--device-namespaces", "")
    result = await runtime.create_container(pod(annotations=CHANNELS), container())
    assert channels_of(result) == []


@pytest.mark.parametrize("mode", ["raw", "cdi"])
async def test_no_channels_on_a_node_with_a_real_driver(
    runtime: RuntimeDouble,
    start_plugin: Start,
    overlay: Overlay,
    fake_host: FakeHost,
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    fake_host.load_driver()
    caplog.set_level(logging.WARNING)
    plugin = await start_plugin(
        "--overlay-host-path",
        str(overlay.root),
        "--device-injection-mode",
        mode,
        spec_exists=lambda _: True,
    )
    result = await runtime.create_container(pod(annotations=CHANNELS), container())
    assert list(result.container.linux.devices) == []
    assert cgroup_rules(result) == []
    assert len(result.adjustment.mounts) == 1, "the overlay and env are still injected"
    refused = 'reason="real_driver"'
    assert await plugin.metric("nvml_mock_nri_imex_channels_refused_total", refused) == 1
    assert await plugin.metric("nvml_mock_nri_real_driver_present") == 1
    ready = await plugin.get("/readyz")
    assert ready.status_code == 200
    assert ready.text.startswith("ok (device nodes and IMEX channels refused: a real NVIDIA"), (
        ready.text
    )
    messages = warnings(caplog)
    assert any(m.startswith("IMEX channels refused: a real NVIDIA driver") for m in messages)
    assert any("without device nodes or IMEX channels" in m for m in messages)


async def test_both_opt_ins_get_both_sets(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Overlay
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(overlay.root))
    result = await runtime.create_container(pod(annotations=BOTH), container())
    paths = [d.path for d in result.container.linux.devices]
    assert paths == ["/dev/nvidia0", "/dev/nvidiactl", *channel_paths()]
    assert cgroup_rules(result) == [
        (True, "c", 195, 0, "rw"),
        (True, "c", 195, 255, "rw"),
        *((True, "c", MAJOR, n, "rw") for n in STAGED),
    ]
    assert await plugin.metric("nvml_mock_nri_device_injections_total", 'mode="raw"') == 1
    assert await plugin.metric("nvml_mock_nri_imex_channel_injections_total") == 1


async def test_both_opt_ins_in_cdi_mode_get_the_cdi_device_and_raw_channels(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Overlay
) -> None:
    await start_plugin(
        "--overlay-host-path",
        str(overlay.root),
        "--device-injection-mode",
        "cdi",
        spec_exists=lambda _: True,
    )
    result = await runtime.create_container(pod(annotations=BOTH), container())
    assert [d.name for d in result.container.CDI_devices] == [names.CDI_DEVICE_NAME]
    assert [d.path for d in result.container.linux.devices] == channel_paths()


@pytest.mark.parametrize(
    ("device_paths", "cdi"),
    [(["/dev/nvidia0"], []), ([], ["nvidia.com/gpu=GPU-1234"])],
)
async def test_a_device_plugin_allocation_does_not_suppress_the_channels(
    runtime: RuntimeDouble,
    start_plugin: Start,
    overlay: Overlay,
    device_paths: list[str],
    cdi: list[str],
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(overlay.root))
    result = await runtime.create_container(
        pod(annotations=BOTH), container(devices=device_paths, cdi=cdi)
    )
    added = [d.path for d in result.adjustment.linux.devices]
    assert added == channel_paths(), "mock GPU nodes suppressed, channels still added"
    assert await plugin.metric("nvml_mock_nri_devices_suppressed_total") == 1
    assert await plugin.metric("nvml_mock_nri_imex_channel_injections_total") == 1


async def test_a_channel_the_container_already_has_is_left_as_it_is(
    runtime: RuntimeDouble,
    start_plugin: Start,
    overlay: Overlay,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await start_plugin("--overlay-host-path", str(overlay.root))
    caplog.set_level(logging.INFO)
    given = container()
    given.linux.devices.add(path=f"{CHANNEL_DIR}/channel1", type="c", major=237, minor=1)
    result = await runtime.create_container(pod(annotations=CHANNELS), given)
    added = [d.path for d in result.adjustment.linux.devices]
    assert added == channel_paths((0, 2, 10))
    kept = next(d for d in result.container.linux.devices if d.path.endswith("/channel1"))
    assert (kept.major, kept.minor) == (237, 1), "not replaced"
    assert any("already has" in r.getMessage() for r in caplog.records)


async def test_a_missing_channel_directory_injects_the_overlay_with_a_warning(
    runtime: RuntimeDouble,
    start_plugin: Start,
    short_tmp: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (short_tmp / "overlay" / "dev").mkdir(parents=True)
    plugin = await start_plugin("--overlay-host-path", str(short_tmp / "overlay"))
    caplog.set_level(logging.WARNING)
    result = await runtime.create_container(pod(annotations=CHANNELS), container())
    assert list(result.container.linux.devices) == []
    assert len(result.adjustment.mounts) == 1
    assert "MOCK_NVML_CONFIG" in result.env()
    expected = f"{short_tmp}/overlay/dev/nvidia-caps-imex-channels"
    messages = [m for m in warnings(caplog) if "cannot read the IMEX channel directory" in m]
    assert len(messages) == 1 and expected in messages[0], warnings(caplog)
    assert await plugin.metric("nvml_mock_nri_imex_channel_injections_total") == 0


async def test_the_channel_directory_can_be_given(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Overlay, short_tmp: Path
) -> None:
    moved = short_tmp / "elsewhere"
    overlay.channels.rename(moved)
    await start_plugin(
        "--overlay-host-path", str(overlay.root), "--imex-channel-host-path", str(moved)
    )
    result = await runtime.create_container(pod(annotations=CHANNELS), container())
    assert [d.path for d in result.container.linux.devices] == channel_paths()


def test_the_channel_directory_setting() -> None:
    assert (
        load_settings([], {}).effective_imex_channel_host_path
        == "/var/lib/nvml-mock/dev/nvidia-caps-imex-channels"
    )
    derived = load_settings(["--overlay-host-path", "/srv/mock/"], {})
    assert derived.effective_imex_channel_host_path == "/srv/mock/dev/nvidia-caps-imex-channels"
    env = {"NVML_MOCK_IMEX_CHANNEL_HOST_PATH": "/x/ch", "NVML_MOCK_IMEX_CHANNEL_ANNOTATION": "a/b"}
    given = load_settings([], env)
    assert given.effective_imex_channel_host_path == "/x/ch"
    assert given.imex_channel_annotation == "a/b"
    assert load_settings([], {}).imex_channel_annotation == "nvml-mock.nvidia.com/imex-channels"


def test_scan_reports_what_is_not_a_channel(short_tmp: Path) -> None:
    (short_tmp / "channel0").write_text("")
    (short_tmp / "channel1").mkdir()
    os.symlink(short_tmp / "gone", short_tmp / "channel2")
    (short_tmp / "other").write_text("")
    scan = scan_imex_channels(str(short_tmp))
    assert scan.nodes == []
    assert [p.split(":")[0] for p in scan.problems] == [
        "skipping IMEX channel channel0",
        "skipping IMEX channel channel1",
        "skipping IMEX channel channel2",
    ]
    assert "a directory" in scan.problems[1] and "cannot stat" in scan.problems[2]


def test_scan_of_a_directory_without_channels_says_so(short_tmp: Path) -> None:
    scan = scan_imex_channels(str(short_tmp))
    assert scan.nodes == []
    assert scan.problems == [
        f"the IMEX channel directory {short_tmp} holds no channel devices; injecting the "
        "overlay without IMEX channels"
    ]
