"""Xids on the kernel log: the driver's lines, written by nvml-mock-ctl to the sink chosen."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import nvml_mock_live as live
import pytest
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.errors import KernelLogError
from nvml_mock_engine.kernel_log import driver_lines, open_sink, parse_sink, pci_tag
from nvml_mock_engine.render import render_text

# what the readers match: NVSentinel's syslog monitor, node-problem-detector's NVIDIA rules
XID_LINE = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:]+)\): (?P<xid>\d+),")


@pytest.fixture
def node(tmp_path: Path) -> Path:
    state = tmp_path / "state.nvmlmock"
    state.write_text(render_text(resolve_config(node="node-a", profile="h100", count=4)))
    live.create(tmp_path / live.LIVE_FILE_NAME, live.read_board(state))
    return tmp_path


@pytest.fixture
def no_driver(tmp_path: Path) -> dict[str, str]:
    """Host roots without a real NVIDIA driver (the machine running the tests may have one)."""
    proc = tmp_path / "proc"
    (proc / "driver").mkdir(parents=True)
    (proc / "devices").write_text("Character devices:\n  1 mem\n  4 tty\n")
    (tmp_path / "sys" / "module").mkdir(parents=True)
    return {"NVML_MOCK_HOST_PROC_ROOT": str(proc), "NVML_MOCK_HOST_SYS_ROOT": str(tmp_path / "sys")}


def ctl(node: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "nvml_mock_engine.ctl",
            "--live-file",
            str(node / live.LIVE_FILE_NAME),
            *args,
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_driver_lines_for_a_gpu_fallen_off_the_bus() -> None:
    lines = driver_lines(79, bus_id="00000000:1A:00.0", uuid="GPU-1234", architecture=9)
    assert lines == [
        "NVRM: GPU at PCI:0000:1a:00: GPU-1234",
        "NVRM: Xid (PCI:0000:1a:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "NVRM: GPU 0000:1a:00.0: GPU has fallen off the bus.",
    ]
    match = XID_LINE.search(lines[1])
    assert match and (match["pci"], match["xid"]) == ("0000:1a:00", "79")


def test_row_remapping_before_ampere_is_page_retirement() -> None:
    (line,) = driver_lines(63, bus_id="0000:3b:00.0", uuid="GPU-x", architecture=5, first=False)
    assert line.endswith("Dynamic Page Retirement: New page retired, reboot to activate.")
    (line,) = driver_lines(63, bus_id="0000:3b:00.0", uuid="GPU-x", architecture=9, first=False)
    assert "Row Remapper" in line
    assert pci_tag("00000000:3B:00.0") == "0000:3b:00"


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("syslog", "must be one of"),
        ("file", "file needs a path"),
        ("kmsg:dev/kmsg", "is not an absolute path"),
        ("off:/x", "off takes no target"),
    ],
)
def test_bad_sinks_are_refused(spec: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_sink(spec)


def test_a_real_driver_refuses_every_sink(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06\n"
    )
    (proc / "devices").write_text("Character devices:\n195 nvidia\n")
    env = {"NVML_MOCK_HOST_PROC_ROOT": str(proc), "NVML_MOCK_HOST_SYS_ROOT": str(tmp_path)}
    with pytest.raises(KernelLogError, match="real NVIDIA driver"):
        open_sink(f"file:{tmp_path / 'kern.log'}", env)
    assert not (tmp_path / "kern.log").exists()
    assert type(open_sink("off", env)).__name__ == "_Off"


def test_ctl_writes_the_faults_xids_to_a_file(node: Path, no_driver: dict[str, str]) -> None:
    log = node / "kern.log"
    env = {**no_driver, "NVML_MOCK_KERNEL_LOG": f"file:{log}"}
    assert (
        ctl(node, env, "alloc", "--pid", "4242", "--gpus", "1", "--name", "trainer").returncode == 0
    )
    done = ctl(node, env, "fail", "fallen-off-bus", "-i", "0")
    assert done.returncode == 0, done.stderr
    # armed: it fires per process, at no one moment the node could log
    done = ctl(node, env, "fail", "fallen-off-bus", "-i", "2", "--after-calls", "5")
    assert done.returncode == 0 and "armed events xid 79" in done.stdout, done.stderr
    done = ctl(node, env, "xid", "48", "-i", "1")
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    assert all(
        re.match(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: NVRM: ", x) for x in lines
    )
    xids = [(m["pci"], m["xid"]) for m in map(XID_LINE.search, lines) if m]
    board = live.read_board(node / "state.nvmlmock")
    assert xids == [
        (pci_tag(board[0].values["pci_bus_id"]), "79"),
        (pci_tag(board[1].values["pci_bus_id"]), "48"),
    ]
    assert any(line.endswith(f"NVRM: GPU at PCI:{xids[0][0]}: {board[0].uuid}") for line in lines)
    assert any("GPU has fallen off the bus." in line and "NVRM: GPU 0000" in line for line in lines)
    assert any(
        "): 48, pid=4242, name=trainer, An uncorrectable double bit error" in x for x in lines
    )


def test_ctl_writes_to_journald_and_kmsg(node: Path, no_driver: dict[str, str]) -> None:
    address = str(node / "journal.socket")
    journal = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    journal.bind(address)
    journal.settimeout(10)
    with journal:
        done = ctl(
            node,
            {**no_driver, "NVML_MOCK_KERNEL_LOG": f"journald:{address}"},
            "xid",
            "74",
            "-i",
            "2",
        )
        assert done.returncode == 0, done.stderr
        entries = [journal.recv(65536).decode() for _ in range(2)]
    fields = dict(line.split("=", 1) for line in entries[1].splitlines())
    assert fields["SYSLOG_IDENTIFIER"] == "kernel" and fields["PRIORITY"] == "3"
    assert XID_LINE.search(fields["MESSAGE"])["xid"] == "74"  # type: ignore[index]
    # /dev/kmsg takes one record per write; a FIFO shows the writes as they are made
    kmsg = node / "kmsg"
    os.mkfifo(kmsg)
    reader = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    try:
        done = ctl(
            node, {**no_driver, "NVML_MOCK_KERNEL_LOG": f"kmsg:{kmsg}"}, "xid", "13", "-i", "3"
        )
        assert done.returncode == 0, done.stderr
        records = os.read(reader, 65536).decode().splitlines()
    finally:
        os.close(reader)
    assert [r[:3] for r in records] == ["<3>", "<3>"]
    assert XID_LINE.search(records[1])["xid"] == "13"  # type: ignore[index]


def test_a_sink_that_cannot_be_opened_writes_nothing(node: Path, no_driver: dict[str, str]) -> None:
    env = {**no_driver, "NVML_MOCK_KERNEL_LOG": f"journald:{node / 'no-such.socket'}"}
    done = ctl(node, env, "fail", "fallen-off-bus", "-i", "0")
    assert done.returncode == 1
    assert "no-such.socket" in done.stderr
    status = ctl(node, no_driver, "status", "--json")
    assert '"gpu_lost": 1' not in status.stdout


def test_off_by_default(node: Path, no_driver: dict[str, str], tmp_path: Path) -> None:
    assert ctl(node, no_driver, "xid", "79", "-i", "0").returncode == 0
    assert not list(tmp_path.glob("*.log"))
