"""The overlay's own Python runtime and its launchers, in a root with nothing else in it.

A chroot holds only the staged overlay at /opt/nvml-mock and a /bin/sh (a static busybox
when installed, else dash and the libraries it needs): no Python, no libc of its own for
the runtime to lean on. The launchers must work there exactly as in a Python-less image.
Needs root (chroot) or an unprivileged user namespace (``unshare --root``); skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render
from nvml_mock_node.runtime import loader_name
from nvml_mock_node.stage import StageOptions, launcher_script, stage

MOUNT = "opt/nvml-mock"
ENV = {"PATH": "/bin", "HOME": "/"}
CHROOT = shutil.which("chroot") or shutil.which("chroot", path="/usr/sbin:/sbin") or "chroot"


def _shell_files(flavor: str) -> list[tuple[Path, Path]]:
    """(source, path inside the root) pairs that give the root a working /bin/sh.

    ``busybox``: a static busybox and nothing else (no libc at all). ``dash``: dash with the
    libc and loader it links, at their usual paths, as in a Debian slim image.
    """
    if flavor == "busybox":
        busybox = shutil.which("busybox")
        if busybox is None:
            pytest.skip("no busybox (Debian: busybox-static)")
        ldd = subprocess.run(["ldd", busybox], capture_output=True, text=True, check=False)
        if "not a dynamic executable" not in ldd.stdout + ldd.stderr:
            pytest.skip(f"{busybox} is not statically linked (Debian: busybox-static)")
        return [(Path(busybox), Path("bin/busybox"))]
    dash = shutil.which("dash")
    if dash is None:
        pytest.skip("no dash")
    files = [(Path(dash), Path("bin/dash"))]
    ldd = subprocess.run(["ldd", dash], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts else parts[0]
        if path.startswith("/"):
            files.append((Path(path), Path(path.lstrip("/"))))
    return files


def _jail_candidates(root: Path) -> list[list[str]]:
    candidates = []
    if os.geteuid() == 0 and Path(CHROOT).is_file():
        candidates.append([CHROOT, str(root)])
    unshare = shutil.which("unshare") or shutil.which("unshare", path="/usr/bin:/bin")
    if unshare:
        candidates.append([unshare, "--map-root-user", f"--root={root}"])
    return candidates


JAIL: list[str] = []
"""The command prefix that runs a program inside the root (chroot, or unshare --root)."""


@pytest.fixture(scope="module", params=["busybox", "dash"])
def root(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, library: Path
) -> Path:
    flavor: str = request.param
    root = tmp_path_factory.mktemp(f"root-{flavor}")
    for source, inside in _shell_files(flavor):
        (root / inside).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, root / inside)
    shell = "busybox" if (root / "bin/busybox").exists() else "dash"
    (root / "bin/sh").symlink_to(shell)
    if shell == "busybox":
        (root / "bin/readlink").symlink_to("busybox")
    (root / "tmp").mkdir()
    for candidate in _jail_candidates(root):
        probe = subprocess.run(
            [*candidate, "/bin/sh", "-c", "exit 0"], check=False, env=ENV, capture_output=True
        )
        if probe.returncode == 0:
            JAIL[:] = candidate
            break
    else:
        pytest.skip("neither chroot (needs root) nor an unprivileged user namespace is permitted")
    config = resolve_config(profile="gb200", node="tray-4")
    stage(root / MOUNT, config, StageOptions(library=library))
    return root


def _run(
    root: Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert JAIL and str(root) in " ".join(JAIL)
    return subprocess.run(
        [*JAIL, *argv], capture_output=True, text=True, env=env or ENV, timeout=60, check=False
    )


def test_root_has_no_python(root: Path) -> None:
    outside = [p for p in root.rglob("*") if not p.is_relative_to(root / "opt")]
    assert not [p for p in outside if "python" in p.name]
    if (root / "bin/busybox").exists():
        assert sorted(p.name for p in root.iterdir()) == ["bin", "opt", "tmp"]


def test_runtime_loads_the_mock_library_and_finds_its_state(root: Path) -> None:
    rt = f"/{MOUNT}/runtime"
    loader = loader_name(root / MOUNT / "runtime")
    code = (
        "import sys, pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(3); "
        "print(sys.prefix, n.nvmlDeviceGetCount(), n.nvmlDeviceGetName(h), n.nvmlDeviceGetUUID(h))"
    )
    result = _run(
        root,
        f"{rt}/lib/{loader}",
        "--library-path",
        f"{rt}/lib:/{MOUNT}/lib",
        f"{rt}/bin/python3",
        "-I",
        "-c",
        code,
    )
    assert result.returncode == 0, result.stderr
    uuid = render(resolve_config(profile="gb200", node="tray-4")).gpus[3]["uuid"]
    assert result.stdout.split() == [rt, "4", "NVIDIA", "GB200", str(uuid)]


def _install_probe(root: Path, where: str) -> None:
    """A launcher from the same template, running the engine's own CLI."""
    loader = loader_name(root / MOUNT / "runtime")
    script = launcher_script(
        "nvml-mock-engine", "nvml_mock_engine", loader=loader, mount_path=f"/{MOUNT}"
    )
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)


def test_launcher_outside_the_overlay_falls_back_to_the_mount_path(root: Path) -> None:
    _install_probe(root, "usr/local/bin/nvml-mock-engine")
    result = _run(root, "/usr/local/bin/nvml-mock-engine", "lib-path")
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip()
    assert path.startswith(f"/{MOUNT}/") and path.endswith("/libnvidia-ml.so.1")
    shutil.rmtree(root / "usr")


def test_launcher_found_on_path_by_a_bare_name(root: Path) -> None:
    _install_probe(root, "usr/local/bin/nvml-mock-engine")
    result = _run(
        root,
        "/bin/sh",
        "-c",
        "cd /tmp && nvml-mock-engine --version",
        env={"PATH": "/usr/local/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("nvml-mock-engine ")
    shutil.rmtree(root / "usr")


def test_missing_runtime_is_reported(root: Path, tmp_path: Path) -> None:
    _install_probe(root, "usr/local/bin/nvml-mock-engine")
    result = _run(
        root,
        "/usr/local/bin/nvml-mock-engine",
        "lib-path",
        env={**ENV, "NVML_MOCK_OVERLAY_MOUNT_PATH": "/nowhere"},
    )
    shutil.rmtree(root / "usr")
    assert result.returncode == 127
    assert "overlay runtime is missing (looked in /nowhere/runtime)" in result.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("nvml_mock_smi.__main__") is None,
    reason="the nvidia-smi work-alike (nvml_mock_smi) is not installed",
)
def test_nvidia_smi_lists_the_staged_gpus(root: Path) -> None:
    started = time.monotonic()
    result = _run(root, f"/{MOUNT}/bin/nvidia-smi", "-L")
    assert result.returncode == 0, result.stderr
    gpus = render(resolve_config(profile="gb200", node="tray-4")).gpus
    assert result.stdout.splitlines() == [
        f"GPU {i}: NVIDIA GB200 (UUID: {g['uuid']})" for i, g in enumerate(gpus)
    ]
    assert time.monotonic() - started < 30


@pytest.mark.skipif(
    importlib.util.find_spec("check_fabric") is None, reason="check-fabric is not installed"
)
def test_check_fabric_launcher_runs(root: Path) -> None:
    result = _run(root, f"/{MOUNT}/bin/check-fabric", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()


def test_restage_reuses_the_runtime(root: Path, library: Path) -> None:
    overlay = root / MOUNT
    options = StageOptions(library=library)
    # The first re-stage rebuilds only if the sources changed since the fixture staged.
    stage(overlay, resolve_config(profile="gb200", count=2, node="tray-4"), options)
    before = os.readlink(overlay / ".nvml-mock" / "current" / "runtime")
    report = stage(overlay, resolve_config(profile="gb200", count=3, node="tray-4"), options)
    assert report.runtime_reused
    assert os.readlink(overlay / ".nvml-mock" / "current" / "runtime") == before
    runtimes = [p.name for p in (overlay / ".nvml-mock").iterdir() if p.name.startswith("runtime-")]
    assert runtimes == [before.removeprefix("../")]
    probe = _run(root, f"/{MOUNT}/bin/nvidia-smi", "-L")
    if importlib.util.find_spec("nvml_mock_smi.__main__") is not None:
        assert probe.returncode == 0, probe.stderr
        assert len(probe.stdout.splitlines()) == 3
    assert "runtime is missing" not in probe.stderr
