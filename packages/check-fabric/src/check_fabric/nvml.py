"""Reading fabric info through NVIDIA's own Python binding, nvidia-ml-py (``pynvml``).

The binding is used as shipped: it dlopens ``libnvidia-ml.so.1`` through the
dynamic loader (``LD_LIBRARY_PATH`` or the standard paths), so check-fabric
reads whichever library a real client of that node would read, mock or real.

Fabric info is asked for through ``nvmlDeviceGetGpuFabricInfoV`` with the v3
version word, then v2 when the library refuses v3's version, and through the
older ``nvmlDeviceGetGpuFabricInfo`` (v1) when the versioned entry point is
missing or refuses both. The binding passes the struct argument through as
given, so it goes by reference (``ctypes.byref``): a bare struct would be
copied onto the stack by value. ``NVML_ERROR_NOT_SUPPORTED`` means "this GPU has no
fabric"; every other error stops the run with the call and GPU named.

``nvmlInit`` answering ``NVML_ERROR_GPU_NOT_FOUND`` means NVML works and the node
has no GPU: that is read as zero GPUs (a verdict, exit 2), not as a failure. A
library that cannot be loaded, or a driver that is not loaded, stays an error:
NVML could not say whether there are GPUs (and the mock answers
``NVML_ERROR_DRIVER_NOT_LOADED`` for a missing or malformed state, which is a
broken setup, not an empty node).
"""

from __future__ import annotations

import ctypes
import logging
import os
from types import TracebackType
from typing import Any

import pynvml

from check_fabric.errors import NvmlCallError
from check_fabric.model import FabricInfo, GpuFabric, format_cluster_uuid

logger = logging.getLogger(__name__)

_API_ORDER = ("v3", "v2", "v1")


def _error_name(code: int) -> str:
    for attr in dir(pynvml):
        if attr.startswith("NVML_ERROR_") and getattr(pynvml, attr) == code:
            return str(attr)
    return "NVML_ERROR_?"


def _error_message(err: pynvml.NVMLError) -> str:
    """NVML's own text for the error, asked of the loaded library first.

    The binding caches fixed strings for well-known codes; the library's
    ``nvmlErrorString`` can say more (the mock names the bad line of its state).
    """
    code = int(err.value)
    try:
        text = pynvml.nvmlErrorString(code)
    except pynvml.NVMLError:
        text = None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text) if text else str(err)


def _nvml_error(
    call: str, err: pynvml.NVMLError, index: int | None = None, hint: str | None = None
) -> NvmlCallError:
    code = int(err.value)
    return NvmlCallError(call, code, _error_name(code), _error_message(err), index=index, hint=hint)


def _is(err: pynvml.NVMLError, name: str) -> bool:
    return bool(err.value == getattr(pynvml, name, object()))


class FabricReader:
    """An NVML session that reads GPUs' fabric info; use as a context manager."""

    def __init__(self) -> None:
        self._initialized = False
        self._api: str | None = None
        """The first fabric entry point that answered; later GPUs start there."""
        self.no_gpu: NvmlCallError | None = None
        """Set when ``nvmlInit`` said the node has no GPU; the session then has zero GPUs."""

    def __enter__(self) -> FabricReader:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            if _is(err, "NVML_ERROR_GPU_NOT_FOUND"):
                self.no_gpu = _nvml_error("nvmlInit", err, hint="no GPU on this node")
                logger.info("%s", self.no_gpu)
                return self
            hint = None
            if _is(err, "NVML_ERROR_LIBRARY_NOT_FOUND"):
                where = os.environ.get("LD_LIBRARY_PATH") or "unset"
                hint = f"libnvidia-ml.so.1 could not be loaded (LD_LIBRARY_PATH={where})"
            raise _nvml_error("nvmlInit", err, hint=hint) from None
        self._initialized = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._initialized:
            self._initialized = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as err:
                logger.warning("nvmlShutdown failed: %s", _error_message(err))

    @property
    def api(self) -> str | None:
        """The fabric entry point in use (``v3``, ``v2`` or ``v1``), once one answered."""
        return self._api

    def device_count(self) -> int:
        if self.no_gpu is not None:
            return 0
        try:
            return int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as err:
            raise _nvml_error("DeviceGetCount", err) from None

    def read(self, index: int) -> GpuFabric:
        """Read one GPU's UUID and fabric info; raises ``NvmlCallError`` on any other failure."""
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as err:
            raise _nvml_error("handle", err, index) from None
        try:
            gpu_uuid = str(pynvml.nvmlDeviceGetUUID(handle))
        except pynvml.NVMLError as err:
            # As the reference tool: a missing UUID does not stop the fabric check.
            logger.warning("GPU %d: nvmlDeviceGetUUID failed: %s", index, _error_message(err))
            gpu_uuid = ""
        return GpuFabric(index, gpu_uuid, self._read_fabric(handle, index))

    def _read_fabric(self, handle: Any, index: int) -> FabricInfo | None:
        start = _API_ORDER.index(self._api) if self._api else 0
        last: pynvml.NVMLError | None = None
        versioned_missing = False
        for api in _API_ORDER[start:]:
            if versioned_missing and api != "v1":
                continue
            try:
                info = self._call(api, handle)
            except pynvml.NVMLError as err:
                if _is(err, "NVML_ERROR_NOT_SUPPORTED"):
                    return None
                if _is(err, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                    versioned_missing = True
                elif not _is(err, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"):
                    raise _nvml_error("GetGpuFabricInfo", err, index) from None
                logger.debug("GPU %d: fabric info %s refused: %s", index, api, err)
                last = err
                continue
            except _UnavailableError as missing:
                versioned_missing = versioned_missing or missing.entry_point
                continue
            if self._api != api:
                logger.debug("fabric info read through %s", api)
                self._api = api
            return info
        if last is None:  # pragma: no cover - v1 is always present in the binding
            raise NvmlCallError(
                "GetGpuFabricInfo", -1, "NVML_ERROR_?", "no entry point", index=index
            )
        raise _nvml_error("GetGpuFabricInfo", last, index) from None

    @staticmethod
    def _call(api: str, handle: Any) -> FabricInfo:
        if api == "v1":
            v1 = pynvml.c_nvmlGpuFabricInfo_t()
            pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(v1))
            return FabricInfo(
                format_cluster_uuid(bytes(v1.clusterUuid)),
                int(v1.cliqueId),
                int(v1.state),
                int(v1.status),
                None,
                None,
                "v1",
            )
        struct = getattr(pynvml, f"c_nvmlGpuFabricInfo_{api}_t", None)
        call = getattr(pynvml, "nvmlDeviceGetGpuFabricInfoV", None)
        if call is None:
            raise _UnavailableError(entry_point=True)
        if struct is None:
            raise _UnavailableError(entry_point=False)
        info = struct()  # sets the version word
        call(handle, ctypes.byref(info))
        return FabricInfo(
            format_cluster_uuid(bytes(info.clusterUuid)),
            int(info.cliqueId),
            int(info.state),
            int(info.status),
            int(info.healthMask),
            int(info.healthSummary) if api == "v3" else None,
            api,
        )


class _UnavailableError(Exception):
    """The installed binding lacks this version's struct, or the versioned entry point."""

    def __init__(self, *, entry_point: bool) -> None:
        super().__init__("entry point" if entry_point else "struct")
        self.entry_point = entry_point
