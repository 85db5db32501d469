"""The Dockerfile's build steps, checked without Docker.

What the image build runs must exist and be accepted by the tools it calls: the Make
target (asked of make itself, dry run), the ``nvml-mock-engine stage`` command line (parsed
by the engine's own argument parser), the ``nvml-mock-node-setup`` check, the packages it
turns into wheels and installs, the console scripts it starts. The Make target and the
stage command themselves run for real in CI through the nvml-engine env.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import CHART_DIR, REPO_ROOT
from nvml_mock_protocol import names

DOCKERFILE = REPO_ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / "deploy" / "Dockerfile.dockerignore"
COMPONENT_TARGETS = {"engine", "nri-plugin", "topology-service", "exporter"}


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def runs(self) -> list[str]:
        return [body for op, body in self.instructions if op == "RUN"]


def parse_dockerfile(text: str) -> list[Stage]:
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    stages: list[Stage] = []
    for line in logical:
        op, _, body = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            match = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", body.strip(), re.I)
            assert match, line
            stages.append(Stage(match.group(2) or str(len(stages)), match.group(1)))
        elif stages:
            stages[-1].instructions.append((op, body.strip()))
    return stages


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    return {stage.name: stage for stage in parse_dockerfile(DOCKERFILE.read_text())}


def shell_commands(run: str) -> list[list[str]]:
    """The simple commands of a RUN line (split on && and ;), RUN flags dropped."""
    body = re.sub(r"^(--\S+\s+)+", "", run)
    parts = re.split(r"\s*(?:&&|;)\s*", body)
    return [shlex.split(part) for part in parts if part.strip()]


def _pyprojects() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted((REPO_ROOT / "packages").glob("*/pyproject.toml")):
        found[path.parent.name] = tomllib.loads(path.read_text())["project"]
    return found


def test_one_dockerfile_three_component_targets(stages: dict[str, Stage]) -> None:
    assert set(stages) >= COMPONENT_TARGETS
    for target in COMPONENT_TARGETS:
        stage = stages[target]
        assert stage.base == "runtime", f"{target} must build on the runtime stage"
        ops = dict(stage.instructions)
        assert "ARG" in ops and ops["ARG"].startswith("VERSION")
        assert f'org.opencontainers.image.title="nvml-mock-{target}"' in ops["LABEL"]
        assert 'org.opencontainers.image.version="${VERSION}"' in ops["LABEL"]
    # No compiler in what ships: only the build stage installs one.
    for name, stage in stages.items():
        if name != "build":
            assert not any("gcc" in run for run in stage.runs()), name


def test_chart_repositories_are_the_built_images() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert values["image"]["repository"] == "nvml-mock-engine"
    assert values["nri"]["image"]["repository"] == "nvml-mock-nri-plugin"
    assert values["topology"]["image"]["repository"] == "nvml-mock-topology-service"
    assert values["exporter"]["image"]["repository"] == "nvml-mock-exporter"


def test_make_targets_exist(stages: dict[str, Stage]) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed; CI needs it for the nvml-engine env too")
    calls = [c for run in stages["build"].runs() for c in shell_commands(run) if c[0] == "make"]
    assert calls, "the build stage does not run make"
    for call in calls:
        directory = REPO_ROOT / call[call.index("-C") + 1]
        assert (directory / "Makefile").is_file(), directory
        targets = [
            arg for arg in call[1:] if not arg.startswith("-") and arg != call[call.index("-C") + 1]
        ]
        # -n: make resolves the targets and prints the recipes without running them.
        result = subprocess.run(
            [make, "-n", "-C", str(directory), *targets],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "No rule to make target" not in result.stderr


def test_every_package_becomes_a_wheel(stages: dict[str, Stage]) -> None:
    wheel_dirs: list[str] = []
    for run in stages["build"].runs():
        for call in shell_commands(run):
            if call[:4] == ["python", "-m", "pip", "wheel"]:
                wheel_dirs += [arg for arg in call[4:] if arg.startswith("./packages/")]
    packages = {f"./packages/{name}" for name in _pyprojects()}
    assert set(wheel_dirs) == packages
    # Dependencies first: protocol before the packages that need it.
    assert wheel_dirs[0] == "./packages/protocol"


def test_runtime_stages_install_real_distributions_and_start_their_scripts(
    stages: dict[str, Stage],
) -> None:
    projects = {p["name"]: p for p in _pyprojects().values()}
    copied_scripts = {"nvml-mock-node-setup"}
    for target in COMPONENT_TARGETS:
        installed: list[str] = []
        for run in stages[target].runs():
            for call in shell_commands(run):
                if call[:4] == ["python", "-m", "pip", "install"]:
                    assert "--no-index" in call, "runtime stages install only the built wheels"
                    installed += [a for a in call[4:] if not a.startswith("-")]
        assert installed, target
        assert set(installed) <= set(projects), installed
        scripts = {s for name in installed for s in projects[name].get("scripts", {})}
        entrypoint = dict(stages[target].instructions)["ENTRYPOINT"]
        (command, *_rest) = yaml.safe_load(entrypoint)
        assert command in scripts | copied_scripts, (target, command)


def test_copied_sources_exist_and_are_not_ignored(stages: dict[str, Stage]) -> None:
    ignore = [
        line for line in DOCKERIGNORE.read_text().splitlines() if line and not line.startswith("#")
    ]
    assert ignore[0] == "*"
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for stage in stages.values():
        for op, body in stage.instructions:
            if op != "COPY" or "--from" in body:
                continue
            sources = [a for a in shlex.split(body) if not a.startswith("--")][:-1]
            for source in sources:
                assert (REPO_ROOT / source).exists(), source
                assert any(source.rstrip("/").startswith(k) for k in kept), source


def _engine_cli() -> Any:
    """The engine's command line with the node's commands, both from their source trees."""
    sources = [str(REPO_ROOT / "packages" / p / "src") for p in ("nvml-engine", "node")]
    sys.path[:0] = sources
    try:
        from nvml_mock_engine import cli
        from nvml_mock_node.commands import AGENT, STAGE
    finally:
        for source in sources:
            sys.path.remove(source)
    return lambda argv, environ: cli.parse_settings(argv, environ, (STAGE, AGENT))


def test_the_stage_step_is_the_engines_command_line(stages: dict[str, Stage]) -> None:
    calls = [c for run in stages["engine"].runs() for c in shell_commands(run)]
    (stage_call,) = [c for c in calls if c[:2] == ["nvml-mock-engine", "stage"]]
    parsed = _engine_cli()(stage_call[1:], {})
    # Staged where workloads see it, so the launchers' paths are the real ones.
    assert str(parsed.dir) == names.OVERLAY_MOUNT_PATH
    assert parsed.mount_path == names.OVERLAY_MOUNT_PATH
    profiles = REPO_ROOT / "packages/nvml-engine/src/nvml_mock_engine/profiles"
    assert (profiles / f"{parsed.profile}.yaml").is_file()
    assert parsed.no_devices, "image builds cannot mknod"

    # The staged tools then run with an empty environment, from the overlay itself.
    tools = [c for c in calls if c[:2] == ["env", "-i"]]
    ran = {next(a for a in c[2:] if "=" not in a) for c in tools}
    assert ran == {
        f"{names.OVERLAY_MOUNT_PATH}/{names.OVERLAY_BIN_DIR}/nvidia-smi",
        f"{names.OVERLAY_MOUNT_PATH}/{names.OVERLAY_BIN_DIR}/check-fabric",
    }
    (check,) = [c for c in calls if c[:1] == ["nvml-mock-node-setup"]]
    assert check[1] == "check"
    assert check[check.index("--overlay-dir") + 1] == names.OVERLAY_MOUNT_PATH


def test_check_fabric_step_flags_exist(stages: dict[str, Stage]) -> None:
    calls = [c for run in stages["engine"].runs() for c in shell_commands(run)]
    (call,) = [c for c in calls if any(a.endswith("/check-fabric") for a in c)]
    args = call[next(i for i, a in enumerate(call) if a.endswith("/check-fabric")) + 1 :]
    source = (REPO_ROOT / "packages/check-fabric/src/check_fabric/settings.py").read_text()
    for flag in (a for a in args if a.startswith("--")):
        assert f'"{flag}"' in source, f"check-fabric has no {flag}"


# Parser directives are `# key=value` comments before the first instruction or other comment
# line; BuildKit matches the key case-insensitively and allows spaces around it.
_DIRECTIVE = re.compile(r"^#\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(.*)$")
# Instruction flags the Dockerfile frontend built into BuildKit knows (Docker 23+ and buildx
# ship frontend 1.5 or later; buildah reads the same flags). A flag from a newer or labs
# frontend would need a syntax directive, and so a registry.
_BUILTIN_FLAGS = {
    "RUN": {"--mount", "--network", "--security"},
    "COPY": {"--from", "--chown", "--chmod", "--link"},
    "ADD": {"--chown", "--chmod", "--link"},
    "FROM": {"--platform"},
}


def parser_directives(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _DIRECTIVE.match(line.strip())
        if not match:
            break
        found[match.group(1).lower()] = match.group(2)
    return found


def _dockerfiles() -> list[Path]:
    return sorted(
        path
        for path in (REPO_ROOT / "deploy").rglob("*Dockerfile*")
        if path.is_file() and not path.name.endswith(".dockerignore")
    )


def test_parser_directives_are_found_where_buildkit_reads_them() -> None:
    assert parser_directives("# syntax=docker/dockerfile:1.7\nFROM x\n") == {
        "syntax": "docker/dockerfile:1.7"
    }
    assert parser_directives("#  SYNTAX = example.com/front:1\n# escape=`\n") == {
        "syntax": "example.com/front:1",
        "escape": "`",
    }
    assert parser_directives("# a comment\n# syntax=x\n") == {}, "only before other comments"
    assert parser_directives("FROM x\n# syntax=x\n") == {}


@pytest.mark.parametrize("path", _dockerfiles(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_the_dockerfile_needs_no_external_frontend(path: Path) -> None:
    """No ``# syntax=`` line: BuildKit would pull that frontend image before building."""
    text = path.read_text()
    assert "syntax" not in parser_directives(text), (
        f"{path.name} names a Dockerfile frontend image; air-gapped builders cannot fetch it"
    )
    for stage in parse_dockerfile(text):
        for op, body in stage.instructions:
            leading = set()
            for word in body.split():
                if not word.startswith("--"):
                    break
                leading.add(word.split("=", 1)[0])
            unknown = leading - _BUILTIN_FLAGS.get(op, set())
            assert not unknown, f"{op} {sorted(unknown)} in stage {stage.name}"


@pytest.mark.parametrize("package", ["nvml-engine", "cuda"])
def test_the_build_stage_installs_the_header_packages_each_library_needs(package: str) -> None:
    """The build stage runs the packages' Makefiles before any wheel is built, so the
    header distributions their build backends would install (NVIDIA's nvml.h, cuda.h, the
    CUDA 12 runtime API and crt/ headers) must be installed by the stage itself: a missing
    one fails the image build in make, as a CUDA 12 header once did."""
    project = tomllib.loads((REPO_ROOT / "packages" / package / "pyproject.toml").read_text())
    headers = [r for r in project["build-system"]["requires"] if r.startswith("nvidia-")]
    installed = " ".join(
        body
        for body in " ".join(DOCKERFILE.read_text().splitlines()).split("RUN ")
        if "pip install" in body
    )
    for requirement in headers:
        assert f"'{requirement}'" in installed, f"the build stage does not install {requirement}"
