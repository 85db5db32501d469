"""``nvml-mock-ctl status`` and ``xid`` on the quick path answer exactly as the full command line.

The installed console script runs in a real child process, beside the full command line
(``nvml_mock_engine.ctl_cli``, on argparse) on the same files: the same exit code, the same
stdout, the same stderr (timestamps aside) and the same bytes in the live file afterwards,
for plain uses and for every edge the quick path meets (a bad GPU, no state, a corrupt,
foreign, torn or retired live file, a bad Xid, bad options, a writer holding the lock). In
process, :func:`ctl_quick.run` says which cases it answers itself, and its tables are held
to the settings declaration and the argparse parser.
"""

from __future__ import annotations

import argparse
import mmap
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import nvml_mock_live as live
import pytest
from conftest import StateWriter
from nvml_mock_engine import ctl, ctl_cli, ctl_quick, settings
from nvml_mock_engine.library import library_file
from nvml_mock_live import _layout as layout
from nvml_mock_live.layer import guarded_directory
from nvml_mock_live.writers_lock import WritersLock

CONSOLE_SCRIPT = Path(sys.executable).parent / "nvml-mock-ctl"
FULL = [
    sys.executable,
    "-c",
    "import sys; from nvml_mock_engine.ctl_cli import main; sys.exit(main())",
]
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")

needs_console_script = pytest.mark.skipif(
    not CONSOLE_SCRIPT.is_file(),
    reason=f"no installed console script at {CONSOLE_SCRIPT} (install nvml-mock-engine)",
)


class Outcome(NamedTuple):
    code: int
    stdout: str
    stderr: str
    live: bytes | None


@pytest.fixture
def live_file(write_state: StateWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two GPUs and a live layer holding values, an armed fault, an event and an allocation
    (written by the full command line), with a lock directory of this test's own."""
    monkeypatch.setenv("NVML_MOCK_LOCK_DIR", str(tmp_path / "locks"))
    state = write_state()
    path = live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))
    for argv in (
        ["temp", "71", "-i", "0"],
        ["throttle", "hw-slowdown", "-i", "0"],
        ["fail", "thermal", "-i", "1", "--after-calls", "5"],
        ["set", "pcie_cur_gen=3", "-i", "1", "--at", "1700000000"],
        ["xid", "-i", "1", "13"],
        ["alloc", "--pid", "4242", "--gpus", "1", "--memory", "2Gi", "--utilization", "sine 80"],
    ):
        assert ctl_cli.main(["--live-file", str(path), *argv]) == 0
    return path


def _run(command: list[str], live_file: Path | None) -> Outcome:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    data = live_file.read_bytes() if live_file is not None and live_file.is_file() else None
    return Outcome(proc.returncode, proc.stdout, _TIMESTAMP.sub("<ts>", proc.stderr), data)


def both(live_file: Path | None, *argv: str) -> tuple[Outcome, Outcome]:
    """The console script's outcome and the full command line's, each from the same files."""
    before = live_file.read_bytes() if live_file is not None and live_file.exists() else None
    quick = _run([str(CONSOLE_SCRIPT), *argv], live_file)
    if live_file is not None and before is not None:
        live_file.write_bytes(before)
    full = _run([*FULL, *argv], live_file)
    return quick, full


def assert_same(live_file: Path | None, *argv: str) -> Outcome:
    quick, full = both(live_file, *argv)
    assert quick.code == full.code, (quick, full)
    assert quick.stdout == full.stdout
    assert quick.stderr == full.stderr
    assert quick.live == full.live, "the two paths left different live files"
    return quick


# -- the same answers -------------------------------------------------------------------


PLAIN = [
    ("status",),
    ("status", "--json"),
    ("status", "-i", "1"),
    ("status", "--gpu=1,0", "--json"),
    ("status", "-i=all"),
    ("--log-level", "debug", "status", "--log-format", "json"),
    ("xid", "-i", "0", "79"),
    ("xid", "79", "-i", "all"),
    ("xid", "--gpu=1", "4294967295"),
    ("--log-level", "warning", "xid", "-i", "1,0", "48"),
]


@needs_console_script
@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_plain_uses_answer_as_the_full_command_line(live_file: Path, argv: tuple[str, ...]) -> None:
    outcome = assert_same(live_file, "--live-file", str(live_file), *argv)
    assert outcome.code == 0, outcome.stderr
    assert outcome.stdout


def test_status_shows_what_the_live_file_holds(
    live_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ctl_quick.run(["--live-file", str(live_file), "status"]) == ctl.EXIT_OK
    table = capsys.readouterr().out.splitlines()
    assert table[1].endswith(" live     clocks_event_reasons=0x8 temperature_c=71")
    assert table[2].split()[2] == "armed"
    assert "temperature_c=92* " in table[2] and "pcie_cur_gen=3*" in table[2]
    assert "(* when triggered: at 2023-11-1" in table[2]
    assert table[3].startswith("allocations (1;")
    assert "ctl-4242" in table[5] and "2048MiB" in table[5] and "sine 80" in table[5]
    assert table[-1].startswith(f"live layer {live_file}, generation ")


def test_xid_reaches_the_event_ring(live_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ctl_quick.run(["--live-file", str(live_file), "xid", "-i", "0", "79"]) == ctl.EXIT_OK
    with live.LiveLayer.open(live_file) as layer:
        last = layer.events()[-1]
    assert (last.gpu, last.event_type, last.data, last.gpu_instance) == (0, 8, 79, None)
    assert capsys.readouterr().out.endswith(": events xid 79\n")


REFUSED = [
    ("status", "-i", "7"),
    ("status", "-i", "GPU-nope"),
    ("status", "-i", ""),
    ("status", "--json=yes"),
    ("status", "extra"),
    ("status", "--bogus"),
    ("status", "--js"),
    ("status", "-i"),
    ("--log-level", "loud", "status"),
    ("--log-format", "JSON", "status", "-i", "9"),
    ("--log-format", "json", "status", "-i", "9"),
    ("status", "--help"),
    ("xid", "-i", "7", "79"),
    ("xid", "-i", "0", "0"),
    ("xid", "-i", "0", "4294967296"),
    ("xid", "-i", "0", "seventy"),
    ("xid", "-i", "0", "-5"),
    ("xid", "-i", "0", "0x4f"),
    ("xid", "-i", "0", "079"),
    ("xid", "79"),
    ("xid", "-i", "0"),
    ("xid", "-i", "0", "79", "80"),
    ("xid", "-i", "0", "79", "--gi", "1"),
    ("xid", "-i", "0", "--", "79"),
    ("xid", "-i0", "79"),
]


@needs_console_script
@pytest.mark.parametrize("argv", REFUSED, ids=" ".join)
def test_edges_answer_as_the_full_command_line(live_file: Path, argv: tuple[str, ...]) -> None:
    assert_same(live_file, "--live-file", str(live_file), *argv)


@needs_console_script
@pytest.mark.parametrize(
    "argv",
    [("--help",), ("--version",), ("stat",), ("status", "--live-file")],
    ids=" ".join,
)
def test_other_words_go_to_the_full_command_line(live_file: Path, argv: tuple[str, ...]) -> None:
    assert_same(live_file, *argv)


@needs_console_script
@pytest.mark.parametrize("verb", [("status",), ("xid", "-i", "0", "79")], ids=["status", "xid"])
def test_no_board_state(tmp_path: Path, verb: tuple[str, ...]) -> None:
    outcome = assert_same(None, "--live-file", str(tmp_path / "none" / live.LIVE_FILE_NAME), *verb)
    assert outcome.code == ctl.EXIT_FAILURE and "no board state" in outcome.stderr


@needs_console_script
@pytest.mark.parametrize("verb", [("status",), ("xid", "-i", "0", "79")], ids=["status", "xid"])
def test_no_live_file_beside_the_state(write_state: StateWriter, verb: tuple[str, ...]) -> None:
    state = write_state()
    outcome = assert_same(None, "--live-file", str(state.parent / "elsewhere.nvmlmock"), *verb)
    assert outcome.code == ctl.EXIT_FAILURE, outcome


def _damage(path: Path, how: str) -> None:
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:4096])
        return
    with open(path, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:
        if how == "bad magic":
            mapped[0:4] = b"XXXX"
        elif how == "foreign record":
            at = layout.LIVE_RECORDS_OFFSET + layout.LIVE_RECORD_BYTES + layout.LIVE_RECORD_UUID
            mapped[at : at + 4] = b"GPU-"[::-1]
        elif how == "retired":
            struct.pack_into("<I", mapped, layout.LIVE_HEADER_FIELDS["retired"][1], 1)
        elif how == "torn record":  # a writer killed in the middle of GPU 1's record
            at = layout.LIVE_RECORDS_OFFSET + layout.LIVE_RECORD_BYTES + layout.LIVE_RECORD_SEQ
            seq = struct.unpack_from("<Q", mapped, at)[0]
            struct.pack_into("<Q", mapped, at, seq | 1)


DAMAGES = ["truncated", "bad magic", "foreign record", "retired", "torn record"]


@needs_console_script
@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize(
    "verb",
    [("status",), ("status", "-i", "0", "--json"), ("xid", "-i", "0", "79")],
    ids=["status", "status-json", "xid"],
)
def test_a_damaged_live_file(live_file: Path, how: str, verb: tuple[str, ...]) -> None:
    _damage(live_file, how)
    outcome = assert_same(live_file, "--live-file", str(live_file), *verb)
    if how != "torn record" or verb[0] == "xid":  # a writer repairs a torn record, says so
        assert outcome.stderr, outcome


@needs_console_script
def test_env_twins_and_the_flag_after_the_verb(
    live_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOCK_NVML_LIVE", str(live_file))
    monkeypatch.setenv("NVML_MOCK_LOG_FORMAT", "json")
    assert assert_same(live_file, "status", "-i", "1").code == 0
    assert assert_same(live_file, "xid", "-i", "5", "79").code == ctl.EXIT_VALUE
    # the flag after the verb wins over the one before it, which wins over the env twin
    elsewhere = str(live_file.parent / "missing" / live.LIVE_FILE_NAME)
    assert (
        assert_same(
            live_file, "--live-file", elsewhere, "status", "--live-file", str(live_file)
        ).code
        == 0
    )
    assert (
        assert_same(
            live_file, "--live-file", str(live_file), "status", "--live-file", elsewhere
        ).code
        == 1
    )
    monkeypatch.setenv("NVML_MOCK_KERNEL_LOG", "bogus")
    assert assert_same(live_file, "status").code == ctl.EXIT_VALUE


@needs_console_script
def test_xid_waits_for_the_writer_holding_the_lock(live_file: Path) -> None:
    lock = WritersLock.for_directory("live", guarded_directory(live_file))
    head_at = layout.LIVE_HEADER_FIELDS["event_head"][1]
    head = struct.unpack_from("<Q", live_file.read_bytes(), head_at)[0]
    try:
        with lock.held():
            child = subprocess.Popen(
                [str(CONSOLE_SCRIPT), "--live-file", str(live_file), "xid", "-i", "0", "79"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            _wait_blocked_on_a_lock(child)
            # while this writer holds the lock, the Xid is not written
            assert struct.unpack_from("<Q", live_file.read_bytes(), head_at)[0] == head
            assert child.poll() is None
        out, err = child.communicate(timeout=60)
    finally:
        lock.close()
    assert child.returncode == 0, err
    assert out.endswith(": events xid 79\n")
    assert struct.unpack_from("<Q", live_file.read_bytes(), head_at)[0] == head + 1


def _wait_blocked_on_a_lock(child: subprocess.Popen[str]) -> None:
    """Until *child* waits for an flock (``/proc/locks`` lists waiters with ``->``)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open("/proc/locks") as handle:
            waiting = [line for line in handle if "->" in line and f" {child.pid} " in line]
        if waiting:
            return
        if child.poll() is not None:
            pytest.fail(f"xid finished while another writer held the lock: {child.communicate()}")
        time.sleep(0.01)
    child.kill()
    pytest.fail("xid never waited for the writers' lock")


# -- which path answers -----------------------------------------------------------------


@pytest.mark.parametrize("argv", PLAIN, ids=" ".join)
def test_the_quick_path_answers_plain_uses(
    live_file: Path, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert ctl_quick.run(["--live-file", str(live_file), *argv]) == 0
    assert capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "how"),
    [*((argv, None) for argv in REFUSED), *((argv, how) for argv in PLAIN for how in DAMAGES)],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else str(value),
)
def test_the_quick_path_leaves_every_refusal_untouched(
    live_file: Path, argv: tuple[str, ...], how: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    if how is not None:
        _damage(live_file, how)
    before = live_file.read_bytes()
    assert ctl_quick.run(["--live-file", str(live_file), *argv]) is None
    assert capsys.readouterr() == ("", "")
    assert live_file.read_bytes() == before


@pytest.mark.parametrize(
    "env",
    [
        {"NVML_MOCK_KERNEL_LOG": "file:/dev/null"},
        {"NVML_MOCK_LOG_LEVEL": "INFO"},
        {"MOCK_NVML_LIVE": " spaced "},
        {"NVML_MOCK_OVERLAY_HOST_PATH": "relative"},
    ],
)
def test_other_spellings_go_to_the_full_command_line(
    live_file: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["status"] if "MOCK_NVML_LIVE" in env else ["--live-file", str(live_file), "status"]
    assert ctl_quick.run(argv, environ=env) is None
    assert capsys.readouterr() == ("", "")


def test_a_state_without_its_live_file_is_made_by_the_full_command_line(
    write_state: StateWriter, capsys: pytest.CaptureFixture[str]
) -> None:
    state = write_state()
    assert ctl_quick.run(["--state-file", str(state), "xid", "-i", "0", "79"]) is None
    assert not (state.parent / live.LIVE_FILE_NAME).exists()
    assert ctl.main(["--state-file", str(state), "xid", "-i", "0", "79"]) == 0
    assert (state.parent / live.LIVE_FILE_NAME).is_file()
    assert capsys.readouterr().out.endswith(": events xid 79\n")


@pytest.mark.parametrize(
    ("spelled", "plain"),
    [
        ("/a/b", True),
        ("a/b", True),
        ("/", True),
        ("a//b", False),
        ("./a", False),
        ("a/./b", False),
        ("a/", False),
        ("a/.", False),
        (".", False),
        ("", False),
        (" a", False),
    ],
)
def test_plain_paths_are_the_ones_pathlib_spells_alike(spelled: str, plain: bool) -> None:
    assert ctl_quick._plain(spelled) is plain
    if plain:
        assert str(Path(spelled)) == spelled


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"live_file": "x/live"},
        {"state_file": "s/state"},
        {"state_file": "state"},
        {"live_file": "/l/f", "state_file": "/s/f"},
        {"overlay_path": "/"},
        {"overlay_path": "/o"},
    ],
)
def test_the_paths_are_the_settings_paths(options: dict[str, str]) -> None:
    resolved = settings.CtlSettings(**{k: Path(v) for k, v in options.items()})
    assert ctl_quick._paths(options) == (str(resolved.live_path), str(resolved.state_path))


# -- the tables are the declaration's ---------------------------------------------------


def test_the_command_options_are_the_declared_ones() -> None:
    declared = [(o.field, o.flag, o.env) for o in (*settings.LOG_OPTIONS, *settings.CTL_OPTIONS)]
    assert list(ctl_quick.COMMAND_OPTIONS) == declared
    assert ctl_quick.ENV_KERNEL_LOG == settings.ENV_KERNEL_LOG
    assert ctl_quick._LOCATIONS == settings.LOCATION_FIELDS
    assert not any(o.aliases for o in (*settings.LOG_OPTIONS, *settings.CTL_OPTIONS))


def test_the_library_is_the_packages() -> None:
    assert os.path.realpath(ctl_quick._library_file()) == library_file()


def _verb_parser(verb: str) -> argparse.ArgumentParser:
    parser = ctl_cli._parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[verb]
            return sub
    raise AssertionError("no verbs")


@pytest.mark.parametrize("verb", list(ctl_quick.VERB_OPTIONS))
def test_the_verb_options_are_the_parsers(verb: str) -> None:
    command = {flag for _field, flag, _env in ctl_quick.COMMAND_OPTIONS}
    own = {
        flag: action.dest
        for action in _verb_parser(verb)._actions
        for flag in action.option_strings
        if flag not in command and flag not in ("-h", "--help")
    }
    # the MIG device, and the trigger flags the full command line refuses with the reason
    left_to_the_full_command_line = (
        {"--gi", "-gi", "--ci", "-ci", "--after-calls", "--probability", "--at"}
        if verb == "xid"
        else set()
    )
    known = dict(ctl_quick.VERB_OPTIONS[verb])
    assert {f: d for f, d in own.items() if f not in left_to_the_full_command_line} == known
