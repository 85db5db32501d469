"""Every fuzz seed and every minimised crasher, fed to the real built library through init.

The fuzz campaigns (native/fuzz/README.md) run in ASan/UBSan builds; this is the check
that stays in every run: each file under ``native/fuzz/seeds`` and
``native/fuzz/regressions`` is loaded by the shipped ``libnvidia-ml.so.1`` in a child
process (a crash there must not take the test run with it). Init must answer
SUCCESS or one of the codes STATE-FORMAT.md documents, with a non-empty error string
that says why, and an accepted state must then be fully readable and shut down cleanly.

The last byte of an input selects the same variant as the init fuzzer does (fabric
identity from the environment, valid or not; NO_GPUS init; NVIDIA_VISIBLE_DEVICES from
the input's last comment), so a crasher replays here exactly as it was found.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FUZZ = Path(__file__).resolve().parents[2] / "native" / "fuzz"
CORPUS = sorted(
    p
    for d in ("seeds", "regressions")
    if (FUZZ / d).is_dir()
    for p in (FUZZ / d).iterdir()
    if p.is_file() and not p.name.startswith(".")
)

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
DOCUMENTED = {
    NVML_SUCCESS,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_NOT_FOUND,
    NVML_ERROR_INVALID_STATE,
}

# What the named seeds must do (the rest only have to answer a documented code).
SEED_OUTCOME: dict[str, tuple[int, int]] = {  # name -> (init code, GPU count)
    "a100-2gpu": (NVML_SUCCESS, 2),
    "h100-2gpu": (NVML_SUCCESS, 2),
    "visible-one-gpu": (NVML_SUCCESS, 1),
    "visible-unknown-index": (NVML_ERROR_INVALID_STATE, 0),
    "visible-none": (NVML_ERROR_GPU_NOT_FOUND, 0),
    "gb200-2gpu": (NVML_SUCCESS, 2),
    "gb300-2gpu": (NVML_SUCCESS, 2),
    "l40s-2gpu": (NVML_SUCCESS, 2),
    "t4-2gpu": (NVML_SUCCESS, 2),
    "eight-gpus": (NVML_SUCCESS, 8),
    "no-trailing-newline": (NVML_SUCCESS, 2),
    "env-style-unknown-keys": (NVML_ERROR_INVALID_STATE, 0),
    "no-gpus": (NVML_ERROR_GPU_NOT_FOUND, 0),
    "empty": (NVML_ERROR_INVALID_STATE, 0),
    "magic-only": (NVML_ERROR_INVALID_STATE, 0),
    "magic-no-newline": (NVML_ERROR_INVALID_STATE, 0),
    "wrong-format": (NVML_ERROR_INVALID_STATE, 0),
    "crlf": (NVML_ERROR_INVALID_STATE, 0),
    "truncated-mid-gpu": (NVML_ERROR_INVALID_STATE, 0),
    "duplicate-key": (NVML_ERROR_INVALID_STATE, 0),
    "count-mismatch": (NVML_ERROR_INVALID_STATE, 0),
    "gpu-out-of-order": (NVML_ERROR_INVALID_STATE, 0),
    "max-values": (NVML_ERROR_INVALID_STATE, 0),
    "bad-bus-id": (NVML_ERROR_INVALID_STATE, 0),
    "long-line": (NVML_ERROR_INVALID_STATE, 0),
    "empty-uuid": (NVML_ERROR_INVALID_STATE, 0),
    "too-many-nvlink-remotes": (NVML_ERROR_INVALID_STATE, 0),
    "eighteen-nvlink-remotes": (NVML_SUCCESS, 2),
    "invalid-utf8": (NVML_ERROR_INVALID_STATE, 0),
    "multibyte-utf8": (NVML_SUCCESS, 2),
}

# Runs in a child: init on one input, read every GPU, print one JSON line.
DRIVER = r"""
import ctypes, json, os, sys

lib_path, state = sys.argv[1], sys.argv[2]
data = open(state, "rb").read()
variant = data[-1] if data else 0
if variant & 1:
    bad = variant & 2
    good_uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    os.environ["MOCK_FABRIC_CLUSTER_UUID"] = "not-a-uuid" if bad else good_uuid
    os.environ["MOCK_FABRIC_CLIQUE_ID"] = "4294967296" if bad else "7"
if variant & 0x80:
    tail = data[:-1]
    value = tail[tail.rfind(b"#") + 1 :][-255:].split(b"\0")[0]
    os.environb[b"NVIDIA_VISIBLE_DEVICES"] = value
os.environ["MOCK_NVML_CONFIG"] = state
lib = ctypes.CDLL(lib_path)
lib.nvmlErrorString.restype = ctypes.c_char_p


class MemoryV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint)] + [
        (n, ctypes.c_ulonglong) for n in ("total", "reserved", "free", "used")
    ]


class FabricV3(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint), ("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_int),
        ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte), ("healthMask", ctypes.c_uint),
        ("healthSummary", ctypes.c_ubyte),
    ]


rc = lib.nvmlInitWithFlags(1 if variant & 4 else 0)
out = {"rc": rc, "message": (lib.nvmlErrorString(rc) or b"").decode("utf-8", "replace"), "gpus": []}
if rc == 0:
    count = ctypes.c_uint()
    out["count_rc"] = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    for i in range(count.value):
        h = ctypes.c_void_p()
        name = ctypes.create_string_buffer(96)
        uuid = ctypes.create_string_buffer(96)
        mem = MemoryV2(version=(2 << 24) | ctypes.sizeof(MemoryV2))
        fabric = FabricV3(version=(3 << 24) | ctypes.sizeof(FabricV3))
        gpu = {
            "handle": lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)),
            "name": lib.nvmlDeviceGetName(h, name, 96),
            "uuid": lib.nvmlDeviceGetUUID(h, uuid, 96),
            "memory": lib.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(mem)),
            "fabric": lib.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(fabric)),
        }
        again = ctypes.c_void_p()
        gpu["by_uuid"] = lib.nvmlDeviceGetHandleByUUID(uuid, ctypes.byref(again))
        gpu["same_handle"] = again.value == h.value
        gpu["memory_adds_up"] = mem.free + mem.used + mem.reserved == mem.total
        out["gpus"].append(gpu)
out["shutdown"] = lib.nvmlShutdown()
print(json.dumps(out))
"""


def replay(library: Path, state: Path) -> dict[str, Any]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MOCK_") and k != "NVIDIA_VISIBLE_DEVICES"
    }
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(library), str(state)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{state.name}: the process died (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_corpus_is_present() -> None:
    names = {p.name for p in CORPUS}
    assert set(SEED_OUTCOME) <= names, sorted(set(SEED_OUTCOME) - names)


@pytest.mark.parametrize("state", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_input_through_init(library_file: Path, state: Path) -> None:
    out = replay(library_file, state)
    rc = out["rc"]
    assert rc in DOCUMENTED, out
    assert out["message"].strip(), out
    variant = state.read_bytes()[-1:] or b"\0"
    bad_env = variant[0] & 3 == 3
    if rc == NVML_SUCCESS:
        assert out["count_rc"] == NVML_SUCCESS, out
        for gpu in out["gpus"]:
            codes = [gpu[k] for k in ("handle", "name", "uuid", "memory", "by_uuid")]
            assert codes == [NVML_SUCCESS] * 5, out
            assert gpu["fabric"] in (NVML_SUCCESS, 3), out  # NOT_SUPPORTED off the fabric
            assert gpu["same_handle"] and gpu["memory_adds_up"], out
        assert out["shutdown"] == NVML_SUCCESS, out
        assert not bad_env, "an invalid fabric identity in the environment was accepted"
    else:
        # a failed init holds no reference, and its string says why, not just the code name
        assert out["shutdown"] == NVML_ERROR_UNINITIALIZED, out
        if rc == NVML_ERROR_INVALID_STATE:
            reason = out["message"]
            named = (str(state), "MOCK_FABRIC_", "NVIDIA_VISIBLE_DEVICES=")
            assert any(name in reason for name in named), reason
    expected = SEED_OUTCOME.get(state.name) if state.parent.name == "seeds" else None
    if expected is not None:
        assert (rc, len(out["gpus"])) == expected, out


def test_corpus_under_sanitizers() -> None:
    """With clang at hand, replay the corpus through both ASan/UBSan fuzz builds too."""
    if shutil.which(os.environ.get("FUZZ_CC", "clang")) is None:
        pytest.skip("clang (libFuzzer) is not installed")
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        ["make", "-s", "-C", str(FUZZ), "replay"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0 and "fuzzer" in proc.stderr and "cannot find" in proc.stderr:
        pytest.skip(f"clang has no libFuzzer runtime: {proc.stderr[-500:]}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    executed = proc.stderr.count("Executed ")
    assert executed == 2 * len(CORPUS), proc.stderr[-4000:]
