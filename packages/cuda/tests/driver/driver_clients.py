"""Client programs the tests run in processes of their own: each prints one JSON line.

They use NVIDIA's cuda-bindings (``cuda.bindings.driver``) and nvidia-ml-py as any program on
a node would; nothing here knows the mock.
"""

CUDA_IDENTITY = """
import json
from cuda.bindings import driver as d

A = d.CUdevice_attribute
def ok(result):
    err, *values = result
    assert err == d.CUresult.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else values

def uuid_text(raw):
    h = bytes(raw).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

ok(d.cuInit(0))
out = {"version": ok(d.cuDriverGetVersion()), "devices": []}
for i in range(ok(d.cuDeviceGetCount())):
    dev = ok(d.cuDeviceGet(i))
    attr = lambda a: ok(d.cuDeviceGetAttribute(a, dev))
    out["devices"].append({
        "name": ok(d.cuDeviceGetName(96, dev)).split(b"\\0")[0].decode(),
        "uuid": uuid_text(ok(d.cuDeviceGetUuid(dev)).bytes),
        "bus": ok(d.cuDeviceGetPCIBusId(16, dev)).split(b"\\0")[0].decode(),
        "memory": ok(d.cuDeviceTotalMem(dev)),
        "cc": [
            attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        ],
        "sms": attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        "clock_khz": attr(A.CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
        "mem_clock_khz": attr(A.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
        "bus_width": attr(A.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
        "pci_device_id": attr(A.CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID) & 0xFFFFFFFF,
        "l2": attr(A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
        "warp": attr(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE),
    })
print(json.dumps(out))
"""

NVML_IDENTITY = """
import json
import pynvml as n

n.nvmlInit()
out = {"version": n.nvmlSystemGetCudaDriverVersion_v2(), "devices": []}
def entry(h, parent):
    pci = n.nvmlDeviceGetPciInfo(parent)
    uuid = n.nvmlDeviceGetUUID(h)
    return {
        "name": n.nvmlDeviceGetName(h),
        "uuid": uuid.split("-", 1)[1],
        "bus": f"{pci.domain:04X}:{pci.bus:02X}:{pci.device:02X}.0",
        "memory": n.nvmlDeviceGetMemoryInfo(h).total,
        "cc": list(n.nvmlDeviceGetCudaComputeCapability(parent)),
        "sms": n.nvmlDeviceGetAttributes_v2(h).multiprocessorCount,
        "clock_khz": n.nvmlDeviceGetMaxClockInfo(parent, n.NVML_CLOCK_SM) * 1000,
        "mem_clock_khz": n.nvmlDeviceGetMaxClockInfo(parent, n.NVML_CLOCK_MEM) * 1000,
        "bus_width": n.nvmlDeviceGetMemoryBusWidth(parent),
        "pci_device_id": pci.pciDeviceId,
    }
for i in range(n.nvmlDeviceGetCount()):
    gpu = n.nvmlDeviceGetHandleByIndex(i)
    try:
        mig = n.nvmlDeviceGetMigMode(gpu)[0]
    except n.NVMLError:
        mig = 0
    if mig:
        for m in range(n.nvmlDeviceGetMaxMigDeviceCount(gpu)):
            try:
                h = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu, m)
            except n.NVMLError:
                continue
            out["devices"].append(entry(h, gpu))
    else:
        out["devices"].append(entry(gpu, gpu))
print(json.dumps(out))
"""
