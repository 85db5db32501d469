"""Shared fixtures: the chart rendered by Helm's own engine, and the repository's paths.

Rendering goes through helm-python-sdk, which bundles Helm's Go SDK: the same template
engine, values coalescing and values.schema.json validation that `helm install` runs, with
no helm binary and no cluster. Values can be given as YAML text, which is parsed exactly as
`helm -f` parses a file (numbers become floats, as they do for a real install).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "deploy" / "helm" / "nvml-mock"
RELEASE = "nvml-mock"
NAMESPACE = "mokka"

DEMO_TOPOLOGY = {
    "enabled": True,
    "domains": [
        {
            "name": "node-wide-domain",
            "uuid": "00000000-0000-0000-0000-0000000000cd",
            "cliques": [
                {"id": 0, "nodes": ["worker-0", "worker-1"]},
                {"id": 1, "nodes": ["worker-2", "worker-3"]},
            ],
        }
    ],
}


@dataclass(frozen=True)
class Rendered:
    """One rendering: the manifests by (kind, name) and the NOTES text."""

    objects: dict[tuple[str, str], dict[str, Any]]
    notes: str
    files: dict[str, str]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        try:
            return self.objects[(kind, name)]
        except KeyError:
            raise AssertionError(f"no {kind} {name!r}; rendered: {sorted(self.objects)}") from None

    def kinds(self) -> set[str]:
        return {kind for kind, _ in self.objects}


def split_manifests(files: dict[str, str]) -> tuple[dict[tuple[str, str], dict[str, Any]], str]:
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    notes = ""
    for path, text in files.items():
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{key} rendered twice"
            objects[key] = doc
    return objects, notes


@pytest.fixture(scope="session")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


RenderFn = Callable[..., Rendered]


@pytest.fixture(scope="session")
def render(chart: helm.Chart) -> RenderFn:
    """render(values=None, yaml_text=None, namespace=NAMESPACE, name=RELEASE) -> Rendered."""

    def _render(
        values: dict[str, Any] | None = None,
        *,
        yaml_text: str | None = None,
        namespace: str = NAMESPACE,
        name: str = RELEASE,
    ) -> Rendered:
        if yaml_text is not None:
            assert values is None
            values = helm.values_from_yaml(yaml_text)
        files = chart.render(values or {}, name=name, namespace=namespace, is_install=True)
        objects, notes = split_manifests(files)
        return Rendered(objects, notes, files)

    return _render
