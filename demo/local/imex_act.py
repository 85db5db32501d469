"""The local demo's IMEX act: two IMEX daemons (the work-alike NVIDIA's compute-domain daemon
runs as ``nvidia-imex`` from the driver root) on two simulated nodes, each on a loopback
address of its own, with one config file and node list, as the DRA driver writes them.

Both reach READY (``nvidia-imex-ctl -q``, the compute-domain daemon's probe of its own
daemon) and their domain UP (``-N``); the second node's daemon is killed and the first reports
its domain degraded (``-N`` says ``Domain State: DEGRADED``) while its own ``-q`` stays
READY, as on a real node. Each daemon takes its clique from the topology service, as a real
one takes it from its node's GPUs.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEGRADED_WITHIN = 5.0


@dataclass
class ImexRow:
    """One line of the IMEX summary."""

    act: str
    node: str
    address: str
    state: str
    verdict: str


def _free(addresses: Sequence[str], port: int) -> bool:
    for address in addresses:
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                return False
    return True


def pick_addresses() -> tuple[list[str], int]:
    """Two loopback addresses of a random 127.x.y.0/24 and a port free on both (the peer
    port; the command port is the next-but-four, as NVIDIA's 50000 and 50005)."""
    rng = random.Random()
    for _ in range(50):
        base = f"127.{rng.randint(1, 254)}.{rng.randint(1, 254)}"
        addresses = [f"{base}.1", f"{base}.2"]
        port = rng.randint(20000, 45000)
        if _free(addresses, port) and _free(addresses, port + 5):
            return addresses, port
    raise RuntimeError("no free loopback port for the IMEX daemons")


def tool(overlay: Path, name: str) -> list[str]:
    """The driver root's launcher of *name* when staged, else the same module here."""
    staged = overlay / "usr" / "bin" / name
    if staged.is_file() and os.access(staged, os.X_OK) and (overlay / "runtime").exists():
        return [str(staged)]
    module = "nvml_mock_imex.imexd" if name == "nvidia-imex" else "nvml_mock_imex.imexctl"
    return [sys.executable, "-m", module]


def write_config(root: Path, addresses: Sequence[str], port: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    nodes = root / "nodes.cfg"
    nodes.write_text("".join(f"{a}\n" for a in addresses))
    config = root / "imexd.cfg"
    config.write_text(
        "\n".join(
            [
                "LOG_LEVEL=4",
                "LOG_FILE_NAME=",
                "DAEMONIZE=0",
                "BIND_INTERFACE_IP=",
                f"SERVER_PORT={port}",
                f"IMEX_NODE_CONFIG_FILE={nodes}",
                "IMEX_WAIT_FOR_QUORUM=RECOVERY",
                "IMEX_CMD_ENABLED=1",
                "IMEX_CMD_BIND_INTERFACE_IP=",
                f"IMEX_CMD_PORT={port + 5}",
                "",
            ]
        )
    )
    return config


async def _ctl(argv: list[str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 20)
    return proc.returncode or 0, out.decode(errors="replace")


async def run_imex_act(
    *,
    work: Path,
    overlay: Path,
    node_names: Sequence[str],
    topology_url: str | None,
    check: Callable[[bool, str], bool],
    say: Callable[[str], None],
) -> list[ImexRow]:
    """Run the act; its summary rows. *check* records an assertion of the demo."""
    addresses, port = pick_addresses()
    root = work / "imex"
    config = write_config(root, addresses, port)
    daemon, ctl = tool(overlay, "nvidia-imex"), tool(overlay, "nvidia-imex-ctl")
    say(f"  {len(addresses)} daemons ({' '.join(daemon)[-60:]}), one config {config}")
    procs: list[asyncio.subprocess.Process] = []
    rows: list[ImexRow] = []

    async def state(i: int) -> str:
        rc, out = await _ctl([*ctl, "-c", str(config), "-i", addresses[i], "-q"])
        return out.strip() if rc == 0 else "UNREACHABLE"

    async def node_status(i: int) -> tuple[str, str]:
        """Node *i*'s ``-N`` and the domain state it ends with."""
        _, text = await _ctl([*ctl, "-c", str(config), "-i", addresses[i], "-N"])
        domain = next((ln for ln in text.splitlines() if ln.startswith("Domain State:")), "")
        return text, domain.removeprefix("Domain State: ")

    try:
        for i, name in enumerate(node_names[:2]):
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NODE_NAME": name}
            if topology_url:
                env["NVML_MOCK_TOPOLOGY_URL"] = topology_url
            log = (work / "logs" / f"imex-{name}.log").open("wb")
            procs.append(
                await asyncio.create_subprocess_exec(
                    *daemon, "-c", str(config), stdout=log, stderr=log, env=env
                )
            )
            log.close()
            deadline = time.monotonic() + 20
            while await state(i) == "UNREACHABLE" and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        deadline = time.monotonic() + 20
        states, domains = ["", ""], ["", ""]
        while time.monotonic() < deadline:
            states = [await state(0), await state(1)]
            domains = [(await node_status(0))[1], (await node_status(1))[1]]
            if states == ["READY", "READY"] and domains == ["UP", "UP"]:
                break
            await asyncio.sleep(0.2)
        for i, name in enumerate(node_names[:2]):
            ok = check(
                states[i] == "READY" and domains[i] == "UP",
                f"{name}: nvidia-imex-ctl -q prints READY, -N says Domain State: UP",
            )
            rows.append(
                ImexRow(
                    "imex: up",
                    name,
                    addresses[i],
                    f"{states[i]}/{domains[i]}",
                    "PASS" if ok else "FAIL",
                )
            )
        say(f"  both daemons READY, their domain UP: {states} {domains}")
        victim = procs[1]
        say(f"  killing the IMEX daemon of {node_names[1]} ({addresses[1]})")
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
        killed = time.monotonic()
        text, domain = "", ""
        while time.monotonic() - killed < DEGRADED_WITHIN:
            text, domain = await node_status(0)
            if domain == "DEGRADED":
                break
            await asyncio.sleep(0.1)
        took = time.monotonic() - killed
        seen = await state(0)
        ok = check(
            seen == "READY" and domain == "DEGRADED",
            f"{node_names[0]}: domain degraded {took:.1f}s after its peer was killed, its own "
            f"daemon still {seen}",
        )
        say("  " + "\n  ".join(text.rstrip().splitlines()[-6:]))
        rows.append(
            ImexRow(
                "imex: peer killed",
                node_names[0],
                addresses[0],
                f"{seen}/{domain}",
                "PASS" if ok else "FAIL",
            )
        )
        rows.append(
            ImexRow("imex: peer killed", node_names[1], addresses[1], await state(1), "KILLED")
        )
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await proc.wait()
    return rows


def imex_table(rows: Sequence[ImexRow], say: Callable[[str], None]) -> None:
    """The IMEX summary: ACT, NODE, ADDRESS, STATE (``-q`` / the domain state), VERDICT."""
    table = [("ACT", "NODE", "ADDRESS", "-q/DOMAIN", "VERDICT")]
    table += [(r.act, r.node, r.address, r.state, r.verdict) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    for row in table:
        say("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
