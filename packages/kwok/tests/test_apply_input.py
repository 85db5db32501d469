"""Bad input stops ``apply`` before its first request: a real loopback HTTP server stands in
for the API server and counts what reaches it (nothing may)."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from loopback import api_server
from nvml_mock_kwok.cli import EXIT_CONFIG, EXIT_FAILURE, main


class _Counting(BaseHTTPRequestHandler):
    seen: list[str] = []

    def _any(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._any()

    def do_PATCH(self) -> None:
        self._any()

    def do_POST(self) -> None:
        self._any()

    def do_PUT(self) -> None:
        self._any()

    def do_DELETE(self) -> None:
        self._any()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads ``seen``."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Counting,), {"seen": seen})
    with api_server(handler, tmp_path / "kubeconfig") as kubeconfig:
        yield kubeconfig, seen


def _plan(tmp_path: Path, nodes: int, *extra: str) -> Path:
    doc = tmp_path / "topology.yaml"
    assert main(["plan", "--nodes", str(nodes), *extra, "-o", str(doc)]) == 0
    return doc


def _refused_before_any_request(
    server: tuple[Path, list[str]],
    doc: Path,
    caplog: pytest.LogCaptureFixture,
    argv: list[str],
    message: str,
) -> None:
    """``apply`` of *doc* with *argv* exits with the config error naming *message*, without
    a traceback and before the server sees a request."""
    kubeconfig, seen = server
    code = main(["apply", "--topology", str(doc), "--kubeconfig", str(kubeconfig), *argv])
    assert code == EXIT_CONFIG, caplog.text
    assert message in caplog.text
    assert "Traceback" not in caplog.text
    assert seen == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "37"], "the topology document places 36 node(s); it cannot hold 37"),
        (["--profile", "rtx9000"], "profile 'rtx9000' has no recorded truth"),
        (["--mig-strategy", "mixed"], "no recorded truth"),
        (["--only", "kwok-gpu-99999"], "kwok-gpu-99999"),
        (["--domain-profile", "nvl72-0099=h100"], "nvl72-0099"),
    ],
)
def test_bad_input_makes_no_request(
    server: tuple[Path, list[str]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    argv: list[str],
    message: str,
) -> None:
    _refused_before_any_request(server, _plan(tmp_path, 36), caplog, argv, message)


def test_a_clique_one_nvlink_domain_cannot_hold_makes_no_request(
    server: tuple[Path, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig, seen = server
    code = main(["apply", "--nodes", "40", "--clique-size", "19", "--kubeconfig", str(kubeconfig)])
    assert code == EXIT_CONFIG
    assert "clique 0 has 19 nodes of 4 gb200 GPUs (76 GPUs); one NVLink domain holds 72" in (
        caplog.text
    )
    assert seen == []


def test_good_input_reaches_the_server_and_its_error_is_named(
    server: tuple[Path, list[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The counterpart: the same server does see a valid fleet's first request, so the
    tests above would notice a request made before the checks."""
    kubeconfig, seen = server
    code = main(["apply", "--topology", str(_plan(tmp_path, 18)), "--kubeconfig", str(kubeconfig)])
    assert code == EXIT_FAILURE
    assert seen and seen[0].startswith("PATCH /apis/kwok.x-k8s.io/v1alpha1/stages/")
    assert "HTTP 500" in caplog.text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cpu", "abc"], "--cpu 'abc': not a Kubernetes quantity"),
        (["--cpu", "0"], "--cpu '0': must be more than 0"),
        (["--memory", "1Zi"], "--memory '1Zi': not a Kubernetes quantity"),
        (["--pods", "1e3"], "--pods '1e3': must be a whole number of pods"),
        (["--arch", "a b"], "--arch 'a b': not a label value"),
        (["--slices-after-ready", "-1"], "--slices-after-ready -1.0: must be from 0"),
        (["--slices-after-ready", "nan"], "--slices-after-ready nan: must be from 0"),
        (["--slices-after-ready", "inf"], "--slices-after-ready inf: must be from 0"),
        (["--workers", "0"], "--workers 0: must be from 1 to 256"),
        (["--workers", "-1"], "--workers -1: must be from 1 to 256"),
        (["--context", "nope"], "has no context named 'nope'"),
    ],
)
def test_a_bad_flag_is_refused_naming_it_before_any_request(
    server: tuple[Path, list[str]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    argv: list[str],
    message: str,
) -> None:
    _refused_before_any_request(server, _plan(tmp_path, 18), caplog, argv, message)


def test_a_node_name_too_long_for_its_hostname_label_makes_no_request(
    server: tuple[Path, list[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig, seen = server
    name = "n" * 250
    doc = tmp_path / "long.yaml"
    doc.write_text(
        "version: 1\ndomains:\n  - name: d\n    uuid: 00000000-0000-0000-0000-0000000000ab\n"
        f"    cliques:\n      - id: 0\n        nodes: [{name}]\n",
        encoding="utf-8",
    )
    code = main(["apply", "--topology", str(doc), "--kubeconfig", str(kubeconfig)])
    assert code == EXIT_CONFIG, caplog.text
    assert "a node name of 250 characters; at most 63" in caplog.text
    assert seen == []
    code = main(["apply", "--nodes", "2", "--prefix", "p" * 70, "--kubeconfig", str(kubeconfig)])
    assert code == EXIT_CONFIG
    assert "--prefix 'ppp" in caplog.text
    assert seen == []


def test_plan_refuses_a_node_count_past_its_cap_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "plan.yaml"
    code = main(["plan", "--nodes", "100000000", "-o", str(out)])
    assert code == EXIT_CONFIG
    assert "--nodes 100000000: must be from 1 to 100,000 nodes" in caplog.text
    assert not out.exists()
