"""Faults written with nvml-mock-ctl, as the exporter's series show them: a lost GPU drops its
series (never a 500), thermal and ECC faults move values and health, the Xid latches."""

from __future__ import annotations

from collections.abc import Callable

from conftest import Exporter, Node, get, parse


def test_a_gpu_fallen_off_the_bus_drops_its_series_but_keeps_its_xid(
    node: Node, run_exporter: Callable[..., Exporter]
) -> None:
    exporter = run_exporter()
    exporter.wait_for(lambda t: 'DCGM_FI_DEV_GPU_TEMP{gpu="2"' in t)
    node.ctl("fail", "fallen-off-bus", "-i", "2")
    text = exporter.wait_for(lambda t: 'DCGM_FI_DEV_GPU_TEMP{gpu="2"' not in t)
    exposition = parse(text)
    assert {s.labels["gpu"] for s in exposition.of("DCGM_FI_DEV_GPU_TEMP")} == {
        str(i) for i in range(8) if i != 2
    }
    assert not exposition.of("DCGM_FI_DEV_FB_USED", gpu="2")
    assert not exposition.of("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="2")
    # what DCGM keeps from events stays: the last Xid, and the health verdict
    text = exporter.wait_for(lambda t: 'DCGM_FI_DEV_XID_ERRORS{gpu="2"' in t and "} 79" in t)
    exposition = parse(text)
    assert exposition.of("DCGM_FI_DEV_XID_ERRORS", gpu="2")[0].value == 79
    pcie = exposition.of("DCGM_EXP_GPU_HEALTH_STATUS", gpu="2", health_watch="PCIE")[0]
    assert (pcie.value, pcie.labels["health_error_code"]) == (20, "DCGM_FR_FALLEN_OFF_BUS")
    status, _ = get(exporter.url + "/metrics")
    assert status == 200
    assert exporter.proc.poll() is None
    # a reset brings it back
    node.ctl("reset", "-i", "2")
    exporter.wait_for(lambda t: 'DCGM_FI_DEV_GPU_TEMP{gpu="2"' in t)


def test_a_thermal_fault_shows_in_temperature_clocks_and_health(
    node: Node, run_exporter: Callable[..., Exporter]
) -> None:
    exporter = run_exporter()
    before = parse(exporter.wait_for(lambda t: "DCGM_FI_DEV_GPU_TEMP" in t))
    cold = before.of("DCGM_FI_DEV_GPU_TEMP", gpu="1")[0].value
    node.ctl("fail", "thermal", "-i", "1", "--temp", "92")
    after = parse(exporter.wait_for(lambda t: 'gpu="1"' in t and "} 92\n" in t))
    assert after.of("DCGM_FI_DEV_GPU_TEMP", gpu="1")[0].value == 92 > cold
    assert after.of("DCGM_FI_DEV_GPU_TEMP", gpu="0")[0].value == cold
    thermal = after.of("DCGM_EXP_GPU_HEALTH_STATUS", gpu="1", health_watch="THERMAL")[0]
    assert (thermal.value, thermal.labels["health_error_code"]) == (
        10,
        "DCGM_FR_CLOCK_THROTTLE_THERMAL",
    )
    assert after.of("DCGM_EXP_GPU_HEALTH_STATUS", gpu="1", health_watch="ALL")[0].value == 10
    assert after.of("DCGM_EXP_GPU_HEALTH_STATUS", gpu="0", health_watch="ALL")[0].value == 0


def test_an_uncorrectable_ecc_error_moves_the_counters_and_fails_mem_health(
    node: Node, run_exporter: Callable[..., Exporter]
) -> None:
    exporter = run_exporter()
    exporter.wait_for(lambda t: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" in t)
    node.ctl("fail", "ecc-uncorrectable", "-i", "4")
    text = exporter.wait_for(
        lambda t: (
            'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{gpu="4"' in t
            and any(
                s.value > 0 for s in parse(t).of("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", gpu="4")
            )
        )
    )
    exposition = parse(text)
    mem = exposition.of("DCGM_EXP_GPU_HEALTH_STATUS", gpu="4", health_watch="MEM")[0]
    assert mem.value == 20
    # Xid 94 then 63 (an Ampere-and-later board remaps a row): the last one latches
    text = exporter.wait_for(
        lambda t: parse(t).of("DCGM_FI_DEV_XID_ERRORS", gpu="4")[0].value == 63
    )
    counts = {
        s.labels.get("xid"): s.value for s in parse(text).of("DCGM_EXP_XID_ERRORS_COUNT", gpu="4")
    }
    assert counts == {"94": 1, "63": 1}


def test_the_xid_value_latches_after_the_fault_is_cleared(
    node: Node, run_exporter: Callable[..., Exporter]
) -> None:
    exporter = run_exporter()
    exporter.wait_for(lambda t: "DCGM_FI_DEV_XID_ERRORS" in t)
    node.ctl("xid", "31", "-i", "0")
    exporter.wait_for(lambda t: parse(t).of("DCGM_FI_DEV_XID_ERRORS", gpu="0")[0].value == 31)
    node.ctl("reset")
    collections = exporter.wait_for(lambda t: "DCGM_FI_DEV_GPU_TEMP" in t)
    assert parse(collections).of("DCGM_FI_DEV_XID_ERRORS", gpu="0")[0].value == 31


def test_utilization_moves_the_profiling_families(
    node: Node, run_exporter: Callable[..., Exporter]
) -> None:
    node.ctl("util", "steady", "60", "-i", "6")
    exporter = run_exporter()
    text = exporter.wait_for(lambda t: bool(parse(t).of("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="6")))
    exposition = parse(text)
    assert exposition.of("DCGM_FI_DEV_GPU_UTIL", gpu="6")[0].value == 60
    assert exposition.of("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="6")[0].value == 0.6
    tensor = exposition.of("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", gpu="6")[0].value
    assert 0 < tensor < 0.6
    assert exposition.of("DCGM_FI_PROF_PCIE_RX_BYTES", gpu="6")[0].value > 0
    assert exposition.of("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0")[0].value == 0
