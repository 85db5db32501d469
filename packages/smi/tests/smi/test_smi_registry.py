"""The work-alike's command registry: the rules its contract states, and that the parser and
the runner read nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from nvml_mock_smi import _registry, main
from nvml_mock_smi._errors import SmiError
from nvml_mock_smi._options import Options, common_fields, parse
from nvml_mock_smi._registry import Command, Option
from smi_fixtures.helpers import render_profile


def test_every_module_declares_commands() -> None:
    names = [c.name for c in _registry.commands()]
    assert len(names) == len(set(names))
    assert {"table", "list", "report", "query-gpu", "query-apps", "topo", "nvlink", "reset"} <= set(
        names
    )


def test_top_level_commands_share_flags_through_one_option() -> None:
    seen: dict[str, tuple[Option, str]] = {}
    for command in _registry.top_level():
        for option in command.options:
            for name in option.names:
                first = seen.setdefault(name, (option, command.name))
                assert first[0] is option, f"{name}: {first[1]} and {command.name} differ"


def test_each_key_selects_at_most_one_command_and_one_default() -> None:
    top = _registry.top_level()
    keys = [k for c in top for k in c.select]
    assert len(keys) == len(set(keys))
    assert [c.name for c in top if not c.select] == ["table"]
    assert _registry.default_mode().name == "table"
    for command in _registry.commands():
        assert set(command.select) <= command.keys(), command.name
        assert bool(command.word) != bool(command.select) or command.name == "table"


def test_sub_command_words_are_unique() -> None:
    words = [c.word for c in _registry.commands() if c.word]
    assert sorted(words) == sorted(set(words))


def test_loading_the_registry_imports_no_renderer() -> None:
    # -L loads every command module on each run; the renderers and ctypes come later
    script = (
        "import sys\n"
        "from nvml_mock_smi import _registry\n"
        "_registry.commands()\n"
        "ours = ('nvml_mock_engine', 'nvml_mock_smi')\n"
        "mods = sorted(m for m in sys.modules if m.startswith(ours))\n"
        "print('ctypes' in sys.modules, *mods)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    allowed = {
        "nvml_mock_smi",
        "nvml_mock_smi._registry",
        "nvml_mock_smi._options",
        "nvml_mock_smi._errors",
        "nvml_mock_smi._commands",
    }
    allowed |= {f"nvml_mock_smi._commands.{m}" for m in _registry.COMMAND_MODULES}
    ctypes_loaded, *modules = proc.stdout.split()
    assert set(modules) <= allowed
    assert "nvml_mock_smi._commands.list" in modules
    assert ctypes_loaded == "False"


def test_each_command_line_loads_only_the_modules_it_needs(
    library_file: Path, tmp_path: Path
) -> None:
    state = render_profile("t4", 1, tmp_path / "t4.nvmlmock")
    env = {**os.environ, "MOCK_NVML_CONFIG": str(state)}

    def loaded(*argv: str) -> set[str]:
        script = (
            "import sys\n"
            "from nvml_mock_smi import main\n"
            f"rc = main([*{argv!r}, '--nvml-lib', {str(library_file)!r}])\n"
            "print(rc, *sorted(m for m in sys.modules if '._commands.' in m))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        rc, *modules = proc.stdout.splitlines()[-1].split()
        assert rc == "0", proc.stdout
        return {m.rsplit(".", 1)[1] for m in modules}

    # the parser reads the mode modules in order only until it knows every flag given
    assert loaded("-L") == {"list"}
    assert loaded() == {"table"}
    assert loaded("-q", "-i", "0") == {"list", "query", "report"}
    assert loaded("topo", "-m") == {"topo"}
    assert loaded("-h") == set(_registry.MODE_MODULES) - {"table"}


@pytest.fixture
def extra_command(monkeypatch: pytest.MonkeyPatch) -> list[Options]:
    """A sub-command registered the way a new module would be, removed afterwards."""
    ran: list[Options] = []

    def build(values: Mapping[str, str], environ: Mapping[str, str]) -> Options:
        return Options(command="probe", extra=values, **common_fields(values, environ))

    def run(options: Options, write: Callable[[str], None]) -> int:
        ran.append(options)
        write(f"probe {options.extra.get('count', '-')}\n")
        return 7

    count = Option(("-c", "--count"), "count", value=True)
    command = Command("probe", word="probe", options=(count, _registry.ID), build=build, run=run)
    # what adding "probe" to SUBCOMMAND_MODULES and writing _commands/probe.py would do
    words = (*_registry.SUBCOMMAND_MODULES, "probe")
    monkeypatch.setattr(_registry, "SUBCOMMAND_MODULES", words)
    monkeypatch.setitem(_registry._loaded, "probe", (command,))
    return ran


def test_a_registered_sub_command_parses_and_runs_with_no_other_change(
    extra_command: list[Options], capsys: pytest.CaptureFixture[str]
) -> None:
    options = parse(["probe", "-c", "3", "-i", "0,1"], {})
    assert (options.command, options.ids, options.extra["count"]) == ("probe", ("0", "1"), "3")
    # its -c is its own: at the top level -c is the compute mode, and it refuses the others' flags
    assert parse(["-c", "3"], {}).command == "set-compute-mode"
    with pytest.raises(SmiError):
        parse(["probe", "-L"], {})
    assert main(["probe", "--count=9"]) == 7
    assert capsys.readouterr().out == "probe 9\n"


def test_options_carry_their_command() -> None:
    assert parse(["-q"], {}).command == "report"
    assert parse(["nvlink", "-s"], {}).command == "nvlink"
    assert parse(["--query-compute-apps=pid", "--format=csv"], {}).command == "query-apps"
    assert parse([], {}).command == "table"


def test_the_readme_names_every_command_module() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    for name in _registry.COMMAND_MODULES:
        assert f"_commands/{name}.py" in readme, name
