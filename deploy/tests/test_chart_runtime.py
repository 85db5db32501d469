"""What the plugin and the agents need at run time, checked on the rendered manifests.

* The NRI plugin writes allocation records, and removes them, through the chart's own
  mounts: each volume of its container is bind-mounted at its ``mountPath`` (read-only
  where the manifest says so) in a mount namespace of its own, and the live layer is
  written there with the plugin's own calls (it once mounted the whole overlay read-only,
  so no record was ever written). Needs root and ``unshare``.
* The network policy admits every client of the topology service (the scenario agents too).
* The admission policy's expressions, run by a CEL evaluator on real request shapes:
  a request without ``userInfo.extra`` gets the intended message, and removing the stager's
  labels is refused.
* The topology pod drains before it exits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import celpy
import pytest
from conftest import DEMO_TOPOLOGY, NAMESPACE, REPO_ROOT, RenderFn
from manifests import container, env_of, mounts_of, pod_spec

ENGINE_SRC = REPO_ROOT / "packages" / "nvml-engine" / "src"
LIBRARY = ENGINE_SRC / "nvml_mock_engine" / "_lib" / "libnvidia-ml.so.1"
STAGER = f"system:serviceaccount:{NAMESPACE}:nvml-mock-staging"

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import nvml_mock_live as live
    overlay = Path(sys.argv[1])
    config = overlay / "config"
    with live.LiveLayer.open(config / "live.nvmlmock", state=config / "state.nvmlmock",
                             library=overlay / "lib" / "libnvidia-ml.so.1") as layer:
        layer.put(live.Allocation(container_id="c" * 64, pid=4242, gpus=(0,),
                                  used_memory_bytes=1 << 30))
        print("written", [a.pid for a in layer.list()], flush=True)
        layer.remove("c" * 64)
        print("removed", [a.pid for a in layer.list()], flush=True)
    """
)


def _mount_script(mounts: list[tuple[str, str, bool]], host: Path, then: str) -> str:
    """Shell lines that bind each (source, target, read-only) as the runtime would: parents
    before what is mounted inside them, each from the host's view of its source (``host`` is
    bound aside first: a source reached through a read-only mount made here would be bound
    read-only too, which the kubelet's host paths never are)."""
    alias = host.with_name(host.name + "-host")
    alias.mkdir(exist_ok=True)
    lines = [f"mount --bind {host} {alias}"]
    for source, target, read_only in sorted(mounts, key=lambda m: Path(m[1]).parts):
        seen = alias / Path(source).relative_to(host)
        lines.append(f"mount --bind {seen} {target}")
        if read_only:
            lines.append(f"mount -o remount,bind,ro {target}")
    return " && ".join([*lines, then])


def _stage(overlay: Path) -> None:
    # the engine's command with the node's commands, from their source trees
    # (and the mock CUDA libraries it stages, built in place by ``tox -e native``)
    sources = [str(ENGINE_SRC.parents[1] / p / "src") for p in ("nvml-engine", "node", "cuda")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sources, *sys.path])}
    result = subprocess.run(
        [sys.executable, "-m", "nvml_mock_node", "stage", "--profile", "h100",
         "--count", "2", "--no-devices", str(overlay)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def _write_through(rendered: Any, overlay: Path, host: Path) -> subprocess.CompletedProcess[str]:
    ds = rendered.get("DaemonSet", "nvml-mock-nri")
    plugin = container(ds, "nri-plugin")
    mounts = []
    for target, (mount, volume) in mounts_of(ds, plugin).items():
        if "hostPath" not in volume:
            continue
        source = Path(volume["hostPath"]["path"])
        source.mkdir(parents=True, exist_ok=True)
        mounts.append((str(source), target, bool(mount.get("readOnly"))))
    env = {
        **os.environ,
        "NVML_MOCK_LOCK_DIR": env_of(plugin)["NVML_MOCK_LOCK_DIR"],
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    script = _mount_script(mounts, host, f"exec {sys.executable} -c '{WRITER}' {overlay}")
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip


def test_the_plugin_writes_and_removes_records_through_the_charts_mounts(
    render: RenderFn, tmp_path: Path
) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to make a mount namespace")
    if not LIBRARY.exists():
        pytest.skip("the engine's library is not built (tox -e native)")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    _stage(overlay)
    values = {
        "nri": {
            "overlay": {
                "hostPath": str(overlay),
                "writersLockPath": str(tmp_path / "locks"),
            },
            "cdiSpecDir": str(tmp_path / "cdi"),
            "socketPath": str(tmp_path / "nri" / "nri.sock"),
        }
    }
    result = _write_through(render(values), overlay, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["written [4242]", "removed []"]
    # The mounts the chart had (the overlay read-only, nothing more) could not write it.
    before = render(values)
    ds = before.get("DaemonSet", "nvml-mock-nri")
    (plugin,) = [c for c in pod_spec(ds)["containers"] if c["name"] == "nri-plugin"]
    plugin["volumeMounts"] = [m for m in plugin["volumeMounts"] if m["name"] == "overlay"]
    refused = _write_through(before, overlay, tmp_path)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr


def test_the_network_policy_admits_every_client_of_the_service(render: RenderFn) -> None:
    rendered = render(
        {
            "topology": {**DEMO_TOPOLOGY, "networkPolicy": {"enabled": True}},
            "scenarios": {"enabled": True, "items": [{"name": "a", "apply": {"xid": 79}}]},
        }
    )
    (rule,) = rendered.get("NetworkPolicy", "nvml-mock-topology")["spec"]["ingress"]
    selectors = [peer["podSelector"]["matchLabels"] for peer in rule["from"]]
    clients = {
        "nvml-mock-nri": "nri-plugin",
        "nvml-mock": "agent",  # the staging pods' scenario agent
    }
    for daemonset, name in clients.items():
        ds = rendered.get("DaemonSet", daemonset)
        labels = ds["spec"]["template"]["metadata"]["labels"]
        assert any(s.items() <= labels.items() for s in selectors), daemonset
        url = env_of(container(ds, name))["NVML_MOCK_TOPOLOGY_URL"]
        assert url.startswith("http://nvml-mock-topology.")
    no_scenarios = render({"topology": {**DEMO_TOPOLOGY, "networkPolicy": {"enabled": True}}})
    (rule,) = no_scenarios.get("NetworkPolicy", "nvml-mock-topology")["spec"]["ingress"]
    assert len(rule["from"]) == 1  # the plugins only: no agent runs


def _policy(render: RenderFn) -> dict[str, Any]:
    rendered = render()
    return rendered.get("ValidatingAdmissionPolicy", f"nvml-mock-{NAMESPACE}-own-node-labels")


def _admit(policy: dict[str, Any], request: dict[str, Any]) -> list[str]:
    """The messages of every validation that refuses ``request`` (CEL, as the API server
    runs it: variables first, then each validation; an evaluation error refuses too)."""
    env = celpy.Environment()
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(request["object"]),
        "oldObject": celpy.json_to_cel(request["oldObject"]),
    }
    variables: dict[str, Any] = {}
    for variable in policy["spec"]["variables"]:
        program = env.program(env.compile(variable["expression"]))
        variables[variable["name"]] = program.evaluate({**activation, "variables": variables})
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    refusals = []
    for validation in policy["spec"]["validations"]:
        program = env.program(env.compile(validation["expression"]))
        try:
            result = program.evaluate(activation)
        except Exception as exc:  # an evaluation error is a refusal too
            refusals.append(f"error: {exc}")
            continue
        if isinstance(result, celpy.CELEvalError):
            refusals.append(f"error: {result}")
        elif not bool(result):
            refusals.append(validation.get("message", validation.get("messageExpression")))
    return refusals


def _request(old: dict[str, str], new: dict[str, str], extra: Any = ...) -> dict[str, Any]:
    user: dict[str, Any] = {"username": STAGER}
    if extra is ...:
        extra = {"authentication.kubernetes.io/node-name": ["worker-1"]}
    if extra is not None:
        user["extra"] = extra
    node = {"metadata": {"name": "worker-1"}, "spec": {}}
    return {
        "userInfo": user,
        "object": {**node, "metadata": {**node["metadata"], "labels": new}},
        "oldObject": {**node, "metadata": {**node["metadata"], "labels": old}},
    }


STAGED = "nvml-mock.nvidia.com/staged"
PRESENT = "nvidia.com/gpu.present"


def test_the_admission_policy_refuses_what_the_readme_says(render: RenderFn) -> None:
    policy = _policy(render)
    labelled = {STAGED: "true", PRESENT: "true", "pool": "a"}
    assert _admit(policy, _request({"pool": "a"}, labelled)) == []
    # Removing the staged label would make the node look like a real GPU node.
    removed = _admit(policy, _request(labelled, {PRESENT: "true", "pool": "a"}))
    assert removed == ["the nvml-mock stager may not remove its labels"]
    assert _admit(policy, _request(labelled, {"pool": "a"})) == removed
    # No userInfo.extra at all (impersonation, a token bound to no pod): the intended message.
    assert _admit(policy, _request({"pool": "a"}, labelled, extra=None)) == [
        "the nvml-mock stager may label only the node its pod runs on"
    ]
    other = {"authentication.kubernetes.io/node-name": ["worker-2"]}
    assert _admit(policy, _request({"pool": "a"}, labelled, extra=other)) == [
        "the nvml-mock stager may label only the node its pod runs on"
    ]


def test_the_topology_pod_drains_before_it_exits(render: RenderFn) -> None:
    rendered = render({"topology": DEMO_TOPOLOGY})
    deployment = rendered.get("Deployment", "nvml-mock-topology")
    spec = pod_spec(deployment)
    service = container(deployment, "topology-service")
    drain = float(env_of(service)["NVML_MOCK_TOPOLOGY_DRAIN_SECONDS"])
    probe = service["readinessProbe"]
    assert probe["httpGet"]["path"] == "/readyz"  # 503 while draining
    # Not ready by its probe before the drain ends (the endpoints controller takes a
    # terminating pod out at once; the probe is for whatever reads readiness only).
    assert probe["periodSeconds"] * probe["failureThreshold"] <= drain
    # The drain, then uvicorn's 10 s for requests in flight, fit in the grace period.
    assert spec["terminationGracePeriodSeconds"] >= drain + 10
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    longer = render({"topology": {**DEMO_TOPOLOGY, "drainSeconds": 30}})
    assert (
        pod_spec(longer.get("Deployment", "nvml-mock-topology"))["terminationGracePeriodSeconds"]
        >= 40
    )
