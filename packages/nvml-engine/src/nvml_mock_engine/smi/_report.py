"""Walks the ``-q`` layout (:mod:`._layout`) with one GPU's readings into the report tree.

This is the one renderer of the report: the same tree goes to :mod:`._text` for ``-q`` and
to :mod:`._xml` for ``-q -x``, so the two views cannot drift apart. It decides nothing about
the shape itself: each entry's gates (driver generation, board flags, deprecation) are
data in the layout, and each value is a reading (:mod:`._readings`); a layout entry
without a reading is a programming error (``KeyError``), caught by the report tests.
"""

from __future__ import annotations

from ._layout import DEPRECATED, GPU, Entry
from ._tree import Node, leaf

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    Version = tuple[int, ...]


def build(facts: Mapping[str, Any], flags: frozenset[str], driver: Version) -> list[Node]:
    """The children of ``<gpu id=...>`` for the tool of ``driver``."""
    return _children(GPU, facts, "", flags, driver, deprecated=False)


def _children(
    entries: tuple[Entry, ...],
    facts: Mapping[str, Any],
    prefix: str,
    flags: frozenset[str],
    driver: Version,
    *,
    deprecated: bool,
) -> list[Node]:
    out: list[Node] = []
    for entry in entries:
        chosen: Entry | None = entry
        if entry.alternatives:
            chosen = next((a for a in entry.alternatives if a.shown(driver, flags)), None)
        elif not entry.shown(driver, flags):
            chosen = None
        if chosen is not None:
            out.extend(_nodes(chosen, facts, prefix, flags, driver, deprecated=deprecated))
    return out


def _nodes(
    entry: Entry,
    facts: Mapping[str, Any],
    prefix: str,
    flags: frozenset[str],
    driver: Version,
    *,
    deprecated: bool,
) -> list[Node]:
    path = prefix + entry.tag
    deprecated = deprecated or (entry.deprecated is not None and driver >= entry.deprecated)
    if entry.raw is not None and not (
        entry.children and facts.get(f"{path}/{entry.children[0].tag}")
    ):
        node = Node(entry.tag, entry.label_for(driver), raw=entry.raw)
    elif entry.each:
        return [
            _mark(n, entry)
            for n in _repeated(entry, facts[path], flags, driver, deprecated=deprecated)
        ]
    elif entry.group:
        own = facts.get(path)
        if isinstance(own, str):
            # one answer for the whole group: the board has none of it
            node = leaf(entry.tag, entry.label_for(driver), own)
        else:
            assert entry.children is not None
            kids = _children(
                entry.children, facts, path + "/", flags, driver, deprecated=deprecated
            )
            text = facts[f"{path}/{entry.text_from}"] if entry.text_from else None
            if entry.empty_text is not None and not kids:
                text = entry.empty_text
            node = Node(entry.tag, entry.label_for(driver), children=kids, text=text)
    else:
        value = DEPRECATED if deprecated else facts[path]
        if value is None:
            node = Node(entry.tag, entry.label_for(driver), children=[])
        else:
            text = facts[path + "#text"] if entry.text_variant and not deprecated else None
            node = leaf(entry.tag, entry.label_for(driver), value, text=text, indent=entry.indent)
    return [_mark(node, entry)]


def _repeated(
    entry: Entry,
    items: list[Any],
    flags: frozenset[str],
    driver: Version,
    *,
    deprecated: bool,
) -> list[Node]:
    if not entry.group:
        return [
            leaf(entry.tag, entry.label_for(driver), value, indent=entry.indent) for value in items
        ]
    assert entry.children is not None
    nodes = []
    for item in items:
        kids = _children(entry.children, item, "", flags, driver, deprecated=deprecated)
        text = item[entry.text_from] if entry.text_from else None
        nodes.append(Node(entry.tag, entry.label_for(driver), children=kids, text=text))
    return nodes


def _mark(node: Node, entry: Entry) -> Node:
    node.section = entry.section
    node.text_only_with = entry.text_only_with
    return node
