"""A GPU's MIG devices as the default table and ``-q`` show them.

One walk over ``nvmlDeviceGetMigDeviceHandleByIndex`` per GPU feeds both views, so the table's
``MIG devices`` block and the report's ``MIG Device`` sections always list the same devices
with the same ids and figures. A GPU without MIG (or with MIG off) has none.
"""

from __future__ import annotations

from ctypes import Structure, byref, c_uint, c_ulonglong, c_void_p

from ._nvml import ECC_UNCORRECTED, ECC_VOLATILE, Device, NvmlError

NA = "N/A"
MIB = 1024 * 1024
BOX = "+" + "-" * 89 + "+"
SPLIT = "+" + "-" * 18 + "+" + "-" * 34 + "+" + "-" * 11 + "+" + "-" * 23 + "+"
DOUBLE = "|" + "=" * 18 + "+" + "=" * 34 + "+" + "=" * 11 + "+" + "=" * 23 + "|"


class _Attributes(Structure):
    _fields_ = [
        ("multiprocessorCount", c_uint),
        ("sharedCopyEngineCount", c_uint),
        ("sharedDecoderCount", c_uint),
        ("sharedEncoderCount", c_uint),
        ("sharedJpegCount", c_uint),
        ("sharedOfaCount", c_uint),
        ("gpuInstanceSliceCount", c_uint),
        ("computeInstanceSliceCount", c_uint),
        ("memorySizeMB", c_ulonglong),
    ]


class MigDevice:
    """One MIG device: its index under the GPU, its instance ids, figures in MiB; ``bar1``
    is (used, total) MiB, None where the library has none. A plain class, not a dataclass:
    the common commands read it, and ``dataclasses`` costs their start-up (see
    ``tests/smi/test_smi_startup.py``)."""

    __slots__ = (
        "bar1",
        "ci",
        "copy_engines",
        "decoders",
        "ecc_volatile_uncorrected",
        "encoders",
        "gi",
        "index",
        "jpegs",
        "ofas",
        "reserved_mib",
        "sms",
        "total_mib",
        "used_mib",
    )

    def __init__(
        self,
        *,
        index: int,
        gi: int,
        ci: int,
        sms: int,
        copy_engines: int,
        encoders: int,
        decoders: int,
        ofas: int,
        jpegs: int,
        total_mib: int | None,
        used_mib: int | None,
        reserved_mib: int | None,
        bar1: tuple[int, int] | None,
        ecc_volatile_uncorrected: int | None,
    ) -> None:
        self.index = index
        self.gi = gi
        self.ci = ci
        self.sms = sms
        self.copy_engines = copy_engines
        self.encoders = encoders
        self.decoders = decoders
        self.ofas = ofas
        self.jpegs = jpegs
        self.total_mib = total_mib
        self.used_mib = used_mib
        self.reserved_mib = reserved_mib
        self.bar1 = bar1
        self.ecc_volatile_uncorrected = ecc_volatile_uncorrected


def mig_handles(device: Device) -> list[tuple[int, c_void_p]]:
    """(index, handle) of the GPU's MIG devices; empty unless MIG is on. The one walk that
    ``-L``, the default table and ``-q`` share, so they list the same devices."""
    try:
        if device.mig_mode()[0] != 1:
            return []
        count = c_uint(0)
        device.nvml.call("nvmlDeviceGetMaxMigDeviceCount", device.handle, byref(count))
    except NvmlError:
        return []
    found = []
    for index in range(count.value):
        handle = c_void_p()
        try:
            device.nvml.call(
                "nvmlDeviceGetMigDeviceHandleByIndex", device.handle, index, byref(handle)
            )
        except NvmlError:
            continue
        found.append((index, handle))
    return found


def mig_devices(device: Device) -> list[MigDevice]:
    """The GPU's MIG devices, by index; empty unless MIG is on."""
    return [_one(Device(device.nvml, h, index), index) for index, h in mig_handles(device)]


def _one(mig: Device, index: int) -> MigDevice:
    gi, ci, attrs = c_uint(0), c_uint(0), _Attributes()
    mig.nvml.call("nvmlDeviceGetGpuInstanceId", mig.handle, byref(gi))
    mig.nvml.call("nvmlDeviceGetComputeInstanceId", mig.handle, byref(ci))
    mig.nvml.call("nvmlDeviceGetAttributes_v2", mig.handle, byref(attrs))
    total = used = reserved = None
    try:
        mem = mig.memory_info()
        total, used, reserved = mem.total // MIB, mem.used // MIB, mem.reserved // MIB
    except NvmlError:
        pass
    bar1 = None
    try:
        b = mig.bar1_memory_info()
        bar1 = (b.bar1Used // MIB, b.bar1Total // MIB)
    except NvmlError:
        pass
    try:
        ecc: int | None = mig.total_ecc_errors(ECC_UNCORRECTED, ECC_VOLATILE)
    except NvmlError:
        ecc = None
    return MigDevice(
        index=index,
        gi=gi.value,
        ci=ci.value,
        sms=attrs.multiprocessorCount,
        copy_engines=attrs.sharedCopyEngineCount,
        encoders=attrs.sharedEncoderCount,
        decoders=attrs.sharedDecoderCount,
        ofas=attrs.sharedOfaCount,
        jpegs=attrs.sharedJpegCount,
        total_mib=total,
        used_mib=used,
        reserved_mib=reserved,
        bar1=bar1,
        ecc_volatile_uncorrected=ecc,
    )


def _or_na(value: int | None) -> str:
    return NA if value is None else str(value)


def _mib(value: int | None) -> str:
    return NA if value is None else f"{value}MiB"


def table_block(rows: list[tuple[int, MigDevice]]) -> list[str]:
    """The default table's ``MIG devices`` box (current drivers' 91 columns): two lines per
    MIG device, memory over BAR1; ``No MIG devices found`` when MIG is on without any."""
    out = [
        BOX,
        f"|{' MIG devices:':<88} |",
        SPLIT,
        (
            "| GPU  GI  CI  MIG |                     Memo"
            "ry-Usage |        Vol|        Shared         |"
        ),
        (
            "|      ID  ID  Dev |                       BA"
            "R1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |"
        ),
        (
            "|                  |                         "
            "         |        ECC|                       |"
        ),
        DOUBLE,
    ]
    if not rows:
        out += [f"|{'  No MIG devices found':<88} |", BOX]
        return out
    for gpu, m in rows:
        bar_used, bar_total = (NA, NA) if m.bar1 is None else (f"{m.bar1[0]}MiB", f"{m.bar1[1]}MiB")
        out.append(
            f"|{gpu:>3}{m.gi:>5}{m.ci:>4}{m.index:>4}  |"
            f"{_mib(m.used_mib):>19} / {_mib(m.total_mib):>8}    |"
            f" {m.sms:<4}{_or_na(m.ecc_volatile_uncorrected):>5} |"
            f"{m.copy_engines:>3}{m.encoders:>4}{m.decoders:>5}{m.ofas:>5}{m.jpegs:>5} |"
        )
        out.append(f"|{'':18}|{bar_used:>21} / {bar_total:>8}  |{'':11}|{'':23}|")
        out.append(SPLIT)
    return out
