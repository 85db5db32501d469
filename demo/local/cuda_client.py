"""A small CUDA program, run inside the CUDA act's pod: the runtime API through ctypes.

It loads ``libcudart.so.13`` by soname, as a program linked against NVIDIA's runtime does
(``libcudart.so.12`` where the driver is older than CUDA 13, which a CUDA 13 runtime refuses);
in a pod annotated ``nvml-mock.nvidia.com/cuda-runtime: "true"`` the NRI plugin has preloaded
the overlay's runtime work-alikes, so those names are already taken by them. Each step prints one
``@@cuda@@ {json}`` line for the act to read. After allocating it waits (at most a minute)
for the act to create the file named by its first argument, then makes one more call and
prints its result: after a fault, the error the driver gives. With PyTorch importable it also
lets PyTorch see and use the GPU (its own tensors, on the same preloaded runtime).

Only the standard library: it runs in whatever interpreter the pod has.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from typing import Any

MARK = "@@cuda@@"
ALLOCATION = 256 << 20
ROUND_TRIP = 4 << 20
HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2  # cudaMemcpyKind
PROPERTIES_BYTES = 8192  # larger than any major's cudaDeviceProp
UUID_OFFSET = 256  # cudaDeviceProp: char name[256], then cudaUUID_t uuid
SONAMES = ("libcudart.so.13", "libcudart.so.12")
"""A CUDA 13 build first; a CUDA 12 one where the node's driver is older than CUDA 13."""
INSUFFICIENT_DRIVER = 35  # cudaErrorInsufficientDriver


def emit(step: str, **fields: Any) -> None:
    print(MARK, json.dumps({"step": step, **fields}), flush=True)


def loaded_from(soname: str) -> str:
    """The file the process mapped for *soname* (which library answers the calls)."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split()[-1]
            if path.endswith("/" + soname):
                return path
    return ""


def uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def err(rt: ctypes.CDLL, code: int) -> dict[str, Any]:
    """A runtime result: its code, name and string."""
    return {
        "code": code,
        "error": rt.cudaGetErrorName(code).decode(),
        "string": rt.cudaGetErrorString(code).decode(),
    }


def main() -> int:
    go = sys.argv[1]
    for soname in SONAMES:
        rt = ctypes.CDLL(soname)
        rt.cudaGetErrorName.restype = ctypes.c_char_p
        rt.cudaGetErrorString.restype = ctypes.c_char_p
        count = ctypes.c_int(-1)
        rc = rt.cudaGetDeviceCount(ctypes.byref(count))
        if rc != INSUFFICIENT_DRIVER:
            break
        emit("refused", soname=soname, **err(rt, rc))
    emit("loaded", library=loaded_from(soname), pid=os.getpid())
    emit("count", count=count.value, **err(rt, rc))
    if rc != 0 or count.value < 1:
        return 1
    props = ctypes.create_string_buffer(PROPERTIES_BYTES)
    rc = rt.cudaGetDeviceProperties(props, 0)
    name = props.raw[:256].split(b"\0", 1)[0].decode()
    uuid = uuid_text(props.raw[UUID_OFFSET : UUID_OFFSET + 16])
    emit("properties", name=name, uuid=uuid, **err(rt, rc))
    free0, total = ctypes.c_size_t(), ctypes.c_size_t()
    rc = rt.cudaMemGetInfo(ctypes.byref(free0), ctypes.byref(total))
    emit("memory", free=free0.value, total=total.value, **err(rt, rc))
    pointer = ctypes.c_void_p()
    rc = rt.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(ALLOCATION))
    free1 = ctypes.c_size_t()
    rt.cudaMemGetInfo(ctypes.byref(free1), ctypes.byref(total))
    emit("malloc", bytes=ALLOCATION, free_before=free0.value, free_after=free1.value, **err(rt, rc))
    if rc != 0:
        return 1
    data = os.urandom(ROUND_TRIP)
    back = ctypes.create_string_buffer(ROUND_TRIP)
    size = ctypes.c_size_t(ROUND_TRIP)
    up = rt.cudaMemcpy(pointer, ctypes.c_char_p(data), size, HOST_TO_DEVICE)
    down = rt.cudaMemcpy(back, pointer, size, DEVICE_TO_HOST)
    emit("round-trip", bytes=ROUND_TRIP, exact=back.raw == data, up=err(rt, up), **err(rt, down))
    torch_check()
    emit("waiting")
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
    rc = rt.cudaMemcpy(back, pointer, size, DEVICE_TO_HOST)
    emit("after", **err(rt, rc))
    return 0


def torch_check() -> None:
    """PyTorch on the same GPU, when this interpreter has it."""
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        emit("torch", ran=False, why=f"import torch: {exc}")
        return
    try:
        available = torch.cuda.is_available()
        seen: dict[str, Any] = {"available": available, "version": torch.__version__}
        if available:
            seen["count"] = torch.cuda.device_count()
            seen["name"] = torch.cuda.get_device_name(0)
            source = torch.randint(0, 256, (ALLOCATION,), dtype=torch.uint8)
            tensor = source.to("cuda:0")
            seen["exact"] = bool(torch.equal(tensor.cpu(), source))
            seen["allocated"] = int(torch.cuda.memory_allocated(0))
            globals()["_kept"] = tensor  # held while the act looks at nvidia-smi
        emit("torch", ran=True, **seen)
    except Exception as exc:
        emit("torch", ran=True, error=f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
