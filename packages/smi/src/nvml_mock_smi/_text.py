"""Renders report trees as the real tool's ``-q`` text.

Keys are indented four spaces per level and padded so that the colon sits in the key column
of the driver's layout (:func:`._layout.key_width`: 55 today, 42 before 570); the process
entries keep the narrower column 42 the real tool still uses there.
``-d`` limits each GPU to the requested display categories.
"""

from __future__ import annotations

from ._tree import Node

KEY_WIDTH = 55
PROCESS_KEY_WIDTH = 42


def line(indent: int, label: str, value: str, width: int = KEY_WIDTH) -> str:
    key = " " * indent + label
    return f"{key.ljust(width)}: {value}"


def _emit(node: Node, indent: int, out: list[str], shown: frozenset[str], width: int) -> None:
    if node.tag == "mig_devices" and node.children:
        # no heading of its own in text: each MIG device is a section of the GPU
        for child in node.children:
            _emit(child, indent, out, shown, width)
        return
    if node.label is None and node.tag != "process_info":
        return
    if node.text_only_with is not None and node.text_only_with not in shown:
        return
    ind = indent + node.text_indent
    if node.tag == "process_info" and node.children is not None:
        for child in node.children:
            _emit(child, indent, out, shown, PROCESS_KEY_WIDTH)
        return
    if node.text is not None:
        out.append(line(ind, node.label or "", node.text, width))
        for child in node.children or ():
            _emit(child, ind, out, shown, width)
        return
    if node.children is None:
        out.append(line(ind, node.label or "", node.value or "", width))
        return
    out.append(" " * ind + (node.label or ""))
    for child in node.children:
        _emit(child, ind + 4, out, shown, width)


def render(
    header: list[tuple[str, str]],
    attached: int,
    gpus: list[tuple[str, list[Node]]],
    display: frozenset[str],
    width: int = KEY_WIDTH,
) -> str:
    """``display`` empty means the full report; otherwise only those categories per GPU.
    ``width``: the key column."""
    out = ["", "==============NVSMI LOG==============", ""]
    for label, value in header:
        out.append(line(0, label, value, width))
    out.append("")
    out.append(line(0, "Attached GPUs", str(attached), width))
    for i, (bus_id, nodes) in enumerate(gpus):
        if i:
            out.append("")
        out.append(f"GPU {bus_id}")
        for node in nodes:
            if display and node.section not in display:
                continue
            _emit(node, 4, out, display, width)
    out.append("")
    return "\n".join(out) + "\n"
