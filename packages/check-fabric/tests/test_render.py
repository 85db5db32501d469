"""The reference's text lines, stderr verdict lines and the JSON document."""

from __future__ import annotations

import io
import json

import pytest
from check_fabric.checks import Expectations, evaluate
from check_fabric.errors import CheckFabricError, ConfigError, IdentityLookupError, NvmlCallError
from check_fabric.model import (
    FabricInfo,
    GpuFabric,
    Identity,
    TopologyAnswer,
    format_cluster_uuid,
    normalize_cluster_uuid,
)
from check_fabric.render import TextReport, discovered_line, gpu_lines, report_doc
from fabric_values import UUID_A, gpu


def test_discovered_line() -> None:
    assert discovered_line(4) == "Discovered 4 GPU(s)"
    assert discovered_line(0) == "Discovered 0 GPU(s)"


def test_gpu_block_is_the_reference_format() -> None:
    assert gpu_lines(gpu(2, clique=1)) == [
        "GPU 2 (GPU-00000002-0000-0000-0000-000000000000)",
        f"  clusterUuid : {UUID_A}",
        "  cliqueId    : 1",
        "  state       : completed (3)",
    ]


@pytest.mark.parametrize(
    ("state", "text"),
    [(0, "not_supported (0)"), (1, "not_started (1)"), (2, "in_progress (2)"), (9, "unknown (9)")],
)
def test_state_names(state: int, text: str) -> None:
    assert gpu_lines(gpu(0, state=state))[3] == f"  state       : {text}"


def test_not_supported_line() -> None:
    assert gpu_lines(GpuFabric(1, "GPU-x", None)) == ["GPU 1 (GPU-x): fabric NOT SUPPORTED"]


def test_cluster_uuid_bytes_render_lowercase_8_4_4_4_12() -> None:
    raw = bytes.fromhex("ABCDEF0123456789ABCDEF0123456789")
    assert format_cluster_uuid(raw) == "abcdef01-2345-6789-abcd-ef0123456789"
    with pytest.raises(ValueError, match="16 bytes, got 3"):
        format_cluster_uuid(b"abc")


def test_normalize_cluster_uuid() -> None:
    assert normalize_cluster_uuid(" ABCDEF01-2345-6789-ABCD-EF0123456789 ") == (
        "abcdef01-2345-6789-abcd-ef0123456789"
    )
    with pytest.raises(ValueError, match="'nope' is not a UUID"):
        normalize_cluster_uuid("nope")


def test_text_report_keeps_stdout_to_the_reference_lines_and_reports_checks_on_stderr() -> None:
    out, err = io.StringIO(), io.StringIO()
    report = TextReport(out, err)
    gpus = [gpu(0), gpu(1, clique=1)]
    report.discovered(2)
    for g in gpus:
        report.gpu(g)
    report.finish(evaluate(gpus, Expectations(clique_id=0)))
    assert out.getvalue().splitlines() == [
        "Discovered 2 GPU(s)",
        *gpu_lines(gpus[0]),
        *gpu_lines(gpus[1]),
    ]
    assert err.getvalue().splitlines() == [
        f"consistency: MISMATCH: GPUs disagree: GPU 0: clusterUuid {UUID_A} cliqueId 0; "
        f"GPU 1: clusterUuid {UUID_A} cliqueId 1",
        "expect-clique: MISMATCH: expected cliqueId 0, but GPU 1 reports cliqueId 1",
    ]


def test_text_report_is_silent_on_stderr_when_only_the_default_check_passes() -> None:
    out, err = io.StringIO(), io.StringIO()
    TextReport(out, err).finish(evaluate([gpu(0)], Expectations()))
    assert err.getvalue() == ""


def test_nvml_errors_keep_the_reference_prefix() -> None:
    err = io.StringIO()
    TextReport(io.StringIO(), err).fail(
        NvmlCallError("GetGpuFabricInfo", 15, "NVML_ERROR_GPU_IS_LOST", "GPU is lost", index=3)
    )
    assert err.getvalue() == "GetGpuFabricInfo[3]: GPU is lost (NVML_ERROR_GPU_IS_LOST, code 15)\n"


def test_json_document_for_a_verdict() -> None:
    gpus = [
        gpu(0, clique=1),
        GpuFabric(1, "GPU-b", FabricInfo(UUID_A, 1, 3, 0, None, None, "v1")),
        GpuFabric(2, "GPU-c", None),
    ]
    answer = TopologyAnswer("http://t/v1/nodes/w/identity", "w", Identity(UUID_A, 1), "cd", 7)
    verdict = evaluate(gpus, Expectations(topology=answer))
    doc = report_doc(gpu_count=3, gpus=gpus, verdict=verdict, topology=answer, error=None, api="v3")
    doc = json.loads(json.dumps(doc))
    assert doc["schemaVersion"] == 1
    assert (doc["verdict"], doc["exitCode"], doc["gpuCount"]) == ("not_supported", 2, 3)
    assert doc["identity"] == {"clusterUuid": UUID_A, "cliqueId": 1}
    assert doc["gpus"][0]["fabric"] == {
        "supported": True,
        "clusterUuid": UUID_A,
        "cliqueId": 1,
        "state": "completed",
        "stateCode": 3,
        "status": 0,
        "healthMask": 0x1AA,
        "healthSummary": "healthy",
        "api": "v3",
    }
    assert doc["gpus"][1]["fabric"]["healthMask"] is None
    assert doc["gpus"][2] == {"index": 2, "uuid": "GPU-c", "fabric": {"supported": False}}
    assert doc["unsupported"] == [2]
    assert [c["name"] for c in doc["checks"]] == ["consistency", "topology"]
    assert doc["topology"] == {
        "url": "http://t/v1/nodes/w/identity",
        "node": "w",
        "inClique": True,
        "identity": {"clusterUuid": UUID_A, "cliqueId": 1},
        "domain": "cd",
        "revision": 7,
        "detail": None,
    }
    assert doc["error"] is None


@pytest.mark.parametrize(
    ("error", "fields"),
    [
        (
            NvmlCallError("nvmlInit", 999, "NVML_ERROR_UNKNOWN", "state line 3: bad key"),
            {"kind": "nvml", "call": "nvmlInit", "index": None, "code": 999},
        ),
        (
            IdentityLookupError("http://t/x", "HTTP 500: boom"),
            {"kind": "topology", "url": "http://t/x"},
        ),
        (ConfigError("--expect-clique", "x", "bad"), {"kind": "config", "key": "--expect-clique"}),
    ],
)
def test_json_document_for_an_error(error: CheckFabricError, fields: dict[str, object]) -> None:
    doc = report_doc(gpu_count=None, gpus=[], verdict=None, topology=None, error=error, api=None)
    assert (doc["verdict"], doc["exitCode"]) == ("error", 1)
    assert doc["error"]["message"] == str(error)
    assert fields.items() <= doc["error"].items()
