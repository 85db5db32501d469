"""Config resolution: flags over file over profile, and every bad value named by its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nvml_mock_engine.config import load_config_file, resolve_config
from nvml_mock_engine.errors import ConfigError
from nvml_mock_engine.render import render_text
from nvml_mock_engine.schema import GPU_KEYS


def _error(**kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        resolve_config(**kwargs)
    return info.value


def test_profile_defaults_fill_everything_not_given() -> None:
    config = resolve_config(profile="gb200", node="n1")
    assert config.count == 4
    assert config.driver_version == "580.173.02"
    assert config.cuda_driver_version == 13000
    assert config.nvml_version == "13.580.173.02"
    assert config.fabric is not None
    assert config.fabric.cluster_uuid == "00000000-0000-0000-0000-000000000001"


def test_no_profile_anywhere_means_a100() -> None:
    assert resolve_config(node="n").profile.key == "a100"


def test_flags_win_over_the_file() -> None:
    data = {"profile": "h100", "count": 2, "node": "from-file", "driver_version": "570.148.08"}
    config = resolve_config(profile="t4", count=3, file_data=data)
    assert (config.profile.key, config.count, config.node) == ("t4", 3, "from-file")
    assert config.driver_version == "570.148.08"
    assert config.cuda_driver_version == 12080


def test_driver_version_picks_its_cuda_version() -> None:
    assert (
        resolve_config(profile="h100", node="n", driver_version="550.163.01").cuda_driver_version
        == 12040
    )
    config = resolve_config(
        profile="h100", node="n", driver_version="999.1.2", cuda_driver_version=14000
    )
    assert config.nvml_version == "14.999.1.2"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"count": 0}, "count: must be an integer in 1..64, got 0"),
        ({"count": 65}, "count: must be an integer in 1..64, got 65"),
        ({"file_data": {"count": "eight"}}, "count: must be an integer in 1..64, got 'eight'"),
        ({"node": ""}, "node: must be a non-empty name"),
        ({"node": "a\nb"}, "node: must be a node name"),
        ({"driver_version": "latest"}, "driver_version: must look like 580.65.06"),
        ({"driver_version": "540.1"}, "cuda_driver_version: driver branch of 540.1 is unknown"),
        ({"profile": "nope"}, "profile: unknown profile 'nope'"),
        (
            {"file_data": {"gpus": {3: {"memory_total_bytes": -1}}}},
            "gpus[3].memory_total_bytes: must be a positive integer, got -1",
        ),
        (
            {"file_data": {"gpus": {3: {"memory_total_bytes": "80GB"}}}},
            "gpus[3].memory_total_bytes: must be an integer, got '80GB'",
        ),
        (
            {"file_data": {"gpus": {9: {"pstate": 2}}}},
            "gpus[9]: index out of range: the node has 8 GPUs",
        ),
        ({"file_data": {"gpus": [{}, {"colour": "red"}]}}, "gpus[1].colour: unknown state key"),
        ({"file_data": {"gpus": [{"uuid": "GPU-1"}]}}, "gpus[0].uuid: must look like GPU-"),
        (
            {"file_data": {"gpus": [{"pci_bus_id": "1:2:3"}]}},
            "gpus[0].pci_bus_id: must be a PCI bus id",
        ),
        (
            {"file_data": {"gpus": [{"name": "x" * 96}]}},
            "gpus[0].name: is 96 bytes, longer than the 95",
        ),
        (
            {"file_data": {"gpus": [{"pstate": 16}]}},
            "gpus[0].pstate: must be an integer in 0..15, got 16",
        ),
        (
            {"file_data": {"gpus": [{"ecc_enabled": "yes"}]}},
            "gpus[0].ecc_enabled: must be 0/1 or true/false",
        ),
        ({"file_data": {"gpus": "all"}}, "gpus: must be a list (by position) or a mapping"),
        (
            {"file_data": {"defaults": {"cpu_affinity": "0-"}}},
            "defaults.cpu_affinity: '0-' is not a cpu",
        ),
        (
            {"file_data": {"defaults": {"cpu_affinity": "0-1024"}}},
            "defaults.cpu_affinity: cpu 1024 is above the supported 1023",
        ),
        ({"file_data": {"defaults": {"numa_node": None}}}, "defaults.numa_node: must have a value"),
        (
            {"file_data": {"fabric": {"clique_id": -2}}},
            "fabric.clique_id: must be an integer in 0..4294967295",
        ),
        ({"file_data": {"fabric": {"cluster_uuid": "abc"}}}, "fabric.cluster_uuid: must be a UUID"),
        ({"file_data": {"fabric": {"domain": "x"}}}, "fabric.domain: unknown key"),
    ],
)
def test_invalid_values_name_their_key(kwargs: dict[str, Any], expected: str) -> None:
    kwargs.setdefault("profile", "h100")
    kwargs.setdefault("node", "n")
    error = _error(**kwargs)
    assert expected in str(error)
    assert str(error).startswith(error.key + ": ")


def test_fabric_identity_needs_a_fabric_attached_profile() -> None:
    error = _error(profile="l40s", node="n", file_data={"fabric": {"clique_id": 1}})
    assert error.key == "fabric"
    assert "not fabric-attached" in str(error)


def test_fabric_identity_from_file_keeps_unset_parts_from_profile() -> None:
    config = resolve_config(profile="gb300", node="n", file_data={"fabric": {"clique_id": 32766}})
    assert config.fabric is not None
    assert config.fabric.clique_id == 32766
    assert config.fabric.cluster_uuid == "00000000-0000-0000-0000-000000000001"


def test_overrides_are_normalised() -> None:
    config = resolve_config(
        profile="h100",
        node="n",
        file_data={
            "defaults": {"temperature_c": 45, "persistence_mode": False},
            "gpus": [None, {"pci_device_id": "0x233110de", "nvlink_remote_bus_ids": []}],
        },
    )
    assert config.defaults == {"temperature_c": 45, "persistence_mode": 0}
    assert 0 not in config.gpus
    assert config.gpus[1] == {"pci_device_id": 0x233110DE, "nvlink_remote_bus_ids": ()}


def test_config_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(
        "version: 1\nprofile: gb200\ncount: 2\nnode: rack1-tray4\n"
        "gpus:\n  1: {memory_used_bytes: 1048576}\n"
    )
    config = resolve_config(file_data=load_config_file(path))
    assert (config.profile.key, config.count, config.node) == ("gb200", 2, "rack1-tray4")
    assert config.gpus[1]["memory_used_bytes"] == 1048576


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("profile: [", "is not valid YAML"),
        ("- a\n- b\n", "must hold a mapping, got list"),
        ("version: 2\n", "version: must be 1, got 2"),
        ("profil: a100\n", "profil: unknown key"),
    ],
)
def test_bad_config_files(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[")):
        load_config_file(path)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config: cannot read"):
        load_config_file(tmp_path / "missing.yaml")


def test_empty_config_file_is_all_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config_file(path) == {}


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=300),
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
_state_keys = st.sampled_from(sorted(GPU_KEYS)) | st.text(max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.one_of(st.none(), st.integers(min_value=-3, max_value=70)),
    defaults=st.dictionaries(_state_keys, _values, max_size=4) | _values,
    gpus=st.dictionaries(
        st.integers(min_value=-2, max_value=10) | st.text(max_size=3),
        st.dictionaries(_state_keys, _values, max_size=3) | _values,
        max_size=3,
    )
    | st.lists(st.dictionaries(_state_keys, _values, max_size=3) | st.none(), max_size=3),
    fabric=_values,
)
def test_any_input_is_rendered_or_refused_with_a_config_error(
    count: int | None, defaults: object, gpus: object, fabric: object
) -> None:
    data: dict[str, object] = {"defaults": defaults, "gpus": gpus}
    if fabric is not None:
        data["fabric"] = fabric
    try:
        config = resolve_config(profile="gb200", node="n", count=count, file_data=data)
        text = render_text(config)
    except ConfigError as exc:
        assert exc.key and str(exc).startswith(exc.key)
        return
    lines = text.split("\n")
    assert lines[0] == "nvml-mock-state 1"
    assert all(len(line.encode()) <= 1023 for line in lines)
    assert all(len(line.partition("=")[2].encode()) <= 255 for line in lines)


def test_a_610_driver_renders_without_a_cuda_version() -> None:
    """610 ships CUDA 13.3 (real 610.43.02 / 610.43.03 tables: "CUDA UMD Version: 13.3"); a
    branch newer than every known one gets the newest CUDA version the table knows (a driver
    runs every CUDA release up to its own; its real pairing is not on file). An explicit value
    still wins."""
    assert (
        resolve_config(profile="h100", node="n", driver_version="610.43.02").cuda_driver_version
        == 13030
    )
    assert (
        resolve_config(profile="h100", node="n", driver_version="620.1.2").cuda_driver_version
        == 13030
    )
    pinned = resolve_config(
        profile="h100", node="n", driver_version="620.1.2", cuda_driver_version=14000
    )
    assert pinned.cuda_driver_version == 14000
