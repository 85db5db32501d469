"""The MIG capability minor table, both ways."""

from __future__ import annotations

import pytest
from nvml_mock_protocol.mig_caps import MigCap, cap_of_minor, cap_of_path, minor_of


def test_the_table_starts_after_config_and_monitor() -> None:
    assert minor_of(MigCap(0, 0)) == 3
    assert minor_of(MigCap(0, 0, 0)) == 4
    assert minor_of(MigCap(0, 0, 7)) == 11
    assert minor_of(MigCap(0, 1)) == 12
    assert minor_of(MigCap(0, 14, 7)) == 137
    assert minor_of(MigCap(1, 0)) == 138
    assert cap_of_minor(1) is None and cap_of_minor(2) is None


def test_every_minor_names_one_capability_and_back() -> None:
    seen: set[int] = set()
    for gpu in range(8):
        for gi in range(15):
            for ci in (None, *range(8)):
                cap = MigCap(gpu, gi, ci)
                minor = minor_of(cap)
                assert minor not in seen
                seen.add(minor)
                assert cap_of_minor(minor) == cap
    assert seen == set(range(3, 3 + 8 * 135))


def test_paths_and_names() -> None:
    assert cap_of_path("/dev/nvidia-caps/nvidia-cap13") == MigCap(0, 1, 0)
    assert cap_of_path("/dev/nvidia1") is None
    assert MigCap(2, 3, 1).name == "gpu2/gi3/ci1/access"
    assert MigCap(2, 3).name == "gpu2/gi3/access"


@pytest.mark.parametrize("cap", [MigCap(0, 15), MigCap(0, 0, 8), MigCap(-1, 0)])
def test_ids_outside_the_table_are_refused(cap: MigCap) -> None:
    with pytest.raises(ValueError, match="no such capability"):
        minor_of(cap)
