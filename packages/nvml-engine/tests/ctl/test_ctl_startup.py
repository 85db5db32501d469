"""What ``nvml-mock-ctl status`` and ``xid`` load at start-up, held as behaviour rather than time.

Scripts call them in loops; the verbs that read or write the live layer need neither the HTTP
and TLS stack (only the ``scenario`` verb talks to the topology service) nor the installed
distributions' metadata (the command names its own library), and on their quick path
(``ctl_quick``) none of the standard library's heavier modules either: the installed console
script, run as a user runs it, imports nothing of argparse, logging, typing, re, dataclasses,
enum or pathlib, and neither verb loads the ``ctypes`` package. ``bench/ctl_bench.py``
measures the wall time beside the bare interpreter's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nvml_mock_live as live
import pytest
from conftest import StateWriter
from test_ctl_quick import CONSOLE_SCRIPT, needs_console_script

HEAVY = frozenset(
    {
        "email.message",
        "http.client",
        "importlib.metadata",
        "ssl",
        "urllib.request",
    }
)
"""Modules that cost a measurable share of a run and that these verbs never need."""
QUICK_NEVER = HEAVY | {
    "argparse",
    "collections",
    "contextlib",
    "dataclasses",
    "datetime",
    "enum",
    "functools",
    "inspect",
    "logging",
    "pathlib",
    "re",
    "socket",
    "typing",
}
"""What the quick path of the live verbs never loads (each is a millisecond or more)."""


@pytest.fixture
def live_file(write_state: StateWriter) -> Path:
    state = write_state()
    return live.create(state.parent / live.LIVE_FILE_NAME, live.read_board(state))


@pytest.mark.parametrize("argv", [("status",), ("xid", "-i", "0", "79")], ids=["status", "xid"])
def test_live_verbs_load_no_network_or_metadata_module(
    argv: tuple[str, ...], live_file: Path
) -> None:
    # started as the console script starts it: the module imported, then main()
    script = (
        "import sys, json\n"
        "before = set(sys.modules)\n"
        "from nvml_mock_engine.ctl import main\n"
        "code = main(sys.argv[1:])\n"
        "sys.stderr.write(json.dumps([code, sorted(set(sys.modules) - before)]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, "--live-file", str(live_file), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    code, loaded = json.loads(proc.stderr.splitlines()[-1])
    assert code == 0, proc.stdout + proc.stderr
    assert sorted(HEAVY & set(loaded)) == []


def test_the_scenario_verb_still_reaches_the_service_stack(live_file: Path) -> None:
    """The lazy import is where the verb needs it: an unreachable service is named."""
    script = "import sys\nfrom nvml_mock_engine.ctl import main\nsys.exit(main(sys.argv[1:]))\n"
    proc = subprocess.run(
        [sys.executable, "-c", script, "scenario", "list", "--url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "cannot reach the topology service at http://127.0.0.1:9" in proc.stderr


@needs_console_script
@pytest.mark.parametrize(
    ("argv", "allowed"),
    [
        (("status",), set()),
        # the json module itself brings re (its scanner), and re its enum and functools
        (("status", "--json"), {"json", "re", "enum", "functools", "collections"}),
        (("xid", "-i", "0", "79"), set()),
    ],
    ids=["status", "status-json", "xid"],
)
def test_the_console_script_loads_only_what_its_verb_needs(
    argv: tuple[str, ...], allowed: set[str], live_file: Path
) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            str(CONSOLE_SCRIPT),
            "--live-file",
            str(live_file),
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    loaded = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "nvml_mock_engine.ctl_quick" in loaded
    assert sorted((QUICK_NEVER | {"json"}) - allowed & loaded) == []
    # status reads with plain mmap reads; xid binds its one primitive on ctypes' C core
    # (nvml_mock_live.library.event_sender): the ctypes package would double what it adds
    assert "ctypes" not in loaded
    assert ("_ctypes" in loaded) == (argv[0] == "xid")
