"""The staged overlay as a driver root: the library and tools where NVIDIA's tools search,
the kernel surfaces in the driver's formats, the PCI tree, bad input, and the refusal on a
node with a real driver.

The fake host tree (``NVML_MOCK_HOST_PROC_ROOT``) stands for the node's ``/proc``; the
library is the real one, loaded from the driver root's ``usr/lib64`` in a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nvml_mock_cuda.library import driver_path
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.errors import ConfigError, ProfileError, StageError
from nvml_mock_node.driver_root import library_file_name
from nvml_mock_node.procfs import ci_minor, gi_minor
from nvml_mock_node.stage import StageOptions, StageReport, stage
from nvml_mock_protocol import hostgpu

H100_BUS = ["0000:53:00.0", "0000:64:00.0"]

PROFILES = Path(__file__).parents[3] / "nvml-engine" / "src" / "nvml_mock_engine" / "profiles"


def fake_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, driver: bool = False) -> Path:
    """A node /proc with a few devices and modules; *driver* adds a real driver's traces."""
    proc, sys_ = tmp_path / "host" / "proc", tmp_path / "host" / "sys"
    (sys_ / "module").mkdir(parents=True)
    proc.mkdir(parents=True)
    character = "  1 mem\n  4 /dev/vc/0\n  4 tty\n  4 ttyS\n"
    if driver:
        character += "195 nvidia\n"
    (proc / "devices").write_text(
        f"Character devices:\n{character}\nBlock devices:\n  7 loop\n259 blkext\n"
    )
    (proc / "modules").write_text("overlay 151552 0 - Live 0x0000000000000000\n")
    monkeypatch.setenv(hostgpu.ENV_HOST_PROC_ROOT, str(proc))
    monkeypatch.setenv(hostgpu.ENV_HOST_SYS_ROOT, str(sys_))
    return proc


def staged(
    overlay: Path, library: Path, profile: str = "h100", count: int = 2, **options: object
) -> StageReport:
    config = resolve_config(profile=profile, count=count, node="driver-node")
    chosen = StageOptions(runtime=False, library=library, **options)  # type: ignore[arg-type]
    return stage(overlay, config, chosen)


def test_the_library_where_the_dra_driver_and_the_toolkit_search(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    overlay = tmp_path / "o"
    staged(overlay, library, devices=False)
    lib64 = overlay / "usr" / "lib64"
    versioned = lib64 / "libnvidia-ml.so.580.105.08"
    # a regular file under the version NVML reports (the DRA driver compares the two), with
    # the soname link and the development link
    assert versioned.is_file() and not versioned.is_symlink()
    assert versioned.read_bytes() == library.read_bytes()
    assert os.readlink(lib64 / "libnvidia-ml.so.1") == versioned.name
    assert os.readlink(lib64 / "libnvidia-ml.so") == "libnvidia-ml.so.1"
    # usr/ is a directory of the overlay: resolving it names no generation
    assert not (overlay / "usr").is_symlink()
    assert Path(os.path.realpath(lib64 / "libnvidia-ml.so.1")) == versioned.resolve()
    assert ".nvml-mock" not in os.path.realpath(lib64 / "libnvidia-ml.so.1")
    assert (overlay / "usr" / "bin").is_dir()
    # the CUDA driver beside it, under the same version (the toolkit's legacy mode looks for it)
    cuda = lib64 / "libcuda.so.580.105.08"
    assert cuda.is_file() and not cuda.is_symlink()
    assert cuda.read_bytes() == driver_path().read_bytes()
    assert os.readlink(lib64 / "libcuda.so.1") == cuda.name
    assert os.readlink(lib64 / "libcuda.so") == "libcuda.so.1"


def test_the_library_finds_its_state_from_the_driver_root(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    overlay = tmp_path / "o"
    staged(overlay, library, devices=False)
    script = textwrap.dedent(
        """
        import sys, pynvml
        pynvml.nvmlInit()
        print(pynvml.nvmlDeviceGetCount(), pynvml.nvmlSystemGetDriverVersion())
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCK_")}
    env["LD_LIBRARY_PATH"] = str(overlay / "usr" / "lib64")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout == "2 580.105.08\n"


def test_proc_surfaces_in_the_drivers_formats(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    overlay = tmp_path / "o"
    report = staged(overlay, library, imex_major=245)
    proc = overlay / "proc"
    nvidia = proc / "driver" / "nvidia"
    assert "  580.105.08  Release Build" in (nvidia / "version").read_text()
    assert "ImexChannelCount: 8\n" in (nvidia / "params").read_text()
    info = (nvidia / "gpus" / H100_BUS[1] / "information").read_text()
    fields = dict(line.split(":", 1) for line in info.splitlines())
    assert fields["Model"].strip() == "NVIDIA H100 80GB HBM3"
    assert fields["Bus Location"].strip() == H100_BUS[1]
    assert fields["Device Minor"].strip() == "1"
    assert fields["GPU UUID"].strip().startswith("GPU-")
    caps = nvidia / "capabilities"
    assert (caps / "mig" / "config").read_text() == (
        "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
    )
    assert (caps / "mig" / "monitor").read_text().startswith("DeviceFileMinor: 2\n")
    assert (caps / "fabric-imex-mgmt").read_text().startswith("DeviceFileMinor: 4323\n")
    # no MIG instances: each GPU's directory is there, empty
    assert [sorted(os.listdir(caps / f"gpu{i}" / "mig")) for i in range(2)] == [[], []]
    minors = (proc / "driver" / "nvidia-caps" / "mig-minors").read_text().splitlines()
    # the minors NVIDIA's own comments quote (the DRA driver's nvcaps.go)
    for line in ("gpu0/gi0/access 3", "gpu3/gi3/ci3/access 439", "gpu6/gi11/ci7/access 920"):
        assert line in minors
    assert minors[:2] == ["config 1", "monitor 2"]
    assert len(minors) == 2 + 32 * 15 * 9
    devices = (proc / "devices").read_text()
    assert report.caps_major is not None
    assert devices == (
        "Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  4 ttyS\n"
        "195 nvidia-frontend\n245 nvidia-caps-imex-channels\n"
        f"{report.caps_major:3d} nvidia-caps\n510 nvidia-uvm\n\n"
        "Block devices:\n  7 loop\n259 blkext\n"
    )
    modules = (proc / "modules").read_text().splitlines()
    assert [line.split()[0] for line in modules] == [
        "nvidia_uvm",
        "nvidia_drm",
        "nvidia_modeset",
        "nvidia",
        "overlay",
    ]
    assert (overlay / "sys" / "module" / "nvidia" / "version").read_text() == "580.105.08\n"


def _pcie_root(sys_root: Path, bdf: str) -> str:
    """``resource.kubernetes.io/pcieRoot`` as Kubernetes' deviceattribute resolves it."""
    target = os.readlink(sys_root / "bus" / "pci" / "devices" / bdf)
    resolved = os.path.normpath(os.path.join("bus/pci/devices", target))
    assert resolved.startswith("devices/pci") and os.path.basename(resolved) == bdf
    return resolved.split("/")[1]


def test_the_pci_tree_with_a_root_port_above_each_gpu(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    overlay = tmp_path / "o"
    staged(overlay, library, count=8, devices=False)
    sys_root = overlay / "sys"
    gpu = sys_root / "bus" / "pci" / "devices" / "0000:53:00.0"
    read = {
        name: (gpu / name).read_text().strip()
        for name in (
            "vendor",
            "device",
            "subsystem_vendor",
            "subsystem_device",
            "class",
            "numa_node",
            "local_cpulist",
            "current_link_speed",
            "current_link_width",
            "max_link_speed",
            "max_link_width",
        )
    }
    # the H100 SXM's own ids (pci_device_id 0x233010DE, pci_subsystem_id 0x16C110DE)
    assert read == {
        "vendor": "0x10de",
        "device": "0x2330",
        "subsystem_vendor": "0x10de",
        "subsystem_device": "0x16c1",
        "class": "0x030200",
        "numa_node": "0",
        "local_cpulist": "0-55,112-167",
        "current_link_speed": "32.0 GT/s PCIe",
        "current_link_width": "16",
        "max_link_speed": "32.0 GT/s PCIe",
        "max_link_width": "16",
    }
    assert os.path.basename(os.path.realpath(gpu / "driver")) == "nvidia"
    assert os.path.basename(os.path.realpath(gpu / "iommu_group")) == "0"
    bars = (gpu / "resource").read_text().splitlines()
    assert len(bars) == 13 and all(len(line.split(" ")) == 3 for line in bars)
    start, end, _ = (int(v, 16) for v in bars[1].split(" "))
    assert end - start + 1 == 128 << 30  # BAR1 is the board's bar1_total_bytes
    # the function sits below a root port (a bridge) on its root complex's bus
    port = Path(os.path.realpath(gpu)).parent
    assert port.name == "0000:50:01.0"
    assert (port / "class").read_text() == "0x060400\n"
    assert port.parent.name == "pci0000:50"
    roots = [
        _pcie_root(sys_root, bdf) for bdf in sorted(os.listdir(sys_root / "bus/pci/drivers/nvidia"))
    ]
    assert roots == ["pci0000:50", "pci0000:60", "pci0000:70", "pci0000:80",
                     "pci0000:90", "pci0000:a0", "pci0000:b0", "pci0000:c0"]  # fmt: skip
    # a GPU on bus 0 (a T4 in a virtual machine) sits on its root complex itself
    fake_host(tmp_path / "t4", monkeypatch)
    staged(tmp_path / "t4o", library, profile="t4", count=2, devices=False)
    assert _pcie_root(tmp_path / "t4o" / "sys", "0000:00:1b.0") == "pci0000:00"


def test_a_graphics_mode_board_shows_the_vga_class(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    source = PROFILES / "l40s.yaml"
    text = source.read_text().replace("layout:\n", 'layout:\n  pci_class: "0x030000"\n', 1)
    profile = tmp_path / "l40s-graphics.yaml"
    profile.write_text(text)
    config = resolve_config(profile=str(profile), count=1, node="n")
    stage(tmp_path / "o", config, StageOptions(runtime=False, library=library, devices=False))
    devices = tmp_path / "o" / "sys" / "bus" / "pci" / "devices"
    (bdf,) = [p for p in devices.iterdir() if (p / "vendor").read_text() == "0x10de\n"]
    assert (bdf / "class").read_text() == "0x030000\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace('"0x030000"', '"0x0302"'))
    with pytest.raises(ProfileError, match=r"layout\.pci_class: must be one of 0x030000"):
        resolve_config(profile=str(bad), count=1, node="n")


def test_mig_capabilities_follow_the_live_layout(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvml_mock_engine.mig_layout import parse_spec
    from nvml_mock_node.driver_surfaces import MigFollower
    from smi_fixtures.helpers import smi

    fake_host(tmp_path, monkeypatch)
    overlay = tmp_path / "o"
    config = resolve_config(profile="h100", count=2, node="driver-node")
    plan = parse_spec("all-balanced", config.profile.mig, config.count)
    options = StageOptions(runtime=False, library=library, devices=False, mig=plan)
    stage(overlay, config, options)
    caps = overlay / "proc" / "driver" / "nvidia" / "capabilities"

    def files(gpu: int) -> list[str]:
        root = caps / f"gpu{gpu}" / "mig"
        return sorted(str(p.relative_to(root)) for p in root.rglob("access"))

    # all-balanced on an H100: 3g.40gb, 2g.20gb and two 1g.10gb, one compute instance each
    made = files(0)
    assert len(made) == 8 and made == files(1)
    gi_ids = sorted(int(p.split("/")[0][2:]) for p in made if p.count("/") == 1)
    for gi in gi_ids:
        text = (caps / "gpu1" / "mig" / f"gi{gi}" / "access").read_text()
        assert (
            text
            == f"DeviceFileMinor: {gi_minor(1, gi)}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
        )
        ci = (caps / "gpu1" / "mig" / f"gi{gi}" / "ci0" / "access").read_text()
        assert ci.startswith(f"DeviceFileMinor: {ci_minor(1, gi, 0)}\n")

    follower = MigFollower(overlay / "config" / "live.nvmlmock")
    assert follower.poll()  # the first poll syncs
    assert not follower.poll(), "nothing changed: no rewrite"
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(overlay / "config" / "state.nvmlmock"))
    assert smi(library, "mig", "-i", "0", "-dci")[0] == 0
    assert smi(library, "mig", "-i", "0", "-dgi")[0] == 0
    assert follower.poll()
    assert files(0) == [] and len(files(1)) == 8
    rc, _ = smi(library, "mig", "-i", "0", "-cgi", "9", "-C")
    assert rc == 0
    assert follower.poll()
    (gi,) = [p for p in files(0) if p.count("/") == 1]
    assert files(0) == [gi, gi.replace("/access", "/ci0/access")]


def test_bad_input_is_a_clear_error_and_nothing_is_left(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    source = PROFILES / "h100.yaml"
    no_id = tmp_path / "no-id.yaml"
    no_id.write_text(source.read_text().replace('  pci_device_id: "0x233010DE"\n', ""))
    with pytest.raises(ProfileError, match=r"gpu: missing required key\(s\): pci_device_id"):
        resolve_config(profile=str(no_id), count=1, node="n")
    overlay = tmp_path / "o"
    clash = resolve_config(
        profile="h100",
        count=2,
        node="n",
        file_data={"gpus": {1: {"pci_bus_id": "00000000:53:00.0"}}},
    )
    with pytest.raises(
        ConfigError, match=r"gpus\[1\]\.pci_bus_id: 00000000:53:00\.0 is also GPU 0's"
    ):
        stage(overlay, clash, StageOptions(runtime=False, library=library))
    assert not overlay.exists(), "refused before anything is written"
    with pytest.raises(ConfigError, match="driver_version"):
        resolve_config(profile="h100", count=1, node="n", driver_version="580/../x")
    with pytest.raises(StageError, match=r"driver_version: '580\.1x' cannot name the driver"):
        library_file_name("580.1x")
    # a staged overlay stays as it was when a later staging is refused
    staged(overlay, library, devices=False)
    before = sorted(str(p.relative_to(overlay)) for p in overlay.rglob("*"))
    with pytest.raises(ConfigError):
        stage(overlay, clash, StageOptions(runtime=False, library=library))
    assert sorted(str(p.relative_to(overlay)) for p in overlay.rglob("*")) == before


def test_refused_on_a_node_with_a_real_driver(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overlay = tmp_path / "o"
    fake_host(tmp_path, monkeypatch)
    staged(overlay, library, devices=False)
    assert (overlay / "proc").is_dir()
    proc = fake_host(tmp_path / "real", monkeypatch, driver=True)
    report = staged(overlay, library, devices=False)
    assert report.driver_root_refused == (
        "driver root refused: a real NVIDIA driver is loaded on this node "
        f"({proc}/devices lists nvidia (major 195)), and the mock's usr/lib64, proc/ and sys/ "
        "would shadow the real driver's files; the rest of the overlay is staged without them"
    )
    # what an earlier staging laid out is taken away, the rest is staged
    for name in ("usr", "proc", "sys"):
        assert not (overlay / name).exists()
    assert (overlay / "config" / "state.nvmlmock").is_file()
    assert (
        staged(tmp_path / "off", library, devices=False, driver_root=False).driver_root_refused
        is None
    )


def test_the_librarys_mount_path_default_is_the_protocols() -> None:
    """The C library's fallback overlay path and ENV name agree with ``names`` (one fact)."""
    from nvml_mock_protocol import names

    init = (Path(__file__).parents[3] / "nvml-engine" / "native" / "src" / "init.c").read_text()
    assert f'#define OVERLAY_MOUNT_DEFAULT "{names.OVERLAY_MOUNT_PATH}"' in init
    assert f'#define ENV_OVERLAY_MOUNT "{names.ENV_OVERLAY_MOUNT_PATH}"' in init


@pytest.mark.parametrize(
    ("profile", "machine"),
    [("h100", "DGX H100"), ("gb200", "DGX GB200"), ("a100", "DGXA100 920-23687-2530-000")],
)
def test_the_root_names_the_machine_where_gpu_feature_discovery_reads_it(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch, profile: str, machine: str
) -> None:
    fake_host(tmp_path, monkeypatch)
    staged(tmp_path / "o", library, profile=profile, count=1, devices=False)
    product = tmp_path / "o" / "sys" / "class" / "dmi" / "id" / "product_name"
    assert product.read_text() == f"{machine}\n"
    assert product.stat().st_mode & 0o777 == 0o444


def test_every_packaged_profile_names_its_machine() -> None:
    from nvml_mock_engine.profiles import load_profile, profile_names

    machines = {name: load_profile(name).machine for name in profile_names()}
    assert all(machines.values()), machines


@pytest.mark.parametrize(
    ("value", "why"),
    [('"DGX\\tH100"', "printable ASCII"), ('" DGX"', "no blank"), ("7", "printable"),
     (f'"{"x" * 65}"', "at most 64")],
)  # fmt: skip
def test_a_bad_machine_name_is_refused_naming_the_key(tmp_path: Path, value: str, why: str) -> None:
    source = PROFILES / "t4.yaml"
    text = source.read_text().replace("layout:\n", f"layout:\n  machine: {value}\n", 1)
    text = text.replace('  machine: "g4dn.12xlarge"', "  # machine given above", 1)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ProfileError, match=r"layout\.machine: ") as caught:
        resolve_config(profile=str(bad), count=1, node="n")
    assert why in str(caught.value)


def test_a_profile_file_without_a_machine_stages_no_product_name(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    source = PROFILES / "t4.yaml"
    lines = [line for line in source.read_text().splitlines() if "machine:" not in line]
    own = tmp_path / "own.yaml"
    own.write_text("\n".join(lines) + "\n")
    config = resolve_config(profile=str(own), count=1, node="n")
    stage(tmp_path / "o", config, StageOptions(runtime=False, library=library, devices=False))
    assert not (tmp_path / "o" / "sys" / "class").exists()


def _toolkit_libraries(root: str) -> list[str]:
    """The libraries a CDI spec would mount from *root*, found as NVIDIA's toolkit finds them
    (its library lookup under the DRA driver and nvidia-ctk): each candidate resolved to its
    real path, then kept, relative to the root, only when it starts with the root as given."""
    found = sorted(
        {os.path.realpath(p) for p in Path(root, "usr", "lib64").glob("libnvidia-ml.so.*")}
    )
    return [p[len(root) :] for p in found if p.startswith(root + "/")]


def test_a_symlinked_driver_root_is_warned_about_naming_the_real_one(
    tmp_path: Path, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_host(tmp_path, monkeypatch)
    real = tmp_path / "real-overlay"
    link = tmp_path / "overlay-link"
    real.mkdir()
    link.symlink_to(real)
    report = staged(link, library, devices=False)
    (warning,) = [w for w in report.warnings if "symlink" in w]
    assert f"the driver root {link} is reached through a symlink" in warning
    assert f"give {real} as the driver root" in warning
    # why: through the link the toolkit's lookup keeps no library; from the real path it does
    assert _toolkit_libraries(str(link)) == []
    assert _toolkit_libraries(str(real)) == ["/usr/lib64/libnvidia-ml.so.580.105.08"]
    # staged at the real path, or told where the host sees it through a link
    assert not [w for w in staged(real, library, devices=False).warnings if "symlink" in w]
    report = staged(real, library, devices=False, host_path=str(link))
    assert [w for w in report.warnings if "symlink" in w] == [warning]
