"""The driver root's ``proc/driver/nvidia-caps/mig-minors`` and the protocol's MIG
capability table (which the NRI plugin reads DRA MIG claims with) name the same minors."""

from __future__ import annotations

from nvml_mock_node.procfs import mig_minors
from nvml_mock_protocol.mig_caps import CONFIG_MINOR, MONITOR_MINOR, cap_of_minor, minor_of


def test_the_rendered_minors_are_the_protocols_table() -> None:
    lines = mig_minors(8).splitlines()
    assert lines[:2] == [f"config {CONFIG_MINOR}", f"monitor {MONITOR_MINOR}"]
    checked = 0
    for line in lines[2:]:
        name, _, number = line.rpartition(" ")
        cap = cap_of_minor(int(number))
        if cap is None or not name.startswith("gpu"):
            continue  # entries past the MIG range (fabric-imex-mgmt and the like)
        assert cap.name == name, line
        assert minor_of(cap) == int(number)
        checked += 1
    assert checked >= 8 * 135
