"""The kept answers of the common CreateContainer case: the same bytes as the full rules,
shared only by containers whose deciding inputs match, renewed when the identity, the
staged GPUs or the runtime config change, and never used for what must be logged.
In-process on the Injector, and through the runtime double over a real unix socket."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from conftest import Start, container, pod
from nvml_mock_engine.config import resolve_config
from nvml_mock_node.stage import StageOptions, stage
from nvml_mock_nri.adjust import FabricIdentity
from nvml_mock_nri.errors import UnknownDeviceError
from nvml_mock_nri.identity import IdentityCache, Snapshot, Status
from nvml_mock_nri.metrics import Metrics
from nvml_mock_nri.plugin import Injector
from nvml_mock_nri.replies import CACHE_ENTRIES, ReplyCache
from nvml_mock_nri.settings import load_settings
from nvml_mock_protocol import names
from nvml_mock_protocol.nri import api_pb2 as api
from nvml_mock_protocol.nri.runtime import RuntimeDouble

DOMAIN = FabricIdentity("d1", "8a0f7c2e-1b3d-4e5f-8a9b-0c1d2e3f4a5b", 4)
REBOUND = FabricIdentity("d2", "0d8f6a4e-1c2b-4f3a-9e8d-7c6b5a4f3e2d", 9)
OPT_OUT = {"nvml-mock.nvidia.com/inject": "false"}
DEVICES = {"nvml-mock.nvidia.com/devices": "true"}


def injector(*argv: str) -> tuple[Injector, IdentityCache]:
    settings = load_settings(["--node-name", "node-a", "--health-addr", "", *argv], {})
    metrics = Metrics()
    identity = IdentityCache("http://127.0.0.1:9", metrics)
    made = Injector(settings, metrics=metrics, identity=identity)
    return made, identity


def env_of(reply: bytes) -> dict[str, str]:
    adjust = api.CreateContainerResponse.FromString(reply).adjust
    return {kv.key: kv.value for kv in adjust.env}


def full_rules(made: Injector, sandbox: api.PodSandbox, ctr: api.Container) -> bytes:
    current = made.identity.current if made.identity else None
    response, _ = made._create_container(sandbox, ctr, current)
    return response.SerializeToString()


def test_a_kept_answer_is_the_full_rules_answer_byte_for_byte() -> None:
    made, identity = injector()
    identity.update(Snapshot(Status.MEMBER, DOMAIN, 3))
    sandbox, ctr = pod(), container(env=["PATH=/usr/bin:/bin", "HOSTNAME=web-1"])
    first = made.answer_create(sandbox, ctr)
    assert (made.replies.hits, len(made.replies)) == (0, 1)
    again = made.answer_create(sandbox, container(env=["HOSTNAME=web-2", "PATH=/usr/bin:/bin"]))
    assert made.replies.hits == 1, "HOSTNAME decides nothing: the replicas share the answer"
    assert made.metrics.create.injections == 2, "a kept answer is still an injection"
    assert again == first == full_rules(made, sandbox, ctr)
    assert env_of(first)[names.ENV_FABRIC_DOMAIN] == "d1"


@pytest.mark.parametrize(
    "other",
    [
        ["PATH=/bin"],
        ["PATH=/usr/bin:/bin"],
        ["LD_LIBRARY_PATH=/lib", "PATH=/usr/bin:/bin"],  # changed keys keep the container's order
        ["PATH=/usr/bin:/bin", "MOCK_NVML_CONFIG=/mine"],
        ["PATH=/usr/bin:/bin", "NODE_NAME=elsewhere"],
        ["PATH=/usr/bin:/bin", "MOCK_FABRIC_DOMAIN=own"],
        ["PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=0"],
        ["PATH=/usr/bin:/bin", "PATH=/second/wins/not"],
    ],
)
def test_containers_whose_deciding_env_differs_get_their_own_answer(other: list[str]) -> None:
    made, identity = injector()
    identity.update(Snapshot(Status.MEMBER, DOMAIN, 3))
    sandbox = pod()
    made.answer_create(sandbox, container(env=["PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=/lib"]))
    ctr = container(env=other)
    reply = made.answer_create(sandbox, ctr)
    assert made.replies.hits == 0 and len(made.replies) == 2
    assert reply == full_rules(made, sandbox, ctr)
    if other[-1] == "PATH=/second/wins/not":
        assert env_of(reply)["PATH"].endswith(":/usr/bin:/bin"), "the first PATH decides"


def test_a_new_identity_is_injected_at_once() -> None:
    made, identity = injector()
    identity.update(Snapshot(Status.MEMBER, DOMAIN, 3))
    sandbox, ctr = pod(), container()
    assert env_of(made.answer_create(sandbox, ctr))[names.ENV_FABRIC_DOMAIN] == "d1"
    identity.update(Snapshot(Status.MEMBER, REBOUND, 4))
    rebound = env_of(made.answer_create(sandbox, ctr))
    assert rebound[names.ENV_FABRIC_DOMAIN] == "d2"
    assert rebound[names.ENV_FABRIC_CLIQUE_ID] == "9"
    identity.update(Snapshot(Status.NOT_MEMBER, None, 5))
    assert names.ENV_FABRIC_DOMAIN not in env_of(made.answer_create(sandbox, ctr))


def test_skips_and_opt_ins_are_never_kept(caplog: pytest.LogCaptureFixture) -> None:
    made, _ = injector("--excluded-namespaces", "batch", "--device-namespaces", "default")
    caplog.set_level(logging.INFO)
    for _ in range(2):
        assert made.answer_create(pod(namespace="batch"), container()) == b""
        assert made.answer_create(pod(annotations=OPT_OUT), container()) == b""
        mounted = container()
        mounted.mounts.add(destination="/opt//nvml-mock/", type="bind", source="/x")
        assert made.answer_create(pod(), mounted) == b""
        made.answer_create(pod(annotations=DEVICES), container())
        made.answer_create(pod(), container(cdi=["nvidia.com/gpu=0"]))
    assert len(made.replies) == 0 and made.replies.hits == 0
    skips = [r for r in caplog.records if r.getMessage().startswith("not injecting")]
    assert len(skips) == 6, "every skip is logged, the second time too"


def test_debug_logging_takes_the_full_path(caplog: pytest.LogCaptureFixture) -> None:
    made, _ = injector()
    made.answer_create(pod(), container())
    caplog.set_level(logging.DEBUG, logger="nvml_mock_nri.plugin")
    made.answer_create(pod(), container())
    assert made.replies.hits == 0
    assert any(r.getMessage().startswith("injecting:") for r in caplog.records)


def test_a_runtime_config_change_drops_the_kept_answers() -> None:
    made, _ = injector()
    made.answer_create(pod(), container())
    assert len(made.replies) == 1
    made.configure("overlayMountPath: /opt/other\n", "containerd", "2.4", 2.0)
    assert len(made.replies) == 0
    reply = api.CreateContainerResponse.FromString(made.answer_create(pod(), container()))
    assert reply.adjust.mounts[0].destination == "/opt/other"


def test_a_restage_with_fewer_gpus_is_judged_again(short_tmp: Path) -> None:
    overlay = short_tmp / "overlay"
    options = StageOptions(runtime=False)
    stage(overlay, resolve_config(profile="h100", node="node-a", count=4), options)
    made, _ = injector("--overlay-host-path", str(overlay))
    asking = container(env=["PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=3"])
    made.answer_create(pod(), asking)
    made.answer_create(pod(), asking)
    assert made.replies.hits == 1
    stage(overlay, resolve_config(profile="h100", node="node-a", count=2), options)
    with pytest.raises(UnknownDeviceError):
        made.answer_create(pod(), asking)


def test_a_restage_is_judged_again_while_the_live_file_is_held(short_tmp: Path) -> None:
    """Once a life-cycle event opened the live file, the kept answers skip the stat of the
    staged state; the re-stage retires that file, and the next container is judged again."""
    overlay = short_tmp / "overlay"
    options = StageOptions(runtime=False)
    stage(overlay, resolve_config(profile="h100", node="node-a", count=4), options)
    made, _ = injector("--overlay-host-path", str(overlay))
    made.synchronize([], [])
    sandbox = pod()
    held = container(env=["PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=1"])
    held.pid, held.state = 4242, api.CONTAINER_RUNNING
    made.container_starting(sandbox, held)
    made.container_started(sandbox, held)
    assert made.recorder.live is not None and not made.recorder.live.retired
    asking = container(env=["PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=3"])
    made.answer_create(sandbox, asking)
    made.answer_create(sandbox, asking)
    assert made.replies.hits == 1
    stage(overlay, resolve_config(profile="h100", node="node-a", count=2), options)
    assert made.recorder.live.retired
    with pytest.raises(UnknownDeviceError):
        made.answer_create(sandbox, asking)


def test_the_cache_is_bounded() -> None:
    cache = ReplyCache()
    for i in range(CACHE_ENTRIES + 5):
        cache.put((i,), b"x")
    assert len(cache) <= CACHE_ENTRIES
    assert cache.get((CACHE_ENTRIES + 4,)) == b"x"


async def test_through_the_runtime_the_kept_answer_is_applied_alike(
    runtime: RuntimeDouble, start_plugin: Start
) -> None:
    plugin = await start_plugin()
    first = await runtime.create_container(pod(), container(name="a"))
    second = await runtime.create_container(pod(), container(name="b"))
    assert plugin.service.injector.replies.hits == 1
    assert first.adjustment == second.adjustment
    assert second.env()["PATH"].startswith("/opt/nvml-mock/bin:")
    assert len(second.adjustment.mounts) == 1
