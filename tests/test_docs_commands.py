"""The commands the docs show work as written.

Every command line of a shell block in README.md, CONTRIBUTING.md and the packages' READMEs
is either run here (the README's own walk-through: render, the library through nvidia-smi and
nvidia-ml-py, every ``nvml-mock-ctl`` line; CONTRIBUTING's ``make … index`` and ``make fuzz``)
or covered by the test or CI step named in :data:`COVERED`, or needs a tool named in
:data:`NEEDS`, checked for and skipped with its name. A new command in the docs that is none of
these fails :func:`test_every_documented_command_is_accounted_for`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(ROOT.glob("packages/*/README.md"))]
BIN = Path(sys.executable).parent

RUN_HERE = {"nvml-mock-engine", "nvml-mock-smi", "nvml-mock-ctl", "python", "export"}
COVERED = {
    "make": "the Makefile's targets: make test and make demo are CI (.ci/run), make dist is "
    "tests/test_release.py, make -C … index / fuzz run here",
    "python3": "the README's venv: tests/test_release.py installs into a fresh venv",
    "pip": "tests/test_release.py installs the built wheels into a fresh venv",
    "tox": "the tox envs themselves (make test runs them)",
    ".venv/bin/tox": "the tox envs themselves (make test runs them)",
    "check-fabric": "packages/check-fabric/tests run the command against the real library",
    "nvml-mock-topology-service": "packages/topology-service/tests start it (real uvicorn)",
    "nvml-mock-nri-plugin": "packages/nri-plugin/tests run it against the runtime double",
    "bench/run.sh": "the engine's benchmark (figures in its README)",
    "curl": "packages/topology-service/tests make the same requests over HTTP",
    "nvml-mock-imex": "packages/imex/tests run the daemon as processes on loopback",
    "nvml-mock-imex-ctl": "packages/imex/tests run it against those daemons",
    "nvml-mock-exporter": "packages/exporter/tests start it as a process over the real library "
    "and scrape it (also with a real Prometheus)",
}
NEEDS = {"kubectl": "kubectl", "helm": "helm", "kind": "kind", "docker": "docker"}
_ASSIGNMENT = re.compile(r"[A-Z_][A-Z0-9_]*=\S*")


def _command_lines() -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", text, re.DOTALL):
            for raw in block.splitlines():
                line = raw.strip().removeprefix("$ ")
                if line and not line.startswith("#"):
                    found.append((doc, line))
    return found


def _program(line: str) -> str:
    words = [w for w in line.split() if not _ASSIGNMENT.fullmatch(w)]
    return words[0] if words else "export"


def test_every_documented_command_is_accounted_for() -> None:
    unknown = sorted(
        {
            f"{doc.relative_to(ROOT)}: {line}"
            for doc, line in _command_lines()
            if _program(line) not in RUN_HERE | set(COVERED) | set(NEEDS)
            and re.match(r"[./a-z]", _program(line))
        }
    )
    assert not unknown, "commands in the docs no test runs or names:\n" + "\n".join(unknown)


@pytest.mark.parametrize("tool", sorted(NEEDS))
def test_commands_that_need_a_tool_say_which(tool: str) -> None:
    lines = [line for _, line in _command_lines() if _program(line) == tool]
    if shutil.which(NEEDS[tool]) is None:
        pytest.skip(f"{NEEDS[tool]} is not installed: the docs' {len(lines)} {tool} command(s)")
    assert all(line.split()[0] == tool or _program(line) == tool for line in lines)


def _readme_block(heading: str) -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(heading, 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, heading
    return [line for line in block.group(1).splitlines() if line.strip()]


def _run(line: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(line, comments=True)
    program = shutil.which(argv[0], path=str(BIN)) or argv[0]
    return subprocess.run(
        [program, *argv[1:]],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_readme_walk_through_works_as_written(tmp_path: Path) -> None:
    """ "Without Kubernetes", then "GPUs that change while they are used": the same shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOCK_", "NVML_MOCK_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["NVML_MOCK_HOST_PATH"] = str(tmp_path / "no-overlay")  # the README sets none
    state = tmp_path / "state.nvmlmock"
    for written in _readme_block("Without Kubernetes, the library works on its own:"):
        if written.startswith(("python3 -m venv", "pip install")):
            continue  # the venv and install: tests/test_release.py, in a fresh venv
        line = written.replace("/tmp/state.nvmlmock", str(state))
        if line.startswith("export "):
            library = _run("nvml-mock-engine lib-path", env, tmp_path).stdout.strip()
            env["LD_LIBRARY_PATH"] = str(Path(library).parent)
            env["MOCK_NVML_CONFIG"] = str(state)
            continue
        done = _run(line, env, tmp_path)
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
        if line.startswith("python -c"):
            assert done.stdout.strip() == "8"
        if line.startswith("nvml-mock-smi"):
            assert "NVIDIA-SMI" in done.stdout and "H100" in done.stdout
    uuid = re.search(r"uuid=(GPU-[0-9a-f-]+)", state.read_text()).group(1)  # type: ignore[union-attr]
    for written in _readme_block("`nvml-mock-ctl` writes it:"):
        line = written.replace("GPU-…", uuid)
        done = _run(line, env, tmp_path)
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"


def test_contributings_native_targets_find_nvml_h(tmp_path: Path) -> None:
    """``make -C packages/nvml-engine/native index`` with a python3 that has no nvml.h."""
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("make and cc are needed for the native targets")
    native = ROOT / "packages/nvml-engine/native"
    env = {**os.environ, "PYTHON": "false"}
    done = subprocess.run(
        ["make", "-s", "-C", str(native), "print-nvml-include", "PYTHON=false"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0 and not (ROOT / ".tox/native/bin/python").exists():
        pytest.skip("no .tox/native venv yet (tox run -e native makes it)")
    assert done.returncode == 0, done.stderr
    assert (Path(done.stdout.strip()) / "nvml.h").is_file()
    index = subprocess.run(
        ["make", "-s", "-C", str(native), "index-check", "PYTHON=false", f"BUILD={tmp_path}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert index.returncode == 0, index.stdout + index.stderr


def test_contributings_make_fuzz_finds_nvml_h() -> None:
    """``make fuzz`` (CONTRIBUTING, "Fuzzing and sanitizers") with a python3 lacking nvml.h."""
    if shutil.which("clang") is None:
        pytest.skip("clang is needed for make fuzz (apt-get install clang)")
    if not (ROOT / ".tox/native/bin/python").exists():
        pytest.skip("no .tox/native venv yet (tox run -e native makes it)")
    done = subprocess.run(
        ["make", "-s", "-C", str(ROOT / "packages/nvml-engine/native"), "fuzz", "PYTHON=false"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "nvml.h not found" not in done.stderr
