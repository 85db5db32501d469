"""Which pod holds which GPU: the NRI plugin's allocation records in the node's live layer.

dcgm-exporter learns a GPU's pod from the kubelet's pod-resources API and adds ``pod``,
``namespace`` and ``container`` to that GPU's series. On an nvml-mock node the NRI plugin
writes the same facts, per running container, into the live layer's allocation records
(``nvml_mock_protocol.live``): the board GPUs it holds, and for MIG the GPU instances. This
module reads them, through the protocol package's read-only view of the live file (the mock
library's own sequence-locked readers, from the library NVML loaded).

A GPU held by several containers gets one copy of its series per container, as
dcgm-exporter does for shared GPUs; a GPU instance (MIG) gets the containers holding it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nvml_mock_protocol.live import LiveFile, LiveFileError, record_uuid

__all__ = ["PodLabels", "PodRecords", "loaded_library"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PodLabels:
    """The Kubernetes labels of one container holding a GPU (or a GPU instance of it)."""

    pod: str
    namespace: str
    container: str


def loaded_library(name: str = "libnvidia-ml.so.1") -> Path | None:
    """The file of the NVML library this process loaded (from /proc/self/maps), if any."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if path.startswith("/") and Path(path).name.startswith(
                    name.split(".so", maxsplit=1)[0]
                ):
                    return Path(path)
    except OSError:
        return None
    return None


Holders = Mapping[str, list[PodLabels]]
"""GPU UUID -> the containers holding the whole GPU."""
MigHolders = Mapping[tuple[str, int], list[PodLabels]]
"""(GPU UUID, GPU instance id) -> the containers holding that GPU instance."""


class PodRecords:
    """The allocation records of one live file, re-read at each collection."""

    def __init__(self, live_file: Path | None, library: Path | None) -> None:
        self.live_file = live_file
        self.library = library
        self._file: LiveFile | None = None
        self._problem: str | None = None

    def _open(self) -> LiveFile | None:
        if self._file is not None:
            if not self._file.u32("retired"):
                return self._file
            self._file.close()  # replaced by a re-stage: open the new one
            self._file = None
        if self.live_file is None or self.library is None:
            return None
        try:
            self._file = LiveFile.open(self.live_file, library=self.library, writable=False)
        except LiveFileError as exc:
            if str(exc) != self._problem:
                logger.warning("no pod labels: %s", exc)
                self._problem = str(exc)
            return None
        self._problem = None
        return self._file

    def read(
        self,
    ) -> tuple[Mapping[str, list[PodLabels]], Mapping[tuple[str, int], list[PodLabels]]]:
        """(GPU UUID -> holders of the whole GPU, (GPU UUID, GPU instance) -> holders of it).

        Records name board GPUs; the live file names each board GPU's UUID, so the labels
        reach the right GPU whatever numbering this process's NVML view uses."""
        live = self._open()
        whole: dict[str, list[PodLabels]] = {}
        mig: dict[tuple[str, int], list[PodLabels]] = {}
        if live is None:
            return whole, mig
        try:
            records = live.list()
        except LiveFileError as exc:
            logger.warning("allocation records unreadable: %s", exc)
            return whole, mig
        for alloc in sorted(records, key=lambda a: (a.namespace, a.pod, a.container_name)):
            if not alloc.pod:
                continue  # not a pod's container (nvml-mock-ctl alloc without --pod)
            labels = PodLabels(alloc.pod, alloc.namespace, alloc.container_name)
            by_mig = {gpu for gpu, _, _ in alloc.mig}
            for gpu, gi, _ in alloc.mig:
                held = mig.setdefault((self._uuid(live, gpu), gi), [])
                if labels not in held:
                    held.append(labels)
            for gpu in alloc.gpus:
                if gpu not in by_mig:
                    whole.setdefault(self._uuid(live, gpu), []).append(labels)
        return whole, mig

    @staticmethod
    def _uuid(live: LiveFile, gpu: int) -> str:
        return record_uuid(live.mapping, gpu) if gpu < live.gpu_count else ""

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
