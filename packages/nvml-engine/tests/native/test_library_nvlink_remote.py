"""The link number at the far end of each NVLink: ``NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID``.

``nvidia-smi nvlink -R`` prints it beside the remote PCI address, and fabric tools map an
NVSwitch's port errors back to a GPU link with it. The mock derives it from the board's
links: a GPU peer's link back to this GPU (in link order), or a switch's ports numbered GPU
by GPU in board order; so it does not depend on which GPUs a process sees.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import StateWriter, gpu_entry

FI_REMOTE = 146  # NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID


def remote_link(nvml: Any, handle: Any, link: int) -> int:
    value = nvml.nvmlDeviceGetFieldValues(handle, [(FI_REMOTE, link)])[0]
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(value.nvmlReturn)
    assert value.valueType == nvml.NVML_VALUE_TYPE_UNSIGNED_INT
    return int(value.value.uiVal)


def test_switch_ports_are_numbered_gpu_by_gpu(pynvml: Any, write_state: StateWriter) -> None:
    # link 0 to the first switch, links 1-17 to the second (the last id repeats)
    gpus = [
        gpu_entry(i, nvlink_count=18, nvlink_remote_bus_ids="00000000:05:00.0,00000000:06:00.0")
        for i in range(4)
    ]
    write_state(gpus=gpus)
    pynvml.nvmlInit()
    for g in range(4):
        h = pynvml.nvmlDeviceGetHandleByIndex(g)
        assert remote_link(pynvml, h, 0) == g
        assert [remote_link(pynvml, h, link) for link in range(1, 18)] == list(
            range(g * 17, g * 17 + 17)
        )


G0, G1, G2 = "00000000:18:00.0", "00000000:19:00.0", "00000000:1A:00.0"
PEERS = [
    # GPU 0, 1 and 2 (the bus ids above), two links between each pair
    gpu_entry(0, nvlink_count=4, nvlink_remote_bus_ids=",".join((G1, G2, G1, G2))),
    gpu_entry(1, nvlink_count=4, nvlink_remote_bus_ids=",".join((G0, G0, G2))),  # G2 repeats
    gpu_entry(2, nvlink_count=4, nvlink_remote_bus_ids=",".join((G0, G1, G0, G1))),
]


def test_a_gpu_peer_answers_its_own_link_back(pynvml: Any, write_state: StateWriter) -> None:
    write_state(gpus=PEERS)
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    bus = {pynvml.nvmlDeviceGetPciInfo(h).busId: i for i, h in enumerate(handles)}
    ends = {}
    for g, h in enumerate(handles):
        for link in range(4):
            peer = bus[pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId]
            ends[(g, link)] = (peer, remote_link(pynvml, h, link))
    # every link's far end names this link as its own far end
    assert all(ends[far] == near for near, far in ends.items())
    assert ends[(0, 2)] == (1, 1)
    assert ends[(1, 3)] == (2, 3)


def test_the_numbers_do_not_depend_on_the_visible_gpus(
    pynvml: Any, write_state: StateWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_state(gpus=PEERS)
    pynvml.nvmlInit()
    whole = [remote_link(pynvml, pynvml.nvmlDeviceGetHandleByIndex(2), link) for link in range(4)]
    pynvml.nvmlShutdown()
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "2")
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 1
    alone = [remote_link(pynvml, pynvml.nvmlDeviceGetHandleByIndex(0), link) for link in range(4)]
    assert alone == whole == [1, 2, 3, 3]


def test_past_the_links_and_without_links(pynvml: Any, write_state: StateWriter) -> None:
    write_state(gpus=[PEERS[0], gpu_entry(1, nvlink_count=0, nvlink_remote_bus_ids="")])
    pynvml.nvmlInit()
    h0, h1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        remote_link(pynvml, h0, 4)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        remote_link(pynvml, h1, 0)
