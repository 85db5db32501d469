"""A MIG layout made at staging (``mig``, ``--mig``, ``NVML_MOCK_MIG``): mig-parted's names
or its list shape, made through the staged library, replaced by the next staging with one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from nvml_mock_engine.cli import main
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.errors import ConfigError
from nvml_mock_engine.mig_layout import GpuLayout, parse_spec
from nvml_mock_node.stage import StageOptions, stage
from smi_fixtures.helpers import smi


def _stage(overlay: Path, library: Path, profile: str, spec: object, count: int = 2) -> Path:
    config = resolve_config(profile=profile, node="mig-node", count=count)
    options = StageOptions(
        runtime=False,
        devices=False,
        imex_channels=0,
        library=library,
        mig=parse_spec(spec, config.profile.mig, config.count),
    )
    stage(overlay, config, options)
    return overlay / "config" / "state.nvmlmock"


def _listing(library: Path, state: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    rc, out = smi(library, "-L")
    assert rc == 0
    return [re.sub(r"\(UUID: .*\)", "", line).rstrip() for line in out.splitlines()]


def test_all_balanced(tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = _stage(tmp_path / "o", library, "h100", "all-balanced")
    gpu = [
        "  MIG 3g.40gb     Device  0:",
        "  MIG 2g.20gb     Device  1:",
        "  MIG 1g.10gb     Device  2:",
        "  MIG 1g.10gb     Device  3:",
    ]
    assert _listing(library, state, monkeypatch) == [
        "GPU 0: NVIDIA H100 80GB HBM3",
        *gpu,
        "GPU 1: NVIDIA H100 80GB HBM3",
        *gpu,
    ]


def test_a_list_per_gpu_and_a_restage(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = [{"devices": [1], "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "4g.20gb": 1}}]
    state = _stage(tmp_path / "o", library, "a100", spec)
    assert _listing(library, state, monkeypatch) == [
        "GPU 0: NVIDIA A100-SXM4-40GB",
        "GPU 1: NVIDIA A100-SXM4-40GB",
        "  MIG 4g.20gb     Device  0:",
        "  MIG 1g.5gb      Device  1:",
        "  MIG 1g.5gb      Device  2:",
    ]
    rc, out = smi(library, "-i", "0", "--query-gpu=mig.mode.current", "--format=csv,noheader")
    assert (rc, out) == (0, "Disabled\n")

    # a staging without a layout keeps the node's; one with a layout replaces it
    state = _stage(tmp_path / "o", library, "a100", None)
    assert len(_listing(library, state, monkeypatch)) == 5
    state = _stage(tmp_path / "o", library, "a100", "all-1g.10gb")
    assert _listing(library, state, monkeypatch) == [
        "GPU 0: NVIDIA A100-SXM4-40GB",
        *[f"  MIG 1g.10gb     Device  {i}:" for i in range(4)],
        "GPU 1: NVIDIA A100-SXM4-40GB",
        *[f"  MIG 1g.10gb     Device  {i}:" for i in range(4)],
    ]
    state = _stage(tmp_path / "o", library, "a100", "all-enabled")
    assert _listing(library, state, monkeypatch) == [
        "GPU 0: NVIDIA A100-SXM4-40GB",
        "GPU 1: NVIDIA A100-SXM4-40GB",
    ]
    rc, out = smi(library, "--query-gpu=mig.mode.current", "--format=csv,noheader")
    assert (rc, out) == (0, "Enabled\nEnabled\n")
    _stage(tmp_path / "o", library, "a100", "all-disabled")
    rc, out = smi(library, "--query-gpu=mig.mode.current", "--format=csv,noheader")
    assert (rc, out) == (0, "Disabled\nDisabled\n")


def _cdi_names(overlay: Path) -> dict[str, Any]:
    spec = yaml.safe_load((overlay / "cdi" / "nvml-mock.yaml").read_text())
    return {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}


def test_the_cdi_spec_names_the_mig_devices_made(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``nvidia-ctk cdi generate`` names them: ``<gpu>:<mig>`` and the ``MIG-`` UUID, each
    with its parent GPU's node; the names select the same device in NVML."""
    spec = [{"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "3g.40gb": 1}}]
    state = _stage(tmp_path / "o", library, "h100", spec)
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(state))
    rc, out = smi(library, "-L")
    assert rc == 0
    uuids = re.findall(r"\(UUID: (MIG-[0-9a-f-]+)\)", out)
    assert len(uuids) == 3
    devices = _cdi_names(tmp_path / "o")
    assert list(devices) == [
        "0",
        *[n for n in devices if n.startswith("GPU-")][:1],
        "1",
        *[n for n in devices if n.startswith("GPU-")][1:],
        "1:0",
        uuids[0],
        "1:1",
        uuids[1],
        "1:2",
        uuids[2],
        "all",
    ]
    assert devices["1:2"] == devices[uuids[2]] == devices["1"]
    assert [node["path"] for node in devices["1:0"]] == ["/dev/nvidia1"]
    for name in ("1:1", uuids[1]):
        monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", name)
        rc, out = smi(library, "-L")
        assert rc == 0 and re.findall(r"UUID: (MIG-[0-9a-f-]+)", out) == [uuids[1]]
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES")

    # a layout with no MIG device leaves the spec with the GPUs alone
    _stage(tmp_path / "o", library, "h100", "all-enabled")
    assert list(_cdi_names(tmp_path / "o")) == [*list(devices)[:4], "all"]


def test_names() -> None:
    table = resolve_config(profile="h100").profile.mig
    plan = parse_spec("all-1g.10gb.me", table, 1)
    assert plan is not None and plan.gpus == (GpuLayout(True, (7,)),)
    plan = parse_spec('[{"devices": "all", "mig-devices": {"7g.80gb": 1}}]', table, 2)
    assert plan is not None and plan.gpus == (GpuLayout(True, (4,)),) * 2
    assert parse_spec("", table, 1) is None


@pytest.mark.parametrize(
    ("profile", "spec", "says"),
    [
        ("h100", "all-9g.90gb", "mig: '9g.90gb' is not a MIG profile of this board (1g.10gb, "),
        ("h100", "half", "mig: must be all-disabled, all-enabled, all-balanced, all-<profile>"),
        ("h100", [{"mig-devices": {"4g.40gb": 2}}], "mig: 4g.40gb: at most 1 on this board"),
        (
            "h100",
            [{"mig-devices": {"4g.40gb": 1, "3g.40gb": 2}}],
            "mig: more memory slices than the GPU has (8)",
        ),
        ("h100", [{"devices": [5]}], "mig: devices: 5 is not a GPU index of this node (0..1)"),
        ("h100", [{"devices": [0]}, {"devices": [0]}], "mig: GPU 0 is listed twice"),
        ("h100", "[unclosed", "mig: is not a YAML/JSON list"),
        ("l40s", "all-enabled", "mig: this board has no MIG"),
    ],
)
def test_bad_layouts_name_what_is_wrong(profile: str, spec: object, says: str) -> None:
    config = resolve_config(profile=profile, count=2)
    with pytest.raises(ConfigError) as caught:
        parse_spec(spec, config.profile.mig, config.count)
    assert str(caught.value).startswith(says)


def test_cli_flag_env_and_config_file(
    tmp_path: Path,
    library: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["stage", "--profile", "h100", "--count", "1", "--node", "n", "--no-devices"]
    monkeypatch.setenv("NVML_MOCK_IMEX_CHANNELS", "0")
    monkeypatch.setenv("NVML_MOCK_MIG", "all-3g.40gb")
    assert main([*base, str(tmp_path / "a"), "--mig", "all-half"]) == 3
    assert "mig: 'half' is not a MIG profile of this board" in capsys.readouterr().err
    assert not (tmp_path / "a").exists(), "refused before anything is written"

    assert main([*base, str(tmp_path / "b")]) == 0
    state = tmp_path / "b" / "config" / "state.nvmlmock"
    assert _listing(library, state, monkeypatch)[1:] == [
        "  MIG 3g.40gb     Device  0:",
        "  MIG 3g.40gb     Device  1:",
    ]
    monkeypatch.delenv("NVML_MOCK_MIG")
    config = tmp_path / "engine.yaml"
    config.write_text("mig: all-7g.80gb\n")
    assert main([*base, str(tmp_path / "b"), "--config", str(config)]) == 0
    assert _listing(library, state, monkeypatch)[1:] == ["  MIG 7g.80gb     Device  0:"]


def test_the_stagers_own_view_does_not_narrow_the_layout(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "0")
    state = _stage(tmp_path / "o", library, "h100", "all-7g.80gb")
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES")
    assert _listing(library, state, monkeypatch)[1::2] == ["  MIG 7g.80gb     Device  0:"] * 2
