"""The report tree that ``-q`` and ``-q -x`` both render.

The real tool's text report and XML report carry the same facts in the same order, under
different names (``Product Name`` / ``<product_name>``). Building one tree per GPU, with both
names on every node, keeps the two views from drifting apart: ``_xml`` walks it for
``-q -x``, ``_text`` for ``-q``. A node may be XML-only (``label=None``) or print differently
in text (``text``), because the real tool's text view folds or hides a few XML elements.
"""

from __future__ import annotations


class Node:
    """One element: a leaf with ``value`` or a group with ``children``.

    ``text``: the text view prints ``label : text`` (children hidden) when set.
    ``raw``: XML prints this inner text on its own line (``<mig_devices>`` / ``None``).
    ``text_indent``: extra text indentation (the real tool nests some XML siblings in text).
    ``section``: the ``-d`` display category of a top-level node.
    ``text_only_with``: shown in text only when this ``-d`` category is requested.
    """

    __slots__ = (
        "attrs",
        "children",
        "label",
        "raw",
        "section",
        "tag",
        "text",
        "text_indent",
        "text_only_with",
        "value",
    )

    def __init__(
        self,
        tag: str,
        label: str | None,
        *,
        value: str | None = None,
        children: list[Node] | None = None,
        text: str | None = None,
        raw: str | None = None,
        attrs: dict[str, str] | None = None,
        text_indent: int = 0,
    ) -> None:
        self.tag = tag
        self.label = label
        self.value = value
        self.children = children
        self.text = text
        self.raw = raw
        self.attrs = attrs or {}
        self.text_indent = text_indent
        self.section: str | None = None
        self.text_only_with: str | None = None


def leaf(
    tag: str, label: str | None, value: str, *, text: str | None = None, indent: int = 0
) -> Node:
    return Node(tag, label, value=value, text=text, text_indent=indent)


def group(tag: str, label: str | None, children: list[Node], *, text: str | None = None) -> Node:
    return Node(tag, label, children=children, text=text)
