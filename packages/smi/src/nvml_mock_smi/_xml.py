"""Renders report trees as the real tool's ``-q -x`` XML, byte for byte in layout.

Written by hand rather than through ``xml.etree``: the real output has a fixed shape (tab
indentation, ``<?xml version="1.0" ?>``, a DOCTYPE naming the DTD generation, empty
elements as an open and a close line, a blank line after each ``</gpu>``) that parsers
ignore but people diff, and string building keeps the import cost at zero.
"""

from __future__ import annotations

from ._tree import Node

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})


def escape(text: str) -> str:
    return text.translate(_ESCAPES)


def _emit(node: Node, depth: int, out: list[str]) -> None:
    pad = "\t" * depth
    attrs = "".join(f' {k}="{escape(v)}"' for k, v in node.attrs.items())
    if node.raw is not None:
        out.append(f"{pad}<{node.tag}{attrs}>\n{pad}\t{escape(node.raw)}\n{pad}</{node.tag}>\n")
    elif node.children is None:
        out.append(f"{pad}<{node.tag}{attrs}>{escape(node.value or '')}</{node.tag}>\n")
    else:
        out.append(f"{pad}<{node.tag}{attrs}>\n")
        for child in node.children:
            _emit(child, depth + 1, out)
        out.append(f"{pad}</{node.tag}>\n")


def render(header: list[Node], gpus: list[tuple[str, list[Node]]], dtd: str) -> str:
    """The whole document: ``header`` leaves, then one ``<gpu id=...>`` per entry."""
    out = [
        '<?xml version="1.0" ?>\n',
        f'<!DOCTYPE nvidia_smi_log SYSTEM "{dtd}">\n',
        "<nvidia_smi_log>\n",
    ]
    for node in header:
        _emit(node, 1, out)
    for bus_id, nodes in gpus:
        _emit(Node("gpu", None, children=nodes, attrs={"id": bus_id}), 1, out)
        out.append("\n")
    out.append("</nvidia_smi_log>\n")
    return "".join(out)
