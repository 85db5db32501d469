"""Packaged profiles: each loads, holds its real board's values, and bad files fail by key."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvml_mock_engine.errors import ProfileError
from nvml_mock_engine.profiles import load_profile, profile_names

PROFILES = ("a100", "b200", "gb200", "gb300", "h100", "h200", "l40s", "t4")


def test_packaged_profiles_are_the_documented_set() -> None:
    assert profile_names() == PROFILES


# name, GPUs per node, MiB, arch value, cc, NVLinks, fabric, PCI device id (from the captures)
EXPECTED = {
    "a100": ("NVIDIA A100-SXM4-40GB", 8, 40960, 7, (8, 0), 12, False, 0x20B010DE),
    "h100": ("NVIDIA H100 80GB HBM3", 8, 81559, 9, (9, 0), 18, True, 0x233010DE),
    "h200": ("NVIDIA H200", 8, 143771, 9, (9, 0), 18, True, 0x233510DE),
    "b200": ("NVIDIA B200", 8, 183359, 10, (10, 0), 18, True, 0x290110DE),
    "gb200": ("NVIDIA GB200", 4, 189471, 10, (10, 0), 18, True, 0x294110DE),
    "gb300": ("NVIDIA GB300", 4, 284208, 10, (10, 3), 18, True, 0x31C210DE),
    "l40s": ("NVIDIA L40S", 8, 46068, 8, (8, 9), 0, False, 0x26B910DE),
    "t4": ("Tesla T4", 4, 15360, 6, (7, 5), 0, False, 0x1EB810DE),
}


@pytest.mark.parametrize("key", PROFILES)
def test_profile_values_match_the_real_board(key: str) -> None:
    name, count, mib, arch, cc, links, fabric, device_id = EXPECTED[key]
    profile = load_profile(key)
    assert profile.key == key
    assert profile.name == name
    assert profile.default_count == count
    assert profile.gpu["memory_total_bytes"] == mib * 1024 * 1024
    assert profile.architecture == arch
    assert profile.cuda_cc == cc
    assert profile.gpu.get("nvlink_count", 0) == links
    assert (profile.fabric is not None) is fabric
    assert profile.gpu["pci_device_id"] == device_id
    assert len(profile.pci_bus_ids) == count == len(profile.numa_nodes)
    assert set(profile.numa_nodes) <= set(profile.cpu_affinity)


def test_grace_blackwell_trays_pair_gpus_per_module_and_grace() -> None:
    for key in ("gb200", "gb300"):
        profile = load_profile(key)
        assert profile.gpus_per_serial == 2
        assert profile.numa_nodes == (0, 0, 1, 1)
        assert profile.cpu_affinity == {0: "0-71", 1: "72-143"}
        assert profile.gpu["power_max_limit_mw"] in (1_200_000, 1_400_000)


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("v100")
    assert info.value.key == "profile"
    assert "unknown profile 'v100'" in str(info.value)
    assert "gb200" in str(info.value)


def _packaged_text(key: str) -> str:
    from importlib import resources

    return resources.files("nvml_mock_engine.profiles").joinpath(f"{key}.yaml").read_text()


def test_profile_file_by_path_loads_like_a_packaged_one(tmp_path: Path) -> None:
    path = tmp_path / "custom-board.yaml"
    path.write_text(_packaged_text("h100").replace("NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL"))
    profile = load_profile(str(path))
    assert profile.key == "custom-board"
    assert profile.name == "NVIDIA H100 NVL"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "  pcie_max_gen: 5\n",
            "  pcie_max_gen: 5\n  frobnicate: 1\n",
            "gpu.frobnicate: unknown state key",
        ),
        ("  memory_bus_width: 5120\n", "", "gpu: missing required key(s): memory_bus_width"),
        (
            '"00000000:53:00.0"',
            '"0:53:00.0"',
            "layout.pci_bus_ids: '0:53:00.0' is not a PCI bus id",
        ),
        (
            "default_count: 8",
            "default_count: 7",
            "layout.pci_bus_ids: must list default_count=7 ids",
        ),
        (
            "architecture: hopper",
            "architecture: fermi",
            "architecture: unknown architecture 'fermi'",
        ),
        ('0: "0-55,112-167"', '0: "55-0"', "layout.cpu_affinity.0: range '55-0' runs backwards"),
        ("  brand: 14", "  uuid: GPU-x", "gpu.uuid: is derived from the layout"),
    ],
)
def test_bad_profile_file_names_file_and_key(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    text = _packaged_text("h100")
    assert old in text
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_missing_profile_file_is_a_profile_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read profile file"):
        load_profile(str(tmp_path / "nope.yaml"))
