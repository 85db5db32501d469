"""The surfaces hook in real containers: runc and crun (Debian's) run a busybox container
with the overlay's ``bin/nvml-mock-surfaces-hook`` as its ``createContainer`` hook, as the
NRI plugin adds it, for a root and a non-root, read-only-rootfs process.

The container reads the driver root's files at the fixed paths; where this kernel offers
nothing to bind over (no ``/proc/driver``, no ``/proc/modules``), the hook says so on stderr
and in ``/proc/driver/nvml-mock-surfaces``, and the container starts all the same.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_node.stage import StageOptions, stage
from nvml_mock_node.surfaces_hook import fdmount
from nvml_mock_protocol import names

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="running containers needs root")
BUSYBOX = shutil.which("busybox")
SCRIPT = (
    "cat /proc/devices; echo =; ls /sys/bus/pci/devices; echo =; "
    "cat /sys/bus/pci/devices/0000:53:00.0/class; readlink /sys/bus/pci/devices/0000:53:00.0; "
    "echo =; ls /sys/devices; echo =; cat /sys/module/nvidia/version; "
    "cat /proc/driver/nvidia/version /proc/driver/nvml-mock-surfaces; echo =; id -u"
)


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory, library: Path) -> Path:
    """An h100 node staged with its runtime, as the DaemonSet stages it."""
    root = tmp_path_factory.mktemp("hook") / "nvml-mock"
    host = root.parent / "host-proc"
    host.mkdir()
    (host / "devices").write_text("Character devices:\n  1 mem\n\nBlock devices:\n")
    saved = os.environ.get("NVML_MOCK_HOST_PROC_ROOT")
    os.environ["NVML_MOCK_HOST_PROC_ROOT"] = str(host)
    try:
        config = resolve_config(profile="h100", count=2, node="hook-node")
        stage(root, config, StageOptions(library=library, devices=False))
    finally:
        if saved is None:
            os.environ.pop("NVML_MOCK_HOST_PROC_ROOT", None)
        else:
            os.environ["NVML_MOCK_HOST_PROC_ROOT"] = saved
    return root


def _bundle(
    tmp_path: Path,
    overlay: Path,
    runtime: str,
    *,
    user: int,
    script: str = SCRIPT,
    volumes: dict[str, Path] | None = None,
) -> Path:
    if BUSYBOX is None:
        pytest.skip(
            "needs a static busybox for the container's root (apt-get install busybox-static)"
        )
    bundle = tmp_path / "bundle"
    rootfs = bundle / "rootfs"
    for name in ("bin", "proc", "sys", "dev", "tmp"):
        (rootfs / name).mkdir(parents=True)
    shutil.copy(BUSYBOX, rootfs / "bin" / "busybox")
    for tool in ("sh", "cat", "ls", "readlink", "id", "echo", "touch"):
        (rootfs / "bin" / tool).symlink_to("busybox")
    subprocess.run([runtime, "spec"], cwd=bundle, check=True)
    config = json.loads((bundle / "config.json").read_text())
    config["process"].update(terminal=False, args=["sh", "-c", script])
    config["process"]["user"] = {"uid": user, "gid": user}
    config["root"]["readonly"] = True
    config["linux"]["namespaces"] = [{"type": t} for t in ("pid", "ipc", "uts", "mount")]
    config["linux"].pop("resources", None)
    for destination, source in (volumes or {}).items():
        config["mounts"].append(
            {
                "destination": destination,
                "type": "bind",
                "source": str(source),
                "options": ["rbind", "rw"],
            }
        )
    hook = overlay / names.OVERLAY_BIN_DIR / names.SURFACES_HOOK
    config["hooks"] = {
        "createContainer": [
            {
                "path": str(hook),
                "args": [names.SURFACES_HOOK, "--root", str(overlay)],
                "timeout": 30,
            }
        ]
    }
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def _run(runtime: str, bundle: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    state = tmp_path / "state"
    if runtime == "runc":
        argv = ["runc", "--root", str(state), "run", "--bundle", str(bundle), "hook-test"]
    else:
        # crun refuses this machine's hybrid cgroup layout: give it a cgroup2-only view
        command = (
            "(umount -R /sys/fs/cgroup 2>/dev/null; mount -t cgroup2 none /sys/fs/cgroup) && "
            f"exec crun --root {state} run --bundle {bundle} hook-test"
        )
        argv = ["unshare", "-m", "sh", "-c", command]
    for _ in range(3):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if runtime != "runc" or _RUNC_INIT_LOST not in done.stderr:
            return done
        # runc's own init died before runc read its descriptors (seen on a loaded machine),
        # before any hook ran: nothing of the test has happened yet, so run it again
        subprocess.run(
            ["runc", "--root", str(state), "delete", "-f", "hook-test"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    return done


_RUNC_INIT_LOST = "error getting pipe fds for pid"


@ROOT_ONLY
@pytest.mark.parametrize("user", [0, 1000], ids=["root", "non-root"])
@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_a_container_reads_the_driver_surfaces_at_their_paths(
    tmp_path: Path, overlay: Path, runtime: str, user: int
) -> None:
    if shutil.which(runtime) is None:
        pytest.skip(f"needs {runtime} (apt-get install {runtime})")
    done = _run(runtime, _bundle(tmp_path, overlay, runtime, user=user), tmp_path)
    assert done.returncode == 0, done.stderr
    devices, pci, link, sys_devices, versions, uid = done.stdout.split("=\n")
    assert devices == (overlay / "proc" / "devices").read_text()
    assert pci.split() == sorted(os.listdir(overlay / "sys" / "bus" / "pci" / "devices"))
    assert link.splitlines() == [
        "0x030200",
        "../../../devices/pci0000:50/0000:50:01.0/0000:53:00.0",
    ]
    # the driver root's root complexes beside the kernel's own entries
    listed = sys_devices.split()
    assert {"pci0000:50", "pci0000:60", "system", "virtual"} <= set(listed)
    assert versions.splitlines()[0] == "580.105.08"
    assert "  580.105.08  Release Build" in versions  # /proc/driver/nvidia/version
    status = versions.split("Release Build", 1)[1]
    made = [line for line in status.splitlines() if line.startswith("made ")]
    assert made[:5] == [
        "made /sys/devices",
        "made /sys/module",
        "made /sys/kernel/iommu_groups",
        "made /proc/devices",
        "made /sys/bus/pci",
    ]
    assert made[-1] == "made /proc/driver"
    if not Path("/proc/modules").exists():
        assert "not reached /proc/modules (this kernel offers none to bind over)" in status
    else:
        assert "made /proc/modules" in status
    assert uid.strip() == str(user)


@ROOT_ONLY
def test_the_hook_never_fails_the_container(tmp_path: Path, overlay: Path) -> None:
    """A hook that cannot work says why and lets the container start: a failing hook would
    abort it."""
    if shutil.which("runc") is None:
        pytest.skip("needs runc (apt-get install runc)")
    bundle = _bundle(tmp_path, overlay, "runc", user=0)
    config = json.loads((bundle / "config.json").read_text())
    config["hooks"]["createContainer"][0]["args"][-1] = str(tmp_path / "not-staged")
    config["process"]["args"] = ["sh", "-c", "cat /proc/devices"]
    (bundle / "config.json").write_text(json.dumps(config))
    done = _run("runc", bundle, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "nvidia" not in done.stdout
    # a runtime shows a hook's stderr only when it fails: the hook itself says why
    hook = overlay / names.OVERLAY_BIN_DIR / names.SURFACES_HOOK
    for root, stdin, why in (
        (tmp_path / "not-staged", "{}", f"{tmp_path / 'not-staged'} holds no staged proc/"),
        (overlay, "{}", "the OCI state on stdin names no bundle"),
        (overlay, "not json", "Expecting value"),
    ):
        direct = subprocess.run(
            [str(hook), "--root", str(root)],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        assert direct.returncode == 0
        assert direct.stderr.startswith(
            f"{names.SURFACES_HOOK}: the container starts without the driver surfaces: {why}"
        ), direct.stderr


def test_the_driver_roots_nvidia_smi_works_from_the_root_alone(
    overlay: Path, tmp_path: Path
) -> None:
    """``usr/bin/nvidia-smi`` finds the runtime and the state from its own place: no
    ``/opt/nvml-mock`` fallback, no env (as when a tool runs it from the driver root)."""
    env = {
        "PATH": "/usr/bin:/bin",
        names.ENV_OVERLAY_MOUNT_PATH: str(tmp_path / "no-overlay-here"),
    }
    done = subprocess.run(
        [str(overlay / "usr" / "bin" / "nvidia-smi"), "-L"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [line.split(" (UUID")[0] for line in done.stdout.splitlines()] == [
        "GPU 0: NVIDIA H100 80GB HBM3",
        "GPU 1: NVIDIA H100 80GB HBM3",
    ]


# -- attacks -------------------------------------------------------------------

HOOK_PLACES = (
    "/sys/devices",
    "/sys/module",
    "/sys/kernel/iommu_groups",
    "/proc/devices",
    "/proc/modules",
    "/sys/bus/pci",
    "/proc/driver",
)
"""Where the hook mounts: what it mounts there, and every mount below, must be read-only."""
RACE_RUNS = int(os.environ.get("NVML_MOCK_HOOK_RACE_RUNS", "3"))
"""Containers started against the racing sibling; ``NVML_MOCK_HOOK_RACE_RUNS=200`` for the
release check (its result is in the README)."""
RACER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
pairs = [(a.encode(), (a + ".swap").encode()) for a in sys.argv[1:]]
swaps = 0
stop = time.monotonic() + 3600
while not os.path.exists(sys.argv[1] + ".stop") and time.monotonic() < stop:
    for a, b in pairs:
        if libc.renameat2(-100, a, -100, b, 2) == 0:  # RENAME_EXCHANGE
            swaps += 1
print(swaps)
"""
"""The sibling: swaps each entry between a directory and a symlink to a host directory, as
fast as it can (``renameat2(RENAME_EXCHANGE)``), until told to stop."""
RACE_SCRIPT = (
    "for p in /sys/devices/x /sys/bus/pci /sys/kernel/iommu_groups; do "
    "cat $p/secret; ls $p; touch $p/probe; done 2>&1; touch /sys/devices/probe 2>&1; "
    "echo =; cat /proc/self/mountinfo"
)


def _mountinfo_writable(mountinfo: str) -> list[str]:
    """Mount points at or below a hook place whose mount is not read-only; at a place, only
    the topmost mount counts (the ones below it are covered)."""
    top: dict[str, str] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        point, options = fields[4], fields[5].split(",")
        if any(point == p or point.startswith(p + "/") for p in HOOK_PLACES):
            top[point] = "ro" if "ro" in options else "rw"
    return sorted(point for point, mode in top.items() if mode != "ro")


def _volume(root: Path, entry: str, canary: Path) -> Path:
    """A pod volume holding *entry*, a directory, and *entry*.swap, a symlink to *canary*."""
    root.mkdir()
    (root / entry).mkdir()
    (root / entry / "inside").write_text("the pod's own\n")
    (root / f"{entry}.swap").symlink_to(canary)
    return root


@ROOT_ONLY
def test_a_racing_sibling_never_gets_a_host_path_into_the_container(
    tmp_path: Path, overlay: Path
) -> None:
    """Volumes at the hook's places (``/sys/devices``, ``/sys/bus``, ``/sys/kernel``) whose
    entries a sibling keeps swapping between a directory and a symlink to a host directory
    while the hook runs: in no run does the container read the host directory, nor see it
    mounted, nor find anything the hook mounted writable."""
    if shutil.which("runc") is None:
        pytest.skip("needs runc (apt-get install runc)")
    secret = f"host secret {os.getpid()}-{id(tmp_path)}"
    canary = tmp_path / "host-etc"
    canary.mkdir()
    (canary / "secret").write_text(secret + "\n")
    volumes = {
        "/sys/devices": _volume(tmp_path / "vol-devices", "x", canary),
        "/sys/bus": _volume(tmp_path / "vol-bus", "pci", canary),
        "/sys/kernel": _volume(tmp_path / "vol-kernel", "iommu_groups", canary),
    }
    bundle = _bundle(tmp_path, overlay, "runc", user=0, script=RACE_SCRIPT, volumes=volumes)
    entries = [
        str(volumes["/sys/devices"] / "x"),
        str(volumes["/sys/bus"] / "pci"),
        str(volumes["/sys/kernel"] / "iommu_groups"),
    ]
    racer = subprocess.Popen(
        [sys.executable, "-c", RACER, *entries], stdout=subprocess.PIPE, text=True
    )
    failures: list[str] = []
    try:
        for run in range(RACE_RUNS):
            done = _run("runc", bundle, tmp_path)
            assert done.returncode == 0, done.stderr
            seen, mountinfo = done.stdout.split("=\n", 1)
            if secret in done.stdout:
                failures.append(f"run {run}: the host file was read: {seen!r}")
            if str(canary) in mountinfo:
                failures.append(f"run {run}: the host directory is mounted")
            writable = _mountinfo_writable(mountinfo)
            if writable:
                failures.append(f"run {run}: writable below the hook's places: {writable}")
            if "Read-only file system" not in seen:
                failures.append(f"run {run}: a write was not refused: {seen!r}")
    finally:
        Path(entries[0] + ".stop").touch()
        swaps = int(racer.communicate(timeout=60)[0] or 0)
    failed_runs = len({failure.split(":", 1)[0] for failure in failures})
    read = sum("the host file was read" in failure for failure in failures)
    assert not failures, (
        f"{failed_runs} of {RACE_RUNS} runs failed, {read} read the host file: {failures[:4]}"
    )
    assert swaps > RACE_RUNS  # the sibling really raced
    # the pod's volumes are its own to write where the hook refused; the host's never
    assert sorted(p.name for p in canary.iterdir()) == ["secret"]


@ROOT_ONLY
def test_a_writable_volume_below_a_graft_turns_read_only(tmp_path: Path, overlay: Path) -> None:
    """A pod volume at ``/sys/devices`` with a second, writable one mounted two levels below
    it: the hook binds the first's entry back into its graft with everything below, and
    read-only reaches the second too (a non-recursive remount left it writable)."""
    if shutil.which("runc") is None:
        pytest.skip("needs runc (apt-get install runc)")
    outer, inner = tmp_path / "vol-devices", tmp_path / "vol-inner"
    (outer / "sub" / "deep").mkdir(parents=True)
    inner.mkdir()
    (inner / "kept").write_text("the pod's own\n")
    script = (
        "cat /sys/devices/sub/deep/kept; touch /sys/devices/sub/deep/pwned 2>&1; "
        "echo =; cat /proc/self/mountinfo"
    )
    bundle = _bundle(
        tmp_path,
        overlay,
        "runc",
        user=0,
        script=script,
        volumes={"/sys/devices": outer, "/sys/devices/sub/deep": inner},
    )
    done = _run("runc", bundle, tmp_path)
    assert done.returncode == 0, done.stderr
    seen, mountinfo = done.stdout.split("=\n", 1)
    assert seen.startswith("the pod's own\n")
    assert "Read-only file system" in seen
    assert not (inner / "pwned").exists()
    assert _mountinfo_writable(mountinfo) == []
    assert any(line.split()[4] == "/sys/devices/sub/deep" for line in mountinfo.splitlines())


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "walk"])
def test_resolve_never_leaves_the_root_nor_follows_a_symlink(tmp_path: Path, openat2: bool) -> None:
    """The hook's path resolution, with ``openat2`` and with the walk kernels without it
    take: a symlink anywhere on the way is refused, ``..`` stays below the root."""
    root = tmp_path / "root"
    (root / "sys" / "devices").mkdir(parents=True)
    (root / "etc").symlink_to("/etc")
    (root / "sys" / "link").symlink_to("devices")
    with fdmount.opened(os.open(root, os.O_PATH | os.O_DIRECTORY)) as fd:
        with fdmount.opened(
            fdmount.resolve(fd, "sys/devices", directory=True, openat2=openat2)
        ) as found:
            assert fdmount.same_object(found, os.open(root / "sys" / "devices", os.O_PATH))
        for relative in ("etc/shadow", "etc", "sys/link", "sys/link/x"):
            with pytest.raises(OSError) as refused:
                fdmount.resolve(fd, relative, openat2=openat2)
            assert refused.value.errno == errno.ELOOP, relative
        with pytest.raises(OSError) as climbed:
            fdmount.resolve(fd, "../root/sys", openat2=openat2)
        if openat2:  # in-root: ".." at the root stays there, and root/root/sys is not
            assert climbed.value.errno == errno.ENOENT
        else:
            assert climbed.value.errno == errno.EXDEV
