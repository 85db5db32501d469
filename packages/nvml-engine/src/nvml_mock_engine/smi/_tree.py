"""The report tree that ``-q`` and ``-q -x`` both render.

The real tool's text report and XML report carry the same facts in the same order, under
different names (``Product Name`` / ``<product_name>``). Building one tree per GPU, with both
names on every node, keeps the two views from drifting apart: ``_xml`` walks it for
``-q -x``, ``_text`` for ``-q``. A node may be XML-only (``label=None``) or print differently
in text (``text``), because the real tool's text view folds or hides a few XML elements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NA = "N/A"


@dataclass(slots=True)
class Node:
    """One element: a leaf with ``value`` or a group with ``children``."""

    tag: str
    label: str | None
    value: str | None = None
    children: list[Node] | None = None
    text: str | None = None
    """Text view prints the node as ``label : text`` (children hidden) when set."""
    raw: str | None = None
    """XML prints this inner text on its own line (``<mig_devices>`` / ``None``)."""
    attrs: dict[str, str] = field(default_factory=dict)
    text_indent: int = 0
    """Extra text indentation (the real tool nests some XML siblings in text)."""
    section: str | None = None
    """``-d`` display category this top-level node belongs to."""
    text_only_with: str | None = None
    """Shown in text only when this ``-d`` category is requested."""


def leaf(
    tag: str, label: str | None, value: str, *, text: str | None = None, indent: int = 0
) -> Node:
    return Node(tag, label, value=value, text=text, text_indent=indent)


def group(tag: str, label: str | None, children: list[Node], *, text: str | None = None) -> Node:
    return Node(tag, label, children=children, text=text)
