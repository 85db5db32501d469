"""NVML structs the tests lay out themselves where nvidia-ml-py lacks the version (shared by
the library's and the fault recipes' tests, in different topic folders)."""

from __future__ import annotations

import ctypes


class FabricV3(ctypes.Structure):
    """nvmlGpuFabricInfo_v3_t as nvml.h lays it out (nvidia-ml-py only knows v2)."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_ubyte * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
        ("healthSummary", ctypes.c_ubyte),
    ]


FABRIC_V3 = ctypes.sizeof(FabricV3) | 3 << 24
