"""Record what NVIDIA's unmodified components publish on a mock node: the fixtures' source.

For one variant (a profile, optionally a MIG layout) the recorder stages a mock node with the
engine's own command, then runs the components the user supplies, each as it runs on a real
node: the device plugin against a kubelet registration socket (capacity counts every device it
lists, allocatable the healthy ones), GPU feature discovery once into a file, and the DRA
driver's kubelet plugins against a real API server, whose ResourceSlices are read back. Fixed
host paths the components read (the kubelet's device-plugin directory, ``/sys/bus/pci``) are
bind-mounted from the mock node in a private mount namespace, as the NRI plugin gives them to
containers. Then an Xid 79 goes to GPU 0 through ``nvml-mock-ctl`` and what changes is recorded
too. It builds nothing: the binaries come from ``--bin-dir``, and their Go build info is
written into the fixture.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

from nvml_mock_engine.config import resolve_config

from nvml_mock_kwok.buildinfo import read_build
from nvml_mock_kwok.errors import RecordError
from nvml_mock_kwok.identity import Fabric, Identity, node_identity
from nvml_mock_kwok.kube import Kube
from nvml_mock_kwok.kubelet import FakeKubelet
from nvml_mock_kwok.truth import (
    COMPONENTS,
    COMPUTE_DOMAIN_DRIVER,
    GPU_DRIVER,
    SCHEMA_VERSION,
    STRATEGIES,
)

__all__ = ["RECORD_FABRIC", "Recording", "component_versions", "record_variant"]

logger = logging.getLogger(__name__)

RECORD_FABRIC: Final = Fabric("5e6d0c1a-3b2f-4c7d-8e9f-0a1b2c3d4e5f", 3)
"""The clique a recorded fabric node sits in (any clique does: the generator rewrites it)."""
XID: Final = 79
DEVICE_PLUGIN_SOCKETS: Final = "/var/lib/kubelet/device-plugins"
SETTLE: Final = 3.0


@dataclass(frozen=True)
class Recording:
    """What one recording is asked to do."""

    profile: str
    node: str
    bin_dir: Path
    mig: str | None = None
    kube: Kube | None = None
    timeout: float = 60.0


def component_versions(bin_dir: Path, names: Sequence[str] = COMPONENTS) -> dict[str, Any]:
    """Each component's Go build info, as a fixture records it."""
    versions: dict[str, Any] = {}
    for name in names:
        build = read_build(bin_dir / name)
        versions[name] = {
            "module": build.module,
            "version": build.version,
            "revision": build.revision,
            "modified": build.modified,
        }
    return versions


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    if here.is_file():
        return str(here)
    found = shutil.which(name)
    if not found:
        raise RecordError(f"{name} is not installed (it comes with nvml-mock-engine)")
    return found


def _run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float) -> str:
    try:
        done = subprocess.run(
            list(argv),
            env=dict(env) if env else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RecordError(f"{argv[0]}: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RecordError(f"{Path(argv[0]).name} exited {done.returncode}: " + " | ".join(tail))
    return done.stdout


def _in_namespace(binds: Sequence[tuple[Path, str]], argv: Sequence[str]) -> list[str]:
    """``argv`` in a private mount namespace with each ``(source, target)`` bind-mounted."""
    script = []
    for position, (_, target) in enumerate(binds, start=1):
        script.append(f'mkdir -p {target} && mount --rbind "${position}" {target} && ')
    count = len(binds)
    script.append(f'shift {count} && exec "$@"')
    return [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        "".join(script),
        "sh",
        *(str(source) for source, _ in binds),
        *argv,
    ]


def _fabric_env(fabric: Fabric | None) -> dict[str, str]:
    if fabric is None:
        return {}
    return {
        "MOCK_FABRIC_CLUSTER_UUID": fabric.cluster_uuid,
        "MOCK_FABRIC_CLIQUE_ID": str(fabric.clique_id),
        "MOCK_FABRIC_DOMAIN": "recorded",
    }


@contextmanager
def _process(
    argv: Sequence[str], env: Mapping[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), env=dict(env), stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tail(log: Path) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-4:])
    except OSError:
        return ""


def _wait(what: str, probe: Callable[[], Any], timeout: float, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise RecordError(f"{what} did not appear within {timeout:.0f}s; log: {_tail(log)}")


class _Session:
    def __init__(self, rec: Recording, work: Path) -> None:
        self.rec = rec
        self.work = work
        self.overlay = work / "node"
        config = resolve_config(profile=rec.profile, node=rec.node)
        self.count = config.count
        self.fabric = RECORD_FABRIC if config.profile.fabric is not None else None
        self.identity = node_identity(rec.profile, rec.node, self.count, self.fabric)
        self.env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(self.overlay / "lib"),
            "NODE_NAME": rec.node,
            **_fabric_env(self.fabric),
        }

    def stage(self) -> None:
        argv = [
            _tool("nvml-mock-engine"),
            "stage",
            str(self.overlay),
            "--profile",
            self.rec.profile,
            "--node",
            self.rec.node,
        ]
        if self.rec.mig:
            argv += ["--mig", self.rec.mig]
        _run(argv, timeout=self.rec.timeout * 3)

    def _proc_binds(self) -> list[tuple[Path, str]]:
        """MIG devices' capability files, which the components read at the kernel's path."""
        if not self.rec.mig:
            return []
        return [(self.overlay / "proc" / "driver", "/proc/driver")]

    def xid(self, code: int, gpu: int) -> None:
        _run(
            [
                _tool("nvml-mock-ctl"),
                "--overlay-path",
                str(self.overlay),
                "xid",
                "-i",
                str(gpu),
                str(code),
            ],
            timeout=self.rec.timeout,
        )

    def reset(self) -> None:
        _run(
            [_tool("nvml-mock-ctl"), "--overlay-path", str(self.overlay), "reset"],
            timeout=self.rec.timeout,
        )

    def device_plugin(self, strategy: str, *, fault: bool) -> dict[str, Any]:
        sockets = self.work / f"dp-{strategy}"
        sockets.mkdir()
        argv = _in_namespace(
            [(sockets, DEVICE_PLUGIN_SOCKETS), *self._proc_binds()],
            [
                str(self.rec.bin_dir / "nvidia-device-plugin"),
                "--mig-strategy",
                strategy,
                "--fail-on-init-error=true",
                "--kubelet-socket",
                f"{DEVICE_PLUGIN_SOCKETS}/kubelet.sock",
            ],
        )
        log = self.work / f"device-plugin-{strategy}.log"
        result: dict[str, Any] = {}
        with FakeKubelet(sockets) as kubelet, _process(argv, self.env, log) as proc:
            try:
                listed = kubelet.wait(self.rec.timeout, settle=SETTLE)
            except RecordError as exc:
                raise RecordError(f"device plugin ({strategy}): {exc}; log: {_tail(log)}") from exc
            result["resources"] = {
                name: {"capacity": a.capacity, "allocatable": a.allocatable}
                for name, a in sorted(listed.items())
            }
            if fault:
                before = {n: a.allocatable for n, a in listed.items()}
                self.xid(XID, 0)
                changed = _wait(
                    "the device plugin's reaction to an Xid",
                    lambda: {n: a.allocatable for n, a in kubelet.snapshot().items()} != before,
                    self.rec.timeout,
                    log,
                )
                assert changed
                time.sleep(SETTLE)
                result["xid79"] = {
                    name: {"capacity": a.capacity, "allocatable": a.allocatable}
                    for name, a in sorted(kubelet.snapshot().items())
                }
                self.reset()
            if proc.poll() is not None:
                raise RecordError(f"the device plugin exited {proc.returncode}: {_tail(log)}")
        return result

    def gfd(self, strategy: str) -> dict[str, str]:
        out = self.work / f"gfd-{strategy}"
        argv = _in_namespace(
            [
                (self.overlay / "sys" / "bus" / "pci", "/sys/bus/pci"),
                (self.overlay / "sys" / "devices", "/sys/devices"),
                *self._proc_binds(),
            ],
            [
                str(self.rec.bin_dir / "gpu-feature-discovery"),
                # the staged machine name (GFD's default is the host's /sys/class/dmi)
                "--machine-type-file",
                str(self.overlay / "sys" / "class" / "dmi" / "id" / "product_name"),
                "--oneshot",
                "--no-timestamp",
                "--mig-strategy",
                strategy,
                "--output-file",
                str(out),
            ],
        )
        env = {**self.env, "GFD_USE_NODE_FEATURE_API": "false"}
        _run(argv, env=env, timeout=self.rec.timeout)
        labels: dict[str, str] = {}
        for line in out.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                labels[key] = value
        return dict(sorted(labels.items()))

    def _slices(self, kube: Kube, driver: str) -> list[dict[str, Any]]:
        items = kube.list(
            "/apis/resource.k8s.io/v1/resourceslices",
            field=f"spec.nodeName={self.rec.node},spec.driver={driver}",
        )
        return sorted(
            (_timeless(item["spec"]) for item in items),
            key=lambda spec: json.dumps(spec, sort_keys=True),
        )

    def dra(self, kube: Kube, binary: str, driver: str, *, fault: bool) -> dict[str, Any]:
        # short names: the plugin's socket path must fit a unix socket address (108 bytes)
        tag = "gpu" if binary == "gpu-kubelet-plugin" else "cd"
        plugins = self.work / f"{tag}-p"
        registry = self.work / f"{tag}-r"
        cdi = self.work / f"{tag}-cdi"
        for folder in (plugins, registry, cdi):
            folder.mkdir()
        kubeconfig = self.work / "kubeconfig"
        command = [
            str(self.rec.bin_dir / binary),
            "--node-name",
            self.rec.node,
            "--nvidia-driver-root",
            str(self.overlay),
            "--container-driver-root",
            str(self.overlay),
            "--cdi-root",
            str(cdi),
            "--kubelet-plugins-directory-path",
            str(plugins),
            "--kubelet-registrar-directory-path",
            str(registry),
            "--kubeconfig",
            str(kubeconfig),
            "--healthcheck-port",
            "-1",
            "--nvidia-cdi-hook-path",
            str(self.rec.bin_dir / "nvidia-cdi-hook"),
        ]
        if binary == "gpu-kubelet-plugin":
            # the image only goes into pod templates; nothing the plugin publishes names it
            command += [
                "--image-name",
                "registry.invalid/recorded:none",
                "--feature-gates",
                "NVMLDeviceHealthCheck=true",
            ]
        # pcieRoot comes from the PCI functions at the kernel's fixed path
        argv = _in_namespace(
            [
                (self.overlay / "sys" / "bus" / "pci", "/sys/bus/pci"),
                (self.overlay / "sys" / "devices", "/sys/devices"),
            ],
            command,
        )
        env = {**self.env, "ALT_PROC_DEVICES_PATH": str(self.overlay / "imex" / "proc-devices")}
        log = self.work / f"{binary}.log"
        result: dict[str, Any] = {}
        with _process(argv, env, log):
            result["slices"] = _wait(
                f"{binary}'s ResourceSlices",
                lambda: self._slices(kube, driver),
                self.rec.timeout,
                log,
            )
            time.sleep(SETTLE)
            result["slices"] = self._slices(kube, driver)
            if fault:
                self.xid(XID, 0)
                result["xid79"] = _wait(
                    f"{binary}'s reaction to an Xid",
                    lambda: (s := self._slices(kube, driver)) != result["slices"] and s,
                    self.rec.timeout,
                    log,
                )
                time.sleep(SETTLE)
                result["xid79"] = self._slices(kube, driver)
                self.reset()
        for item in kube.list(
            "/apis/resource.k8s.io/v1/resourceslices", field=f"spec.nodeName={self.rec.node}"
        ):
            kube.request(
                "DELETE",
                f"/apis/resource.k8s.io/v1/resourceslices/{item['metadata']['name']}",
                ok_missing=True,
            )
        return result


def _timeless(spec: dict[str, Any]) -> dict[str, Any]:
    """A slice spec in a canonical form: devices by name (the driver lists them in Go's map
    order, which differs from run to run), taints without ``timeAdded`` (when, not what: a
    fake node sets its own)."""
    for device in spec.get("devices") or ():
        for taint in device.get("taints") or ():
            taint.pop("timeAdded", None)
    if spec.get("devices"):
        spec["devices"] = sorted(spec["devices"], key=lambda d: str(d.get("name")))
    return spec


def _write_kubeconfig(kube: Kube, path: Path) -> None:
    creds = kube.credentials
    cluster: dict[str, Any] = {"server": creds.server}
    if creds.insecure:
        cluster["insecure-skip-tls-verify"] = True
    if creds.ca_file:
        cluster["certificate-authority"] = creds.ca_file
    user: dict[str, Any] = {}
    if creds.token:
        user["token"] = creds.token
    if creds.cert_file and creds.key_file:
        user["client-certificate"], user["client-key"] = creds.cert_file, creds.key_file
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "rec",
        "clusters": [{"name": "rec", "cluster": cluster}],
        "users": [{"name": "rec", "user": user}],
        "contexts": [{"name": "rec", "context": {"cluster": "rec", "user": "rec"}}],
    }
    path.write_text(json.dumps(doc))


def record_variant(rec: Recording) -> dict[str, Any]:
    """Record one variant; the fixture's JSON data."""
    strategies = STRATEGIES if rec.mig else ("none",)
    with tempfile.TemporaryDirectory(prefix="nmk-rec-") as tmp:
        session = _Session(rec, Path(tmp))
        session.stage()
        dp: dict[str, Any] = {}
        gfd: dict[str, Any] = {}
        faults: dict[str, Any] = {"xid79": {"gpu": 0}}
        for strategy in strategies:
            got = session.device_plugin(strategy, fault=strategy == "none")
            dp[strategy] = got["resources"]
            if "xid79" in got:
                faults["xid79"]["devicePlugin"] = got["xid79"]
            gfd[strategy] = session.gfd(strategy)
        names = ["nvidia-device-plugin", "gpu-feature-discovery"]
        slices: dict[str, Any] = {}
        # MIG devices' UUIDs come from the library's live layout, not from the node's
        # identity, so slices are recorded for whole GPUs only
        if rec.kube is not None and not rec.mig:
            _write_kubeconfig(rec.kube, Path(tmp) / "kubeconfig")
            _ensure_node(rec.kube, rec.node)
            got = session.dra(rec.kube, "gpu-kubelet-plugin", GPU_DRIVER, fault=True)
            slices[GPU_DRIVER] = got["slices"]
            faults["xid79"]["resourceSlices"] = {GPU_DRIVER: got["xid79"]}
            names.append("gpu-kubelet-plugin")
            if session.fabric is not None:
                got = session.dra(
                    rec.kube, "compute-domain-kubelet-plugin", COMPUTE_DOMAIN_DRIVER, fault=False
                )
                slices[COMPUTE_DOMAIN_DRIVER] = got["slices"]
                names.append("compute-domain-kubelet-plugin")
            rec.kube.request("DELETE", f"/api/v1/nodes/{rec.node}", ok_missing=True)
        return {
            "schemaVersion": SCHEMA_VERSION,
            "variant": variant_name(rec.profile, rec.mig),
            "profile": rec.profile,
            "gpuCount": session.count,
            "mig": rec.mig,
            "identity": session.identity.to_data(),
            "components": component_versions(rec.bin_dir, names),
            "recordedWith": {"nvml-mock-engine": version("nvml-mock-engine")},
            "devicePlugin": dp,
            "gfd": gfd,
            "resourceSlices": slices,
            "faults": faults,
        }


def variant_name(profile: str, mig: str | None) -> str:
    """A fixture's name: the profile, and its MIG layout when it has one."""
    return profile if not mig else f"{profile}-mig-{mig}"


def _ensure_node(kube: Kube, node: str) -> None:
    """The recorded node's Node object (the DRA driver's slices are owned by it)."""
    kube.apply(
        f"/api/v1/nodes/{node}",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
        },
    )


def identity_of(data: Mapping[str, Any]) -> Identity:
    """A fixture's recorded identity."""
    return Identity.from_data(data["identity"])
