"""The renderer: deterministic per node, distinct across nodes, read back by the real library."""

from __future__ import annotations

import ctypes
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.errors import ConfigError
from nvml_mock_engine.profiles import OPTIONAL_GPU_KEYS, profile_names
from nvml_mock_engine.render import render, render_text
from nvml_mock_engine.schema import GPU_KEYS, INTEGER_LIMITS, SYSTEM_KEYS, Kind


def _sections(text: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Parse a state the way STATE-FORMAT.md defines it (strictly)."""
    lines = text.split("\n")
    assert lines[0] == "nvml-mock-state 1"
    assert text.endswith("\n")
    system: dict[str, str] = {}
    gpus: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in lines[1:]:
        assert len(line.encode()) <= 1023
        if not line or line.startswith("#"):
            continue
        if line == "[system]":
            current = system
            continue
        match = re.fullmatch(r"\[gpu (\d+)\]", line)
        if match:
            assert int(match.group(1)) == len(gpus)
            current = {}
            gpus.append(current)
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[a-z0-9_]{1,63}", key), line
        assert len(value.encode()) <= 255, line
        # mig_gi_profile is the one repeated key (a line per MIG profile)
        assert current is not None and (key not in current or key == "mig_gi_profile")
        current[key] = value
    return system, gpus


def test_same_node_renders_byte_for_byte_the_same() -> None:
    first = render_text(resolve_config(profile="gb200", count=8, node="tray-4"))
    second = render_text(resolve_config(profile="gb200", count=8, node="tray-4"))
    assert first == second


def test_output_has_every_key_in_contract_order() -> None:
    system, gpus = _sections(render_text(resolve_config(profile="h100", node="n")))
    assert list(system) == list(SYSTEM_KEYS)
    assert system["device_count"] == "8" == str(len(gpus))
    for gpu in gpus:
        # contract order; only keys with a format default may be left out (the platform
        # identifiers are derived only for boards that report platform info)
        assert list(gpu) == [k for k in GPU_KEYS if k in gpu]
        platform_ids = {"platform_chassis_serial", "platform_ib_guid"}
        assert set(GPU_KEYS) - set(gpu) <= OPTIONAL_GPU_KEYS | platform_ids
        # the profile's fabric health (the capture's); a board without one leaves the default
        assert gpu["fabric_health_mask"] == "0x00000000"


def test_gpu_uuids_never_repeat_across_nodes() -> None:
    uuids: set[str] = set()
    serials: set[str] = set()
    for n in range(300):
        state = render(resolve_config(profile="h100", node=f"node-{n:04d}"))
        uuids.update(str(gpu["uuid"]) for gpu in state.gpus)
        serials.update(str(gpu["serial"]) for gpu in state.gpus)
    assert len(uuids) == 300 * 8
    assert len(serials) == 300 * 8
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", u) for u in uuids)
    assert all(re.fullmatch(r"1\d{12}", s) for s in serials)


def test_pdi_is_distinct_per_gpu_and_node() -> None:
    nodes = [render(resolve_config(profile="b200", node=n)).gpus for n in ("a", "b")]
    pdis = [gpu["pdi"] for gpus in nodes for gpu in gpus]
    assert len(set(pdis)) == len(pdis) == 16
    assert all(isinstance(p, int) and 0 < p < 1 << 64 for p in pdis)
    again = render(resolve_config(profile="b200", node="a")).gpus
    assert [gpu["pdi"] for gpu in again] == pdis[:8]


def test_node_name_changes_identities_but_not_layout() -> None:
    a = render(resolve_config(profile="b200", node="a")).gpus
    b = render(resolve_config(profile="b200", node="b")).gpus
    for left, right in zip(a, b, strict=True):
        assert left["uuid"] != right["uuid"]
        assert left["serial"] != right["serial"]
        assert left["pci_bus_id"] == right["pci_bus_id"]


def test_growing_a_node_keeps_existing_gpu_identities() -> None:
    small = render(resolve_config(profile="h100", count=2, node="n")).gpus
    large = render(resolve_config(profile="h100", count=16, node="n")).gpus
    assert [g["uuid"] for g in small] == [g["uuid"] for g in large[:2]]


def test_grace_blackwell_modules_share_a_serial() -> None:
    gpus = render(resolve_config(profile="gb200", node="n")).gpus
    assert gpus[0]["serial"] == gpus[1]["serial"] != gpus[2]["serial"] == gpus[3]["serial"]
    assert [g["module_id"] for g in gpus] == [2, 1, 4, 3]
    assert [g["cpu_affinity"] for g in gpus] == ["0-71", "0-71", "72-143", "72-143"]


def test_gpus_past_the_real_layout_take_the_next_pci_domains() -> None:
    gpus = render(resolve_config(profile="gb300", count=12, node="n")).gpus
    bus_ids = [str(g["pci_bus_id"]) for g in gpus]
    assert bus_ids[:4] == [
        "00000008:06:00.0",
        "00000009:06:00.0",
        "00000018:06:00.0",
        "00000019:06:00.0",
    ]
    assert bus_ids[4] == "00000022:06:00.0"
    assert len(set(bus_ids)) == 12
    assert [g["gpu_group"] for g in gpus] == [0] * 4 + [1] * 4 + [2] * 4
    assert gpus[4]["board_id"] == 0x220600


def test_nvswitch_links_fit_one_value() -> None:
    gpu = render(resolve_config(profile="h100", node="n")).gpus[0]
    remotes = gpu["nvlink_remote_bus_ids"]
    assert isinstance(remotes, tuple)
    # 18 links over 4 switches in runs of 5/4/4/5: the trailing run is implied by repetition.
    assert remotes.count("00000000:05:00.0") == 5
    assert remotes[-1] == "00000000:08:00.0"
    assert len(",".join(remotes)) <= 255


def test_overrides_apply_to_one_gpu_and_defaults_to_all() -> None:
    config = resolve_config(
        profile="h100",
        node="n",
        file_data={
            "defaults": {"temperature_c": 51},
            "gpus": {
                3: {
                    "memory_used_bytes": 1 << 30,
                    "uuid": "GPU-00000000-1111-2222-3333-444444444444",
                }
            },
        },
    )
    gpus = render(config).gpus
    assert {g["temperature_c"] for g in gpus} == {51}
    assert gpus[3]["memory_used_bytes"] == 1 << 30
    assert gpus[3]["uuid"] == "GPU-00000000-1111-2222-3333-444444444444"
    assert gpus[2]["memory_used_bytes"] == 0


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        (
            {
                1: {"uuid": "GPU-00000000-1111-2222-3333-444444444444"},
                2: {"uuid": "GPU-00000000-1111-2222-3333-444444444444"},
            },
            "gpus[2].uuid: GPU-00000000-1111-2222-3333-444444444444 is also GPU 1's",
        ),
        ({0: {"pci_bus_id": "00000000:64:00.0"}}, "gpus[1].pci_bus_id"),
        ({2: {"memory_reserved_bytes": 1 << 50}}, "gpus[2].memory_used_bytes: reserved"),
        ({2: {"bar1_used_bytes": 1 << 50}}, "gpus[2].bar1_used_bytes: exceeds bar1_total_bytes"),
    ],
)
def test_inconsistent_overrides_are_refused(gpus: dict[int, Any], expected: str) -> None:
    config = resolve_config(profile="h100", node="n", file_data={"gpus": gpus})
    with pytest.raises(ConfigError, match=re.escape(expected)):
        render_text(config)


def test_sixty_four_gpus_stay_within_the_format_bounds() -> None:
    text = render_text(resolve_config(profile="gb300", count=64, node="n"))
    system, gpus = _sections(text)
    assert system["device_count"] == "64" and len(gpus) == 64
    assert len(text.encode()) < 1 << 20


@pytest.mark.parametrize("key", profile_names())
def test_every_profile_is_read_back_by_the_library(
    key: str, pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = resolve_config(profile=key, node="reader")
    state = render(config)
    path = tmp_path / "state.nvmlmock"
    path.write_text(render_text(config))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(path))
    pynvml.nvmlInit()
    assert pynvml.nvmlSystemGetDriverVersion() == config.driver_version
    assert pynvml.nvmlDeviceGetCount() == config.count
    for index, gpu in enumerate(state.gpus):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        assert pynvml.nvmlDeviceGetName(handle) == config.profile.name
        assert pynvml.nvmlDeviceGetUUID(handle) == gpu["uuid"]
        assert pynvml.nvmlDeviceGetSerial(handle) == gpu["serial"]
        assert pynvml.nvmlDeviceGetPdi(handle) == gpu["pdi"]
        assert pynvml.nvmlDeviceGetPciInfo(handle).busId == gpu["pci_bus_id"]
        assert pynvml.nvmlDeviceGetMemoryInfo(handle).total == gpu["memory_total_bytes"]
        assert pynvml.nvmlDeviceGetCudaComputeCapability(handle) == config.profile.cuda_cc
        assert pynvml.nvmlDeviceGetBoardId(handle) == gpu["board_id"]
        assert pynvml.nvmlDeviceGetPowerManagementLimit(handle) == gpu["power_limit_mw"]
        if config.fabric is None:
            with pytest.raises(pynvml.NVMLError_NotSupported):
                info = pynvml.c_nvmlGpuFabricInfo_t()
                pynvml.nvmlDeviceGetGpuFabricInfo(handle, pynvml.byref(info))
        else:
            info = pynvml.c_nvmlGpuFabricInfo_t()
            pynvml.nvmlDeviceGetGpuFabricInfo(handle, pynvml.byref(info))
            assert info.state == 3
            assert info.cliqueId == config.fabric.clique_id


def test_the_highest_cpu_the_schema_accepts_loads_in_the_library(
    pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = resolve_config(
        profile="t4", count=1, node="n", file_data={"defaults": {"cpu_affinity": "1020-1023"}}
    )
    path = tmp_path / "state.nvmlmock"
    path.write_text(render_text(config))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(path))
    pynvml.nvmlInit()
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    words = pynvml.nvmlDeviceGetCpuAffinity(pynvml.nvmlDeviceGetHandleByIndex(0), 1024 // bits)
    cpus = [w * bits + b for w, word in enumerate(words) for b in range(bits) if word >> b & 1]
    assert cpus == [1020, 1021, 1022, 1023]


def _bound_values() -> list[tuple[str, object]]:
    """Each GPU key at the edges the schema accepts: integer bounds, longest strings."""
    cases: list[tuple[str, object]] = []
    for key, spec in GPU_KEYS.items():
        if spec.kind in INTEGER_LIMITS:
            low, high = INTEGER_LIMITS[spec.kind]
            low = low if spec.minimum is None else max(low, spec.minimum)
            high = high if spec.maximum is None else min(high, spec.maximum)
            cases += [(key, low), (key, high)]
        elif spec.kind is Kind.STRING:
            cases.append((key, "x" * spec.max_len))
    longest_links = ",".join(f"00000000:{bus:02X}:00.0" for bus in range(15))
    cases += [("nvlink_remote_bus_ids", longest_links), ("cpu_affinity", "0-1023")]
    return cases


def test_every_value_at_the_schemas_bounds_loads_in_the_library(
    pynvml: Any, cnvml: ctypes.CDLL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.nvmlmock"
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(path))
    refused: set[tuple[str, object]] = set()
    for key, value in _bound_values():
        try:
            config = resolve_config(
                profile="h100", count=2, node="n", file_data={"gpus": {1: {key: value}}}
            )
            path.write_text(render_text(config))
        except ConfigError:
            refused.add((key, value))
            continue
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            pytest.fail(f"{key}={value!r}: {pynvml.nvmlErrorString(exc.value)}")
        pynvml.nvmlShutdown()
    # Only the renderer's cross-key checks refuse a single in-bounds value.
    assert refused == {
        ("memory_total_bytes", 1),
        ("memory_reserved_bytes", 2**64 - 1),
        ("memory_used_bytes", 2**64 - 1),
        ("bar1_total_bytes", 0),
        ("bar1_used_bytes", 2**64 - 1),
        ("nvlink_version", 0),
    }


def test_system_values_past_the_formats_bounds_are_refused_by_their_config_key(
    pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t4 = resources.files("nvml_mock_engine.profiles").joinpath("t4.yaml").read_text()
    longest, too_long = tmp_path / f"{'p' * 63}.yaml", tmp_path / f"{'p' * 64}.yaml"
    for path in (longest, too_long):
        path.write_text(t4)
    with pytest.raises(ConfigError, match=r"^profile: is 64 bytes, longer than the 63"):
        render(resolve_config(profile=str(too_long), node="n"))
    with pytest.raises(ConfigError, match=r"^node: is 400 bytes, longer than the 255"):
        render(resolve_config(profile="t4", node="é" * 200))

    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(profile=str(longest), node="é" * 127)))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 4


def test_sixty_four_gpus_load_in_the_library(
    pynvml: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.nvmlmock"
    path.write_text(render_text(resolve_config(profile="gb200", count=64, node="big")))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(path))
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 64
    last = pynvml.nvmlDeviceGetHandleByIndex(63)
    assert pynvml.nvmlDeviceGetPciInfo(last).busId == "0000000F:B2:00.0"
