"""Walks the ``-q`` layout (:mod:`._layout`) with one GPU's readings into the report tree.

This is the one renderer of the report: the same tree goes to :mod:`._text` for ``-q`` and
to :mod:`._xml` for ``-q -x``, so the two views cannot drift apart. It decides nothing about
the shape itself: each entry's gates (driver generation, board flags, deprecation) are
data in the layout, and each value is a reading (:mod:`._readings`); a layout entry
without a reading is a programming error (``KeyError``), caught by the report tests.
"""

from __future__ import annotations

from ._layout import DEPRECATED, GPU, Entry
from ._tree import Node

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    Version = tuple[int, ...]
    Step = tuple[Entry, str | None, bool]


def build(facts: Mapping[str, Any], flags: frozenset[str], driver: Version) -> list[Node]:
    """The children of ``<gpu id=...>`` for the tool of ``driver``."""
    return _children(GPU, facts, "", flags, driver, deprecated=False)


_PLANS: dict[tuple[int, frozenset[str], Version, bool], tuple[Step, ...]] = {}
""":func:`_plan`'s answers. The keys hold the ``id`` of a layout tuple: those are module
constants of :mod:`._layout`, alive (and so never reused) for the whole process."""


def _plan(
    entries: tuple[Entry, ...], flags: frozenset[str], driver: Version, deprecated: bool
) -> tuple[Step, ...]:
    """The entries of ``entries`` that the tool of ``driver`` shows on a board with
    ``flags``, each with its text label and whether it prints the deprecation text.

    This is the gating half of the walk, and it depends only on the layout, the driver and
    the flags, not on one GPU's values: the GPUs of a node share their board, so an 8-GPU
    report resolves each part of the layout once and only fills in values per GPU.
    """
    key = (id(entries), flags, driver, deprecated)
    plan = _PLANS.get(key)
    if plan is None:
        steps: list[Step] = []
        for entry in entries:
            chosen: Entry | None = entry
            if entry.alternatives:
                chosen = next((a for a in entry.alternatives if a.shown(driver, flags)), None)
            elif not entry.shown(driver, flags):
                chosen = None
            if chosen is not None:
                gone = deprecated or (chosen.deprecated is not None and driver >= chosen.deprecated)
                steps.append((chosen, chosen.label_for(driver), gone))
        plan = _PLANS[key] = tuple(steps)
    return plan


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
    for entry, label, gone in _plan(entries, flags, driver, deprecated):
        out.extend(_nodes(entry, label, facts, prefix, flags=flags, driver=driver, deprecated=gone))
    return out


def _nodes(
    entry: Entry,
    label: str | None,
    facts: Mapping[str, Any],
    prefix: str,
    *,
    flags: frozenset[str],
    driver: Version,
    deprecated: bool,
) -> list[Node]:
    path = prefix + entry.tag
    if entry.raw is not None and not (
        entry.children and facts.get(f"{path}/{entry.children[0].tag}")
    ):
        node = Node(entry.tag, label, raw=entry.raw)
    elif entry.each:
        return [
            _mark(n, entry)
            for n in _repeated(entry, label, facts[path], flags, driver, deprecated=deprecated)
        ]
    elif entry.group:
        own = facts.get(path)
        if isinstance(own, str):
            # one answer for the whole group: the board has none of it
            node = Node(entry.tag, label, value=own)
        else:
            assert entry.children is not None
            kids = _children(
                entry.children, facts, path + "/", flags, driver, deprecated=deprecated
            )
            text = facts[f"{path}/{entry.text_from}"] if entry.text_from else None
            if entry.empty_text is not None and not kids:
                text = entry.empty_text
            node = Node(entry.tag, label, children=kids, text=text)
    else:
        value = DEPRECATED if deprecated else facts[path]
        if value is None:
            node = Node(entry.tag, label, children=[])
        else:
            text = facts[path + "#text"] if entry.text_variant and not deprecated else None
            node = Node(entry.tag, label, value=value, text=text, text_indent=entry.indent)
    node.section = entry.section
    node.text_only_with = entry.text_only_with
    return [node]


def _repeated(
    entry: Entry,
    label: str | None,
    items: list[Any],
    flags: frozenset[str],
    driver: Version,
    *,
    deprecated: bool,
) -> list[Node]:
    if not entry.group:
        return [Node(entry.tag, label, value=value, text_indent=entry.indent) for value in items]
    assert entry.children is not None
    nodes = []
    for item in items:
        kids = _children(entry.children, item, "", flags, driver, deprecated=deprecated)
        text = item[entry.text_from] if entry.text_from else None
        nodes.append(Node(entry.tag, label, children=kids, text=text))
    return nodes


def _mark(node: Node, entry: Entry) -> Node:
    node.section = entry.section
    node.text_only_with = entry.text_only_with
    return node
