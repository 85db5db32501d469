"""The ``unsigned int`` fields of NVML's MIG profile info structures, in NVML's order.

Both the ``nvidia-smi`` work-alike and the stage-time layout maker read these structures
through ctypes; one declaration keeps their layouts from drifting apart. A GPU-instance
profile's ``memorySizeMB`` (``unsigned long long``) follows its fields. Import-light on
purpose, and loaded only when a MIG command runs (not when ``-L`` loads the registry).
"""

from __future__ import annotations

GI_PROFILE_FIELDS: tuple[str, ...] = (
    "id",
    "isP2pSupported",
    "sliceCount",
    "instanceCount",
    "multiprocessorCount",
    "copyEngineCount",
    "decoderCount",
    "encoderCount",
    "jpegCount",
    "ofaCount",
)
CI_PROFILE_FIELDS: tuple[str, ...] = (
    "id",
    "sliceCount",
    "instanceCount",
    "multiprocessorCount",
    "sharedCopyEngineCount",
    "sharedDecoderCount",
    "sharedEncoderCount",
    "sharedJpegCount",
    "sharedOfaCount",
)
