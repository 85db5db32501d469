"""Assembles the ``-q`` report of the selected GPUs, as text or as XML.

The document header (timestamp, driver and CUDA versions, attached GPU count) is read once;
each GPU's node list comes from its readings (:mod:`._readings`) laid out by
:mod:`._report`; the driver generation picks the element set
and the DTD named in the DOCTYPE (both data in :mod:`._layout`).
"""

from __future__ import annotations

from ._generation import parse_driver_version
from ._layout import dtd, key_width
from ._nvml import Device, Nvml, NvmlError
from ._readings import Readings
from ._report import build
from ._tree import Node, leaf
from ._values import NA, clock_stamp, cuda_version

KMD_FROM = (610,)
"""The first driver whose report names the KMD and CUDA UMD versions."""
_DEPRECATED = "[Deprecated; will be removed in CUDA 14.0. Use {} instead]"


def render(
    nvml: Nvml, devices: list[Device], attached: int, *, xml: bool, display: tuple[str, ...]
) -> str:
    try:
        driver = nvml.driver_version()
    except NvmlError as exc:
        driver = exc.text
    try:
        cuda = cuda_version(nvml.cuda_driver_version())
    except NvmlError:
        cuda = NA
    version = parse_driver_version(driver)
    gpus: list[tuple[str, list[Node]]] = []
    shown = frozenset(display)
    for device in devices:
        readings = Readings(device).read()
        nodes = build(readings.facts, frozenset(readings.flags), version)
        if xml and shown:
            nodes = [n for n in nodes if n.section in shown]
        gpus.append((readings.bus_id, nodes))
    stamp = clock_stamp()
    if xml:  # the XML of 610 is not on file: its elements stay those of 595
        from ._xml import render as xml_render

        header = [
            leaf("timestamp", None, stamp),
            leaf("driver_version", None, driver),
            leaf("cuda_version", None, cuda),
            leaf("attached_gpus", None, str(attached)),
        ]
        return xml_render(header, gpus, dtd(version))
    from ._text import render as text_render

    lines = [("Timestamp", stamp), ("Driver Version", driver), ("CUDA Version", cuda)]
    if version >= KMD_FROM:
        # 610 keeps the two lines, marked deprecated, and adds the new names (the real
        # 610.57.04 report, smi_fixtures/exporter)
        lines = [
            ("Timestamp", stamp),
            ("Driver Version", f"{driver} {_DEPRECATED.format('KMD Version')}"),
            ("CUDA Version", f"{cuda} {_DEPRECATED.format('CUDA UMD Version')}"),
            ("KMD Version", driver),
            ("CUDA UMD Version", cuda),
        ]
    return text_render(
        lines,
        attached,
        gpus,
        shown,
        key_width(version),
    )
