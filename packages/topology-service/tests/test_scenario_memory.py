"""A scenario document as large as the caps let it be, and its edits, in a real process's
memory: the chart gives the service 512Mi, and one edit of such a document used to take it
past that (40 scenarios of 20,000 names: 448 MB after the first edit, 725 MB at the peak of
later ones). The resident set is read from the kernel (``VmRSS``, and ``VmHWM``: the most it
ever held) after the start and after edits of one scenario and of every scenario.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
from conftest import document, serving, write_atomically
from test_hostile_load import scenario_xids, until

MIB = 1024 * 1024
PEAK_LIMIT = 448 * MIB
"""64 MiB under the chart's 512Mi limit."""
STEADY_LIMIT = 320 * MIB


def caps_document(xid: int, *, every: bool) -> str:
    """40 scenarios of 20,000 distinct names each (6.9 MiB as JSON, under the 8 MiB cap and
    the 1,000,000-item cap); scenario 0's Xid is *xid*, and every scenario's with *every*."""
    scenarios = [
        {
            "name": f"s-{s}",
            "selector": {"nodes": [f"{s:02d}{i:04x}" for i in range(20_000)]},
            "apply": {"xid": xid if s == 0 or every else 79},
        }
        for s in range(40)
    ]
    return json.dumps({"version": 1, "scenarios": scenarios}, separators=(",", ":"))


def _memory(pid: int) -> tuple[int, int]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split(maxsplit=1)[0]) * 1024
    return found["VmRSS"], found["VmHWM"]


def test_a_document_at_the_caps_and_its_edits_stay_under_the_chart_limit(tmp_path: Path) -> None:
    topology = tmp_path / "topology.yaml"
    topology.write_text(document())
    scenarios = tmp_path / "scenarios.json"
    text = caps_document(79, every=False)
    assert 6 * MIB < len(text) < 8 * MIB
    scenarios.write_text(text)
    with serving(
        "--topology-file", str(topology), "--scenarios-file", str(scenarios),
        "--poll-interval", "0.2",
    ) as (process, url):  # fmt: skip
        until(lambda: scenario_xids(url, "390000") == [79])
        rss, peak = _memory(process.pid)
        assert rss < STEADY_LIMIT, f"{rss / MIB:.0f} MiB after the start"
        # one scenario edited, then every one, then one again
        for xid, every in ((80, False), (81, True), (82, False)):
            write_atomically(scenarios, caps_document(xid, every=every))
            until(lambda xid=xid: scenario_xids(url, "000000") == [xid], seconds=60)
            until(
                lambda xid=xid, every=every: scenario_xids(url, "39001f") == [xid if every else 79]
            )
            rss, peak = _memory(process.pid)
            assert rss < STEADY_LIMIT, f"{rss / MIB:.0f} MiB after the edit to Xid {xid}"
        assert peak < PEAK_LIMIT, f"peak {peak / MIB:.0f} MiB"
        assert httpx.get(f"{url}/readyz").json()["status"] == "ready"
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
