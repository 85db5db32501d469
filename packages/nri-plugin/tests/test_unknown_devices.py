"""A container whose own NVIDIA_VISIBLE_DEVICES names a GPU the node lacks fails its creation
with the NVIDIA container toolkit's message (``nvidia-container-cli: device error: 7: unknown
device``), as on a real node; ``--unknown-visible-devices allow`` leaves the refusal to
nvmlInit. Through the runtime double over a real unix socket, on a real staged overlay."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from conftest import Start, container, pod
from nvml_mock_engine.config import resolve_config
from nvml_mock_live import read_board
from nvml_mock_node.stage import StageOptions, stage
from nvml_mock_nri import unknown_devices
from nvml_mock_nri.errors import ConfigError, UnknownDeviceError
from nvml_mock_nri.selection import select
from nvml_mock_nri.settings import load_settings
from nvml_mock_protocol import names
from nvml_mock_protocol.logs import configure_logging
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.errors import PluginError
from nvml_mock_protocol.nri.runtime import RuntimeDouble


@pytest.fixture
def overlay(short_tmp: Path) -> Path:
    """A staged four-GPU H100 overlay."""
    root = short_tmp / "overlay"
    stage(root, resolve_config(profile="h100", node="node-a", count=4), StageOptions(runtime=False))
    return root


def injected(made: api.Container) -> bool:
    return any(e.startswith(names.ENV_MOCK_NVML_CONFIG + "=") for e in made.env)


def asking(value: str, *, cdi: list[str] | None = None) -> api.Container:
    return container(env=["PATH=/usr/bin:/bin", f"NVIDIA_VISIBLE_DEVICES={value}"], cdi=cdi)


@pytest.mark.parametrize("value", ["7", "0,7", "GPU-00000000-dead", "0000:ff:00.0", "gpu0"])
async def test_a_device_the_node_lacks_fails_the_creation_with_the_toolkits_message(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path, value: str
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(overlay))
    with pytest.raises(PluginError) as failed:
        await runtime.create_container(pod("train"), asking(value))
    entry = next(v for v in value.split(",") if v != "0")
    assert failed.value.message == f"nvidia-container-cli: device error: {entry}: unknown device"
    assert failed.value.method == "CreateContainer"
    assert await plugin.metric("nvml_mock_nri_unknown_devices_refused_total") == 1
    assert await plugin.metric("nvml_mock_nri_create_container_errors_total") == 0
    # the plugin stays connected, and the next container is answered as before
    result = await runtime.create_container(pod("train"), asking("0,3"))
    assert injected(result.container)  # the overlay's env
    assert (await plugin.get("/readyz")).status_code == 200


async def test_devices_the_node_has_are_not_refused(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    plugin = await start_plugin("--overlay-host-path", str(overlay))
    state = overlay / "config" / "state.nvmlmock"
    board = read_board(state)
    values = [
        "3",
        f"{board[1].uuid}",
        f"{board[2].uuid[:12].lower()}",  # a unique prefix, any case
        f"{board[0].bus_id}",
        "all",
        "none",
        "void",
        "",
        "MIG-4f1c0000-0000-0000-0000-000000000000",  # left to the library
        "1:0",  # MIG device 0 of GPU 1: the live MIG layout's, left to the library
        "0,3:12",
    ]
    for value in values:
        await runtime.create_container(pod("train"), asking(value))
    # a CDI name the node lacks is the runtime's to refuse (before the plugin sees it)
    await runtime.create_container(pod("train"), container(cdi=["nvidia.com/gpu=9"]))
    assert await plugin.metric("nvml_mock_nri_unknown_devices_refused_total") == 0


async def test_allow_leaves_the_refusal_to_nvml_init(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay), "--unknown-visible-devices", "allow")
    result = await runtime.create_container(pod("train"), asking("7"))
    assert injected(result.container)  # it starts, and its nvmlInit refuses the 7


async def test_excluded_and_opted_out_pods_are_untouched(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay), "--excluded-namespaces", "batch")
    await runtime.create_container(pod("job", namespace="batch"), asking("7"))
    opted_out = pod("off", annotations={names.ANNOTATION_INJECT: "false"})
    await runtime.create_container(opted_out, asking("7"))


async def test_a_node_without_a_readable_state_refuses_nothing(
    runtime: RuntimeDouble, start_plugin: Start, short_tmp: Path
) -> None:
    await start_plugin("--overlay-host-path", str(short_tmp / "not-staged"))
    await runtime.create_container(pod("train"), asking("7"))


def test_a_restaged_node_is_read_again(overlay: Path) -> None:
    """The node's GPUs follow the state file: a re-stage with eight GPUs makes 7 valid."""
    gpus = unknown_devices.NodeGpus(overlay / "config" / "state.nvmlmock")
    with pytest.raises(UnknownDeviceError):
        unknown_devices.refuse(select(asking("7")), gpus)
    stage(
        overlay, resolve_config(profile="h100", node="node-a", count=8), StageOptions(runtime=False)
    )
    unknown_devices.refuse(select(asking("7")), gpus)


def test_with_the_live_file_held_the_stat_waits_for_a_retirement_or_the_recheck(
    overlay: Path,
) -> None:
    """revision() with a pinned live file skips the stat until the file is retired (then
    the caller stops pinning it) or RECHECK_SECONDS pass; without one, every call stats."""
    state = overlay / "config" / "state.nvmlmock"
    now = [100.0]
    gpus = unknown_devices.NodeGpus(state, clock=lambda: now[0])
    live = object()
    first = gpus.revision(live)
    stage(overlay, resolve_config(profile="h100", node="node-a", count=2), StageOptions())
    assert gpus.revision(live) == first, "the same live file: no stat within the recheck"
    assert gpus.revision(None) != first, "unpinned (e.g. the live file retired): read again"
    again = gpus.revision(live)
    stage(overlay, resolve_config(profile="h100", node="node-a", count=8), StageOptions())
    now[0] += unknown_devices.RECHECK_SECONDS
    assert gpus.revision(live) != again, "the recheck comes even with the file pinned"


def test_the_flag_env_and_runtime_key_spell_the_mode() -> None:
    assert load_settings([], {}).unknown_visible_devices == "fail"
    flag = load_settings(["--unknown-visible-devices", "allow"], {})
    env = load_settings([], {"NVML_MOCK_UNKNOWN_VISIBLE_DEVICES": "ALLOW"})
    assert flag.unknown_visible_devices == env.unknown_visible_devices == "allow"
    with pytest.raises(ConfigError, match="must be fail or allow"):
        load_settings(["--unknown-visible-devices", "maybe"], {})


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_hostile_entry_is_escaped_and_bounded_in_the_error_and_the_log(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path, log_format: str
) -> None:
    """A newline in NVIDIA_VISIBLE_DEVICES forged a log line, NUL bytes reached the log,
    and a 10 KB entry made a 10 KB creation error. The plugin's own log setup writes."""
    out = io.StringIO()
    handler = configure_logging("info", log_format, out)
    try:
        await start_plugin("--overlay-host-path", str(overlay))
        forged = (
            "7\n2026-12-01T00:00:00.000Z INFO    nvml_mock_nri.plugin: forged\x00" + "x" * 10_000
        )
        with pytest.raises(PluginError) as failed:
            await runtime.create_container(pod("train"), asking(forged))
    finally:
        logging.getLogger().removeHandler(handler)
    message = failed.value.message
    assert len(message) < 300
    assert "\n" not in message and "\x00" not in message
    assert message.startswith("nvidia-container-cli: device error: 7\\n2026-12-01")
    assert message.endswith(f"...({len(forged)} chars): unknown device")
    text = out.getvalue()
    assert "failing the container's creation" in text
    assert "\x00" not in text
    lines = text.splitlines()
    assert not [line for line in lines if line.startswith("2026-12-01T00:00:00.000Z")]
    assert all(len(line) < 24_000 for line in lines)
