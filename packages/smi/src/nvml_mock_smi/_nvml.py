"""A minimal ctypes binding to whatever ``libnvidia-ml.so.1`` the process loads.

The work-alike must behave like the real tool on a real GPU node too, so it talks to NVML
through its C ABI and nothing else: no reading of mock state, no pynvml (importing pynvml
costs more start-up time than a whole ``-L`` run may take). Only the structs and calls the
tool renders are declared here. Each struct names the ``nvml.h`` type it mirrors
(``_nvml_type_``); ``tests/smi/test_smi_bindings.py`` compiles against NVIDIA's ``nvml.h`` (from
``nvidia-nvml-dev``) and holds every struct's size and field offsets, and every call's
argument count, kinds and pointee sizes, to the header's. A symbol the library lacks answers
``NVML_ERROR_FUNCTION_NOT_FOUND`` like any other error, so an old driver prints an error
string instead of crashing the tool.
"""

from __future__ import annotations

import ctypes
from ctypes import (
    Structure,
    Union,
    byref,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_longlong,
    c_uint,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
    create_string_buffer,
    sizeof,
)

from ._errors import WorkAlikeError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_LIBRARY = "libnvidia-ml.so.1"

SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_GPU_NOT_FOUND = 28
ERROR_UNKNOWN = 999

VALUE_NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF
"""``NVML_VALUE_NOT_AVAILABLE`` in a 64-bit field (a process's memory under some drivers)."""
VALUE_NOT_AVAILABLE_UINT = 0xFFFFFFFF
"""The same in a 32-bit field (a process's GPU / compute instance outside MIG)."""

CLOCK_GRAPHICS, CLOCK_SM, CLOCK_MEM, CLOCK_VIDEO = 0, 1, 2, 3
TEMP_THRESHOLD_SHUTDOWN, TEMP_THRESHOLD_SLOWDOWN, TEMP_THRESHOLD_MEM_MAX, TEMP_THRESHOLD_GPU_MAX = (
    0,
    1,
    2,
    3,
)
ECC_CORRECTED, ECC_UNCORRECTED = 0, 1
ECC_VOLATILE, ECC_AGGREGATE = 0, 1
MEM_LOC_L1, MEM_LOC_L2, MEM_LOC_DRAM, MEM_LOC_REGISTER, MEM_LOC_TEXTURE, MEM_LOC_TEXTURE_SHM = (
    0,
    1,
    2,
    3,
    4,
    5,
)
MEM_LOC_CBU, MEM_LOC_SRAM = 6, 7
INFOROM_OEM, INFOROM_ECC, INFOROM_POWER = 0, 1, 2
PCIE_UTIL_TX, PCIE_UTIL_RX = 0, 1
PAGE_RETIREMENT_MULTIPLE_SBE, PAGE_RETIREMENT_DBE = 0, 1
AFFINITY_SCOPE_NODE = 0

FI_PERF_POLICY_POWER = 74
FI_PERF_POLICY_SYNC_BOOST = 76
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_REMOTE_NVLINK_ID = 146
FI_NVLINK_GET_SPEED = 164
FI_POWER_AVERAGE = 185
FI_POWER_INSTANT = 186
FI_POWER_MIN_LIMIT = 187
FI_POWER_MAX_LIMIT = 188
FI_POWER_DEFAULT_LIMIT = 189
FI_POWER_CURRENT_LIMIT = 190
FI_POWER_REQUESTED_LIMIT = 192
POWER_SCOPE_MODULE = 1
POWER_SCOPE_MEMORY = 2
FI_PCIE_OUTBOUND_ATOMICS_MASK = 228
FI_PCIE_INBOUND_ATOMICS_MASK = 229
FI_GPU_RECOVERY_ACTION = 230
FI_CLOCKS_EVENT_SW_THERM = 269
FI_CLOCKS_EVENT_HW_THERM = 270
FI_CLOCKS_EVENT_HW_POWER_BRAKE = 271
FI_EDPP_MULTIPLIER = 274

VALUE_TYPE_DOUBLE, VALUE_TYPE_UINT, VALUE_TYPE_ULONG, VALUE_TYPE_ULONGLONG = 0, 1, 2, 3
VALUE_TYPE_SLONGLONG, VALUE_TYPE_SINT, VALUE_TYPE_USHORT = 4, 5, 6


def struct_version(struct: type[Structure], version: int) -> int:
    """``NVML_STRUCT_VERSION``: the struct size with the version in the top byte."""
    return sizeof(struct) | (version << 24)


class PciInfo(Structure):
    _nvml_type_ = "nvmlPciInfo_t"
    _fields_ = [
        ("busIdLegacy", c_char * 16),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * 32),
    ]


class PciInfoExt(Structure):
    _nvml_type_ = "nvmlPciInfoExt_v1_t"
    _fields_ = [
        ("version", c_uint),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("baseClass", c_uint),
        ("subClass", c_uint),
        ("busId", c_char * 32),
    ]


class Memory(Structure):
    _nvml_type_ = "nvmlMemory_t"
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class MemoryV2(Structure):
    _nvml_type_ = "nvmlMemory_v2_t"
    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


class Bar1Memory(Structure):
    _nvml_type_ = "nvmlBAR1Memory_t"
    _fields_ = [("bar1Total", c_ulonglong), ("bar1Free", c_ulonglong), ("bar1Used", c_ulonglong)]


class Utilization(Structure):
    _nvml_type_ = "nvmlUtilization_t"
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class ViolationTime(Structure):
    _nvml_type_ = "nvmlViolationTime_t"
    _fields_ = [("referenceTime", c_ulonglong), ("violationTime", c_ulonglong)]


class ProcessUtilizationSample(Structure):
    _nvml_type_ = "nvmlProcessUtilizationSample_t"
    _fields_ = [
        ("pid", c_uint),
        ("timeStamp", c_ulonglong),
        ("smUtil", c_uint),
        ("memUtil", c_uint),
        ("encUtil", c_uint),
        ("decUtil", c_uint),
    ]


class ProcessInfo(Structure):
    _nvml_type_ = "nvmlProcessInfo_v2_t"
    _fields_ = [
        ("pid", c_uint),
        ("usedGpuMemory", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    ]


class GpuFabricInfoV3(Structure):
    _nvml_type_ = "nvmlGpuFabricInfo_v3_t"
    _fields_ = [
        ("version", c_uint),
        ("clusterUuid", ctypes.c_ubyte * 16),
        ("status", c_int),
        ("cliqueId", c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", c_uint),
        ("healthSummary", ctypes.c_ubyte),
    ]


class PlatformInfoV2(Structure):
    _nvml_type_ = "nvmlPlatformInfo_v2_t"
    _fields_ = [
        ("version", c_uint),
        ("ibGuid", ctypes.c_ubyte * 16),
        ("chassisSerialNumber", ctypes.c_ubyte * 16),
        ("slotNumber", ctypes.c_ubyte),
        ("trayIndex", ctypes.c_ubyte),
        ("hostId", ctypes.c_ubyte),
        ("peerType", ctypes.c_ubyte),
        ("moduleId", ctypes.c_ubyte),
    ]


class Pdi(Structure):
    _nvml_type_ = "nvmlPdi_v1_t"
    _fields_ = [("version", c_uint), ("value", c_ulonglong)]


class EccSramErrorStatus(Structure):
    _nvml_type_ = "nvmlEccSramErrorStatus_v1_t"
    _fields_ = [
        ("version", c_uint),
        ("aggregateUncParity", c_ulonglong),
        ("aggregateUncSecDed", c_ulonglong),
        ("aggregateCor", c_ulonglong),
        ("volatileUncParity", c_ulonglong),
        ("volatileUncSecDed", c_ulonglong),
        ("volatileCor", c_ulonglong),
        ("aggregateUncBucketL2", c_ulonglong),
        ("aggregateUncBucketSm", c_ulonglong),
        ("aggregateUncBucketPcie", c_ulonglong),
        ("aggregateUncBucketMcu", c_ulonglong),
        ("aggregateUncBucketOther", c_ulonglong),
        ("bThresholdExceeded", c_uint),
    ]


class RepairStatus(Structure):
    _nvml_type_ = "nvmlRepairStatus_v1_t"
    _fields_ = [
        ("version", c_uint),
        ("bChannelRepairPending", c_uint),
        ("bTpcRepairPending", c_uint),
    ]


class UnrepairableMemoryStatus(Structure):
    _nvml_type_ = "nvmlUnrepairableMemoryStatus_v1_t"
    _fields_ = [("bUnrepairableMemory", c_uint)]


class RowRemapperHistogram(Structure):
    _nvml_type_ = "nvmlRowRemapperHistogramValues_t"
    _fields_ = [
        ("max", c_uint),
        ("high", c_uint),
        ("partial", c_uint),
        ("low", c_uint),
        ("none", c_uint),
    ]


class RemappedRowsV2(Structure):
    _nvml_type_ = "nvmlRemappedRowsInfo_v2_t"
    _fields_ = [
        ("corrActiveRemaps", c_uint),
        ("corrInactiveRemaps", c_uint),
        ("uncActiveRemaps", c_uint),
        ("uncInactiveRemaps", c_uint),
        ("bPending", c_uint),
        ("bFailureOccurred", c_uint),
    ]


class C2cModeInfo(Structure):
    _nvml_type_ = "nvmlC2cModeInfo_v1_t"
    _fields_ = [("isC2cEnabled", c_uint)]


class ConfComputeMemSizeInfo(Structure):
    _nvml_type_ = "nvmlConfComputeMemSizeInfo_t"
    _fields_ = [("protectedMemSizeKib", c_ulonglong), ("unprotectedMemSizeKib", c_ulonglong)]


class DramEncryptionInfo(Structure):
    _nvml_type_ = "nvmlDramEncryptionInfo_v1_t"
    _fields_ = [("version", c_uint), ("encryptionState", c_int)]


class MarginTemperature(Structure):
    _nvml_type_ = "nvmlMarginTemperature_v1_t"
    _fields_ = [("version", c_uint), ("marginTemperature", c_int)]


class AddressingMode(Structure):
    _nvml_type_ = "nvmlDeviceAddressingMode_v1_t"
    _fields_ = [("version", c_uint), ("value", c_uint)]


class FbcStats(Structure):
    _nvml_type_ = "nvmlFBCStats_t"
    _fields_ = [("sessionsCount", c_uint), ("averageFPS", c_uint), ("averageLatency", c_uint)]


class DeviceCapabilities(Structure):
    _nvml_type_ = "nvmlDeviceCapabilities_v1_t"
    _fields_ = [("version", c_uint), ("capMask", c_uint)]


class Value(Union):
    _nvml_type_ = "nvmlValue_t"
    _fields_ = [
        ("dVal", c_double),
        ("siVal", c_int),
        ("uiVal", c_uint),
        ("ulVal", c_ulong),
        ("ullVal", c_ulonglong),
        ("sllVal", c_longlong),
        ("usVal", c_ushort),
    ]


class FieldValue(Structure):
    _nvml_type_ = "nvmlFieldValue_t"
    _fields_ = [
        ("fieldId", c_uint),
        ("scopeId", c_uint),
        ("timestamp", c_longlong),
        ("latencyUsec", c_longlong),
        ("valueType", c_int),
        ("nvmlReturn", c_int),
        ("value", Value),
    ]


class NvmlError(WorkAlikeError):
    """An NVML call returned ``code``; ``text`` is the library's own ``nvmlErrorString``."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


class LibraryNotFoundError(WorkAlikeError):
    """The shared library could not be loaded."""


class Nvml:
    """One loaded NVML library. Every call returns a value or raises :class:`NvmlError`."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        """The library file asked for (None: found by its soname)."""
        try:
            self._lib = ctypes.CDLL(path or DEFAULT_LIBRARY)
        except OSError as exc:
            raise LibraryNotFoundError(str(exc)) from exc
        self._cache: dict[str, Any] = {}
        self._errors: dict[int, str] = {}
        err = self._symbol("nvmlErrorString")
        if err is not None:
            err.restype = c_char_p

    def _symbol(self, name: str) -> Any:
        if name in self._cache:
            return self._cache[name]
        try:
            fn = getattr(self._lib, name)
        except AttributeError:
            fn = None
        self._cache[name] = fn
        return fn

    def error_string(self, code: int) -> str:
        """``nvmlErrorString(code)``, asked once per code: a report turns a few hundred
        answers (mostly ``Not Supported``) into text, and the string is fixed per library."""
        text = self._errors.get(code)
        if text is None:
            fn = self._symbol("nvmlErrorString")
            raw = fn(c_int(code)) if fn is not None else None
            text = raw.decode("utf-8", "replace") if raw else f"Unknown Error ({code})"
            self._errors[code] = text
        return text

    def call(self, name: str, *args: Any) -> None:
        """Call ``name``; raise :class:`NvmlError` unless it returns ``NVML_SUCCESS``."""
        fn = self._symbol(name)
        if fn is None:
            raise NvmlError(ERROR_FUNCTION_NOT_FOUND, self.error_string(ERROR_FUNCTION_NOT_FOUND))
        rc = fn(*args)
        if rc != SUCCESS:
            raise NvmlError(rc, self.error_string(rc))

    def has(self, name: str) -> bool:
        return self._symbol(name) is not None

    # --- system -------------------------------------------------------------------------

    def init(self) -> None:
        self.call("nvmlInit_v2") if self.has("nvmlInit_v2") else self.call("nvmlInit")

    def shutdown(self) -> None:
        try:  # noqa: SIM105 (contextlib would cost start-up time)
            self.call("nvmlShutdown")
        except NvmlError:
            pass

    def _string(self, name: str, *pre: Any, size: int = 96) -> str:
        buf = create_string_buffer(size)
        self.call(name, *pre, buf, c_uint(size))
        return buf.value.decode("utf-8", "replace")

    def driver_version(self) -> str:
        return self._string("nvmlSystemGetDriverVersion", size=80)

    def nvml_version(self) -> str:
        return self._string("nvmlSystemGetNVMLVersion", size=80)

    def cuda_driver_version(self) -> int:
        value = c_int()
        name = "nvmlSystemGetCudaDriverVersion_v2"
        self.call(name if self.has(name) else "nvmlSystemGetCudaDriverVersion", byref(value))
        return value.value

    def process_name(self, pid: int) -> str:
        return self._string("nvmlSystemGetProcessName", c_uint(pid), size=1024)

    def device_count(self) -> int:
        value = c_uint()
        name = "nvmlDeviceGetCount_v2"
        self.call(name if self.has(name) else "nvmlDeviceGetCount", byref(value))
        return value.value

    def handle_by_index(self, index: int) -> c_void_p:
        handle = c_void_p()
        name = "nvmlDeviceGetHandleByIndex_v2"
        self.call(
            name if self.has(name) else "nvmlDeviceGetHandleByIndex", c_uint(index), byref(handle)
        )
        return handle

    def handle_or_lost(self, index: int) -> tuple[c_void_p, bool]:
        """The handle of GPU *index*, and whether the lookup said the GPU is lost (the real
        driver still counts a lost GPU and may fill its handle; every call on it then answers
        ``NVML_ERROR_GPU_IS_LOST``). Other errors raise."""
        handle = c_void_p()
        try:
            name = "nvmlDeviceGetHandleByIndex_v2"
            self.call(
                name if self.has(name) else "nvmlDeviceGetHandleByIndex",
                c_uint(index),
                byref(handle),
            )
        except NvmlError as exc:
            if exc.code != ERROR_GPU_IS_LOST:
                raise
            return handle, True
        return handle, False


class Device:
    """One GPU handle with typed accessors; each raises :class:`NvmlError` on failure."""

    def __init__(self, nvml: Nvml, handle: c_void_p, index: int, *, lost: bool = False) -> None:
        self.nvml = nvml
        self.handle = handle
        self.index = index
        self.lost = lost
        """The handle lookup answered ``NVML_ERROR_GPU_IS_LOST``."""
        self._prefetched: dict[tuple[int, int], FieldValue] = {}

    def _c(self, name: str, *args: Any) -> None:
        self.nvml.call(name, self.handle, *args)

    def _uint(self, name: str, *pre: Any) -> int:
        value = c_uint()
        self._c(name, *pre, byref(value))
        return value.value

    def _int(self, name: str, *pre: Any) -> int:
        value = c_int()
        self._c(name, *pre, byref(value))
        return value.value

    def _ull(self, name: str, *pre: Any) -> int:
        value = c_ulonglong()
        self._c(name, *pre, byref(value))
        return value.value

    def _str(self, name: str, *pre: Any, size: int = 96) -> str:
        buf = create_string_buffer(size)
        self._c(name, *pre, buf, c_uint(size))
        return buf.value.decode("utf-8", "replace")

    def _pair(self, name: str, *pre: Any) -> tuple[int, int]:
        a, b = c_int(), c_int()
        self._c(name, *pre, byref(a), byref(b))
        return a.value, b.value

    # identity
    def name(self) -> str:
        return self._str("nvmlDeviceGetName")

    def uuid(self) -> str:
        return self._str("nvmlDeviceGetUUID")

    def serial(self) -> str:
        return self._str("nvmlDeviceGetSerial", size=30)

    def brand(self) -> int:
        return self._int("nvmlDeviceGetBrand")

    def architecture(self) -> int:
        return self._uint("nvmlDeviceGetArchitecture")

    def minor_number(self) -> int:
        return self._uint("nvmlDeviceGetMinorNumber")

    def vbios_version(self) -> str:
        return self._str("nvmlDeviceGetVbiosVersion", size=32)

    def multi_gpu_board(self) -> int:
        return self._uint("nvmlDeviceGetMultiGpuBoard")

    def board_id(self) -> int:
        return self._uint("nvmlDeviceGetBoardId")

    def board_part_number(self) -> str:
        return self._str("nvmlDeviceGetBoardPartNumber", size=80)

    def _mock_only(self, name: str) -> str:
        """``name``, a mock library export; on a library without it (a real driver) the
        fact is not supported, as the report prints it (N/A), not an unknown function."""
        if not self.nvml.has(name):
            raise NvmlError(ERROR_NOT_SUPPORTED, self.nvml.error_string(ERROR_NOT_SUPPORTED))
        return name

    def gpu_part_number(self) -> str:
        """The GPU's part number: no NVML call answers it; the mock library exports
        ``nvml_mock_device_gpu_part_number``."""
        return self._str(self._mock_only("nvml_mock_device_gpu_part_number"), size=32)

    def sparse_operation_mode(self) -> int:
        """0 disabled, 1 enabled; a mock export like :meth:`gpu_part_number`."""
        return self._uint(self._mock_only("nvml_mock_device_sparse_operation_mode"))

    def driver_bus_id(self) -> str:
        """The PCI bus id the driver side knows (8-digit domain), lost GPU or not: every NVML
        call on a lost GPU answers ``NVML_ERROR_GPU_IS_LOST``, ``GetPciInfo`` included, yet the
        real tool names it by its bus id. The mock library exports ``nvml_mock_device_bus_id``
        for this; elsewhere the PCI info answers (for a GPU that is not lost)."""
        if self.nvml.has("nvml_mock_device_bus_id"):
            return self._str("nvml_mock_device_bus_id", size=32)
        return str(self.pci_info().busId.decode())

    def module_id(self) -> int:
        return self._uint("nvmlDeviceGetModuleId")

    def pdi(self) -> int:
        info = Pdi(version=struct_version(Pdi, 1))
        self._c("nvmlDeviceGetPdi", byref(info))
        return int(info.value)

    def platform_info(self) -> PlatformInfoV2:
        info = PlatformInfoV2(version=struct_version(PlatformInfoV2, 2))
        self._c("nvmlDeviceGetPlatformInfo", byref(info))
        return info

    def inforom_image_version(self) -> str:
        return self._str("nvmlDeviceGetInforomImageVersion", size=16)

    def inforom_version(self, obj: int) -> str:
        return self._str("nvmlDeviceGetInforomVersion", c_int(obj), size=16)

    def cuda_compute_capability(self) -> tuple[int, int]:
        return self._pair("nvmlDeviceGetCudaComputeCapability")

    def gsp_firmware_mode(self) -> tuple[int, int]:
        """Whether GSP firmware runs the GPU now, and whether it does by default."""
        return self._pair("nvmlDeviceGetGspFirmwareMode")

    def validate_inforom(self) -> None:
        """Raises :class:`NvmlError` unless the infoROM's checksum is valid."""
        self._c("nvmlDeviceValidateInforom")

    def gsp_firmware_version(self) -> str:
        buf = create_string_buffer(80)
        self._c("nvmlDeviceGetGspFirmwareVersion", buf)
        return buf.value.decode("utf-8", "replace")

    # modes
    def display_mode(self) -> int:
        return self._int("nvmlDeviceGetDisplayMode")

    def display_active(self) -> int:
        return self._int("nvmlDeviceGetDisplayActive")

    def persistence_mode(self) -> int:
        return self._int("nvmlDeviceGetPersistenceMode")

    def addressing_mode(self) -> int:
        mode = AddressingMode(version=struct_version(AddressingMode, 1))
        self._c("nvmlDeviceGetAddressingMode", byref(mode))
        return int(mode.value)

    def mig_capable(self) -> bool:
        """Whether the GPU answers MIG mode at all (one call; ``-L`` asks it per GPU)."""
        try:
            self.mig_mode()
        except NvmlError:
            return False
        return True

    def mig_mode(self) -> tuple[int, int]:
        return self._pair("nvmlDeviceGetMigMode")

    def accounting_mode(self) -> int:
        return self._int("nvmlDeviceGetAccountingMode")

    def accounting_buffer_size(self) -> int:
        return self._uint("nvmlDeviceGetAccountingBufferSize")

    def driver_model(self) -> tuple[int, int]:
        name = "nvmlDeviceGetDriverModel_v2"
        return self._pair(name if self.nvml.has(name) else "nvmlDeviceGetDriverModel")

    def gpu_operation_mode(self) -> tuple[int, int]:
        return self._pair("nvmlDeviceGetGpuOperationMode")

    def c2c_mode(self) -> int:
        info = C2cModeInfo()
        self._c("nvmlDeviceGetC2cModeInfoV", byref(info))
        return int(info.isC2cEnabled)

    def virtualization_mode(self) -> int:
        return self._int("nvmlDeviceGetVirtualizationMode")

    def host_vgpu_mode(self) -> int:
        return self._int("nvmlDeviceGetHostVgpuMode")

    def compute_mode(self) -> int:
        return self._int("nvmlDeviceGetComputeMode")

    def ecc_mode(self) -> tuple[int, int]:
        return self._pair("nvmlDeviceGetEccMode")

    def dram_encryption_mode(self) -> tuple[int, int]:
        cur = DramEncryptionInfo(version=struct_version(DramEncryptionInfo, 1))
        pend = DramEncryptionInfo(version=struct_version(DramEncryptionInfo, 1))
        self._c("nvmlDeviceGetDramEncryptionMode", byref(cur), byref(pend))
        return int(cur.encryptionState), int(pend.encryptionState)

    def auto_boosted_clocks(self) -> tuple[int, int]:
        return self._pair("nvmlDeviceGetAutoBoostedClocksEnabled")

    # pci
    def pci_info(self) -> PciInfo:
        info = PciInfo()
        name = "nvmlDeviceGetPciInfo_v3"
        self._c(name if self.nvml.has(name) else "nvmlDeviceGetPciInfo", byref(info))
        return info

    def pci_info_ext(self) -> PciInfoExt:
        info = PciInfoExt(version=struct_version(PciInfoExt, 1))
        self._c("nvmlDeviceGetPciInfoExt", byref(info))
        return info

    def max_pcie_link_generation(self) -> int:
        return self._uint("nvmlDeviceGetMaxPcieLinkGeneration")

    def gpu_max_pcie_link_generation(self) -> int:
        return self._uint("nvmlDeviceGetGpuMaxPcieLinkGeneration")

    def curr_pcie_link_generation(self) -> int:
        return self._uint("nvmlDeviceGetCurrPcieLinkGeneration")

    def max_pcie_link_width(self) -> int:
        return self._uint("nvmlDeviceGetMaxPcieLinkWidth")

    def curr_pcie_link_width(self) -> int:
        return self._uint("nvmlDeviceGetCurrPcieLinkWidth")

    def pcie_replay_counter(self) -> int:
        return self._uint("nvmlDeviceGetPcieReplayCounter")

    def pcie_throughput(self, counter: int) -> int:
        return self._uint("nvmlDeviceGetPcieThroughput", c_int(counter))

    def numa_node(self) -> int:
        return self._uint("nvmlDeviceGetNumaNodeId")

    def cpu_affinity(self, words: int) -> list[int]:
        arr = (c_ulong * words)()
        name = "nvmlDeviceGetCpuAffinityWithinScope"
        if self.nvml.has(name):
            self._c(name, c_uint(words), arr, c_uint(AFFINITY_SCOPE_NODE))
        else:
            self._c("nvmlDeviceGetCpuAffinity", c_uint(words), arr)
        return [int(x) for x in arr]

    def nearest_gpus(self, level: int) -> list[c_void_p]:
        """The GPUs NVML finds at topology ``level`` from this one (not itself)."""
        count = c_uint(0)
        self._c("nvmlDeviceGetTopologyNearestGpus", c_int(level), byref(count), None)
        if count.value == 0:
            return []
        handles = (c_void_p * count.value)()
        self._c("nvmlDeviceGetTopologyNearestGpus", c_int(level), byref(count), handles)
        return [c_void_p(handles[i]) for i in range(count.value)]

    def topology_common_ancestor(self, other: Device) -> int:
        value = c_int()
        self.nvml.call(
            "nvmlDeviceGetTopologyCommonAncestor", self.handle, other.handle, byref(value)
        )
        return value.value

    # performance
    def fan_speed(self) -> int:
        return self._uint("nvmlDeviceGetFanSpeed")

    def performance_state(self) -> int:
        return self._int("nvmlDeviceGetPerformanceState")

    def power_state(self) -> int:
        """The P-state through the old entry point the power readings use (deprecated in 595)."""
        return self._int("nvmlDeviceGetPowerState")

    def clocks_event_reasons(self) -> int:
        name = "nvmlDeviceGetCurrentClocksEventReasons"
        return self._ull(
            name if self.nvml.has(name) else "nvmlDeviceGetCurrentClocksThrottleReasons"
        )

    def supported_clocks_event_reasons(self) -> int:
        name = "nvmlDeviceGetSupportedClocksEventReasons"
        return self._ull(
            name if self.nvml.has(name) else "nvmlDeviceGetSupportedClocksThrottleReasons"
        )

    def field_values(self, ids: list[tuple[int, int]]) -> list[FieldValue]:
        values = (FieldValue * len(ids))()
        for slot, (fid, scope) in zip(values, ids, strict=True):
            slot.fieldId = fid
            slot.scopeId = scope
        self._c("nvmlDeviceGetFieldValues", c_int(len(ids)), values)
        return list(values)

    def prefetch_fields(self, ids: tuple[tuple[int, int], ...]) -> None:
        """Read the ``(field, scope)`` pairs of ``ids`` in one ``nvmlDeviceGetFieldValues``
        call, for the :meth:`field_value` calls that follow: a report reads two dozen fields
        per GPU, and one call with all of them answers each slot as its own call would. The
        answers stand for this handle until the next prefetch (a report is one moment; each
        ``-l`` pass opens fresh handles); if the batch call itself fails, every field is
        asked alone."""
        try:
            values = self.field_values(list(ids))
        except NvmlError:
            return
        self._prefetched = dict(zip(ids, values, strict=True))

    def field_value(self, fid: int, scope: int = 0) -> int | float:
        fv = self._prefetched.get((fid, scope))
        if fv is None:
            fv = self.field_values([(fid, scope)])[0]
        if fv.nvmlReturn != SUCCESS:
            raise NvmlError(fv.nvmlReturn, self.nvml.error_string(fv.nvmlReturn))
        return field_number(fv)

    # memory
    def memory_info(self) -> MemoryV2:
        info = MemoryV2(version=struct_version(MemoryV2, 2))
        if self.nvml.has("nvmlDeviceGetMemoryInfo_v2"):
            try:
                self._c("nvmlDeviceGetMemoryInfo_v2", byref(info))
                return info
            except NvmlError as exc:
                if exc.code not in (ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND):
                    raise
        old = Memory()
        self._c("nvmlDeviceGetMemoryInfo", byref(old))
        return MemoryV2(version=0, total=old.total, reserved=0, free=old.free, used=old.used)

    def bar1_memory_info(self) -> Bar1Memory:
        info = Bar1Memory()
        self._c("nvmlDeviceGetBAR1MemoryInfo", byref(info))
        return info

    def conf_compute_mem_size(self) -> ConfComputeMemSizeInfo:
        info = ConfComputeMemSizeInfo()
        self._c("nvmlDeviceGetConfComputeMemSizeInfo", byref(info))
        return info

    def utilization(self) -> Utilization:
        info = Utilization()
        self._c("nvmlDeviceGetUtilizationRates", byref(info))
        return info

    def engine_utilization(self, name: str) -> int:
        value, period = c_uint(), c_uint()
        self._c(name, byref(value), byref(period))
        return value.value

    def encoder_stats(self) -> tuple[int, int, int]:
        count, fps, latency = c_uint(), c_uint(), c_uint()
        self._c("nvmlDeviceGetEncoderStats", byref(count), byref(fps), byref(latency))
        return count.value, fps.value, latency.value

    def fbc_stats(self) -> tuple[int, int, int]:
        stats = FbcStats()
        self._c("nvmlDeviceGetFBCStats", byref(stats))
        return int(stats.sessionsCount), int(stats.averageFPS), int(stats.averageLatency)

    def capabilities(self) -> int:
        """``nvmlDeviceGetCapabilities``'s mask (``NVML_DEV_CAP_*`` bits)."""
        caps = DeviceCapabilities(version=struct_version(DeviceCapabilities, 1))
        self._c("nvmlDeviceGetCapabilities", byref(caps))
        return int(caps.capMask)

    # ecc
    def memory_error_counter(self, err: int, counter: int, location: int) -> int:
        return self._ull(
            "nvmlDeviceGetMemoryErrorCounter", c_int(err), c_int(counter), c_int(location)
        )

    def total_ecc_errors(self, err: int, counter: int) -> int:
        return self._ull("nvmlDeviceGetTotalEccErrors", c_int(err), c_int(counter))

    def sram_ecc_error_status(self) -> EccSramErrorStatus:
        info = EccSramErrorStatus(version=struct_version(EccSramErrorStatus, 1))
        self._c("nvmlDeviceGetSramEccErrorStatus", byref(info))
        return info

    def repair_status(self) -> RepairStatus:
        info = RepairStatus(version=struct_version(RepairStatus, 1))
        self._c("nvmlDeviceGetRepairStatus", byref(info))
        return info

    def unrepairable_memory(self) -> int:
        info = UnrepairableMemoryStatus()
        self._c("nvmlDeviceGetUnrepairableMemoryFlag_v1", byref(info))
        return int(info.bUnrepairableMemory)

    def retired_pages_count(self, cause: int) -> int:
        count = c_uint(0)
        self._c("nvmlDeviceGetRetiredPages", c_int(cause), byref(count), None)
        return count.value

    def retired_pages_pending(self) -> int:
        return self._int("nvmlDeviceGetRetiredPagesPendingStatus")

    def remapped_rows(self) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = c_uint(), c_uint(), c_uint(), c_uint()
        self._c(
            "nvmlDeviceGetRemappedRows", byref(corr), byref(unc), byref(pending), byref(failure)
        )
        return corr.value, unc.value, pending.value, failure.value

    def remapped_rows_v2(self) -> RemappedRowsV2:
        info = RemappedRowsV2()
        self._c("nvmlDeviceGetRemappedRows_v2", byref(info))
        return info

    def row_remapper_histogram(self) -> RowRemapperHistogram:
        info = RowRemapperHistogram()
        self._c("nvmlDeviceGetRowRemapperHistogram", byref(info))
        return info

    # thermal / power
    def temperature(self) -> int:
        return self._uint("nvmlDeviceGetTemperature", c_int(0))

    def temperature_threshold(self, kind: int) -> int:
        return self._uint("nvmlDeviceGetTemperatureThreshold", c_int(kind))

    def margin_temperature(self) -> int:
        info = MarginTemperature(version=struct_version(MarginTemperature, 1))
        self._c("nvmlDeviceGetMarginTemperature", byref(info))
        return int(info.marginTemperature)

    def power_usage(self) -> int:
        return self._uint("nvmlDeviceGetPowerUsage")

    def power_limit(self) -> int:
        return self._uint("nvmlDeviceGetPowerManagementLimit")

    def enforced_power_limit(self) -> int:
        return self._uint("nvmlDeviceGetEnforcedPowerLimit")

    def default_power_limit(self) -> int:
        return self._uint("nvmlDeviceGetPowerManagementDefaultLimit")

    def power_limit_constraints(self) -> tuple[int, int]:
        lo, hi = c_uint(), c_uint()
        self._c("nvmlDeviceGetPowerManagementLimitConstraints", byref(lo), byref(hi))
        return lo.value, hi.value

    def power_management_mode(self) -> int:
        return self._int("nvmlDeviceGetPowerManagementMode")

    # clocks
    def clock_info(self, kind: int) -> int:
        return self._uint("nvmlDeviceGetClockInfo", c_int(kind))

    def max_clock_info(self, kind: int) -> int:
        return self._uint("nvmlDeviceGetMaxClockInfo", c_int(kind))

    def applications_clock(self, kind: int) -> int:
        return self._uint("nvmlDeviceGetApplicationsClock", c_int(kind))

    def default_applications_clock(self, kind: int) -> int:
        return self._uint("nvmlDeviceGetDefaultApplicationsClock", c_int(kind))

    def max_customer_boost_clock(self, kind: int) -> int:
        return self._uint("nvmlDeviceGetMaxCustomerBoostClock", c_int(kind))

    def supported_memory_clocks(self) -> list[int]:
        return self._uint_list("nvmlDeviceGetSupportedMemoryClocks")

    def supported_graphics_clocks(self, mem: int) -> list[int]:
        return self._uint_list("nvmlDeviceGetSupportedGraphicsClocks", c_uint(mem))

    def _uint_list(self, name: str, *pre: Any) -> list[int]:
        count = c_uint(0)
        try:
            self._c(name, *pre, byref(count), None)
        except NvmlError as exc:
            if exc.code != ERROR_INSUFFICIENT_SIZE:
                raise
        if count.value == 0:
            return []
        arr = (c_uint * count.value)()
        self._c(name, *pre, byref(count), arr)
        return [int(arr[i]) for i in range(count.value)]

    # fabric
    def fabric_info(self) -> GpuFabricInfoV3:
        info = GpuFabricInfoV3(version=struct_version(GpuFabricInfoV3, 3))
        self._c("nvmlDeviceGetGpuFabricInfoV", byref(info))
        return info

    # processes
    def running_processes(self, kind: str) -> list[ProcessInfo]:
        name = f"nvmlDeviceGet{kind}RunningProcesses_v3"
        count = c_uint(0)
        try:
            self._c(name, byref(count), None)
            return []
        except NvmlError as exc:
            if exc.code != ERROR_INSUFFICIENT_SIZE:
                raise
        for _ in range(3):
            size = count.value + 8
            arr = (ProcessInfo * size)()
            count = c_uint(size)
            try:
                self._c(name, byref(count), arr)
            except NvmlError as exc:
                if exc.code == ERROR_INSUFFICIENT_SIZE:
                    continue
                raise
            return [arr[i] for i in range(count.value)]
        return []

    # nvlink
    def nvlink_state(self, link: int) -> int:
        return self._int("nvmlDeviceGetNvLinkState", c_uint(link))

    def nvlink_version(self, link: int) -> int:
        return self._uint("nvmlDeviceGetNvLinkVersion", c_uint(link))

    def nvlink_remote_pci(self, link: int) -> PciInfo:
        info = PciInfo()
        name = "nvmlDeviceGetNvLinkRemotePciInfo_v2"
        self._c(
            name if self.nvml.has(name) else "nvmlDeviceGetNvLinkRemotePciInfo",
            c_uint(link),
            byref(info),
        )
        return info


def field_number(fv: FieldValue) -> int | float:
    kind = fv.valueType
    v = fv.value
    if kind == VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if kind == VALUE_TYPE_UINT:
        return int(v.uiVal)
    if kind == VALUE_TYPE_ULONG:
        return int(v.ulVal)
    if kind == VALUE_TYPE_SLONGLONG:
        return int(v.sllVal)
    if kind == VALUE_TYPE_SINT:
        return int(v.siVal)
    if kind == VALUE_TYPE_USHORT:
        return int(v.usVal)
    return int(v.ullVal)


def decode_bytes(raw: Any) -> str:
    """A NUL-padded ``unsigned char[]`` as text."""
    data = bytes(raw)
    return data.split(b"\0", 1)[0].decode("utf-8", "replace")


__all__ = ["Device", "LibraryNotFoundError", "Nvml", "NvmlError"]
