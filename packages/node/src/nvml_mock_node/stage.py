"""Lay out the overlay tree that every container gets at ``/opt/nvml-mock``.

Containers bind-mount the overlay directory while it may be re-staged (a new profile, a
new GPU count, a new library). Replacing files in place would let a container see half
of a change; renaming the directory would leave running containers on the old one. So
the overlay works like a Kubernetes atomic writer: each staging builds a complete
generation under ``.nvml-mock/``, then one ``rename`` of the ``current`` symlink switches
every entry at once, and the top-level entries (``lib``, ``bin``, ``config``, ``dev``,
``cdi``, ``imex``, ``runtime``) are relative symlinks through ``current``::

    DIR/lib -> .nvml-mock/current/lib          DIR/.nvml-mock/current -> gen-<id>
    DIR/.nvml-mock/gen-<id>/{lib,bin,config,dev,cdi,imex,runtime -> ../runtime-<fingerprint>}
    DIR/.nvml-mock/runtime-<fingerprint>/{bin/python3,lib/...}
    DIR/usr/, DIR/proc/, DIR/sys/              real directories, changed file by file

So DIR is a driver root (:mod:`nvml_mock_node.driver_root`): ``usr/lib64``, ``usr/bin``,
``dev/``, and the kernel surfaces ``proc/`` and ``sys/``
(:mod:`nvml_mock_node.driver_surfaces`). Those three are real directories, not links
through ``current``: tools that take a driver root resolve every link and name what they
find in the paths they give containers (a generation's name would leak there), and
containers get ``proc/`` and ``sys/`` by bind mounts, which hold the directory they were
made on. Their files are replaced one by one, each by a rename.

The Python runtime is the one large part; it is named by a fingerprint of what it is
built from and reused when that has not changed, so re-staging takes well under a second.
A lock outside the overlay (``nvml_mock_live.writers_lock``) serialises concurrent stagers of
the same directory; no reader of the overlay can take it.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Final

import nvml_mock_live as live
import yaml
from nvml_mock_cuda.errors import DriverNotBuiltError, RuntimeNotBuiltError
from nvml_mock_cuda.library import DRIVER_NAME, RUNTIME_DIR, driver_path, runtime_paths
from nvml_mock_engine._files import write_atomic
from nvml_mock_engine.config import EngineConfig
from nvml_mock_engine.errors import ConfigError, LiveLayerError, StageError
from nvml_mock_engine.library import LibraryNotBuiltError, library_path
from nvml_mock_engine.mig_layout import MigPlan
from nvml_mock_engine.mig_layout import apply as apply_mig
from nvml_mock_engine.render import RenderedState, render
from nvml_mock_engine.schema import GPU_KEYS, format_value
from nvml_mock_engine.settings import CHAR_MAJOR_MAX, IMEX_CHANNELS_DEFAULT, IMEX_CHANNELS_MAX
from nvml_mock_live.writers_lock import writers_of
from nvml_mock_protocol import hostgpu, names

from nvml_mock_node import driver_root, driver_surfaces, pci_sysfs, procfs
from nvml_mock_node.file_tree import FileTree, sync_tree

__all__ = [
    "CDI_SPEC_NAME",
    "DEVICE_SOURCE_ENV",
    "IMEX_AUTO_MAJORS",
    "TOOLS",
    "StageOptions",
    "StageReport",
    "built_library",
    "cdi_spec",
    "launcher_script",
    "proc_devices",
    "stage",
    "symlinked_root",
    "write_atomic",
]

logger = logging.getLogger(__name__)

STATE_DIR: Final = ".nvml-mock"
CDI_SPEC_NAME: Final = "nvml-mock.yaml"
CDI_VERSION: Final = "0.6.0"
DEVICE_SOURCE_ENV: Final = "NVML_MOCK_DEVICE_SOURCE"
NVIDIA_MAJOR: Final = 195
NVIDIACTL_MINOR: Final = 255
UVM_MAJOR: Final = 510
CONTROL_DEVICES: Final = (
    ("nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR),
    ("nvidia-uvm", UVM_MAJOR, 0),
    ("nvidia-uvm-tools", UVM_MAJOR, 1),
)
"""The driver's control nodes ``(name, major, minor)``, beside one ``nvidia<i>`` per GPU."""
IMEX_AUTO_MAJORS: Final = range(240, 255)
"""Where the IMEX channels' major is chosen: Linux's character majors for local and
experimental use, which no in-tree driver claims. The kernel hands out dynamic majors
from 254 downwards, so the lowest free one is the least likely to be taken later."""
PROC_DEVICES_NAMES: Final = ((NVIDIA_MAJOR, "nvidia-frontend"), (UVM_MAJOR, "nvidia-uvm"))
"""The driver majors ``imex/proc-devices`` lists beside the channels'."""
TOOLS: Final = {
    "nvidia-smi": "nvml_mock_smi",
    "check-fabric": "check_fabric",
    "nvml-mock-surfaces-hook": "nvml_mock_node.surfaces_hook",
}
"""Launchers in ``bin/`` and the module each runs (the surfaces hook is run by container
runtimes on the host, from the overlay's host path)."""
ENTRIES: Final = (
    names.OVERLAY_LIB_DIR,
    names.OVERLAY_BIN_DIR,
    names.OVERLAY_CONFIG_DIR,
    names.OVERLAY_DEV_DIR,
    names.OVERLAY_CDI_DIR,
    names.OVERLAY_IMEX_DIR,
    names.OVERLAY_RUNTIME_DIR,
)
DRIVER_DIRS: Final = (driver_root.DRIVER_USR_DIR, driver_surfaces.PROC_DIR, driver_surfaces.SYS_DIR)
"""The driver root's real directories in DIR (not generation links)."""
CAPS_DIR: Final = "nvidia-caps"


class _PlainDumper(yaml.SafeDumper):
    """Writes shared nodes in full: CDI specs are read by many parsers, not all YAML-complete."""

    def ignore_aliases(self, data: object) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class StageOptions:
    """How to stage, beyond what to render."""

    devices: bool = True
    """Create mock device nodes under ``dev/`` (needs CAP_MKNOD; skipped with a warning).

    Refused on a node with a real NVIDIA driver (:mod:`nvml_mock_protocol.hostgpu`): the
    mock nodes carry the real majors, so there they would be the real GPUs. The rest of
    the overlay is still staged and :attr:`StageReport.devices_refused` says why."""
    mount_path: str = names.OVERLAY_MOUNT_PATH
    """Where containers see the overlay (used in the launchers' fallback)."""
    host_path: str | None = None
    """Where the host sees the overlay, for the CDI spec's device ``hostPath`` (default: DIR)."""
    library: Path | None = None
    """The mock library to install (default: the one built into this package)."""
    runtime: bool = True
    """Build or reuse the Python runtime (tests of the other parts may skip it)."""
    imex_channels: int = IMEX_CHANNELS_DEFAULT
    """IMEX channel nodes ``dev/nvidia-caps-imex-channels/channel0..N-1`` and the
    substitute ``imex/proc-devices`` naming their major; 0 stages neither.

    Device nodes like the GPUs': none with ``devices=False``, refused on a node with a
    real driver (:attr:`StageReport.imex_refused`), and without CAP_MKNOD the nodes are
    skipped with a warning while ``proc-devices`` is still written."""
    imex_major: int | None = None
    """The channels' character major; None takes the first major in :data:`IMEX_AUTO_MAJORS`
    that the node's ``/proc/devices`` does not list. A listed major is refused."""
    mig: MigPlan | None = None
    """A MIG layout to make once the live layer is in place (through the staged library);
    None leaves the node's MIG layout as it is."""
    driver_root: bool = True
    """Lay the overlay out as a driver root: ``usr/lib64``, ``usr/bin`` and the kernel
    surfaces ``proc/`` and ``sys/``. Refused on a node with a real NVIDIA driver (they would
    shadow its files): :attr:`StageReport.driver_root_refused` says why."""


@dataclass(frozen=True, slots=True)
class StageReport:
    """What a staging did."""

    generation: Path
    runtime_reused: bool
    devices_created: bool
    seconds: float
    live_created: bool = False
    """A fresh live layer was written (first staging, or the GPUs changed); False when the
    node's live layer was kept, with its values."""
    warnings: tuple[str, ...] = field(default=())
    devices_refused: str | None = None
    """Why device nodes were asked for and not created (a real driver); the CLI exits 1."""
    imex_channels_created: int = 0
    """IMEX channel nodes created under ``dev/nvidia-caps-imex-channels/``."""
    imex_major: int | None = None
    """The channels' major, as ``imex/proc-devices`` lists it; None when no file was written."""
    imex_refused: str | None = None
    """Why IMEX channels were asked for and not staged (a real driver); the CLI exits 1."""
    driver_root_refused: str | None = None
    """Why the driver root was asked for and not laid out (a real driver); the CLI exits 1."""
    caps_major: int | None = None
    """The ``nvidia-caps`` major ``proc/devices`` lists; None without a driver root."""


def built_library() -> Path:
    """The package's built ``libnvidia-ml.so.1``; ``StageError`` says how to build it if absent."""
    try:
        return library_path()
    except LibraryNotBuiltError as exc:
        raise StageError(str(exc)) from exc


def built_cuda_driver() -> Path:
    """nvml-mock-cuda's built ``libcuda.so.1``; ``StageError`` says how to build it if absent."""
    try:
        return driver_path()
    except DriverNotBuiltError as exc:
        raise StageError(str(exc)) from exc


def built_cuda_runtimes() -> tuple[Path, ...]:
    """nvml-mock-cuda's built runtime work-alikes (``libcudart.so.13``, ``.12``); ``StageError``
    says how to build them if absent."""
    try:
        return runtime_paths()
    except RuntimeNotBuiltError as exc:
        raise StageError(str(exc)) from exc


def proc_devices(imex_major: int) -> str:
    """The substitute ``/proc/devices`` text: the NVIDIA majors the staging uses, as Linux
    formats the file (``%3d name`` lines by major, a blank line, an empty block section)."""
    entries = sorted((*PROC_DEVICES_NAMES, (imex_major, names.IMEX_CHANNELS_DIR)))
    lines = "".join(f"{major:3d} {name}\n" for major, name in entries)
    return f"Character devices:\n{lines}\nBlock devices:\n"


def cdi_spec(
    state: RenderedState,
    host_dev: str | None,
    mig_devices: Sequence[Sequence[str]] = (),
) -> dict[str, object]:
    """The CDI spec for a rendered node's devices: one per index and per UUID, plus ``all``.

    *mig_devices* holds the UUIDs of each GPU's MIG devices (by GPU index, in MIG device
    index order, as :func:`nvml_mock_engine.mig_layout.apply` lists them); each gets the two
    names ``nvidia-ctk cdi generate`` gives a MIG device, ``<gpu>:<mig>`` and its ``MIG-``
    UUID, with its parent GPU's device node.

    Device nodes carry their type and numbers, so a runtime can create them even where
    the host has none; ``hostPath`` is set only when the mock nodes exist under ``dev/``.
    """

    def node(name: str, major: int, minor: int) -> dict[str, object]:
        entry: dict[str, object] = {
            "path": f"/dev/{name}",
            "type": "c",
            "major": major,
            "minor": minor,
            "permissions": "rw",
        }
        if host_dev is not None:
            entry["hostPath"] = f"{host_dev}/{name}"
        return entry

    gpu_nodes = [node(f"nvidia{i}", NVIDIA_MAJOR, i) for i in range(len(state.gpus))]
    devices: list[dict[str, object]] = []
    for index, gpu in enumerate(state.gpus):
        for device_name in (str(index), str(gpu["uuid"])):
            devices.append(
                {"name": device_name, "containerEdits": {"deviceNodes": [gpu_nodes[index]]}}
            )
    for index, uuids in enumerate(mig_devices[: len(gpu_nodes)]):
        for mig_index, uuid in enumerate(uuids):
            for device_name in (f"{index}:{mig_index}", uuid):
                devices.append(
                    {"name": device_name, "containerEdits": {"deviceNodes": [gpu_nodes[index]]}}
                )
    devices.append({"name": "all", "containerEdits": {"deviceNodes": gpu_nodes}})
    return {
        "cdiVersion": CDI_VERSION,
        "kind": names.CDI_KIND,
        "devices": devices,
        "containerEdits": {
            "env": [f"{DEVICE_SOURCE_ENV}=cdi"],
            "deviceNodes": [node(*control) for control in CONTROL_DEVICES],
        },
    }


def stage(
    directory: Path, config: EngineConfig, options: StageOptions | None = None
) -> StageReport:
    """Stage the overlay for *config* into *directory*; safe to repeat, switches atomically."""
    options = options or StageOptions()
    started = time.monotonic()
    directory = directory.absolute()
    if directory.is_dir():
        _check_ours(directory)
    library = options.library or built_library()
    if not library.is_file():
        raise StageError(f"library {library} does not exist")
    cuda = built_cuda_driver()
    cuda_runtimes = built_cuda_runtimes()
    state = render(config)
    state_text = state.text()
    library_name = driver_root.library_file_name(config.driver_version)
    # Decided before anything is written: a major that cannot be used leaves the overlay as it was.
    # Channels are device nodes: none without ``devices``, refused where the GPU nodes are.
    if not 0 <= options.imex_channels <= IMEX_CHANNELS_MAX:
        raise StageError(
            f"IMEX channel count {options.imex_channels} is outside 0..{IMEX_CHANNELS_MAX}"
        )
    driver = hostgpu.detect_from_environ() if options.devices or options.driver_root else None
    refused = _devices_refused(driver) if options.devices else None
    root_refused = _driver_root_refused(driver) if options.driver_root else None
    want_root = options.driver_root and root_refused is None
    channels_asked = options.devices and options.imex_channels > 0
    imex_refused = _imex_refused(driver) if channels_asked else None
    imex_major = _imex_major(options) if channels_asked and refused is None else None
    host = _host_proc() if want_root else None
    caps_major = _caps_major(host[0], imex_major) if host is not None else None
    directory.mkdir(parents=True, exist_ok=True)
    state_root = directory / STATE_DIR
    state_root.mkdir(exist_ok=True)
    warnings: list[str] = []
    with _locked(directory):
        generation = Path(tempfile.mkdtemp(prefix="gen-", dir=state_root))
        try:
            generation.chmod(0o755)
            runtime_name, reused = _ensure_runtime(state_root) if options.runtime else (None, False)
            _populate(
                generation,
                options=options,
                library=library,
                cuda=cuda,
                cuda_runtimes=cuda_runtimes,
                state_text=state_text,
                runtime=state_root / runtime_name if runtime_name else None,
            )
            live_created = _ensure_live(state_root, state)
            mig_devices: tuple[tuple[str, ...], ...] = ()
            if options.mig is not None:
                mig_devices = apply_mig(
                    options.mig,
                    generation / names.OVERLAY_LIB_DIR / names.LIBRARY_NAME,
                    generation / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME,
                )
            devices = (
                options.devices
                and refused is None
                and _make_devices(generation / "dev", config.count, warnings)
            )
            channels = 0
            if imex_major is not None:
                text = proc_devices(imex_major)
                write_atomic(
                    generation / names.OVERLAY_IMEX_DIR / names.IMEX_PROC_DEVICES_FILE,
                    text.encode(),
                )
                channels = _make_channels(
                    generation / names.OVERLAY_DEV_DIR / names.IMEX_CHANNELS_DIR,
                    imex_major,
                    options.imex_channels,
                    warnings,
                )
            surfaces: tuple[FileTree, FileTree] | None = None
            if host is not None and caps_major is not None:
                surfaces = _surfaces(
                    state,
                    config=config,
                    options=options,
                    state_root=state_root,
                    host=host,
                    caps_major=caps_major,
                    imex_major=imex_major,
                )
                if devices:
                    _make_caps(
                        generation / names.OVERLAY_DEV_DIR / CAPS_DIR,
                        caps_major,
                        config.count,
                        warnings,
                    )
            host_dev = (
                f"{options.host_path or directory}/{names.OVERLAY_DEV_DIR}" if devices else None
            )
            spec = cdi_spec(state, host_dev, mig_devices)
            cdi = yaml.dump(spec, Dumper=_PlainDumper, sort_keys=False)
            write_atomic(generation / names.OVERLAY_CDI_DIR / CDI_SPEC_NAME, cdi.encode())
            _check_tools(warnings)
            if surfaces is not None:
                warnings.extend(symlinked_root(directory, options.host_path))
            _sync_driver_root(
                directory,
                surfaces,
                usr=_usr_tree(
                    library,
                    cuda,
                    library_name,
                    state_root / runtime_name if runtime_name else None,
                    options.mount_path,
                )
                if surfaces is not None
                else None,
            )
            previous = _switch(directory, state_root, generation)
        except BaseException:
            if _current(state_root) != generation.name:
                shutil.rmtree(generation, ignore_errors=True)
            raise
        _collect(state_root, {generation.name, *([previous] if previous else [])})
    return StageReport(
        generation=generation,
        runtime_reused=reused,
        devices_created=devices,
        live_created=live_created,
        seconds=time.monotonic() - started,
        warnings=tuple(warnings),
        devices_refused=refused,
        imex_channels_created=channels,
        imex_major=imex_major,
        imex_refused=imex_refused,
        driver_root_refused=root_refused,
        caps_major=caps_major,
    )


def _driver_root_refused(driver: hostgpu.HostDriver | None) -> str | None:
    if driver is None or not driver.present:
        return None
    return (
        f"driver root refused: {driver.reason}, and the mock's usr/lib64, proc/ and sys/ "
        "would shadow the real driver's files; the rest of the overlay is staged without them"
    )


def _proc_root() -> str:
    return os.environ.get(hostgpu.ENV_HOST_PROC_ROOT) or hostgpu.DEFAULT_PROC_ROOT


def _host_proc() -> tuple[dict[str, list[tuple[int, str]]], list[str]]:
    """The node's own ``/proc/devices`` sections and ``/proc/modules`` lines, which the staged
    copies keep beside the driver's (a kernel without modules has no ``/proc/modules``)."""
    root = _proc_root()
    sections = _device_sections(os.path.join(root, "devices"))
    try:
        text = _read_small(os.path.join(root, "modules"))
    except FileNotFoundError:
        text = ""
    modules = [line for line in text.splitlines() if line.strip()]
    return sections, modules


def _read_small(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StageError(f"{path} is not a file")
        return os.read(fd, hostgpu.READ_LIMIT).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _device_sections(path: str) -> dict[str, list[tuple[int, str]]]:
    """The node's ``/proc/devices`` as ``(major, name)`` per section; a major may repeat
    (``4 tty`` and ``4 ttyS``)."""
    try:
        text = _read_small(path)
    except OSError as exc:
        raise StageError(
            f"cannot lay out proc/devices: cannot read {path}: {exc.strerror}"
        ) from None
    sections: dict[str, list[tuple[int, str]]] = {"character": [], "block": []}
    current: list[tuple[int, str]] | None = None
    for line in text.splitlines():
        if line.endswith(":"):
            current = sections.get(line.strip().lower().split(" ", 1)[0])
            continue
        parts = line.split()
        if current is not None and len(parts) == 2 and parts[0].isdigit():
            current.append((int(parts[0]), parts[1]))
    return sections


CAPS_AUTO_MAJORS: Final = range(509, 383, -1)
"""Where the ``nvidia-caps`` major is chosen: Linux's extended dynamic majors (384..511),
from the top down as the kernel hands them out, below the UVM major."""


def _caps_major(host: Mapping[str, Sequence[tuple[int, str]]], imex_major: int | None) -> int:
    """The ``nvidia-caps`` major: the first of :data:`CAPS_AUTO_MAJORS` the node does not
    list and the driver's other nodes do not use."""
    taken = {
        *(m for m, _ in host.get("character", ())),
        *(m for m, _ in PROC_DEVICES_NAMES),
        imex_major,
    }
    for major in CAPS_AUTO_MAJORS:
        if major not in taken:
            return major
    raise StageError(
        f"no free character major for nvidia-caps: {_proc_root()}/devices lists every major "
        f"in {CAPS_AUTO_MAJORS[-1]}..{CAPS_AUTO_MAJORS[0]}"
    )


def _surfaces(
    state: RenderedState,
    *,
    config: EngineConfig,
    options: StageOptions,
    state_root: Path,
    host: tuple[Mapping[str, Sequence[tuple[int, str]]], Sequence[str]],
    caps_major: int,
    imex_major: int | None,
) -> tuple[FileTree, FileTree]:
    """The ``proc/`` and ``sys/`` trees of the driver root, in memory: nothing is written
    until the whole overlay is ready. The MIG capability files follow the live layer now."""
    gpus = []
    pci = []
    for index, gpu in enumerate(state.gpus):
        try:
            device_id = gpu["pci_device_id"]
            subsystem_id = gpu["pci_subsystem_id"]
        except KeyError as exc:
            raise ConfigError(
                f"gpus[{index}].{exc.args[0]}", "required for the PCI sysfs tree"
            ) from None
        assert isinstance(device_id, int) and isinstance(subsystem_id, int)
        if device_id & 0xFFFF != 0x10DE:
            raise ConfigError(
                f"gpus[{index}].pci_device_id",
                f"0x{device_id:08X} does not end in NVIDIA's vendor id 10DE (device << 16 | 10DE)",
            )
        gpus.append(
            procfs.ProcGpu(
                minor=int(str(gpu["minor_number"])),
                bus_id=str(gpu["pci_bus_id"]),
                name=str(gpu["name"]),
                uuid=str(gpu["uuid"]),
                vbios=str(gpu.get("vbios_version", "")),
            )
        )
        pci.append(
            pci_sysfs.PciGpu(
                bus_id=str(gpu["pci_bus_id"]),
                device_id=device_id,
                subsystem_id=subsystem_id,
                pci_class=config.profile.pci_class,
                numa_node=int(str(gpu.get("numa_node", -1))),
                cpu_list=str(gpu["cpu_affinity"]),
                max_gen=int(str(gpu["pcie_max_gen"])),
                max_width=int(str(gpu["pcie_max_width"])),
                cur_gen=int(str(gpu["pcie_cur_gen"])),
                cur_width=int(str(gpu["pcie_cur_width"])),
                bar1_bytes=int(str(gpu["bar1_total_bytes"])),
            )
        )
    majors = procfs.DriverMajors(
        frontend=NVIDIA_MAJOR, uvm=UVM_MAJOR, caps=caps_major, imex_channels=imex_major
    )
    mig = driver_surfaces.read_mig_layout(state_root / live.LIVE_FILE_NAME, len(gpus))
    proc = procfs.proc_tree(
        driver_version=config.driver_version,
        gpus=gpus,
        majors=majors,
        imex_channels=options.imex_channels,
        mig=mig,
        host_devices=host[0],
        host_modules=host[1],
    )
    return proc, pci_sysfs.sys_tree(pci, config.driver_version, config.profile.machine)


def _devices_refused(driver: hostgpu.HostDriver | None) -> str | None:
    if driver is None or not driver.present:
        return None
    return (
        f"mock device nodes refused: {driver.reason}, and the mock's device numbers would be "
        "the real GPUs; the rest of the overlay is staged, dev/ stays empty and the CDI spec "
        "names no hostPath"
    )


def _imex_refused(driver: hostgpu.HostDriver | None) -> str | None:
    if driver is None or not driver.present:
        return None
    return (
        f"IMEX channel nodes refused: {driver.reason}, and a channel major of the mock's "
        f"could be the real driver's; dev/{names.IMEX_CHANNELS_DIR}/ is not created and "
        f"{names.OVERLAY_IMEX_DIR}/ holds no {names.IMEX_PROC_DEVICES_FILE}"
    )


def _imex_major(options: StageOptions) -> int:
    """The IMEX channels' major for *options*, checked against the node's ``/proc/devices``.

    A major the node's kernel lists belongs to a real driver (``1`` is ``mem``: ``channel1``
    would be ``/dev/mem``), and the mock's own GPU majors would alias its GPU nodes, so
    both are refused with a :class:`StageError`, as is an auto range with nothing free.
    """
    wanted = options.imex_major
    if wanted is not None and not 1 <= wanted <= CHAR_MAJOR_MAX:
        raise StageError(f"IMEX channel major {wanted} is outside 1..{CHAR_MAJOR_MAX}")
    path = os.path.join(
        os.environ.get(hostgpu.ENV_HOST_PROC_ROOT) or hostgpu.DEFAULT_PROC_ROOT, "devices"
    )
    taken = _character_majors(path)
    own = {major: name for major, name in PROC_DEVICES_NAMES}
    if wanted is not None:
        if wanted in own:
            raise StageError(
                f"IMEX channel major {wanted} (--imex-major) is the mock's {own[wanted]} major; "
                "give a major of its own"
            )
        if wanted in taken:
            raise StageError(
                f"IMEX channel major {wanted} (--imex-major) is listed in {path} as "
                f"{taken[wanted]!r}: channel nodes with it would reach that driver's devices; "
                "give a major the node does not list"
            )
        return wanted
    for major in IMEX_AUTO_MAJORS:
        if major not in taken:
            return major
    first, last = IMEX_AUTO_MAJORS[0], IMEX_AUTO_MAJORS[-1]
    raise StageError(
        f"no free character major for the IMEX channels: {path} lists every major in "
        f"{first}..{last}; give one the node does not list with --imex-major, or stage no "
        "channels with --imex-channels 0"
    )


def _character_majors(path: str) -> dict[int, str]:
    """The character majors ``/proc/devices`` at *path* lists, with their drivers' names."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StageError(f"cannot choose the IMEX channel major: {path} is not a file")
            text = os.read(fd, hostgpu.READ_LIMIT).decode("utf-8", "replace")
        finally:
            os.close(fd)
    except OSError as exc:
        raise StageError(
            f"cannot choose the IMEX channel major: cannot read {path}: {exc.strerror}"
        ) from None
    majors: dict[int, str] = {}
    in_character = False
    for line in text.splitlines():
        if line.endswith(":"):
            in_character = line.strip().lower() == "character devices:"
            continue
        parts = line.split()
        if in_character and len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(int(parts[0]), parts[1])
    return majors


def _ensure_live(state_root: Path, state: RenderedState) -> bool:
    """Keep the node's live layer if it follows the same GPUs, else write a fresh one."""
    board = [
        live.BoardGpu(
            index, str(gpu["uuid"]), {k: format_value(GPU_KEYS[k], v) for k, v in gpu.items()}
        )
        for index, gpu in enumerate(state.gpus)
    ]
    try:
        return live.ensure(state_root / live.LIVE_FILE_NAME, board)
    except (LiveLayerError, OSError) as exc:
        raise StageError(f"{state_root / live.LIVE_FILE_NAME}: {exc}") from None


def _check_ours(directory: Path) -> None:
    if (directory / STATE_DIR).is_dir():
        return
    present = sorted(p.name for p in directory.iterdir())
    if present:
        raise StageError(
            f"{directory} is not empty ({', '.join(present[:5])}) and was not staged by "
            "nvml-mock-engine; give an empty or new directory"
        )


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Serialise stagers of *directory* with a lock outside the overlay (a ``lock`` file in
    ``.nvml-mock/`` could be held through any container's read-only mount, and hung every
    later ``stage``); see :mod:`nvml_mock_live.writers_lock`."""
    try:
        with writers_of("stage", directory):
            yield
    except LiveLayerError as exc:
        raise StageError(str(exc)) from None


def _ensure_runtime(state_root: Path) -> tuple[str, bool]:
    from nvml_mock_node import runtime

    source = runtime.runtime_source()
    name = f"runtime-{runtime.fingerprint(source)}"
    target = state_root / name
    if (target / "loader").is_file():
        return name, True
    building = Path(tempfile.mkdtemp(prefix=".build-", dir=state_root))
    try:
        shutil.rmtree(building)
        logger.info("building the overlay's Python runtime from %s", source.interpreter)
        runtime.build_runtime(building, source)
        building.chmod(0o755)
        os.replace(building, target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return name, False


def _populate(
    generation: Path,
    *,
    options: StageOptions,
    library: Path,
    cuda: Path,
    cuda_runtimes: tuple[Path, ...],
    state_text: str,
    runtime: Path | None,
) -> None:
    lib = generation / names.OVERLAY_LIB_DIR
    lib.mkdir()
    shutil.copy2(library, lib / names.LIBRARY_NAME)
    (lib / names.LIBRARY_NAME).chmod(0o755)
    (lib / "libnvidia-ml.so").symlink_to(names.LIBRARY_NAME)
    # the CUDA driver beside it: it loads the NVML library from its own directory
    shutil.copy2(cuda, lib / DRIVER_NAME)
    (lib / DRIVER_NAME).chmod(0o755)
    (lib / "libcuda.so").symlink_to(DRIVER_NAME)
    # the CUDA runtime work-alikes one level below: the NRI plugin preloads them into pods
    # that ask (PyTorch binds its runtime by RPATH), and they load ../libcuda.so.1
    runtimes = lib / RUNTIME_DIR
    runtimes.mkdir()
    for path in cuda_runtimes:
        shutil.copy2(path, runtimes / path.name)
        (runtimes / path.name).chmod(0o755)
    write_atomic(generation / names.OVERLAY_CONFIG_DIR / names.STATE_FILE_NAME, state_text.encode())
    # The live layer outlives generations (values survive a re-stage of the same GPUs): it
    # lives in the state root and each generation's config/ links to it.
    (generation / names.OVERLAY_CONFIG_DIR / live.LIVE_FILE_NAME).symlink_to(
        Path("..") / ".." / live.LIVE_FILE_NAME
    )
    (generation / names.OVERLAY_DEV_DIR).mkdir()
    (generation / names.OVERLAY_CDI_DIR).mkdir()
    (generation / names.OVERLAY_IMEX_DIR).mkdir()
    bin_dir = generation / names.OVERLAY_BIN_DIR
    bin_dir.mkdir()
    if runtime is None:
        return
    (generation / names.OVERLAY_RUNTIME_DIR).symlink_to(Path("..") / runtime.name)
    from nvml_mock_node.runtime import loader_name

    loader = loader_name(runtime)
    for tool, module in TOOLS.items():
        script = launcher_script(tool, module, loader=loader, mount_path=options.mount_path)
        write_atomic(bin_dir / tool, script.encode(), mode=0o755)


def _usr_tree(
    library: Path, cuda: Path, library_name: str, runtime: Path | None, mount_path: str
) -> FileTree:
    """The driver root's ``usr/``: the NVML and CUDA libraries under their versioned names, the
    tools of :data:`~nvml_mock_node.driver_root.DRIVER_TOOLS` (none without a runtime)."""
    launchers: dict[str, str] = {}
    if runtime is not None:
        from nvml_mock_node.runtime import loader_name

        loader = loader_name(runtime)
        launchers = {
            tool: launcher_script(tool, module, loader=loader, mount_path=mount_path)
            for tool, module in driver_root.DRIVER_TOOLS.items()
        }
    return driver_root.usr_tree(library.read_bytes(), library_name, launchers, cuda.read_bytes())


def _sync_driver_root(
    directory: Path, surfaces: tuple[FileTree, FileTree] | None, *, usr: FileTree | None
) -> None:
    """Bring DIR's ``usr/``, ``proc/`` and ``sys/`` to the new trees, or remove them when no
    driver root is staged (a real driver appeared, or ``--no-driver-root``)."""
    trees = dict(zip(DRIVER_DIRS, (usr, *(surfaces or (None, None))), strict=True))
    for name, tree in trees.items():
        path = directory / name
        if path.is_symlink():
            path.unlink()
        if tree is None:
            shutil.rmtree(path, ignore_errors=True)
        else:
            sync_tree(path, tree)


def launcher_script(tool: str, module: str, *, loader: str, mount_path: str) -> str:
    """The ``/bin/sh`` launcher that runs ``<module>.__main__`` on the overlay's runtime."""
    template = resources.files("nvml_mock_node").joinpath("launcher.sh.in").read_text("utf-8")
    return (
        template.replace("@TOOL@", tool)
        .replace("@MODULE@", module)
        .replace("@LOADER@", loader)
        .replace("@MOUNT_PATH@", mount_path)
    )


def _make_devices(dev: Path, count: int, warnings: list[str]) -> bool:
    nodes = [(f"nvidia{i}", NVIDIA_MAJOR, i) for i in range(count)]
    for name, major, minor in (*nodes, *CONTROL_DEVICES):
        path = dev / name
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            os.chmod(path, 0o666)
        except PermissionError as exc:
            for created in dev.iterdir():
                created.unlink()
            warnings.append(
                f"mock device nodes not created ({exc.strerror}: creating character devices "
                "needs root with CAP_MKNOD); dev/ stays empty and the CDI spec names no hostPath"
            )
            return False
    return True


def _make_caps(caps: Path, major: int, gpus: int, warnings: list[str]) -> None:
    """``nvidia-caps/nvidia-cap<minor>`` for the MIG config and monitor capabilities,
    fabric-imex-mgmt and every MIG capability of the node's GPUs (what ``nvidia-modprobe``
    makes on a real node as they are used)."""
    minors = [procfs.CONFIG_MINOR, procfs.MONITOR_MINOR, procfs.FABRIC_IMEX_MGMT_MINOR]
    for gpu in range(gpus):
        for gi in range(procfs.MIG_MAX_GI):
            minors.append(procfs.gi_minor(gpu, gi))
            minors += [procfs.ci_minor(gpu, gi, ci) for ci in range(procfs.MIG_MAX_CI)]
    caps.mkdir()
    for minor in minors:
        try:
            os.mknod(caps / f"nvidia-cap{minor}", stat.S_IFCHR | 0o444, os.makedev(major, minor))
        except PermissionError as exc:
            shutil.rmtree(caps)
            warnings.append(
                f"nvidia-caps nodes not created ({exc.strerror}: creating character devices "
                f"needs root with CAP_MKNOD); dev/{CAPS_DIR}/ is not created"
            )
            return


def _make_channels(channels: Path, major: int, count: int, warnings: list[str]) -> int:
    """Create ``channel0..count-1`` (c *major* i) in *channels*; 0, and no directory, if denied."""
    channels.mkdir()
    for minor in range(count):
        path = channels / f"channel{minor}"
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            os.chmod(path, 0o666)
        except PermissionError as exc:
            shutil.rmtree(channels)
            warnings.append(
                f"IMEX channel nodes not created ({exc.strerror}: creating character devices "
                f"needs root with CAP_MKNOD); dev/{names.IMEX_CHANNELS_DIR}/ is not created, "
                f"{names.OVERLAY_IMEX_DIR}/{names.IMEX_PROC_DEVICES_FILE} still names major {major}"
            )
            return 0
    return count


def symlinked_root(directory: Path, host_path: str | None = None) -> list[str]:
    """What is wrong with the driver root's path as users will give it: *directory*, and
    *host_path* (where the host sees it) when it can be looked at here, must name the
    directory itself, not a symlink to it or a path through one.

    NVIDIA's DRA driver and nvidia-ctk (their container toolkit's library lookup) resolve every
    library they find under the root to its real path, then strip the root *as given* from
    it: through a symlink the prefix never matches, and the CDI spec they write silently
    mounts no library. Staging works either way; the warning names the path to give."""
    found: list[str] = []
    for path in (str(directory), host_path):
        if path is None or not os.path.isabs(path) or not os.path.isdir(path):
            continue
        real = os.path.realpath(path)
        if real != os.path.normpath(path):
            found.append(
                f"the driver root {path} is reached through a symlink (the directory is "
                f"{real}): give {real} as the driver root (the DRA driver's "
                "nvidiaDriverRoot, nvidia-ctk's --driver-root); they resolve each library to "
                "its real path and keep only those under the root as given, so through the "
                "link they mount no library"
            )
    return found


def _check_tools(warnings: list[str]) -> None:
    import importlib.util

    for tool, module in TOOLS.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            warnings.append(f"bin/{tool} staged, but module {module} is not installed here")


def _current(state_root: Path) -> str | None:
    current = state_root / "current"
    return os.readlink(current) if current.is_symlink() else None


def _switch(directory: Path, state_root: Path, generation: Path) -> str | None:
    """Point ``current`` at *generation*; returns the generation it pointed at before."""
    for entry in ENTRIES:
        link = directory / entry
        if link.exists() and not link.is_symlink():
            raise StageError(f"{link} is not the overlay's symlink; move it away and stage again")
    previous = _current(state_root)
    pending = state_root / "current.new"
    pending.unlink(missing_ok=True)
    pending.symlink_to(generation.name)
    os.replace(pending, state_root / "current")
    for entry in ENTRIES:
        link = directory / entry
        target = Path(STATE_DIR) / "current" / entry
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        staging = directory / f".{entry}.new"
        staging.unlink(missing_ok=True)
        staging.symlink_to(target)
        os.replace(staging, link)
    return previous


def _collect(state_root: Path, keep: set[str]) -> None:
    """Remove generations older than the previous one, and runtimes neither of them uses.

    The previous generation survives one more staging: a process that resolved its paths
    just before the switch (a library between ``dlopen`` and ``nvmlInit``, an interpreter
    still importing from its runtime) finishes on it.
    """
    kept_runtimes = set()
    for name in keep:
        link = state_root / name / names.OVERLAY_RUNTIME_DIR
        if link.is_symlink():
            kept_runtimes.add(Path(os.readlink(link)).name)
    for entry in state_root.iterdir():
        name = entry.name
        stale_gen = name.startswith("gen-") and name not in keep
        stale_runtime = name.startswith("runtime-") and name not in kept_runtimes
        stale_build = name.startswith(".build-")
        if (stale_gen or stale_runtime or stale_build) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
