"""Per-node cost of making a fake node's objects, against a baseline measured in the same run.

The baseline is a deep copy of the recorded objects (what any replay costs at least); the
measured path adds the engine's identity derivation and the rewrite. Prints p50/p99 in µs.

    python bench/bench_generate.py [NODES]
"""

from __future__ import annotations

import copy
import statistics
import sys
import time

from nvml_mock_kwok.fleet import FakeNode
from nvml_mock_kwok.identity import Fabric
from nvml_mock_kwok.objects import NodeOptions, node_object, slice_objects
from nvml_mock_kwok.truth import load_truth


def _quantiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49] * 1e6, cuts[98] * 1e6


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    truth = load_truth("gb200")
    options = NodeOptions()
    recorded = [dict(truth.data["gfd"]), dict(truth.data["resourceSlices"])]
    base: list[float] = []
    made: list[float] = []
    for i in range(count):
        start = time.perf_counter()
        copy.deepcopy(recorded)
        base.append(time.perf_counter() - start)
        node = FakeNode(
            f"bench-{i:05d}", "gb200", "d", Fabric(truth.identity.fabric.cluster_uuid, i // 18)
        )  # type: ignore[union-attr]
        start = time.perf_counter()
        node_object(truth, node, options)
        slice_objects(truth, node)
        made.append(time.perf_counter() - start)
    for name, samples in (("baseline (deep copy of the recording)", base), ("fake node", made)):
        p50, p99 = _quantiles(samples)
        print(f"{name}: p50 {p50:.0f} µs, p99 {p99:.0f} µs over {count} nodes")


if __name__ == "__main__":
    main()
