"""Hostile topology documents: each is refused with a TopologyError, quickly and in bounded memory.

The committed corpus (``corpus/topology``) holds the small hostile files: alias
bombs, recursive aliases, unhashable keys, numbers too long to convert, names of
20,000 characters, nesting thousands deep, tags that construct nothing safe. The
large cases (100,000 levels, 100,000 bad names, a file over the size limit) are
generated here. Whatever the input, the loader raises TopologyError and nothing
else, and its message stays within the report bounds.

The corpus runs in a child process with its address space capped at 1 GiB and a
generous deadline, so a document that expands without bound fails the test by
running out of memory or time instead of taking the test machine down with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nvml_mock_protocol.topology import (
    DESCRIBED_MAX_PROBLEMS,
    DOCUMENT_MAX_DEPTH,
    REPORT_MAX_BYTES,
    REPORT_MAX_PROBLEMS,
    TopologyError,
    parse_topology,
    read_topology_file,
)

CORPUS = Path(__file__).parent / "corpus" / "topology"
MESSAGE_BOUND = REPORT_MAX_BYTES + 2048
"""A refusal's message, header and "not shown" line included, is never longer than this."""

EXPECTED = {
    "billion-laughs.yaml": "more than 1000000 values",
    "laughs-as-node-lists.yaml": "more than 1000000 values",
    "merge-key-laughs.yaml": "more than 1000000 values",
    "recursive-alias.yaml": "refers to itself",
    "recursive-mapping.yaml": "refers to itself",
    "unhashable-key.yaml": "found a key that is a list",
    "unhashable-mapping-key.yaml": "found a key that is a dict",
    "huge-decimal-int.yaml": "a number has more than",
    "huge-int.json": "a number has more than",
    "huge-hex-int.yaml": "<an integer of 20000 bits> (int) is outside 0..4294967295",
    "huge-version.yaml": "version <an integer of 20000 bits>",
    "long-node-name.yaml": "node name is 20000 characters long",
    "long-domain-and-uuid.yaml": "(10000 characters)",
    "long-key.yaml": "found duplicate key 'kkkk",
    "deep-flow-yaml.yaml": "nesting depth",
    "deep-json.json": f"nested deeper than {DOCUMENT_MAX_DEPTH} levels",
    "deep-but-parsable-json.json": f"nested deeper than {DOCUMENT_MAX_DEPTH} levels",
    "odd-tags.yaml": "unsupported topology document version {1}",
    "python-tag.yaml": "could not determine a constructor",
}

_CORPUS_RUNNER = """
import json, resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from nvml_mock_protocol.topology import TopologyError, read_topology_file
results = {}
for path in sorted(Path(sys.argv[1]).iterdir()):
    try:
        read_topology_file(path)
        results[path.name] = ["accepted", ""]
    except TopologyError as exc:
        results[path.name] = ["TopologyError", str(exc)]
    except BaseException as exc:
        results[path.name] = [type(exc).__name__, str(exc)[:300]]
print(json.dumps(results))
"""


def test_the_corpus_lists_every_file() -> None:
    assert sorted(EXPECTED) == sorted(path.name for path in CORPUS.iterdir())


def test_every_corpus_document_is_refused_with_a_bounded_message() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CORPUS_RUNNER, str(CORPUS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    outcomes = json.loads(result.stdout)
    for name, why in EXPECTED.items():
        kind, message = outcomes[name]
        assert kind == "TopologyError", (name, kind, message)
        assert why in message, (name, message[:500])
        assert len(message) <= MESSAGE_BOUND, (name, len(message))


def refusal(text: str | bytes) -> TopologyError:
    with pytest.raises(TopologyError) as caught:
        parse_topology(text, source="topology.yaml")
    assert len(str(caught.value)) <= MESSAGE_BOUND
    return caught.value


@pytest.mark.parametrize("opener, closer", [("[", "]"), ('{"a": ', "}")])
def test_json_nested_100000_deep(opener: str, closer: str) -> None:
    text = '{"version": 1, "domains": ' + opener * 100_000 + "1" + closer * 100_000 + "}"
    assert "nested deeper than" in refusal(text).problems[0]


def test_yaml_nested_100000_deep() -> None:
    text = "version: 1\ndomains: " + "[" * 100_000 + "]" * 100_000 + "\n"
    refusal(text)


def test_yaml_nested_beyond_the_cap_but_within_the_parser() -> None:
    text = "version: 1\ndomains: " + "[" * 40 + "]" * 40 + "\n"
    assert "nested deeper than" in refusal(text).problems[0]


def test_100000_bad_names_give_a_capped_report() -> None:
    nodes = [f"Bad_{i}" for i in range(100_000)]
    text = json.dumps(
        {
            "version": 1,
            "domains": [
                {
                    "name": "d",
                    "uuid": "00000000-0000-0000-0000-0000000000ab",
                    "cliques": [{"id": 0, "nodes": nodes}],
                }
            ],
        }
    )
    error = refusal(text)
    assert error.count == 100_000
    assert len(error.problems) == DESCRIBED_MAX_PROBLEMS  # the rest are counted, not described
    message = str(error)
    assert message.startswith("invalid topology document topology.yaml: 100000 problem(s)\n")
    shown = [line for line in message.splitlines() if line.startswith("  - ")]
    assert 0 < len(shown) <= REPORT_MAX_PROBLEMS
    assert error.omitted == 100_000 - len(shown)
    assert message.endswith(f"... and {error.omitted} more problem(s) not shown")


def test_a_few_problems_are_all_shown() -> None:
    error = TopologyError(["one", "two"], "t.yaml")
    assert error.omitted == 0
    assert str(error) == "invalid topology document t.yaml: 2 problem(s)\n  - one\n  - two"


def test_size_limit_on_text_and_on_files(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="111 bytes, larger than the limit of 100 bytes"):
        parse_topology(b"version: 1\n" + b"#" * 100, max_bytes=100)
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:  # sparse: the size is checked before anything is read
        handle.truncate(9 * 1024 * 1024)
    with pytest.raises(TopologyError, match=r"9437184 bytes, larger than the limit of 8388608"):
        read_topology_file(big)


def test_item_limit_is_configurable() -> None:
    text = "version: 1\ndomains: []\n"
    parse_topology(text, max_items=5)
    with pytest.raises(TopologyError, match="more than 4 values"):
        parse_topology(text, max_items=4)


def test_aliases_within_the_limits_are_fine() -> None:
    text = (
        "version: 1\n"
        "domains:\n"
        "  - name: d\n"
        "    uuid: &u 00000000-0000-0000-0000-0000000000ab\n"
        "    cliques: [{id: 0, nodes: &n [a, b]}]\n"
    )
    assert set(parse_topology(text).node_index()) == {"a", "b"}


def _blocked_read(path: Path) -> tuple[list[BaseException], threading.Thread]:
    caught: list[BaseException] = []

    def read() -> None:
        try:
            read_topology_file(path)
        except BaseException as exc:
            caught.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)  # generous: a refusal takes microseconds, a blocked open takes forever
    return caught, reader


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "topology.yaml"
    os.mkfifo(fifo)
    caught, reader = _blocked_read(fifo)
    if reader.is_alive():  # unblock the reader so the test run can end
        with open(fifo, "w") as writer:
            writer.write("")
    assert not reader.is_alive(), "reading a FIFO blocked"
    [error] = caught
    assert isinstance(error, TopologyError)
    assert "is a FIFO (named pipe), not a regular file" in str(error)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_link_to_dev_zero_is_refused_without_reading(tmp_path: Path) -> None:
    link = tmp_path / "topology.yaml"
    link.symlink_to("/dev/zero")
    caught, reader = _blocked_read(link)
    assert not reader.is_alive()
    [error] = caught
    assert isinstance(error, TopologyError)
    assert "is a character device, not a regular file" in str(error)


def test_a_symlink_loop_is_an_os_error(tmp_path: Path) -> None:
    link = tmp_path / "topology.yaml"
    link.symlink_to(link.name)
    with pytest.raises(OSError, match="symbolic links"):
        read_topology_file(link)


def test_a_directory_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        read_topology_file(tmp_path)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**4000), max_value=2**4000)
    | st.floats()
    | st.text(max_size=300)
    | st.text(alphabet="ab-.\x00\x07é", min_size=250, max_size=20_000)
)
_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_slots = st.sampled_from(["version", "domains", "domain", "name", "uuid", "cliques", "id", "node"])


def _document_with(slot: str, value: object) -> dict[str, object]:
    clique: dict[str, object] = {"id": 0, "nodes": ["worker-1"]}
    domain: dict[str, object] = {
        "name": "d",
        "uuid": "00000000-0000-0000-0000-0000000000ab",
        "cliques": [clique],
    }
    document: dict[str, object] = {"version": 1, "domains": [domain]}
    if slot in ("version", "domains"):
        document[slot] = value
    elif slot == "domain":
        document["domains"] = [value, domain]
    elif slot in ("name", "uuid", "cliques"):
        domain[slot] = value
    elif slot == "id":
        clique["id"] = value
    else:
        clique["nodes"] = ["worker-1", value, value]
    return document


@given(slot=_slots, value=_values, as_json=st.booleans())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_value_anywhere_is_accepted_or_refused_cleanly(
    slot: str, value: object, as_json: bool
) -> None:
    data = _document_with(slot, value)
    if as_json:
        try:
            text = json.dumps(data)
        except ValueError:  # an integer JSON cannot write in decimal
            return
    else:
        text = yaml.safe_dump(data)
    try:
        parse_topology(text)
    except TopologyError as exc:
        assert len(str(exc)) <= MESSAGE_BOUND
