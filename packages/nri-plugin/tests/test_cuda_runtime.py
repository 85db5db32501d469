"""The CUDA runtime opt-in (``nvml-mock.nvidia.com/cuda-runtime: "true"``): ``LD_PRELOAD`` of
the overlay's runtime work-alikes, through the runtime test double over a real unix socket
to the plugin, against an overlay directory holding (or lacking) the work-alikes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from conftest import Start, container, pod
from nvml_mock_nri.cuda_runtime import preload_value
from nvml_mock_protocol import names
from nvml_mock_protocol.nri.runtime import RuntimeDouble

ASK = {names.ANNOTATION_CUDA_RUNTIME: "true"}
MOUNT = names.OVERLAY_MOUNT_PATH
BOTH = [f"{MOUNT}/{rel}" for rel in names.CUDA_RUNTIME_PRELOADS]


@pytest.fixture
def overlay(short_tmp: Path) -> Path:
    """An overlay directory with both runtime work-alikes staged."""
    root = short_tmp / "overlay"
    for rel in names.CUDA_RUNTIME_PRELOADS:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"\x7fELF")
    return root


def preload(env: list[str]) -> list[str]:
    return [e for e in env if e.startswith(f"{names.ENV_LD_PRELOAD}=")]


async def test_an_annotated_pod_gets_both_work_alikes_first(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay))
    result = await runtime.create_container(pod("torch", annotations=ASK), container())
    assert preload(list(result.container.env)) == [f"LD_PRELOAD={':'.join(BOTH)}"]
    # the lib/ directory the work-alikes are in is still on the search path
    assert f"LD_LIBRARY_PATH={MOUNT}/lib" in result.container.env

    own = container(env=["PATH=/bin", "LD_PRELOAD=/usr/lib/libjemalloc.so.2"])
    result = await runtime.create_container(pod("torch", annotations=ASK), own)
    assert preload(list(result.container.env)) == [
        f"LD_PRELOAD={':'.join(BOTH)}:/usr/lib/libjemalloc.so.2"
    ]

    already = container(env=["PATH=/bin", f"LD_PRELOAD=/x.so {' '.join(BOTH)}"])
    result = await runtime.create_container(pod("torch", annotations=ASK), already)
    assert all(kv.key != "LD_PRELOAD" for kv in result.adjustment.env)


async def test_no_pod_gets_a_preload_without_asking(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path
) -> None:
    await start_plugin("--overlay-host-path", str(overlay), "--excluded-namespaces", "infra")
    for sandbox in (
        pod("plain"),
        pod("no", annotations={names.ANNOTATION_CUDA_RUNTIME: "false"}),
        pod("excluded", namespace="infra", annotations=ASK),
        pod("out", annotations={**ASK, names.ANNOTATION_INJECT: "false"}),
    ):
        result = await runtime.create_container(sandbox, container())
        assert preload(list(result.container.env)) == [], sandbox.name
    own = container(env=["PATH=/bin", "LD_PRELOAD=/usr/lib/libjemalloc.so.2"])
    result = await runtime.create_container(pod("plain"), own)
    assert preload(list(result.container.env)) == ["LD_PRELOAD=/usr/lib/libjemalloc.so.2"]


@pytest.mark.parametrize("value", ["yes", "1", "TRUE please", "tru\u0000e\n" + "x" * 300])
async def test_any_other_value_is_ignored_with_a_warning_naming_it(
    runtime: RuntimeDouble,
    start_plugin: Start,
    overlay: Path,
    caplog: pytest.LogCaptureFixture,
    value: str,
) -> None:
    caplog.set_level(logging.INFO, logger="nvml_mock_nri")
    await start_plugin("--overlay-host-path", str(overlay))
    sandbox = pod("typo", annotations={names.ANNOTATION_CUDA_RUNTIME: value})
    result = await runtime.create_container(sandbox, container())
    assert preload(list(result.container.env)) == []
    assert result.adjustment.mounts, "the overlay itself is still injected"
    (line,) = [r.getMessage() for r in caplog.records if "cuda-runtime" in r.getMessage()]
    assert line.startswith(f"annotation {names.ANNOTATION_CUDA_RUNTIME}='")
    assert 'ignored: only "true" preloads' in line
    assert "\n" not in line and "\x00" not in line and len(line) < 250
    if len(value) < 20:
        assert f"'{value}'" in line


async def test_only_the_staged_work_alikes_are_preloaded(
    runtime: RuntimeDouble, start_plugin: Start, overlay: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nvml_mock_nri")
    (overlay / names.CUDA_RUNTIME_PRELOADS[1]).unlink()
    await start_plugin("--overlay-host-path", str(overlay))
    result = await runtime.create_container(pod("torch", annotations=ASK), container())
    assert preload(list(result.container.env)) == [f"LD_PRELOAD={BOTH[0]}"]
    (overlay / names.CUDA_RUNTIME_PRELOADS[0]).unlink()
    result = await runtime.create_container(pod("torch", annotations=ASK), container())
    assert preload(list(result.container.env)) == []
    assert any("no CUDA runtime work-alike is staged" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (None, "/a.so:/b.so"),
        ("", "/a.so:/b.so"),
        ("  ", "/a.so:/b.so"),
        ("/own.so", "/a.so:/b.so:/own.so"),
        ("/b.so /a.so", None),
        ("/a.so", "/a.so:/b.so:/a.so"),
    ],
)
def test_the_preload_rule(current: str | None, expected: str | None) -> None:
    assert preload_value(current, ["/a.so", "/b.so"]) == expected
