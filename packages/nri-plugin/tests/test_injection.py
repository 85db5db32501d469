"""CreateContainer through the runtime test double over a real unix socket."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from conftest import RunningPlugin, Start, container, pod
from nvml_mock_nri.adjust import DEFAULT_PATH
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.errors import AdjustmentConflictError
from nvml_mock_protocol.nri.runtime import RuntimeDouble
from nvml_mock_protocol.nri.stub import Plugin, Stub

OVERLAY = "/opt/nvml-mock"


def mounts(result_container: api.Container) -> dict[str, api.Mount]:
    return {m.destination: m for m in result_container.mounts}


async def test_plain_container_gets_overlay_and_env(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    plugin: RunningPlugin = await start_plugin("--overlay-host-path", "/srv/mock")
    result = await runtime.create_container(pod(), container())
    assert result.consulted == ("10-nvml-mock",)
    mount = mounts(result.container)[OVERLAY]
    assert (mount.source, mount.type, list(mount.options)) == (
        "/srv/mock",
        "bind",
        ["rbind", "ro", "nosuid", "nodev"],
    )
    env = result.env()
    assert env["PATH"] == f"{OVERLAY}/bin:/usr/local/bin:/usr/bin:/bin"
    assert env["LD_LIBRARY_PATH"] == f"{OVERLAY}/lib"
    assert env["MOCK_NVML_CONFIG"] == f"{OVERLAY}/config/state.nvmlmock"
    assert env["NODE_NAME"] == "node-a"
    assert env["HOME"] == "/root"
    assert not any(key.startswith("MOCK_FABRIC") for key in env)
    assert [kv.key for kv in result.adjustment.env] == [
        "PATH",
        "LD_LIBRARY_PATH",
        "MOCK_NVML_CONFIG",
        "NODE_NAME",
    ]
    assert list(result.container.linux.devices) == []
    assert await plugin.metric("nvml_mock_nri_injections_total") == 1


@pytest.mark.parametrize(
    ("pod_kwargs", "mount_list", "reason"),
    [
        ({"annotations": {"nvml-mock.nvidia.com/inject": "False"}}, [], "opt_out"),
        ({"namespace": "kube-system"}, [], "excluded_namespace"),
        ({"namespace": "nvml-mock"}, [], "excluded_namespace"),
        ({"namespace": "batch"}, [], "excluded_namespace"),
        ({}, [OVERLAY], "overlay_already_mounted"),
        ({}, ["/opt//nvml-mock"], "overlay_already_mounted"),
        ({}, ["/opt/nvml-mock//"], "overlay_already_mounted"),
        ({}, ["/opt/./nvml-mock/."], "overlay_already_mounted"),
        ({}, ["//opt/nvml-mock"], "overlay_already_mounted"),
        ({}, ["/opt/x/../nvml-mock"], "overlay_already_mounted"),
    ],
)
async def test_skips_leave_the_container_alone_with_one_log_line_and_a_metric(
    runtime: RuntimeDouble,
    start_plugin: Start,
    caplog: pytest.LogCaptureFixture,
    pod_kwargs: dict[str, Any],
    mount_list: list[str],
    reason: str,
) -> None:
    plugin = await start_plugin(
        "--release-namespace", "nvml-mock", "--excluded-namespaces", "batch,ci"
    )
    original = container(mounts=mount_list)
    caplog.set_level(logging.INFO, logger="nvml_mock_nri")
    result = await runtime.create_container(pod(**pod_kwargs), original)
    assert result.adjustment == api.ContainerAdjustment()
    assert list(result.container.env) == list(original.env)
    skip_lines = [r for r in caplog.records if getattr(r, "reason", None) == reason]
    assert len(skip_lines) == 1
    assert skip_lines[0].__dict__["pod"] == "app"
    assert skip_lines[0].__dict__["container"] == "main"
    assert await plugin.metric("nvml_mock_nri_skips_total", f'reason="{reason}"') == 1
    assert await plugin.metric("nvml_mock_nri_injections_total") == 0


async def test_absent_path_gets_overlay_and_the_default_search_path(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    await start_plugin()
    result = await runtime.create_container(pod(), container(env=[]))
    assert result.env()["PATH"] == f"{OVERLAY}/bin:{DEFAULT_PATH}"
    assert result.env()["LD_LIBRARY_PATH"] == f"{OVERLAY}/lib"


async def test_empty_path_becomes_the_overlay_bin_alone(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    await start_plugin()
    result = await runtime.create_container(pod(), container(env=["PATH=", "LD_LIBRARY_PATH="]))
    assert result.env()["PATH"] == f"{OVERLAY}/bin"
    assert result.env()["LD_LIBRARY_PATH"] == f"{OVERLAY}/lib"


async def test_path_already_holding_the_overlay_is_not_touched(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    await start_plugin()
    env = [f"PATH=/usr/bin:{OVERLAY}/bin", f"LD_LIBRARY_PATH={OVERLAY}/lib:/usr/lib"]
    result = await runtime.create_container(pod(), container(env=env))
    emitted = {kv.key for kv in result.adjustment.env}
    assert "PATH" not in emitted
    assert "LD_LIBRARY_PATH" not in emitted
    assert result.env()["PATH"] == f"/usr/bin:{OVERLAY}/bin"


async def test_values_the_pod_set_are_kept_and_not_emitted(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    await start_plugin()
    env = ["PATH=/bin", "MOCK_NVML_CONFIG=/etc/mine", "NODE_NAME=elsewhere"]
    result = await runtime.create_container(pod(), container(env=env))
    assert result.env()["MOCK_NVML_CONFIG"] == "/etc/mine"
    assert result.env()["NODE_NAME"] == "elsewhere"
    assert [kv.key for kv in result.adjustment.env] == ["PATH", "LD_LIBRARY_PATH"]


class _EarlierPlugin(Plugin):
    """Another NRI plugin, called before nvml-mock, that sets MOCK_NVML_CONFIG."""

    async def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.ContainerAdjustment:
        return api.ContainerAdjustment(env=[api.KeyValue(key="MOCK_NVML_CONFIG", value="/other")])


async def test_a_key_set_by_an_earlier_plugin_is_not_claimed(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    other = Stub(_EarlierPlugin(), name="earlier", index="05", socket_path=runtime.socket_path)
    await other.start()
    try:
        await runtime.wait_for_plugins(1)
        await start_plugin()
        result = await runtime.create_container(pod(), container())
        assert result.consulted == ("05-earlier", "10-nvml-mock")
        assert result.env()["MOCK_NVML_CONFIG"] == "/other"
    finally:
        await other.close()


class _LaterPlugin(Plugin):
    """A later plugin that sets a key nvml-mock owns: the runtime must refuse it."""

    async def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> api.ContainerAdjustment:
        return api.ContainerAdjustment(env=[api.KeyValue(key="NODE_NAME", value="x")])


async def test_ownership_conflict_is_reported_by_the_runtime(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    await start_plugin()
    other = Stub(_LaterPlugin(), name="later", index="20", socket_path=runtime.socket_path)
    await other.start()
    try:
        await runtime.wait_for_plugins(2)
        with pytest.raises(AdjustmentConflictError, match="NODE_NAME"):
            await runtime.create_container(pod(), container())
    finally:
        await other.close()


async def test_devices_are_not_added_without_the_opt_in(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    calls: list[str] = []

    def scan(path: str) -> Any:
        calls.append(path)
        raise AssertionError("must not scan")

    await start_plugin(scan=scan)
    result = await runtime.create_container(pod(), container())
    assert list(result.container.linux.devices) == []
    assert calls == []


async def test_200_concurrent_create_container_calls(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    plugin = await start_plugin()
    names = [f"c{i}" for i in range(200)]
    results = await asyncio.gather(
        *(
            runtime.create_container(
                pod(name=f"p{i % 7}", namespace="kube-system" if i % 10 == 0 else "default"),
                container(name=name, env=[f"PATH=/p{i}"]),
            )
            for i, name in enumerate(names)
        )
    )
    for i, result in enumerate(results):
        assert result.container.name == names[i]
        if i % 10 == 0:
            assert result.adjustment == api.ContainerAdjustment()
        else:
            assert result.env()["PATH"] == f"{OVERLAY}/bin:/p{i}"
            assert OVERLAY in mounts(result.container)
    assert await plugin.metric("nvml_mock_nri_injections_total") == 180
    assert await plugin.metric("nvml_mock_nri_skips_total", 'reason="excluded_namespace"') == 20
    assert await plugin.metric("nvml_mock_nri_create_container_seconds_count") == 200
    assert plugin.service.state.in_flight() == 0


async def test_a_non_normalised_overlay_path_is_injected_in_one_spelling(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    await start_plugin(
        "--overlay-mount-path", "/opt//nvml-mock/", "--overlay-host-path", "/var/lib/./nvml-mock/"
    )
    env = ["PATH=/opt/nvml-mock/bin/:/usr/bin", "LD_LIBRARY_PATH=/opt//nvml-mock/lib"]
    result = await runtime.create_container(pod(), container(env=env))
    (mount,) = result.adjustment.mounts
    assert (mount.destination, mount.source) == ("/opt/nvml-mock", "/var/lib/nvml-mock")
    changed = {e.key: e.value for e in result.adjustment.env}
    assert "PATH" not in changed and "LD_LIBRARY_PATH" not in changed, "already there"
    assert changed["MOCK_NVML_CONFIG"] == "/opt/nvml-mock/config/state.nvmlmock"
    again = await runtime.create_container(pod(), result.container)
    assert again.adjustment == api.ContainerAdjustment(), "no second overlay mount"
