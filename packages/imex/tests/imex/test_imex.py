"""The IMEX daemon work-alike as real processes on loopback addresses: four daemons of one
config reach READY, a killed or stopped peer shows in the others' node status and domain
state (their own ``-q`` stays READY) and recovers when it returns, a node of another clique
is not counted, a rebind in the topology service moves a daemon, a peer speaking garbage is
dropped, and bad input is refused with a clear error, never a hang."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from nvml_mock_imex import status as st
from nvml_mock_imex.config import parse_config
from nvml_mock_imex.errors import ImexConfigError, NodeListError
from nvml_mock_imex.nodes import parse_nodes
from nvml_mock_protocol.topology import parse_topology
from nvml_mock_topology.api import create_app
from nvml_mock_topology.store import TopologyStore
from nvml_mock_topology.testing import ThreadedServer

DEGRADED_WITHIN = 5.0
"""The issue's bound: a lost peer shows within this many seconds (a behaviour bound polled
for, not a speed measurement; bench/imex_degraded.py measures the time)."""


def _port_free(addresses: list[str], port: int) -> bool:
    for address in addresses:
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                return False
    return True


@dataclass
class Domain:
    """A node list of loopback addresses and one config file for all of its daemons."""

    root: Path
    addresses: list[str]
    port: int
    cmd_port: int
    procs: dict[int, subprocess.Popen[str]] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        return self.root / "imexd.cfg"

    @property
    def nodes(self) -> Path:
        return self.root / "nodes.cfg"

    def write(self, **extra: str) -> None:
        self.nodes.write_text("".join(f"{a}\n" for a in self.addresses))
        keys = {
            "LOG_LEVEL": "4",
            "LOG_FILE_NAME": "",
            "DAEMONIZE": "0",
            "BIND_INTERFACE_IP": "",
            "SERVER_PORT": str(self.port),
            "IMEX_NODE_CONFIG_FILE": str(self.nodes),
            "IMEX_WAIT_FOR_QUORUM": "RECOVERY",
            "IMEX_CMD_ENABLED": "1",
            "IMEX_CMD_BIND_INTERFACE_IP": "",
            "IMEX_CMD_PORT": str(self.cmd_port),
            **extra,
        }
        self.config.write_text(
            "# one config for every daemon\n" + "".join(f"{k}={v}\n" for k, v in keys.items())
        )

    def start(self, index: int, env: dict[str, str] | None = None) -> None:
        """Start the daemon that takes node *index* (the lower ones are running)."""
        log = (self.root / f"d{index}.log").open("a")
        self.procs[index] = subprocess.Popen(
            [sys.executable, "-m", "nvml_mock_imex.imexd", "-c", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})},
        )
        log.close()
        eventually(lambda: self.answers(index), what=f"daemon {index} answers")

    def log(self, index: int) -> str:
        return (self.root / f"d{index}.log").read_text()

    def ctl(self, index: int, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "nvml_mock_imex.imexctl",
                "-c",
                str(self.config),
                "-i",
                self.addresses[index],
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )

    def state(self, index: int) -> str:
        return self.ctl(index, "-q").stdout.strip()

    def answers(self, index: int) -> bool:
        return self.ctl(index, "-q").returncode == 0

    def status(self, index: int) -> dict[str, Any]:
        done = self.ctl(index, "-N", "-j")
        assert done.returncode == 0, done.stderr
        body: dict[str, Any] = json.loads(done.stdout)
        return body

    def link(self, index: int, to: int) -> str:
        """Node *index*'s connection to node *to*, as its ``-N -j`` names it."""
        return str(self.status(index)["nodes"][str(index)]["connections"][str(to)]["status"])

    def kill(self, index: int, signum: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(index)
        proc.send_signal(signum)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait(timeout=10)
        self.procs.clear()


def eventually(check: Callable[[], bool], *, within: float = 20.0, what: str = "") -> float:
    """Poll *check* until it holds; the seconds it took. Fails after *within* seconds."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > within:
            pytest.fail(f"not within {within}s: {what}")
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.fixture
def domain(tmp_path: Path) -> Iterator[Domain]:
    """Four loopback addresses of a random 127.x.y.0/24 and two free ports on all of them."""
    rng = random.Random()
    for _ in range(50):
        base = f"127.{rng.randint(1, 254)}.{rng.randint(1, 254)}"
        addresses = [f"{base}.{i}" for i in range(1, 6)]
        port = rng.randint(20000, 45000)
        if _port_free(addresses, port) and _port_free(addresses, port + 5):
            made = Domain(tmp_path, addresses[:4], port, port + 5)
            made.write()
            yield made
            made.stop_all()
            return
    pytest.skip("no free loopback ports")


def all_ready(domain: Domain, indices: list[int]) -> bool:
    return all(domain.state(i) == st.READY for i in indices)


def test_four_daemons_of_one_config_reach_ready(domain: Domain) -> None:
    for i in range(4):
        domain.start(i)
    eventually(lambda: domain_up(domain, [0, 1, 2, 3]), what="all UP")
    assert all_ready(domain, [0, 1, 2, 3])
    text = domain.ctl(2, "-N").stdout
    assert text.startswith(st.LEGEND)
    lines = text.splitlines()
    assert lines[lines.index("Nodes:") + 1].startswith(
        f"Node #0   - {domain.addresses[0]:<15} - READY"
    )
    assert " Nodes From\\To  0   1   2   3" in lines
    assert "       3        C   C   C   C" in lines
    assert lines[-1] == "Domain State: UP"
    body = domain.status(0)
    assert body["status"] == "UP"
    assert list(body) == ["nodes", "timestamp", "status"]  # NVIDIA's published layout
    nodes = body["nodes"]
    assert [n["host"] for n in nodes.values()] == domain.addresses
    assert nodes["1"]["connections"]["2"] == {
        "host": domain.addresses[2],
        "status": "CONNECTED",
        "changed": True,
    }
    assert {c["status"] for n in nodes.values() for c in n["connections"].values()} == {"CONNECTED"}


def lost(domain: Domain, index: int, node: int) -> bool:
    """Whether *index*'s ``-N -j`` shows *node* lost and its domain degraded."""
    body = domain.status(index)
    return (
        body["status"] == "DEGRADED"
        and body["nodes"][str(node)]["status"] == "UNAVAILABLE"
        and body["nodes"][str(index)]["connections"][str(node)]["status"] != "CONNECTED"
    )


def domain_up(domain: Domain, indices: list[int]) -> bool:
    return all(domain.status(i)["status"] == "UP" for i in indices)


def test_a_killed_peer_shows_in_the_node_status_and_the_survivors_stay_ready(
    domain: Domain,
) -> None:
    """NVIDIA's compute-domain daemon's readiness check (``nvidia-imex-ctl -c CFG -q`` ==
    ``READY``) stays true on the three survivors; their ``-N`` shows the lost node."""
    for i in range(4):
        domain.start(i)
    eventually(lambda: domain_up(domain, [0, 1, 2, 3]), what="the domain UP")
    domain.kill(3)
    eventually(
        lambda: all(lost(domain, i, 3) for i in range(3)),
        within=DEGRADED_WITHIN,
        what="the survivors show node 3 lost",
    )
    for i in range(3):
        done = domain.ctl(i, "-q")
        assert (done.returncode, done.stdout) == (0, "READY\n")  # the probe's exact check
    assert domain.link(1, 3) == "RECOVERING"  # NVIDIA's grace time is forever by default
    text = domain.ctl(1, "-N").stdout
    assert f"Node #3   - {domain.addresses[3]:<15} - UNAVAILABLE" in text
    assert "       1        C   C   C   R" in text.splitlines()
    assert text.splitlines()[-1] == "Domain State: DEGRADED"
    dead = domain.ctl(3, "-q")  # its own ctl finds no daemon
    assert (dead.returncode, dead.stdout) == (1, "UNAVAILABLE\n")
    assert "unable to connect to the IMEX daemon" in dead.stderr
    domain.start(3)
    eventually(lambda: domain_up(domain, [0, 1, 2, 3]), what="the domain UP again")
    assert all_ready(domain, [0, 1, 2, 3])
    for i in range(4):  # connected to each other, each ends cleanly on SIGTERM
        proc = domain.procs.pop(i)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert "Traceback" not in domain.log(i)


def test_a_stopped_peer_is_a_partition(domain: Domain) -> None:
    for i in range(4):
        domain.start(i)
    eventually(lambda: domain_up(domain, [0, 1, 2, 3]), what="all UP")
    domain.procs[2].send_signal(signal.SIGSTOP)
    try:
        eventually(lambda: lost(domain, 0, 2), within=DEGRADED_WITHIN, what="node 2 lost")
        assert domain.state(0) == st.READY
    finally:
        domain.procs[2].send_signal(signal.SIGCONT)
    eventually(lambda: domain_up(domain, [0, 1, 2, 3]), what="UP again")


def test_a_node_of_another_clique_is_not_counted(domain: Domain) -> None:
    uuid = "00000000-0000-0000-0000-0000000000ab"
    env_a = {"MOCK_FABRIC_CLUSTER_UUID": uuid, "MOCK_FABRIC_CLIQUE_ID": "1"}
    env_b = {"MOCK_FABRIC_CLUSTER_UUID": uuid, "MOCK_FABRIC_CLIQUE_ID": "2"}
    for i in range(3):
        domain.start(i, env_a)
    domain.start(3, env_b)
    eventually(lambda: domain_up(domain, [0, 1, 2]), what="clique 1 UP")
    eventually(lambda: domain_up(domain, [0, 1, 2]), what="clique 1 UP")
    body = domain.status(0)
    nodes = body["nodes"]
    assert body["status"] == "UP"
    assert nodes["3"]["status"] == "UNAVAILABLE"
    assert domain.link(0, 3) == "NODE_MAP_MISMATCH"
    assert "       0        C   C   C   !M!" in domain.ctl(0, "-N").stdout.splitlines()
    assert "clique" in domain.log(0) and "not part of the domain" in domain.log(0)
    domain.kill(3)  # not counted, so its loss changes nothing
    time.sleep(1.5)
    assert domain_up(domain, [0, 1, 2])


def test_a_rebind_moves_the_daemon_to_its_new_clique(domain: Domain) -> None:
    def doc(moved: bool) -> str:
        second = "[n2, n3]" if moved else "[n3]"
        first = "[n0, n1]" if moved else "[n0, n1, n2]"
        return (
            "version: 1\ndomains:\n  - name: d\n    uuid: 00000000-0000-0000-0000-0000000000ab\n"
            f"    cliques:\n      - {{id: 1, nodes: {first}}}\n      - {{id: 2, nodes: {second}}}\n"
        )

    store = TopologyStore.from_document(parse_topology(doc(False)))
    with ThreadedServer(create_app(store, max_watch_seconds=5)) as service:
        for i in range(4):
            domain.start(i, {"NVML_MOCK_TOPOLOGY_URL": service.url, "NODE_NAME": f"n{i}"})
        eventually(lambda: domain_up(domain, [0, 1, 2]), what="clique 1 UP")
        assert domain.link(3, 3) == "CONNECTED"
        service.call(store.replace, parse_topology(doc(True)))
        eventually(lambda: domain.link(0, 2) == "NODE_MAP_MISMATCH", what="node 2 left clique 1")
        eventually(lambda: domain.link(3, 2) == "CONNECTED", what="node 2 joined clique 2")
        assert domain_up(domain, [0, 1, 2, 3])


def test_a_peer_of_another_node_list_is_refused_as_unknown(domain: Domain) -> None:
    domain.start(0)
    other = domain.root / "other"
    other.mkdir()
    fifth = domain.addresses[0].rsplit(".", 1)[0] + ".5"
    stranger = Domain(other, [domain.addresses[0], fifth], domain.port, domain.cmd_port)
    stranger.write()
    stranger.start(1)
    try:
        eventually(lambda: "unknown peer" in domain.log(0), what="the stranger refused")
        assert stranger.link(1, 0) == "NODE_MAP_MISMATCH"
    finally:
        stranger.stop_all()


def test_a_broken_frame_closes_one_connection_only(domain: Domain) -> None:
    domain.addresses = domain.addresses[:2]
    domain.write()
    domain.start(0)
    domain.start(1)
    eventually(lambda: domain_up(domain, [0, 1]), what="two UP")
    with socket.create_connection((domain.addresses[0], domain.port), timeout=5) as sock:
        sock.sendall(b"\x00garbage that is not json\n")
        assert sock.recv(100) == b""  # closed
    assert domain_up(domain, [0, 1])


NESTED = b"[" * 60_000 + b"\n"
"""A frame under the 64 KiB line limit nested deeper than any JSON parser recurses."""
LOST_WITHIN = 10.0
"""The bound for a peer that sends a bad frame or dies to show as not connected."""


def _lines(sock: socket.socket) -> Iterator[dict[str, Any]]:
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        yield json.loads(line)


def _raw_peer(listener: socket.socket, go_bad: threading.Event, bad: bytes) -> None:
    """Node 1 played over a raw socket: answers node 0's hello and pings properly until
    *go_bad*, then answers the next ping with *bad* and dies (closes everything)."""
    conn, _ = listener.accept()
    with conn:
        frames = _lines(conn)
        hello = next(frames)
        answer = {
            "t": "hello",
            "index": 1,
            "host": hello["nodes"][1],
            "nodes": hello["nodes"],
            "clique": hello["clique"],
            "version": hello["version"],
        }
        conn.sendall(json.dumps(answer).encode() + b"\n")
        for frame in frames:
            if go_bad.is_set():
                conn.sendall(bad)
                break
            assert frame["t"] == "ping"
            conn.sendall(b'{"t":"pong","row":["C","C"],"clique":null}\n')
    listener.close()


@pytest.mark.parametrize("bad", [NESTED, b"\x00garbage\n", b'{"t":"pong","row":' + NESTED])
def test_a_peer_that_answers_a_ping_with_a_bad_frame_and_dies_is_lost(
    domain: Domain, bad: bytes
) -> None:
    """A raw-socket peer that is connected, then answers a ping with ``[[[[...`` (or other
    garbage) and dies: node 0 shows it not connected within 10 s, its domain DEGRADED, its
    own ``-q`` READY, and it ends cleanly on SIGTERM."""
    domain.addresses = domain.addresses[:2]
    domain.write()
    listener = socket.create_server((domain.addresses[1], domain.port))
    go_bad = threading.Event()
    peer = threading.Thread(target=_raw_peer, args=(listener, go_bad, bad), daemon=True)
    peer.start()
    domain.start(0)
    eventually(lambda: domain_up(domain, [0]), what="the raw peer connected")
    go_bad.set()
    eventually(lambda: lost(domain, 0, 1), within=LOST_WITHIN, what="the raw peer lost")
    peer.join(timeout=10)
    time.sleep(1.0)  # it stays lost: nothing answers there any more
    assert lost(domain, 0, 1)
    assert domain.state(0) == st.READY
    proc = domain.procs.pop(0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    log = domain.log(0)
    assert "Traceback" not in log and "IMEX daemon work-alike stopped" in log
    assert "node #1" in log


def test_a_peer_that_pings_with_a_bad_frame_is_closed(domain: Domain) -> None:
    """The other way round: a raw socket says hello as node 1, then pings with ``[[[[...``:
    that one connection is closed, logged without a traceback, and the daemon serves on."""
    domain.addresses = domain.addresses[:2]
    domain.write()
    domain.start(0)
    with socket.create_connection((domain.addresses[0], domain.port), timeout=5) as sock:
        hello = {
            "t": "hello",
            "index": 1,
            "host": domain.addresses[1],
            "nodes": domain.addresses,
            "clique": None,
            "version": "N/A",
        }
        sock.sendall(json.dumps(hello).encode() + b"\n")
        assert next(_lines(sock))["t"] == "hello"
        sock.sendall(NESTED)
        assert sock.recv(100) == b""  # closed
    assert domain.state(0) == st.READY
    eventually(lambda: "closing a peer connection" in domain.log(0), what="logged")
    proc = domain.procs.pop(0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert "Traceback" not in domain.log(0)


def test_sigusr1_rereads_the_node_list(domain: Domain) -> None:
    domain.addresses = domain.addresses[:2]
    domain.write()
    domain.start(0)
    domain.start(1)
    eventually(lambda: domain_up(domain, [0, 1]), what="two UP")
    domain.addresses = [*domain.addresses, domain.addresses[0].rsplit(".", 1)[0] + ".3"]
    domain.nodes.write_text("".join(f"{a}\n" for a in domain.addresses))
    for proc in domain.procs.values():
        proc.send_signal(signal.SIGUSR1)
    eventually(lambda: domain.status(0)["status"] == "DEGRADED", what="node 2 is waited for")
    assert domain.link(0, 2) == "NEVER_CONNECTED"
    assert all_ready(domain, [0, 1])
    domain.start(2)
    eventually(lambda: domain_up(domain, [0, 1, 2]), what="three UP")


# -- bad input -----------------------------------------------------------------


def run_daemon(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvml_mock_imex.imexd", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ("10.0.0.1\n10.0.0.1\n", "duplicate node '10.0.0.1' (already on line 1)"),
        ("10.0.0.1\n10.0.0.2 10.0.0.3\n", "is not one address or host name per line"),
        ("10.0.0.1\nnot_a/host\n", "'not_a/host' is neither an IP address nor a host name"),
        ("10.0.0.999\n", "'10.0.0.999' is neither an IP address nor a host name"),
        ("# nothing\n\n", "the node list names no node"),
    ],
)
def test_a_bad_node_list_is_refused_naming_the_line(
    domain: Domain, nodes: str, message: str
) -> None:
    domain.nodes.write_text(nodes)
    done = run_daemon(domain.config)
    assert done.returncode == 1
    assert message in done.stderr and str(domain.nodes) in done.stderr


def test_a_port_no_node_can_listen_on_is_refused(domain: Domain) -> None:
    holders = []
    for address in domain.addresses:
        sock = socket.socket()
        sock.bind((address, domain.port))
        sock.listen()
        holders.append(sock)
    try:
        done = run_daemon(domain.config)
    finally:
        for sock in holders:
            sock.close()
    assert done.returncode == 1
    assert f"cannot listen on SERVER_PORT {domain.port}" in done.stderr
    assert "Address already in use" in done.stderr


def test_ctl_against_no_daemon_fails_at_once(domain: Domain) -> None:
    done = domain.ctl(0, "-q")
    assert done.returncode == 1
    assert (
        f"unable to connect to the IMEX daemon at {domain.addresses[0]}:{domain.cmd_port}"
        in done.stderr
    )


def test_bind_interface_ip_must_be_a_node(domain: Domain) -> None:
    domain.write(BIND_INTERFACE_IP="10.9.9.9")
    done = run_daemon(domain.config)
    assert done.returncode == 1
    assert "BIND_INTERFACE_IP=10.9.9.9 is not the address of any node" in done.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SERVER_PROT=1\n", "unknown key 'SERVER_PROT'"),
        ("SERVER_PORT=70000\n", "SERVER_PORT=70000 is out of range (1..65535)"),
        ("SERVER_PORT=x\n", "SERVER_PORT='x' is not an integer"),
        ("BIND_INTERFACE_IP=1.2.3\n", "is not a valid IPv4 or IPv6 address"),
        ("IMEX_WAIT_FOR_QUORUM=SOME\n", "is not one of NONE, RECOVERY"),
        ("just words\n", "is not a KEY=VALUE line"),
        ("LOG_LEVEL=1\nLOG_LEVEL=2\n", "LOG_LEVEL is set twice (first on line 1)"),
        ("IMEX_CMD_ENABLED=1\n", "IMEX_CMD_ENABLED=1 needs IMEX_CMD_PORT"),
        ("SERVER_PORT=5_6000\n", "SERVER_PORT='5_6000' is not an integer (1..65535)"),
        ("SERVER_PORT=+4\n", "SERVER_PORT='+4' is not an integer (1..65535)"),
        ("IMEX_CMD_PORT=\u0665\u0660\u0660\u0660\u0665\n", "IMEX_CMD_PORT='\u0665\u0660"),
        ("LOG_LEVEL=\uff14\n", "LOG_LEVEL='\uff14' is not an integer (0..4)"),
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME=-0x1\n", "is not an integer (-1..2147483647)"),
    ],
)
def test_bad_config_is_refused_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(ImexConfigError) as failed:
        parse_config(text, "imex.cfg")
    assert message in str(failed.value)


def test_the_dra_drivers_template_parses() -> None:
    """The keys of NVIDIA's DRA driver template (rendered), as the kubelet plugin writes it."""
    config = parse_config(TEMPLATE, "/imexd/imexd.cfg")
    assert (config.server_port, config.cmd_port, config.cmd_bind_ip) == (50000, 50005, "10.1.2.3")
    assert (config.node_config_file, config.daemonize) == ("/imexd/nodes.cfg", False)


def test_dns_names_that_do_not_resolve_are_no_error() -> None:
    entries = parse_nodes("compute-domain-daemon-0\ncompute-domain-daemon-1\n")
    assert [e.name for e in entries] == ["compute-domain-daemon-0", "compute-domain-daemon-1"]
    with pytest.raises(NodeListError):
        parse_nodes("compute-domain-daemon-0\nCOMPUTE-domain-daemon-0\n")


TEMPLATE = """LOG_LEVEL=4
LOG_FILE_NAME=
STATS_FILE_NAME=/var/log/nvidia-imex-stats.log
LOG_APPEND_TO_LOG=0
LOG_FILE_MAX_SIZE=1024
LOG_MAX_ROTATE_COUNT=10
LOG_USE_SYSLOG=0
DAEMONIZE=0
BIND_INTERFACE_IP=
SERVER_PORT=50000
IMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg
NETWORK_INTERFACE=
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_AUTH_ENCRYPTION_MODE=SSL_TLS
IMEX_AUTH_SOURCE=
IMEX_SERVER_KEY=
IMEX_SERVER_CERT=
IMEX_SERVER_CERT_AUTH=
IMEX_CLIENT_KEY=
IMEX_CLIENT_CERT=
IMEX_CLIENT_CERT_AUTH=
IMEX_SECURITY_TARGET_OVERRIDE=
IMEX_GSS_SERVICE_NAME=host
IMEX_GSS_TIMEOUT_SEC=30
IMEX_GSS_RETRY_INTERVAL_SEC=5
IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC=-1
IMEX_GSS_SHUTDOWN_ON_FAILURE=0
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP=10.1.2.3
IMEX_CMD_PORT=50005
IMEX_CMD_UNIX_DOMAIN_PATH=
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
"""


def test_the_driver_roots_tools_are_the_work_alikes(domain: Domain, tmp_path: Path) -> None:
    """``usr/bin/nvidia-imex`` and ``nvidia-imex-ctl`` of a staged driver root (where NVIDIA's
    compute-domain daemon finds them) run on the overlay's own runtime and reach READY."""
    overlay = tmp_path / "root"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nvml_mock_engine",
            "stage",
            str(overlay),
            "--profile",
            "h100",
            "--count",
            "2",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    daemon, ctl = overlay / "usr/bin/nvidia-imex", overlay / "usr/bin/nvidia-imex-ctl"
    assert os.access(daemon, os.X_OK) and os.access(ctl, os.X_OK)
    domain.addresses = domain.addresses[:1]
    domain.write()
    log = (domain.root / "root.log").open("w")
    proc = subprocess.Popen(
        [str(daemon), "-c", str(domain.config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={"PATH": "/usr/bin:/bin"},  # the version comes from the root's own state
    )
    try:

        def state() -> str:
            done = subprocess.run(
                [str(ctl), "-c", str(domain.config), "-i", domain.addresses[0], "-q"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
                env={"PATH": "/usr/bin:/bin"},
            )
            return done.stdout.strip()

        eventually(lambda: state() == st.READY, what="the driver root's daemon READY")
        text = subprocess.run(
            [str(ctl), "-c", str(domain.config), "-i", domain.addresses[0], "-N"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
            env={"PATH": "/usr/bin:/bin"},
        ).stdout
        version = next(n for n in overlay.glob("usr/lib64/libnvidia-ml.so.*.*")).name
        assert f"Version: {version.removeprefix('libnvidia-ml.so.')}" in text
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_the_grace_time_takes_a_minus_sign() -> None:
    config = parse_config("IMEX_NODE_DISCONNECTED_GRACE_TIME=-1\nSERVER_PORT=050000\n")
    assert (config.disconnected_grace, config.server_port) == (-1, 50000)


def test_ctl_refuses_a_port_that_is_not_plain_digits(domain: Domain) -> None:
    for port in ("5_0005", "+50005", "\u0665\u0660\u0660\u0660\u0665", "70000"):
        done = domain.ctl(0, "-p", port, "-q")
        assert done.returncode == 2
        assert f"{port!r} is not a port (1..65535)" in done.stderr


@pytest.mark.parametrize(
    ("which", "path", "message"),
    [
        ("IMEX_NODE_CONFIG_FILE", "/dev/zero", "it is a character device, not a regular file"),
        ("IMEX_NODE_CONFIG_FILE", "big", "it is larger than 1048576 bytes"),
        ("config", "/dev/zero", "it is a character device, not a regular file"),
    ],
)
def test_a_node_list_or_config_that_is_no_small_file_is_refused(
    domain: Domain, which: str, path: str, message: str
) -> None:
    """``/dev/zero`` (read without bound it was a MemoryError) or a file over 1 MiB."""
    if path == "big":
        big = domain.root / "big"
        big.write_text("10.0.0.1\n" + "#" * 1024 * 1024 + "\n")
        path = str(big)
    config = domain.config
    if which == "config":
        config = Path(path)
        what = "IMEX config file"
    else:
        domain.write(IMEX_NODE_CONFIG_FILE=path)
        what = "IMEX node list"
    done = run_daemon(config)
    assert done.returncode == 1
    assert f"nvidia-imex: cannot read the {what} {path}: {message}" in done.stderr
    assert "Traceback" not in done.stderr


def test_sigusr1_with_a_fifo_for_a_node_list_keeps_serving(domain: Domain) -> None:
    """A FIFO put in the node list's place and SIGUSR1: the daemon refuses it at once (no
    writer is waited for), keeps its list and its peers, answers ``nvidia-imex-ctl`` and
    ends on SIGTERM."""
    domain.addresses = domain.addresses[:2]
    domain.write()
    domain.start(0)
    domain.start(1)
    eventually(lambda: domain_up(domain, [0, 1]), what="two UP")
    domain.nodes.unlink()
    os.mkfifo(domain.nodes)
    domain.procs[0].send_signal(signal.SIGUSR1)
    eventually(lambda: "SIGUSR1: keeping the node list" in domain.log(0), what="refused")
    assert f"{domain.nodes}: it is a FIFO, not a regular file" in domain.log(0)
    assert domain_up(domain, [0, 1]) and all_ready(domain, [0, 1])
    proc = domain.procs.pop(0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert "Traceback" not in domain.log(0)


def test_two_entries_for_this_nodes_address_are_refused(domain: Domain) -> None:
    """``localhost`` and ``127.0.0.1``: one daemon would be both nodes, dial itself and
    refuse itself while its domain showed UP. It is refused at start, naming both."""
    if not _port_free(["127.0.0.1"], domain.port):
        pytest.skip("the port is taken on 127.0.0.1")
    domain.nodes.write_text("localhost\n127.0.0.1\n")
    done = run_daemon(domain.config)
    assert done.returncode == 1
    assert (
        f"{domain.nodes}: node #0 (localhost) and node #1 (127.0.0.1) are both 127.0.0.1, "
        "this node's address: a daemon cannot be two nodes of its list"
    ) in done.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare to give the daemon an /etc/hosts of its own",
)
def test_a_name_that_comes_to_resolve_to_this_node_is_not_dialled(domain: Domain) -> None:
    """A node name that resolves only later, to this daemon's own address (an /etc/hosts
    entry added while it runs, as the DRA driver maps its daemons' names): the daemon does
    not dial itself (it refused itself as an unknown peer and showed the domain UP), logs
    it, and shows the node never connected and the domain DEGRADED."""
    if not _port_free(["127.0.0.1"], domain.port) or not _port_free(["127.0.0.1"], domain.cmd_port):
        pytest.skip("the ports are taken on 127.0.0.1")
    hosts = domain.root / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    domain.addresses = ["127.0.0.1", "imex-twin-of-this-node"]
    domain.write()
    log = (domain.root / "d0.log").open("a")
    command = (
        f"mount --bind {hosts} /etc/hosts && exec {sys.executable} -m nvml_mock_imex.imexd "
        f"-c {domain.config}"
    )
    domain.procs[0] = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", command],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    log.close()
    eventually(lambda: domain.answers(0), what="the daemon answers")
    assert domain.link(0, 1) == "INVALID"  # the name does not resolve yet
    with hosts.open("a") as file:  # in place: the daemon's /etc/hosts is this very file
        file.write("127.0.0.1 imex-twin-of-this-node\n")
    eventually(lambda: "resolves to this node's own address" in domain.log(0), what="logged")
    time.sleep(1.0)
    body = domain.status(0)
    assert body["status"] == "DEGRADED"
    assert domain.link(0, 1) == "NEVER_CONNECTED"
    assert "claims to be this node" not in domain.log(0)
    assert domain.state(0) == st.READY
