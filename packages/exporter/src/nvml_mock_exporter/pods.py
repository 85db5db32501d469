"""Which pod holds which GPU: the NRI plugin's allocation records in the node's live layer.

dcgm-exporter learns a GPU's pod from the kubelet's pod-resources API and adds ``pod``,
``namespace`` and ``container`` to that GPU's series. On an nvml-mock node the NRI plugin
writes the same facts, per running container, into the live layer's allocation records
(``nvml_mock_live``): the board GPUs it holds, and for MIG the GPU instances. This module
reads them through that package's read-only view of the live file, with the sequence-locked
readers of the very library NVML loaded in this process.

A GPU held by several containers gets one copy of its series per container, as
dcgm-exporter does for shared GPUs; a GPU instance (MIG) gets the containers holding it.
Records name board GPUs; the board names each one's UUID, so the labels reach the right GPU
whatever numbering this process's NVML view uses.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nvml_mock_live import LiveLayer, LiveLayerError

__all__ = ["Holders", "MigHolders", "PodLabels", "PodRecords", "loaded_library"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PodLabels:
    """The Kubernetes labels of one container holding a GPU (or a GPU instance of it)."""

    pod: str
    namespace: str
    container: str


Holders = Mapping[str, list[PodLabels]]
"""GPU UUID -> the containers holding the whole GPU."""
MigHolders = Mapping[tuple[str, int], list[PodLabels]]
"""(GPU UUID, GPU instance id) -> the containers holding that GPU instance."""


def loaded_library(name: str = "libnvidia-ml.so.1") -> Path | None:
    """The file of the NVML library this process loaded (from /proc/self/maps), if any."""
    stem = name.split(".so", maxsplit=1)[0]
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if path.startswith("/") and Path(path).name.startswith(stem):
                    return Path(path)
    except OSError:
        return None
    return None


class PodRecords:
    """The allocation records of one live file, re-read at each collection (a re-staged file
    is reopened; a missing or unusable one gives no pod labels, logged once per reason)."""

    def __init__(self, live_file: Path | None, library: Path | None, state: Path | None = None):
        self.live_file = live_file
        self.library = library
        self.state = state
        self._layer: LiveLayer | None = None
        self._problem: str | None = None

    def _open(self) -> LiveLayer | None:
        if self._layer is not None:
            if not self._layer.retired:
                return self._layer
            self._layer.close()  # replaced by a re-stage: open the new one
            self._layer = None
        if self.live_file is None or self.library is None:
            return None
        try:
            self._layer = LiveLayer.open(
                self.live_file, state=self.state, library=self.library, writable=False
            )
        except LiveLayerError as exc:
            if str(exc) != self._problem:
                logger.warning("no pod labels: %s", exc)
                self._problem = str(exc)
            return None
        self._problem = None
        return self._layer

    def read(self) -> tuple[Holders, MigHolders]:
        """(GPU UUID -> holders of the whole GPU, (GPU UUID, GPU instance) -> holders of it)."""
        layer = self._open()
        whole: dict[str, list[PodLabels]] = {}
        mig: dict[tuple[str, int], list[PodLabels]] = {}
        if layer is None:
            return whole, mig
        try:
            records = layer.list()
        except LiveLayerError as exc:
            logger.warning("allocation records unreadable: %s", exc)
            return whole, mig
        uuids = {gpu.index: gpu.uuid for gpu in layer.board}
        for alloc in sorted(records, key=lambda a: (a.namespace, a.pod, a.container_name)):
            if not alloc.pod:
                continue  # not a pod's container (nvml-mock-ctl alloc without --pod)
            labels = PodLabels(alloc.pod, alloc.namespace, alloc.container_name)
            by_mig = {gpu for gpu, _, _ in alloc.mig}
            for gpu, gi, _ in alloc.mig:
                held = mig.setdefault((uuids.get(gpu, ""), gi), [])
                if labels not in held:
                    held.append(labels)
            for gpu in alloc.gpus:
                if gpu not in by_mig:
                    whole.setdefault(uuids.get(gpu, ""), []).append(labels)
        return whole, mig

    def close(self) -> None:
        if self._layer is not None:
            self._layer.close()
            self._layer = None
