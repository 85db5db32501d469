"""Staging: the overlay's layout, atomic re-staging, device nodes and the CDI spec."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml
from nvml_mock_cuda.library import driver_path
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.errors import StageError
from nvml_mock_engine.render import render, render_text
from nvml_mock_node.stage import StageOptions, cdi_spec, stage
from nvml_mock_protocol import hostgpu

ENTRIES = ("lib", "bin", "config", "dev", "cdi", "imex", "runtime")


def _can_mknod(tmp_path: Path) -> bool:
    try:
        os.mknod(tmp_path / "probe", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        return False
    (tmp_path / "probe").unlink()
    return True


def test_layout(tmp_path: Path, library: Path) -> None:
    config = resolve_config(profile="gb200", node="tray-4")
    overlay = tmp_path / "overlay"
    report = stage(overlay, config, StageOptions(runtime=False, library=library))

    for entry in ENTRIES:
        assert (overlay / entry).is_symlink()
        assert os.readlink(overlay / entry) == f".nvml-mock/current/{entry}"
    assert (overlay / "lib" / "libnvidia-ml.so.1").read_bytes() == library.read_bytes()
    assert os.readlink(overlay / "lib" / "libnvidia-ml.so") == "libnvidia-ml.so.1"
    assert (overlay / "lib" / "libcuda.so.1").read_bytes() == driver_path().read_bytes()
    assert os.readlink(overlay / "lib" / "libcuda.so") == "libcuda.so.1"
    assert (overlay / "config" / "state.nvmlmock").read_text() == render_text(config)
    assert report.generation.parent == overlay / ".nvml-mock"
    assert not report.runtime_reused


def fake_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, driver: bool) -> None:
    """Point real-driver detection at a fake /proc and /sys, with or without the driver."""
    proc, sys_ = tmp_path / "host" / "proc", tmp_path / "host" / "sys"
    (sys_ / "module").mkdir(parents=True)
    proc.mkdir(parents=True)
    nvidia = "195 nvidia\n" if driver else ""
    (proc / "devices").write_text(
        f"Character devices:\n  1 mem\n{nvidia}\nBlock devices:\n  7 loop\n"
    )
    monkeypatch.setenv(hostgpu.ENV_HOST_PROC_ROOT, str(proc))
    monkeypatch.setenv(hostgpu.ENV_HOST_SYS_ROOT, str(sys_))


def test_no_device_nodes_on_a_node_with_a_real_driver(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch, driver=True)
    config = resolve_config(profile="h100", count=2, node="n")
    options = StageOptions(runtime=False, library=library, host_path="/var/lib/nvml-mock")
    report = stage(tmp_path / "o", config, options)
    assert not report.devices_created
    assert report.devices_refused is not None
    assert report.devices_refused.startswith(
        "mock device nodes refused: a real NVIDIA driver is loaded on this node "
        f"({tmp_path}/host/proc/devices lists nvidia (major 195))"
    )
    assert list((tmp_path / "o" / "dev").iterdir()) == []
    spec = yaml.safe_load((tmp_path / "o" / "cdi" / "nvml-mock.yaml").read_text())
    nodes = spec["devices"][-1]["containerEdits"]["deviceNodes"]
    assert all("hostPath" not in node for node in nodes)
    assert (tmp_path / "o" / "config" / "state.nvmlmock").read_text() == render_text(config)
    no_devices = stage(
        tmp_path / "p", config, StageOptions(runtime=False, library=library, devices=False)
    )
    assert no_devices.devices_refused is None, "--no-devices asks for none: nothing to refuse"


def test_device_nodes_when_permitted(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch, driver=False)
    config = resolve_config(profile="h100", count=3, node="n")
    # The GPU and control nodes alone; the IMEX channels beside them: test_stage_imex.py.
    options = StageOptions(
        runtime=False, library=library, host_path="/var/lib/nvml-mock", imex_channels=0
    )
    report = stage(tmp_path / "o", config, options)
    dev = tmp_path / "o" / "dev"
    spec = yaml.safe_load((tmp_path / "o" / "cdi" / "nvml-mock.yaml").read_text())
    host_paths = [n.get("hostPath") for n in spec["devices"][-1]["containerEdits"]["deviceNodes"]]
    if not _can_mknod(tmp_path):
        assert not report.devices_created
        assert any("CAP_MKNOD" in w for w in report.warnings)
        assert list(dev.iterdir()) == []
        assert host_paths == [None, None, None]
        return
    assert report.devices_created
    assert host_paths == [f"/var/lib/nvml-mock/dev/nvidia{i}" for i in range(3)]
    expected = {
        "nvidia0": (195, 0),
        "nvidia1": (195, 1),
        "nvidia2": (195, 2),
        "nvidiactl": (195, 255),
        "nvidia-uvm": (510, 0),
        "nvidia-uvm-tools": (510, 1),
    }
    assert sorted(p.name for p in dev.iterdir() if not p.is_dir()) == sorted(expected)
    assert (dev / "nvidia-caps").is_dir()  # the driver root's capability nodes
    for name, (major, minor) in expected.items():
        st = (dev / name).stat()
        assert stat.S_ISCHR(st.st_mode)
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor)
        assert stat.S_IMODE(st.st_mode) == 0o666


def test_no_devices_flag(tmp_path: Path, library: Path) -> None:
    config = resolve_config(profile="t4", node="n")
    report = stage(
        tmp_path / "o", config, StageOptions(runtime=False, devices=False, library=library)
    )
    assert not report.devices_created
    assert list((tmp_path / "o" / "dev").iterdir()) == []
    spec = yaml.safe_load((tmp_path / "o" / "cdi" / "nvml-mock.yaml").read_text())
    nodes = spec["devices"][-1]["containerEdits"]["deviceNodes"]
    assert all("hostPath" not in node for node in nodes)


def test_cdi_spec() -> None:
    config = resolve_config(profile="gb300", node="n")
    spec = cdi_spec(render(config), "/var/lib/nvml-mock/dev")
    assert spec["cdiVersion"] == "0.6.0"
    assert spec["kind"] == "nvml-mock.nvidia.com/gpu"
    devices = spec["devices"]
    assert isinstance(devices, list)
    uuids = [str(g["uuid"]) for g in render(config).gpus]
    assert [d["name"] for d in devices] == [
        "0",
        uuids[0],
        "1",
        uuids[1],
        "2",
        uuids[2],
        "3",
        uuids[3],
        "all",
    ]
    everything = devices[-1]["containerEdits"]["deviceNodes"]
    assert [n["path"] for n in everything] == [f"/dev/nvidia{i}" for i in range(4)]
    assert everything[2] == {
        "path": "/dev/nvidia2",
        "type": "c",
        "major": 195,
        "minor": 2,
        "permissions": "rw",
        "hostPath": "/var/lib/nvml-mock/dev/nvidia2",
    }
    edits = spec["containerEdits"]
    assert isinstance(edits, dict)
    assert edits["env"] == ["NVML_MOCK_DEVICE_SOURCE=cdi"]
    assert [n["path"] for n in edits["deviceNodes"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]


def test_written_cdi_spec_has_no_yaml_aliases(tmp_path: Path, library: Path) -> None:
    stage(
        tmp_path / "o",
        resolve_config(profile="h100", node="n"),
        StageOptions(runtime=False, library=library),
    )
    text = (tmp_path / "o" / "cdi" / "nvml-mock.yaml").read_text()
    assert "&id" not in text and "*id" not in text
    assert yaml.safe_load(text)["devices"][0]["name"] == "0"


def test_restage_switches_atomically_and_keeps_one_previous_generation(
    tmp_path: Path, library: Path
) -> None:
    overlay = tmp_path / "o"
    options = StageOptions(runtime=False, library=library)
    first = stage(overlay, resolve_config(profile="h100", count=2, node="n"), options)
    # A process that resolved the old generation's paths finishes on it.
    held = (overlay / "config" / "state.nvmlmock").resolve()
    second = stage(overlay, resolve_config(profile="h100", count=5, node="n"), options)
    assert first.generation != second.generation
    assert "device_count=5" in (overlay / "config" / "state.nvmlmock").read_text()
    assert "device_count=2" in held.read_text()
    third = stage(overlay, resolve_config(profile="h100", count=3, node="n"), options)
    assert not first.generation.exists()
    generations = sorted(
        p.name for p in (overlay / ".nvml-mock").iterdir() if p.name.startswith("gen-")
    )
    assert generations == sorted([second.generation.name, third.generation.name])
    assert os.readlink(overlay / ".nvml-mock" / "current") == third.generation.name


def _contents(overlay: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for entry in ENTRIES:
        for path in (overlay / entry).rglob("*"):
            if path.is_file():
                files[str(path.relative_to(overlay))] = path.read_bytes()
    return files


def test_restage_with_same_config_gives_identical_content(tmp_path: Path, library: Path) -> None:
    overlay = tmp_path / "o"
    config = resolve_config(profile="b200", node="n")
    options = StageOptions(runtime=False, library=library, devices=False)
    first = stage(overlay, config, options)
    before = _contents(overlay)
    second = stage(overlay, config, options)
    assert second.generation != first.generation
    assert _contents(overlay) == before
    assert {"lib/libnvidia-ml.so.1", "config/state.nvmlmock", "cdi/nvml-mock.yaml"} <= set(before)


def test_refuses_a_foreign_non_empty_directory(tmp_path: Path, library: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    with pytest.raises(StageError, match=r"not empty .* was not staged by nvml-mock-engine"):
        stage(
            tmp_path,
            resolve_config(profile="t4", node="n"),
            StageOptions(runtime=False, library=library),
        )
    assert (tmp_path / "etc" / "passwd").exists()


def test_missing_library_is_a_stage_error(tmp_path: Path) -> None:
    with pytest.raises(StageError, match="does not exist"):
        stage(
            tmp_path / "o",
            resolve_config(profile="t4", node="n"),
            StageOptions(runtime=False, library=tmp_path / "libnvidia-ml.so.1"),
        )
    assert not (tmp_path / "o").exists()


def test_a_real_entry_in_the_way_fails_before_the_switch(tmp_path: Path, library: Path) -> None:
    overlay = tmp_path / "o"
    options = StageOptions(runtime=False, library=library)
    first = stage(overlay, resolve_config(profile="t4", node="n"), options)
    (overlay / "lib").unlink()
    (overlay / "lib").mkdir()
    with pytest.raises(StageError, match="lib is not the overlay's symlink"):
        stage(overlay, resolve_config(profile="t4", count=2, node="n"), options)
    assert os.readlink(overlay / ".nvml-mock" / "current") == first.generation.name
    assert "device_count=4" in (overlay / "config" / "state.nvmlmock").read_text()
    generations = [p for p in (overlay / ".nvml-mock").iterdir() if p.name.startswith("gen-")]
    assert generations == [first.generation]
