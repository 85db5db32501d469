"""NVIDIA's own runtime (libcudart.so.13 from the nvidia-cuda-runtime wheel) against the mock
driver: it asks the driver for private tables (cuGetExportTable), is refused, and reports an
error code. No crash and no hang: the process ends on its own, well inside its timeout."""

from __future__ import annotations

from typing import Any

RUNTIME = """
import ctypes, glob, importlib.metadata as m, json, os
files = m.files("nvidia-cuda-runtime") or []
path = next(str(f.locate()) for f in files
            if os.path.basename(str(f)).startswith("libcudart.so.13"))
rt = ctypes.CDLL(path)
rt.cudaGetErrorString.restype = ctypes.c_char_p
count = ctypes.c_int(-1)
err = rt.cudaGetDeviceCount(ctypes.byref(count))
ptr = ctypes.c_void_p()
malloc = rt.cudaMalloc(ctypes.byref(ptr), 1024)
version = ctypes.c_int()
rt.cudaDriverGetVersion(ctypes.byref(version))
print(json.dumps({"count": err, "malloc": malloc, "string": rt.cudaGetErrorString(err).decode(),
                  "driver": version.value}))
"""


def test_nvidias_runtime_fails_with_an_error_code(node: Any) -> None:
    result = node.run(RUNTIME, timeout=60)
    assert result["count"] != 0  # cudaSuccess would mean the private tables were served
    assert result["malloc"] != 0
    assert result["string"]
    assert result["driver"] == 13000  # it does reach the driver
