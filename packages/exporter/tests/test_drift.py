"""The exporter's families and label keys against dcgm-exporter's own (a committed copy of its
counters facts, ``fixtures/dcgm-exporter-counters.csv``, source named there): a rename, a
retyped family or a changed HELP text on either side fails here."""

from __future__ import annotations

from collections.abc import Callable

import facts
from conftest import Exporter, parse
from nvml_mock_exporter.counters import default_counters
from nvml_mock_exporter.fields import DEFAULT_COUNTERS, FIELDS

DCGM = facts.families()


def test_every_family_the_exporter_knows_is_dcgm_exporters_with_its_type_and_help() -> None:
    for name, field in FIELDS.items():
        assert name in DCGM, f"{name} is not a dcgm-exporter family"
        assert (field.kind, field.help) == (DCGM[name].kind, DCGM[name].help), name


def test_the_default_set_is_dcgm_exporters_plus_its_exporter_made_families() -> None:
    dcgm_default = [f.name for f in DCGM.values() if f.default]
    assert sorted(n for n in DEFAULT_COUNTERS if not n.startswith("DCGM_EXP_")) == sorted(
        dcgm_default
    )
    assert len([n for n in dcgm_default if n.startswith("DCGM_FI_DEV_")]) == 20
    assert len([n for n in dcgm_default if n.startswith("DCGM_FI_PROF_")]) == 5
    assert {"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_GPU_HEALTH_STATUS"} <= set(DEFAULT_COUNTERS)


def test_what_is_served_carries_dcgm_exporters_help_type_and_label_keys(
    run_exporter: Callable[..., Exporter],
) -> None:
    exposition = parse(run_exporter().wait_for(lambda t: "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in t))
    served = {c.name for c in default_counters() if c.kind != "label"}
    assert set(exposition.types) == served
    for name in served:
        assert exposition.types[name] == DCGM[name].kind, name
        assert exposition.helps[name] == DCGM[name].help, name
    known = set(facts.label_keys()) | {"DCGM_FI_DRIVER_VERSION"}
    for sample in exposition.samples:
        assert set(sample.labels) <= known, (sample.name, set(sample.labels) - known)
    identity = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname"]
    assert exposition.label_keys("DCGM_FI_DEV_GPU_TEMP")[0] == [
        *identity,
        "DCGM_FI_DRIVER_VERSION",
    ]
    assert exposition.label_keys("DCGM_EXP_XID_ERRORS_COUNT")[0] == [
        *identity,
        "DCGM_FI_DRIVER_VERSION",
        "window_size_in_ms",
    ]
    assert exposition.label_keys("DCGM_EXP_GPU_HEALTH_STATUS")[0] == [
        *identity,
        "DCGM_FI_DRIVER_VERSION",
        "health_error_code",
        "health_watch",
    ]
