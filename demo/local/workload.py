"""Create an ordinary "gpu-agent" workload on a simulated node and run its check for real.

The pod asks for no GPU, carries no MOCK_* env and no mounts. Its node's runtime sends
CreateContainer through the NRI plugin; what comes back is applied the way containerd
applies it: the final environment becomes the process environment, and each bind mount is
made in a private mount namespace (so the host sees nothing) before the workload's command
runs. The command is the seed's gpu-agent check: ``test -d /opt/nvml-mock``,
``nvidia-smi -L``, ``check-fabric``. A workload that opts in to IMEX channels (the pod
annotation) gets the channel device nodes the plugin added, made the way containerd makes
them (``mknod`` with the adjustment's numbers) in a ``dev`` directory of its own under the
demo's work directory, and its check adds ``check-fabric --imex`` on that directory.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shlex
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nvml_mock_protocol import names
from nvml_mock_protocol.nri import RuntimeDouble
from nvml_mock_protocol.nri import api_pb2 as api

WORKLOAD_NAMESPACE = "gpu-demo"
BASE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
_MARK = "@@check-fabric@@"
_ids = itertools.count(1)


def gpu_agent_check(mount_path: str, imex_dir: Path | None = None) -> str:
    """The workload's command: what the seed's gpu-agent DaemonSet runs; with *imex_dir*,
    ``check-fabric`` checks the IMEX channels there too, against the overlay's substitute
    ``proc-devices`` (a GPU-less node's ``/proc/devices`` names no NVIDIA major)."""
    imex = ""
    if imex_dir is not None:
        proc_devices = f"{mount_path}/{names.OVERLAY_IMEX_DIR}/{names.IMEX_PROC_DEVICES_FILE}"
        imex = f" --imex --imex-dir {shlex.quote(str(imex_dir))} --proc-devices {proc_devices}"
    return (
        f"test -d {mount_path} || {{ echo 'gpu-agent: {mount_path} is missing'; exit 10; }}\n"
        "nvidia-smi -L || exit 11\n"
        f"echo {_MARK}\n"
        f"exec check-fabric --json{imex}\n"
    )


@dataclass
class Isolation:
    """How mounts are applied: a private mount namespace, or (where none is permitted) the
    overlay's host path stands in for its mount path."""

    unshare: tuple[str, ...] | None
    reason: str = ""

    @classmethod
    async def probe(cls) -> Isolation:
        unshare = shutil.which("unshare")
        if unshare is None:
            return cls(None, "the unshare command (util-linux) is not installed")
        argv = (unshare, "--mount", "--propagation", "private")
        if os.geteuid() != 0:
            argv = (unshare, "--user", "--map-root-user", "--mount", "--propagation", "private")
        proc = await asyncio.create_subprocess_exec(
            *argv, "true", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        _, err = await proc.communicate()
        if proc.returncode != 0:
            return cls(None, err.decode(errors="replace").strip() or f"exit {proc.returncode}")
        return cls(argv)

    @property
    def how_to_enable(self) -> str:
        return (
            "run the demo as root, or allow unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1 / "
            "kernel.apparmor_restrict_unprivileged_userns=0) so `unshare -Urm` works"
        )


@dataclass
class Outcome:
    """What one workload saw."""

    node: str
    pod: str
    injected: bool
    env: dict[str, str]
    gpus: list[str] = field(default_factory=list)
    fabric: dict[str, object] | None = None
    exit_code: int | None = None
    output: str = ""
    pid: int | None = None
    imex_dir: Path | None = None
    """The workload's own channel directory, when the plugin gave it IMEX channels."""
    container_id: str = ""

    @property
    def clique(self) -> int | None:
        identity = (self.fabric or {}).get("identity")
        return int(identity["cliqueId"]) if isinstance(identity, dict) else None

    @property
    def cluster_uuid(self) -> str | None:
        identity = (self.fabric or {}).get("identity")
        return str(identity["clusterUuid"]) if isinstance(identity, dict) else None

    @property
    def fabric_verdict(self) -> str:
        return str((self.fabric or {}).get("verdict", "-"))

    @property
    def imex(self) -> dict[str, object] | None:
        """check-fabric's IMEX channel report, when the check ran."""
        report = (self.fabric or {}).get("imex")
        return report if isinstance(report, dict) else None


def describe_pod(
    node: str,
    name: str,
    extra_env: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> tuple[api.PodSandbox, api.Container]:
    """An ordinary pod: no GPU request, no mounts; no annotations and no MOCK_* env unless
    the act gives some (*annotations*, *extra_env*, as a pod author would write them)."""
    serial = next(_ids)
    pod = api.PodSandbox(
        id=f"pod-{serial:04d}",
        name=f"{name}-{node}",
        uid=f"00000000-0000-4000-8000-{serial:012d}",
        namespace=WORKLOAD_NAMESPACE,
        labels={"app": name},
        annotations=dict(annotations or {}),
    )
    container = api.Container(
        id=f"ctr-{serial:04d}",
        pod_sandbox_id=pod.id,
        name=name,
        args=["sh", "-c", "gpu-agent"],
        env=[
            *BASE_ENV,
            f"HOSTNAME={pod.name}",
            *(f"{k}={v}" for k, v in (extra_env or {}).items()),
        ],
    )
    return pod, container


def _mount_script(mounts: Sequence[api.Mount]) -> str:
    """Shell lines that apply the adjustment's bind mounts inside the private namespace."""
    lines: list[str] = []
    for mount in mounts:
        if mount.type != "bind" and "bind" not in mount.options and "rbind" not in mount.options:
            continue
        dest = shlex.quote(mount.destination)
        parent = shlex.quote(str(Path(mount.destination).parent))
        # A missing mount point gets a private tmpfs over its parent (the namespace's view
        # only), where an image would simply have the directory: nothing is written to the
        # host's file systems.
        lines.append(
            f"[ -d {dest} ] || {{ mount -t tmpfs -o mode=0755 workload {parent} && "
            f"mkdir -p {dest}; }} || exit 12"
        )
        flag = "--rbind" if "rbind" in mount.options else "--bind"
        lines.append(f"mount {flag} {shlex.quote(mount.source)} {dest}")
        extra = [opt for opt in mount.options if opt in ("ro", "nosuid", "nodev", "noexec")]
        if extra:
            lines.append(f"mount -o remount,bind,{','.join(extra)} {dest}")
    return "\n".join(lines)


def _parse(outcome: Outcome, stdout: str) -> None:
    before, _, after = stdout.partition(_MARK)
    outcome.gpus = [line for line in before.splitlines() if line.startswith("GPU ")]
    after = after.strip()
    if after:
        try:
            outcome.fabric = json.loads(after)
        except json.JSONDecodeError:
            outcome.fabric = {"verdict": "unparsable", "raw": after[:200]}


def make_channels(container: api.Container, workdir: Path) -> Path | None:
    """Make the IMEX channel nodes the adjustment added, as containerd makes a container's
    device nodes, in ``<workdir>/<container id>/dev/nvidia-caps-imex-channels``; None when
    it added none. The numbers are the plugin's; the demo only carries them out."""
    prefix = f"/dev/{names.IMEX_CHANNELS_DIR}/"
    channels = [d for d in container.linux.devices if d.path.startswith(prefix)]
    if not channels:
        return None
    target = workdir / container.id / "dev" / names.IMEX_CHANNELS_DIR
    target.mkdir(parents=True)
    for device in channels:
        mode = device.file_mode.value if device.HasField("file_mode") else 0o666
        path = target / device.path.removeprefix(prefix)
        os.mknod(path, stat.S_IFCHR | mode, os.makedev(device.major, device.minor))
        os.chmod(path, mode)
    return target


def _rewrite(env: Mapping[str, str], mount_path: str, overlay_host: Path) -> dict[str, str]:
    return {k: v.replace(mount_path, str(overlay_host)) for k, v in env.items()}


async def _run(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    return int(proc.returncode or 0), out.decode("utf-8", "replace")


async def create_and_run(
    runtime: RuntimeDouble,
    node: str,
    isolation: Isolation,
    overlay_host: Path,
    *,
    name: str = "gpu-agent",
    keep_running: bool = False,
    started: list[int] | None = None,
    mount_path: str = names.OVERLAY_MOUNT_PATH,
    extra_env: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    devices_dir: Path | None = None,
    command: str | None = None,
    log: Path | None = None,
) -> Outcome:
    """Create the workload through NRI, apply the adjustment, run the check.

    With ``keep_running`` the workload stays alive afterwards (its namespace and its
    environment fixed at creation), for ``recheck`` after the topology changes; its pid
    goes into ``started`` the moment it exists, so an interrupted demo can stop it.
    *command* replaces the gpu-agent check (shell text; the overlay's mount path in it is
    rewritten where no mount namespace is permitted); with *log*, the workload runs in the
    background, its output going to that file (the act reads it while it runs). With
    *devices_dir*, IMEX channels the plugin added are made there (``make_channels``) and
    checked.
    """
    pod, container = describe_pod(node, name, extra_env, annotations)
    runtime.add_pod(pod)
    result = await runtime.create_container(pod, container)
    env = result.env()
    injected = any(m.destination == mount_path for m in result.container.mounts)
    outcome = Outcome(node=node, pod=pod.name, injected=injected, env=env)
    outcome.container_id = result.container.id
    if devices_dir is not None:
        outcome.imex_dir = make_channels(result.container, devices_dir)
    check = command if command is not None else gpu_agent_check(mount_path, outcome.imex_dir)
    tail = "exec sleep 600" if keep_running else check
    if isolation.unshare is not None:
        script = _mount_script(result.container.mounts) + "\n" + tail
        argv: list[str] = [*isolation.unshare, "sh", "-c", script]
        run_env = env
    else:
        # Only an injected workload has the overlay; the others look where it would be.
        argv = ["sh", "-c", tail.replace(mount_path, str(overlay_host)) if injected else tail]
        run_env = _rewrite(env, mount_path, overlay_host) if injected else env
    if log is not None:
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *argv, env=dict(run_env), stdout=out, stderr=out, start_new_session=True
            )
        outcome.pid = proc.pid
        if started is not None:
            started.append(proc.pid)
        return outcome
    if keep_running:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=dict(run_env),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        outcome.pid = proc.pid
        if started is not None:
            started.append(proc.pid)
        await asyncio.sleep(0.2)  # let the mounts settle before anyone enters
        return await recheck(outcome, isolation, overlay_host, mount_path=mount_path)
    outcome.exit_code, outcome.output = await _run(argv, run_env, 60)
    _parse(outcome, outcome.output)
    return outcome


async def recheck(
    outcome: Outcome,
    isolation: Isolation,
    overlay_host: Path,
    *,
    mount_path: str = names.OVERLAY_MOUNT_PATH,
) -> Outcome:
    """Run the check again inside a running workload: its namespace, its creation-time env."""
    assert outcome.pid is not None
    environ = Path(f"/proc/{outcome.pid}/environ").read_bytes()
    env = dict(e.partition("=")[::2] for e in environ.decode().split("\0") if "=" in e)
    check = gpu_agent_check(mount_path, outcome.imex_dir)
    if isolation.unshare is not None:
        argv = ["nsenter", "-t", str(outcome.pid), "-m", *(["-U"] if os.geteuid() else [])]
        argv += ["sh", "-c", check]
    else:
        argv = [
            "sh",
            "-c",
            check.replace(mount_path, str(overlay_host)) if outcome.injected else check,
        ]
    again = Outcome(node=outcome.node, pod=outcome.pod, injected=outcome.injected, env=env)
    again.pid = outcome.pid
    again.imex_dir = outcome.imex_dir
    again.container_id = outcome.container_id
    again.exit_code, again.output = await _run(argv, env, 60)
    _parse(again, again.output)
    return again
