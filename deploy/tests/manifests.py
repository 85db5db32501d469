"""Small readers for rendered Kubernetes objects, shared by the chart tests."""

from __future__ import annotations

from typing import Any


def pod_spec(owner: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = owner["spec"]["template"]["spec"]
    return spec


def container(owner: dict[str, Any], name: str) -> dict[str, Any]:
    for item in pod_spec(owner)["containers"]:
        if item["name"] == name:
            return dict(item)
    raise AssertionError(f"no container {name!r}")


def env_of(item: dict[str, Any]) -> dict[str, Any]:
    """A container's env as name -> value (or its valueFrom mapping)."""
    names = [e["name"] for e in item.get("env", [])]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in item.get("env", [])}


def mounts_of(
    owner: dict[str, Any], item: dict[str, Any]
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """mountPath -> (volumeMount, volume) for one container."""
    volumes = {v["name"]: v for v in pod_spec(owner).get("volumes", [])}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in item.get("volumeMounts", [])}
