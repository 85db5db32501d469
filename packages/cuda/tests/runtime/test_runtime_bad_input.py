"""Bad input gets the runtime's error for it, never a crash: null and foreign pointers, freed
handles, out-of-range devices, unknown attributes and codes."""

from __future__ import annotations

from typing import Any

import pytest

EXPECTED = {
    "malloc_null": "cudaErrorInvalidValue",
    "set_device_negative": "cudaErrorInvalidDevice",
    "set_device_past_end": "cudaErrorInvalidDevice",
    "properties_null": "cudaErrorInvalidValue",
    "properties_past_end": "cudaErrorInvalidDevice",
    "attribute_unknown": "cudaErrorInvalidValue",
    "count_null": "cudaErrorInvalidValue",
    "memcpy_bad_kind": "cudaErrorInvalidMemcpyDirection",
    "memcpy2d_bad_pitch": "cudaErrorInvalidPitchValue",
    "free_host_pointer": "cudaErrorInvalidValue",
    "free_misaligned": "cudaErrorInvalidValue",
    "free_twice": "cudaErrorInvalidValue",
    "stream_destroy_default": "cudaErrorInvalidResourceHandle",
    "stream_used_after_destroy": "cudaErrorInvalidResourceHandle",
    "event_destroy_twice": "cudaErrorInvalidResourceHandle",
    "event_bad_flags": "cudaErrorInvalidValue",
    "host_get_device_pointer_flags": "cudaErrorInvalidValue",
    "attributes_stack": "cudaSuccess",
    "peer_self": "cudaSuccess",
}


@pytest.mark.parametrize("major", [13, 12])
def test_bad_input_gets_clear_errors(node: Any, run_client: Any, major: int) -> None:
    got = run_client(node, major, "badinput")
    assert got.get("failed") is None, got
    for call, name in EXPECTED.items():
        assert got[call]["name"] == name, f"{call}: {got[call]}"
    # a copy into freed memory fails; which error names it is the driver's to say
    assert got["memcpy_freed"]["code"] != 0
    assert got["stack_type"] == 0 and got["stack_device"] == -2
    assert got["peer_self_value"] == 0
    assert got["unknown_code_string"] == "unrecognized error code"
    assert got["unknown_code_name"] == "unrecognized error code"
    assert got["last"]["code"] != 0


@pytest.mark.parametrize("major", [13, 12])
def test_a_reset_frees_the_device_and_stale_pointers_are_refused(
    node: Any, run_client: Any, major: int
) -> None:
    got = run_client(node, major, "reset")
    assert got.get("failed") is None, got
    assert got["reset"]["code"] == 0 and got["device"] == 1
    assert got["free_before"] - got["free_allocated"] >= 64 << 20
    assert got["free_after_reset"] == got["free_before"]
    assert got["free_stale"]["name"] == "cudaErrorInvalidValue"
    assert got["malloc_after"]["code"] == 0
