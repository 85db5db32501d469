"""The IMEX channel check against real character device nodes made here.

Each test makes its channel nodes with ``mknod`` in a directory of its own and points
check-fabric at it (``--imex-dir``) and at a substitute proc-devices file written in
``/proc/devices`` format (``--proc-devices``). The channels' major is one of Linux's
"local/experimental use" majors (240..254) that this machine's ``/proc/devices`` does
not list, so opening a channel reaches no driver and answers ENXIO, as on a GPU-less
node. Making device nodes needs root (CAP_MKNOD) and a file system mounted without
``nodev``; the tests skip, saying which, where the machine does not allow it.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from check_fabric.errors import ConfigError
from check_fabric.imex import _expected_major, parse_proc_devices
from check_fabric.settings import Settings, load_settings
from conftest import RenderState, RunCheck

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2


def _without_dac_override() -> None:
    """In the child, before the exec: drop the capabilities that let root ignore a file's mode.

    Dropped from the bounding set, they are not granted again by the exec, so the
    command runs as root that a mode-000 node refuses (EACCES), like any other user.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def _proc_devices_text(imex_major: int) -> str:
    """A substitute ``/proc/devices`` in the kernel's format ("%3d %s")."""
    lines = [
        (195, "nvidia-frontend"),
        (511, "nvidia-uvm"),
        (imex_major, "nvidia-caps-imex-channels"),
    ]
    body = "".join(f"{major:3d} {name}\n" for major, name in sorted(lines))
    return f"Character devices:\n{body}\nBlock devices:\n  7 loop\n"


def _free_major() -> int:
    """The first major in 240..254 this machine's /proc/devices lists for no character driver."""
    taken = set(parse_proc_devices(Path("/proc/devices").read_text()).values())
    for major in range(240, 255):
        if major not in taken:
            return major
    pytest.skip("every major in 240..254 is taken by a driver on this machine")


@dataclass
class Channels:
    """A channel directory and its substitute proc-devices file."""

    root: Path
    major: int

    @property
    def dir(self) -> Path:
        return self.root / "nvidia-caps-imex-channels"

    @property
    def proc_devices(self) -> Path:
        return self.root / "proc-devices"

    def args(self, *extra: str) -> list[str]:
        return ["--imex-dir", str(self.dir), "--proc-devices", str(self.proc_devices), *extra]

    def node(self, number: int, major: int | None = None, minor: int | None = None) -> Path:
        path = self.dir / f"channel{number}"
        device = os.makedev(
            self.major if major is None else major, number if minor is None else minor
        )
        os.mknod(path, 0o666 | stat.S_IFCHR, device)
        return path

    def nodes(self, count: int) -> None:
        for number in range(count):
            self.node(number)


@pytest.fixture
def channels(tmp_path: Path) -> Channels:
    """An empty channel directory and a substitute proc-devices naming a free major."""
    if os.geteuid() != 0:
        pytest.skip("making character device nodes needs root (CAP_MKNOD)")
    found = Channels(tmp_path, _free_major())
    found.dir.mkdir()
    found.proc_devices.write_text(_proc_devices_text(found.major))
    probe = tmp_path / "probe"
    try:
        os.mknod(probe, 0o600 | stat.S_IFCHR, os.makedev(found.major, 0))
    except PermissionError:
        pytest.skip("this machine does not allow mknod (no CAP_MKNOD)")
    try:
        os.close(os.open(probe, os.O_RDONLY))
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            pytest.skip(
                f"a device node of an unbound major opens with {errno.errorcode[exc.errno]}, "
                f"not ENXIO, in {tmp_path} (a nodev mount or a device cgroup)"
            )
    probe.unlink()
    return found


def _doc(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(done.stdout)
    assert doc["exitCode"] == done.returncode
    return doc


def test_channels_of_an_unbound_major_are_usable(channels: Channels, run_check: RunCheck) -> None:
    """ENXIO is what a GPU-less node answers: the kernel let the open through, no driver."""
    channels.nodes(4)
    done = run_check(None, "--imex-only", *channels.args())
    assert done.returncode == 0, done.stderr
    m = channels.major
    assert done.stdout.splitlines() == [
        f"Discovered 4 IMEX channel(s) in {channels.dir}",
        *(
            f"IMEX channel {n}: char {m}:{n}, open ENXIO (no driver bound: usable)"
            for n in range(4)
        ),
    ]
    assert done.stderr == (
        f"imex: ok: 4 channel(s) in {channels.dir}, major {m} "
        f"(nvidia-caps-imex-channels in {channels.proc_devices}), all usable\n"
    )

    doc = _doc(run_check(None, "--imex-only", "--json", *channels.args()))
    assert (doc["verdict"], doc["gpuCount"], doc["gpus"], doc["error"]) == ("ok", None, [], None)
    imex = doc["imex"]
    assert imex["passed"] is True
    assert (imex["channelsFound"], imex["major"], imex["problems"]) == (4, m, [])
    assert imex["majorSource"] == str(channels.proc_devices)
    assert imex["channels"][2] == {
        "channel": 2,
        "path": str(channels.dir / "channel2"),
        "type": "char",
        "major": m,
        "minor": 2,
        "open": "ENXIO",
        "usable": True,
        "problems": [],
    }
    assert doc["checks"] == [{"name": "imex", "passed": True, "detail": imex_detail(channels, 4)}]


def imex_detail(channels: Channels, count: int) -> str:
    return (
        f"{count} channel(s) in {channels.dir}, major {channels.major} "
        f"(nvidia-caps-imex-channels in {channels.proc_devices}), all usable"
    )


def test_a_channel_that_opens_is_usable(channels: Channels, run_check: RunCheck) -> None:
    """A node whose open succeeds (1:3 is /dev/null's, which containers may open)."""
    channels.proc_devices.write_text(_proc_devices_text(1))
    channels.node(3, major=1)
    doc = _doc(run_check(None, "--imex-only", "--json", *channels.args()))
    assert doc["verdict"] == "ok"
    assert doc["imex"]["channels"][0]["open"] == "ok"


def test_a_major_other_than_proc_devices_lists_is_an_error(
    channels: Channels, run_check: RunCheck
) -> None:
    channels.nodes(2)
    channels.node(2, major=195)  # nvidia-frontend's, not the channels'
    done = run_check(None, "--imex-only", *channels.args())
    assert done.returncode == 1
    assert "IMEX channel 2: char 195:2, open" in done.stdout
    assert done.stderr == (
        f"imex: FAILED: channel2: major 195, but {channels.proc_devices} lists "
        f"nvidia-caps-imex-channels as {channels.major}\n"
    )
    doc = _doc(run_check(None, "--imex-only", "--json", *channels.args()))
    assert (doc["verdict"], doc["error"]["kind"]) == ("error", "imex")
    assert [c["usable"] for c in doc["imex"]["channels"]] == [True, True, False]


def test_a_minor_other_than_the_channel_number_is_an_error(
    channels: Channels, run_check: RunCheck
) -> None:
    channels.node(0, minor=5)
    done = run_check(None, "--imex-only", *channels.args())
    assert done.returncode == 1
    assert "channel0: minor 5, but a channel's minor is its number" in done.stderr


def test_a_regular_file_is_not_a_channel(channels: Channels, run_check: RunCheck) -> None:
    channels.node(0)
    (channels.dir / "channel1").write_text("")
    done = run_check(None, "--imex-only", *channels.args())
    assert done.returncode == 1
    assert "IMEX channel 1: regular file, not a character device" in done.stdout
    assert done.stderr == "imex: FAILED: channel1: a regular file, not a character device\n"
    doc = _doc(run_check(None, "--imex-only", "--json", *channels.args()))
    assert doc["imex"]["channels"][1]["type"] == "file"
    assert doc["imex"]["channels"][1]["open"] is None


def test_a_dangling_link_is_enoent(channels: Channels, run_check: RunCheck) -> None:
    (channels.dir / "channel0").symlink_to(channels.root / "gone")
    done = run_check(None, "--imex-only", *channels.args())
    assert done.returncode == 1
    assert "channel0: dangling link (ENOENT)" in done.stderr


def test_a_missing_directory_is_not_supported(channels: Channels, run_check: RunCheck) -> None:
    missing = channels.root / "absent"
    done = run_check(None, "--imex-only", "--imex-dir", str(missing))
    assert done.returncode == 2
    assert done.stdout == f"Discovered 0 IMEX channel(s) in {missing}\n"
    assert done.stderr == f"imex: not supported: {missing} does not exist: no IMEX channel\n"
    doc = _doc(run_check(None, "--imex-only", "--json", "--imex-dir", str(missing)))
    assert (doc["verdict"], doc["error"], doc["imex"]["passed"]) == ("not_supported", None, None)


def test_a_directory_without_channels_is_not_supported(
    channels: Channels, run_check: RunCheck
) -> None:
    (channels.dir / "README").write_text("not a channel")
    done = run_check(None, "--imex-only", *channels.args())
    assert done.returncode == 2
    assert f"no channel<N> in {channels.dir}" in done.stderr


def test_an_open_the_mode_denies_is_an_error(channels: Channels, run_check: RunCheck) -> None:
    """EACCES, as a process the node's mode keeps out sees it (a device cgroup says EPERM).

    Root opens a mode-000 node anyway (CAP_DAC_OVERRIDE), so check-fabric runs as root
    without that capability. (Running it as an unprivileged user instead would need an
    interpreter and packages that user may read, which a root-owned checkout need not be.)
    """
    channels.node(0)
    channels.node(1).chmod(0)
    done = run_check(None, "--imex-only", *channels.args(), preexec_fn=_without_dac_override)
    assert done.returncode == 1, done.stderr
    assert "IMEX channel 1: char" in done.stdout and "open EACCES (denied)" in done.stdout
    assert "channel1: open denied (EACCES)" in done.stderr
    assert "channel0" not in done.stderr


def test_an_unreadable_explicit_proc_devices_is_an_error(
    channels: Channels, run_check: RunCheck
) -> None:
    channels.nodes(1)
    absent = channels.root / "absent"
    done = run_check(
        None, "--imex-only", "--imex-dir", str(channels.dir), "--proc-devices", str(absent)
    )
    assert done.returncode == 1
    assert f"cannot read {absent}: it does not exist" in done.stderr


def test_a_proc_devices_without_the_channels_major_is_an_error(
    channels: Channels, run_check: RunCheck
) -> None:
    channels.nodes(1)
    channels.proc_devices.write_text("Character devices:\n195 nvidia-frontend\n\nBlock devices:\n")
    done = run_check(None, "--imex-only", *channels.args())
    assert done.returncode == 1
    assert "lists no nvidia-caps-imex-channels major" in done.stderr


def test_the_default_chain_falls_back_to_the_next_file(tmp_path: Path) -> None:
    """A missing substitute falls back to the next file; a missing explicit file does not."""
    proc = tmp_path / "devices"
    proc.write_text(_proc_devices_text(242))
    absent = str(tmp_path / "absent")
    assert _expected_major((absent, str(proc)), explicit=False) == (242, str(proc), None)
    assert (
        _expected_major((absent,), explicit=True)[2] == f"cannot read {absent}: it does not exist"
    )


def test_proc_devices_is_read_like_the_kernel_writes_it() -> None:
    text = (
        "Character devices:\n  1 mem\n241 nvidia-caps-imex-channels\n\n"
        "Block devices:\n240 nvidia-caps-imex-channels\n"
    )
    assert parse_proc_devices(text) == {"mem": 1, "nvidia-caps-imex-channels": 241}
    with pytest.raises(ValueError, match="Character devices"):
        parse_proc_devices("241 nvidia-caps-imex-channels\n")


def test_with_imex_both_checks_decide_the_exit(
    channels: Channels, run_check: RunCheck, render_state: RenderState
) -> None:
    """``--imex`` adds the channel check to the fabric check; the worse outcome is the exit."""
    state = render_state("gb200", 2)
    channels.nodes(2)
    done = run_check(state, "--imex", *channels.args())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Discovered 2 GPU(s)"
    assert lines[-3:] == [
        f"Discovered 2 IMEX channel(s) in {channels.dir}",
        *(
            f"IMEX channel {n}: char {channels.major}:{n}, open ENXIO (no driver bound: usable)"
            for n in range(2)
        ),
    ]
    doc = _doc(run_check(state, "--imex", "--json", *channels.args()))
    assert [c["name"] for c in doc["checks"]] == ["consistency", "imex"]
    assert (doc["gpuCount"], doc["imex"]["channelsFound"]) == (2, 2)

    # Fabric fine, no channel: not supported.
    missing = ["--imex-dir", str(channels.root / "absent")]
    assert run_check(state, "--imex", *missing).returncode == 2
    # Fabric not supported, a channel broken: the error wins.
    (channels.dir / "channel5").write_text("")
    assert run_check(render_state("t4", 1), "--imex", *channels.args()).returncode == 1
    # Without --imex the channels are not looked at.
    assert run_check(state, *channels.args()).returncode == 0


def test_a_fabric_mismatch_outranks_missing_channels(
    channels: Channels, run_check: RunCheck, render_state: RenderState
) -> None:
    state = render_state("gb200", 2)
    done = run_check(
        state, "--imex", "--expect-clique", "9", "--imex-dir", str(channels.root / "x")
    )
    assert done.returncode == 3


def test_imex_settings_and_env_twins() -> None:
    env = {
        "CHECK_FABRIC_IMEX": "1",
        "CHECK_FABRIC_IMEX_DIR": "/run/channels/",
        "CHECK_FABRIC_PROC_DEVICES": "/host/proc-devices",
    }
    assert load_settings([], env) == Settings(
        imex=True, imex_dir="/run/channels", proc_devices="/host/proc-devices"
    )
    only = load_settings([], {"CHECK_FABRIC_IMEX_ONLY": "yes"})
    assert (only.imex, only.imex_only) == (True, True)
    assert load_settings([], {}).imex_dir == "/dev/nvidia-caps-imex-channels"


@pytest.mark.parametrize(
    ("argv", "key", "reason"),
    [
        (["--imex-dir", "relative"], "--imex-dir", "absolute path"),
        (["--proc-devices", "proc"], "--proc-devices", "absolute path"),
        (["--imex-only", "--expect-clique", "1"], "--expect-clique", "--imex-only does not read"),
        (["--imex-only", "--require-completed"], "--require-completed", "does not read"),
    ],
)
def test_bad_imex_settings_name_key_and_value(argv: list[str], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(argv, {})
    assert info.value.key == key
    assert reason in info.value.reason
