"""The driver surfaces opt-in through the runtime double: a ``createContainer`` hook for the
pods that ask, under the device opt-in's trust rules (namespace allow-list, no real driver).
The hook itself runs in real containers in the engine's ``test_surfaces_hook.py``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from conftest import FakeHost, Start, container, pod
from nvml_mock_protocol import names
from nvml_mock_protocol.nri.runtime import RuntimeDouble

SURFACES = {names.ANNOTATION_DRIVER_SURFACES: "True"}


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


async def test_an_annotated_pod_gets_the_hook(
    runtime: RuntimeDouble, start_plugin: Start, short_tmp: Path
) -> None:
    overlay = short_tmp / "nvml-mock"
    await start_plugin("--overlay-host-path", str(overlay))
    result = await runtime.create_container(pod(annotations=SURFACES), container())
    hooks = list(result.adjustment.hooks.create_container)
    assert [(h.path, list(h.args), h.timeout.value) for h in hooks] == [
        (
            f"{overlay}/bin/nvml-mock-surfaces-hook",
            ["nvml-mock-surfaces-hook", "--root", str(overlay)],
            10,
        )
    ]
    assert [h.path for h in result.container.hooks.create_container] == [hooks[0].path]
    assert not result.adjustment.hooks.start_container, "a startContainer hook cannot bind"
    assert len(result.adjustment.mounts) == 1, "the overlay is injected as always"


@pytest.mark.parametrize("annotations", [{}, {names.ANNOTATION_DRIVER_SURFACES: "no"}])
async def test_no_hook_without_the_annotation(
    runtime: RuntimeDouble, start_plugin: Start, annotations: dict[str, str]
) -> None:
    await start_plugin()
    result = await runtime.create_container(pod(annotations=annotations), container())
    assert not result.adjustment.HasField("hooks")


async def test_refused_outside_the_allowed_namespaces(
    runtime: RuntimeDouble, start_plugin: Start, caplog: pytest.LogCaptureFixture
) -> None:
    await start_plugin()
    caplog.set_level(logging.WARNING)
    result = await runtime.create_container(
        pod(namespace="team-b", annotations=SURFACES), container()
    )
    assert not result.adjustment.hooks.create_container
    assert len(result.adjustment.mounts) == 1
    assert (
        "driver surfaces refused: namespace 'team-b' is not allowed to opt in "
        "(--device-namespaces / NVML_MOCK_DEVICE_NAMESPACES); the overlay and env are still "
        "injected"
    ) in warnings(caplog)


async def test_refused_on_a_node_with_a_real_driver(
    runtime: RuntimeDouble,
    start_plugin: Start,
    fake_host: FakeHost,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_host.load_driver()
    await start_plugin()
    caplog.set_level(logging.WARNING)
    result = await runtime.create_container(pod(annotations=SURFACES), container())
    assert not result.adjustment.hooks.create_container
    (message,) = [m for m in warnings(caplog) if m.startswith("driver surfaces refused")]
    assert "a real NVIDIA driver is loaded on this node" in message
    assert message.endswith(
        "and the mock's /proc/driver and PCI files would shadow the real driver's; the overlay "
        "and env are still injected"
    )
