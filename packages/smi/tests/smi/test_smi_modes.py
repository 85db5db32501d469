"""``topo -m``, ``nvlink``, ``--version``, help texts, ``-f`` and ``python -m`` end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nvml_mock_smi._fields import FIELDS
from smi_fixtures.helpers import read_state, render_profile, smi, smi_process


@pytest.fixture(scope="module")
def rendered(library_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("smi-modes")
    return {
        "h100": render_profile("h100", 8, out / "h100.nvmlmock"),
        "t4": render_profile("t4", 1, out / "t4.nvmlmock"),
        "gb200": render_profile("gb200", 4, out / "gb200.nvmlmock"),
    }


@pytest.fixture
def h100(rendered: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(rendered["h100"]))
    return read_state(rendered["h100"])[1]


def test_topo_matrix(library_file: Path, h100: list[dict[str, str]]) -> None:
    rc, out = smi(library_file, "topo", "-m")
    assert rc == 0
    lines = out.splitlines()
    head = [f"GPU{i}" for i in range(len(h100))]
    assert (
        lines[0]
        == "\t\x1b[4m"
        + "\t".join([*head, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
        + "\x1b[0m"
    )
    for i, gpu in enumerate(h100):
        cells = lines[1 + i].split("\t")
        assert cells[0] == f"GPU{i}"
        links = int(gpu["nvlink_count"])
        for j in range(len(h100)):
            assert cells[1 + j] == (" X " if i == j else f"NV{links}")
        assert re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", cells[1 + len(h100)])
        assert cells[2 + len(h100)] == gpu["numa_node"]
    assert "Legend:" in out
    assert "  NV#  = Connection traversing a bonded set of # NVLinks" in out


def test_topo_on_a_switched_fabric_without_remote_pci_info(
    library_file: Path, rendered: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GB200 trays reach each other through NVSwitch trays that NVML does not name by PCI
    # address; the peer relation comes from nvmlDeviceGetP2PStatus(NVLINK).
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(rendered["gb200"]))
    _, gpus = read_state(rendered["gb200"])
    rc, out = smi(library_file, "topo", "-m")
    assert rc == 0
    rows = [line.split("\t") for line in out.splitlines()[1 : 1 + len(gpus)]]
    for i, row in enumerate(rows):
        expected = [" X " if i == j else f"NV{gpus[i]['nvlink_count']}" for j in range(len(gpus))]
        assert row[1 : 1 + len(gpus)] == expected


def test_topo_without_nvlink_uses_the_pcie_path(
    library_file: Path, rendered: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(rendered["t4"]))
    rc, out = smi(library_file, "topo", "-m")
    assert rc == 0
    assert out.splitlines()[1].split("\t")[:2] == ["GPU0", " X "]


def test_nvlink_status_and_capabilities(library_file: Path, h100: list[dict[str, str]]) -> None:
    rc, out = smi(library_file, "nvlink", "-s", "-i", "1")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == f"GPU 1: {h100[1]['name']} (UUID: {h100[1]['uuid']})"
    assert len(lines) == 1 + int(h100[1]["nvlink_count"])
    assert all(re.fullmatch(r"\t Link \d+: \d+\.\d{3} GB/s", line) for line in lines[1:])
    rc, out = smi(library_file, "nvlink", "--capabilities", "-i", "0")
    assert rc == 0
    caps = out.splitlines()[1:]
    assert len(caps) == 6 * int(h100[0]["nvlink_count"])
    assert caps[0] == "\t Link 0, P2P is supported: true"


def test_version(library_file: Path, h100: list[dict[str, str]], rendered: dict[str, Path]) -> None:
    system, _ = read_state(rendered["h100"])
    rc, out = smi(library_file, "--version")
    assert rc == 0
    driver = system["driver_version"]
    assert out.splitlines() == [
        f"NVIDIA-SMI version  : {driver}",
        f"NVML version        : {'.'.join(driver.split('.')[:2])}",
        f"DRIVER version      : {driver}",
        "CUDA Version        : 13.0",
    ]


def test_help_texts_need_no_library(tmp_path: Path) -> None:
    missing = tmp_path / "none.so"
    rc, out = smi(missing, "-h")
    assert rc == 0 and "--query-gpu=" in out and "topo -m" in out
    rc, out = smi(missing, "--help-query-gpu")
    assert rc == 0
    for field in FIELDS:
        assert " or ".join(f'"{n}"' for n in field.names) in out.splitlines()
    rc, out = smi(missing, "--help-query-compute-apps")
    assert rc == 0 and '"used_gpu_memory" or "used_memory"' in out


def test_filename_writes_the_output_there(
    library_file: Path, h100: list[dict[str, str]], tmp_path: Path
) -> None:
    target = tmp_path / "list.txt"
    rc, out = smi(library_file, "-L", "-f", str(target))
    assert (rc, out) == (0, "")
    assert (
        target.read_text().splitlines()[0] == f"GPU 0: {h100[0]['name']} (UUID: {h100[0]['uuid']})"
    )


def test_python_m_and_env_library(library_file: Path, rendered: dict[str, Path]) -> None:
    proc = smi_process(library_file, ["-L"], {"MOCK_NVML_CONFIG": str(rendered["t4"])})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, gpus = read_state(rendered["t4"])
    assert proc.stdout == f"GPU 0: {gpus[0]['name']} (UUID: {gpus[0]['uuid']})\n"
    assert proc.stderr == ""


# What a fresh `nvidia-smi -L` must not import: each of these costs start-up time that
# scripts calling it in a loop pay every time (bench/smi_bench.py measures the whole).
HEAVY_MODULES = ("typing", "dataclasses", "enum", "re", "argparse", "logging")


def test_list_imports_nothing_heavy(library_file: Path, rendered: dict[str, Path]) -> None:
    script = (
        "import sys\n"
        "from nvml_mock_smi import main\n"
        f"rc = main(['-L', '--nvml-lib', {str(library_file)!r}])\n"
        f"print(rc, [m for m in {HEAVY_MODULES!r} if m in sys.modules])\n"
    )
    env = {**os.environ, "MOCK_NVML_CONFIG": str(rendered["h100"])}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "0 []"


def test_loop_repeats_until_interrupted(
    library_file: Path, h100: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvml_mock_smi import _app

    sleeps: list[float] = []

    def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(_app.time, "sleep", fake_sleep)
    rc, out = smi(
        library_file, "--query-gpu=index", "--format=csv,noheader", "-i", "0", "-lms", "250"
    )
    assert rc == 0
    assert sleeps == [0.25, 0.25]
    assert out == "0\n0\n"


@pytest.mark.parametrize("version", range(1, 9))
def test_nvlink_speed_fallback_agrees_with_the_librarys_speed_field(
    library_file: Path, write_state: Any, version: int
) -> None:
    from nvml_mock_smi._nvml import FI_NVLINK_GET_SPEED, Device, Nvml
    from nvml_mock_smi._topology import LINK_GBPS

    write_state(1, nvlink_version=version)
    nvml = Nvml(str(library_file))
    nvml.init()
    try:
        device = Device(nvml, nvml.handle_by_index(0), 0)
        assert device.field_value(FI_NVLINK_GET_SPEED, 0) == round(LINK_GBPS[version] * 1000)
    finally:
        nvml.shutdown()


def test_default_library_comes_from_the_loader_path(
    library_file: Path, rendered: dict[str, Path]
) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "NVML_MOCK_SMI_LIB"}
    env["MOCK_NVML_CONFIG"] = str(rendered["t4"])
    env["LD_LIBRARY_PATH"] = str(library_file.parent)
    proc = subprocess.run(
        [sys.executable, "-m", "nvml_mock_smi", "-L"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("GPU 0: ")
