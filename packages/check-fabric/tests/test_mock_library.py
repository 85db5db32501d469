"""check-fabric against the real mock libnvidia-ml.so.1: every exit code, both output forms."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import RenderState, RunCheck
from fabric_values import (
    CD_UUID,
    PROFILE_DEFAULT_UUID,
    fabric_env,
    state_health_mask,
    state_uuids,
)


def _blocks(
    uuids: list[str], cluster_uuid: str, clique: int, state: str = "completed (3)"
) -> list[str]:
    lines = []
    for index, uuid in enumerate(uuids):
        lines += [
            f"GPU {index} ({uuid})",
            f"  clusterUuid : {cluster_uuid}",
            f"  cliqueId    : {clique}",
            f"  state       : {state}",
        ]
    return lines


def test_gb200_with_the_injected_identity_exits_0_in_the_reference_format(
    render_state: RenderState, run_check: RunCheck
) -> None:
    state = render_state("gb200", 4)
    upper = {"MOCK_FABRIC_CLUSTER_UUID": CD_UUID.upper(), "MOCK_FABRIC_CLIQUE_ID": "1"}
    done = run_check(state, env=upper)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Discovered 4 GPU(s)",
        *_blocks(state_uuids(state), CD_UUID, 1),
    ]
    assert done.stderr == ""


def test_gb200_without_injection_reports_the_profile_default(
    render_state: RenderState, run_check: RunCheck
) -> None:
    state = render_state("gb200", 2)
    done = run_check(state)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == _blocks(state_uuids(state), PROFILE_DEFAULT_UUID, 0)


def test_console_script_is_the_same_command(
    render_state: RenderState, run_check: RunCheck, console_script: Callable[[str], str]
) -> None:
    state = render_state("gb200", 4)
    module = run_check(state, env=fabric_env())
    script = run_check(state, env=fabric_env(), command=[console_script("check-fabric")])
    assert (script.returncode, script.stdout) == (module.returncode, module.stdout)


def test_non_fabric_profile_exits_2_and_says_not_supported_per_gpu(
    render_state: RenderState, run_check: RunCheck
) -> None:
    state = render_state("t4", 3)
    done = run_check(state, env=fabric_env())
    assert done.returncode == 2, done.stderr
    uuids = state_uuids(state)
    assert done.stdout.splitlines() == [
        "Discovered 3 GPU(s)",
        *[f"GPU {i} ({u}): fabric NOT SUPPORTED" for i, u in enumerate(uuids)],
    ]


def test_one_gpu_without_fabric_exits_2_after_reporting_all(
    render_state: RenderState, run_check: RunCheck
) -> None:
    state = render_state("gb200", 4, config={"gpus": {2: {"fabric_attached": 0}}})
    done = run_check(state, env=fabric_env())
    assert done.returncode == 2, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Discovered 4 GPU(s)"
    assert f"GPU 2 ({state_uuids(state)[2]}): fabric NOT SUPPORTED" in lines
    assert lines[-1] == "  state       : completed (3)"  # GPU 3 still reported


@pytest.mark.parametrize(
    ("args", "check", "stderr"),
    [
        (
            ["--expect-clique", "2"],
            "expect-clique",
            "expected cliqueId 2, but GPU 0 reports cliqueId 1",
        ),
        (
            ["--expect-cluster-uuid", "11111111-2222-3333-4444-555555555555"],
            "expect-cluster-uuid",
            "expected clusterUuid 11111111-2222-3333-4444-555555555555, but GPU 0 reports "
            f"clusterUuid {CD_UUID}",
        ),
    ],
)
def test_expectations_that_fail_exit_3(
    render_state: RenderState, run_check: RunCheck, args: list[str], check: str, stderr: str
) -> None:
    state = render_state("gb200", 4)
    done = run_check(state, *args, env=fabric_env(clique=1))
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith(f"{check}: MISMATCH: {stderr}")
    assert done.stdout.splitlines()[0] == "Discovered 4 GPU(s)"


def test_expectations_that_hold_exit_0_and_say_so(
    render_state: RenderState, run_check: RunCheck
) -> None:
    state = render_state("gb200", 4)
    args = ["--expect-clique", "1", "--expect-cluster-uuid", CD_UUID.upper()]
    done = run_check(state, *args, env=fabric_env(clique=1))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "expect-clique: ok: every fabric GPU reports cliqueId 1",
        f"expect-cluster-uuid: ok: every fabric GPU reports clusterUuid {CD_UUID}",
    ]


def test_expectations_from_env_twins(render_state: RenderState, run_check: RunCheck) -> None:
    state = render_state("gb200", 4)
    env = fabric_env(clique=1) | {"CHECK_FABRIC_EXPECT_CLIQUE": "0"}
    assert run_check(state, env=env).returncode == 3
    assert run_check(state, "--expect-clique", "1", env=env).returncode == 0


def test_gpus_that_disagree_exit_3(render_state: RenderState, run_check: RunCheck) -> None:
    state = render_state("gb200", 4, config={"gpus": {3: {"fabric_clique_id": 7}}})
    done = run_check(state)
    assert done.returncode == 3, done.stderr
    assert done.stderr == (
        f"consistency: MISMATCH: GPUs disagree: GPU 0,1,2: clusterUuid {PROFILE_DEFAULT_UUID} "
        f"cliqueId 0; GPU 3: clusterUuid {PROFILE_DEFAULT_UUID} cliqueId 7\n"
    )


def test_registration_in_progress_passes_unless_completion_is_required(
    render_state: RenderState, run_check: RunCheck
) -> None:
    # No injected identity: the library marks registration completed when it applies one.
    state = render_state("gb200", 2, config={"gpus": {1: {"fabric_state": 2}}})
    done = run_check(state)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "  state       : in_progress (2)"
    done = run_check(state, "--require-completed")
    assert done.returncode == 3
    assert done.stderr == (
        "require-completed: MISMATCH: registration not completed: GPU 1 state in_progress (2)\n"
    )


def test_a_corrupt_state_exits_1_naming_nvml_init_and_the_librarys_reason(
    tmp_path: Path, run_check: RunCheck
) -> None:
    state = tmp_path / "corrupt.nvmlmock"
    state.write_text("nvml-mock-state 1\n[system]\ndevice_count=banana\n")
    done = run_check(state)
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("nvmlInit: ")
    assert "device_count" in line  # the library's own nvmlErrorString names the key
    assert "code " in line


def test_a_bad_injected_identity_exits_1_with_the_librarys_reason(
    render_state: RenderState, run_check: RunCheck
) -> None:
    done = run_check(render_state("gb200", 2), env={"MOCK_FABRIC_CLIQUE_ID": "banana"})
    assert done.returncode == 1
    assert done.stderr.startswith("nvmlInit: ")
    assert "MOCK_FABRIC_CLIQUE_ID='banana'" in done.stderr


def test_a_missing_state_exits_1(tmp_path: Path, run_check: RunCheck) -> None:
    """Driver not loaded is an error, not "no GPU": NVML cannot tell whether there are GPUs."""
    done = run_check(tmp_path / "absent.nvmlmock")
    assert done.returncode == 1
    assert done.stderr.startswith("nvmlInit: ")
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in done.stderr
    assert "absent.nvmlmock" in done.stderr


def _state_without_gpus(render_state: RenderState) -> Path:
    """A valid state that lists no GPU (the renderer makes 1..64, so its GPU is cut out)."""
    state = render_state("a100", 1)
    head = state.read_text().split("[gpu 0]")[0]
    assert "device_count=1\n" in head
    state.write_text(head.replace("device_count=1\n", "device_count=0\n"))
    return state


def test_a_node_without_gpus_exits_2_saying_so(
    render_state: RenderState, run_check: RunCheck
) -> None:
    """nvmlInit's NVML_ERROR_GPU_NOT_FOUND is the reference's "not supported" (2), not an error."""
    state = _state_without_gpus(render_state)
    done = run_check(state)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "Discovered 0 GPU(s)\n"
    (line,) = done.stderr.splitlines()
    assert line.startswith("nvmlInit: No GPUs were found")
    assert line.endswith("(NVML_ERROR_GPU_NOT_FOUND, code 28); no GPU on this node")

    done = run_check(state, "--expect-clique", "1", "--require-completed")
    assert done.returncode == 2, done.stderr
    assert "expect-clique: skipped: " in done.stderr
    assert "require-completed: skipped: " in done.stderr


def test_a_node_without_gpus_in_json(render_state: RenderState, run_check: RunCheck) -> None:
    done = run_check(_state_without_gpus(render_state), "--json")
    assert done.returncode == 2, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["verdict"], doc["exitCode"], doc["gpuCount"]) == ("not_supported", 2, 0)
    assert (doc["gpus"], doc["unsupported"], doc["error"]) == ([], [], None)
    assert doc["checks"] == [
        {"name": "consistency", "passed": None, "detail": "no GPU on this node"}
    ]


def test_no_library_exits_1_saying_where_it_looked(
    tmp_path: Path, run_check: RunCheck, no_system_nvml: None
) -> None:
    done = run_check(None, lib_dir=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        "nvmlInit: NVML Shared Library Not Found (NVML_ERROR_LIBRARY_NOT_FOUND, code 12); "
        f"libnvidia-ml.so.1 could not be loaded (LD_LIBRARY_PATH={tmp_path})\n"
    )


def test_json_document_on_success(render_state: RenderState, run_check: RunCheck) -> None:
    state = render_state("gb200", 4)
    done = run_check(state, "--json", "--expect-clique", "1", env=fabric_env(clique=1))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    doc = json.loads(done.stdout)
    assert (doc["verdict"], doc["exitCode"], doc["gpuCount"]) == ("ok", 0, 4)
    assert doc["fabricApi"] == "v3"
    assert doc["identity"] == {"clusterUuid": CD_UUID, "cliqueId": 1}
    assert [g["uuid"] for g in doc["gpus"]] == state_uuids(state)
    first = doc["gpus"][0]["fabric"]
    assert first == {
        "supported": True,
        "clusterUuid": CD_UUID,
        "cliqueId": 1,
        "state": "completed",
        "stateCode": 3,
        "status": 0,
        "healthMask": state_health_mask(state),
        "healthSummary": "healthy",
        "api": "v3",
    }
    assert [(c["name"], c["passed"]) for c in doc["checks"]] == [
        ("consistency", True),
        ("expect-clique", True),
    ]
    assert doc["error"] is None


def test_json_document_for_not_supported_and_for_errors(
    render_state: RenderState, run_check: RunCheck, tmp_path: Path
) -> None:
    done = run_check(render_state("t4", 2), env={"CHECK_FABRIC_JSON": "1"})
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert (doc["verdict"], doc["unsupported"], doc["identity"]) == ("not_supported", [0, 1], None)
    assert [g["fabric"] for g in doc["gpus"]] == [{"supported": False}] * 2

    done = run_check(tmp_path / "absent.nvmlmock", "--json")
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert (doc["verdict"], doc["gpuCount"], doc["gpus"]) == ("error", None, [])
    assert doc["error"]["kind"] == "nvml"
    assert doc["error"]["call"] == "nvmlInit"
    assert doc["error"]["name"].startswith("NVML_ERROR_")


def test_bad_flag_value_exits_1_before_touching_nvml(run_check: RunCheck, tmp_path: Path) -> None:
    done = run_check(tmp_path / "absent.nvmlmock", "--expect-clique", "-3")
    assert done.returncode == 1
    assert done.stderr.startswith("check-fabric: config error: invalid --expect-clique='-3'")
    assert "nvmlInit" not in done.stderr


# Older bindings and drivers: the same real library, read through the fallbacks. The
# binding is altered in the child process only, the way an older nvidia-ml-py would look.
_OLD_BINDING = {
    "no-v3-struct": "del pynvml.c_nvmlGpuFabricInfo_v3_t",
    "no-V-entry-point": "del pynvml.nvmlDeviceGetGpuFabricInfoV",
    "library-lacks-V": (
        "pynvml.nvmlDeviceGetGpuFabricInfoV = lambda handle, info: "
        "pynvml._nvmlGetFunctionPointer('nvmlDeviceGetGpuFabricInfoV_absent')"
    ),
    "library-refuses-v3": (
        "class V9(pynvml._PrintableStructure):\n"
        "    _fields_ = pynvml.c_nvmlGpuFabricInfo_v3_t._fields_\n"
        "    def __init__(self):\n"
        "        super().__init__(version=0x09000028)\n"
        "pynvml.c_nvmlGpuFabricInfo_v3_t = V9"
    ),
}


@pytest.mark.parametrize(
    ("case", "api"),
    [
        ("no-v3-struct", "v2"),
        ("no-V-entry-point", "v1"),
        ("library-lacks-V", "v1"),
        ("library-refuses-v3", "v2"),
    ],
)
def test_fabric_info_falls_back_to_older_entry_points(
    render_state: RenderState, run_check: RunCheck, case: str, api: str
) -> None:
    import sys

    state = render_state("gb200", 4)
    script = (
        "import sys, pynvml\n"
        f"{_OLD_BINDING[case]}\n"
        "from check_fabric import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = run_check(
        state,
        "--json",
        "--expect-clique",
        "1",
        env=fabric_env(clique=1),
        command=[sys.executable, "-c", script],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["fabricApi"] == api
    assert {g["fabric"]["api"] for g in doc["gpus"]} == {api}
    assert doc["identity"] == {"clusterUuid": CD_UUID, "cliqueId": 1}
    fabric = doc["gpus"][0]["fabric"]
    assert (fabric["healthMask"] is None) == (api == "v1")
    assert fabric["healthSummary"] is None  # v3 is the only layout that carries it


def test_json_logs_go_to_stderr_and_leave_the_report_alone(
    render_state: RenderState, run_check: RunCheck
) -> None:
    state = render_state("gb200", 2)
    plain = run_check(state)
    done = run_check(state, "--log-format", "json", "--log-level", "debug")
    assert done.returncode == 0
    assert done.stdout == plain.stdout
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert records, "debug logging produced nothing"
    assert {"ts", "level", "logger", "msg"} <= records[0].keys()
    wanted = ("debug", "check_fabric.nvml", "fabric info read through v3")
    assert wanted in [(r["level"], r["logger"], r["msg"]) for r in records]


def test_a_reader_that_went_away_ends_the_run_quietly(
    render_state: RenderState, run_check: RunCheck
) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # as after ``check-fabric | head -1`` once head has exited
    try:
        done = run_check(render_state("gb200", 2), stdout=write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 1
    assert done.stderr == "", "no traceback, no 'Exception ignored' at exit"
