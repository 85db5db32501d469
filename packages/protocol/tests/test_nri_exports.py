"""The public surface of nvml_mock_protocol.nri is what __all__ says."""

from __future__ import annotations

import nvml_mock_protocol.nri as nri


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(nri) if not name.startswith("_")}
    modules = {
        "adjustment",
        "connection",
        "errors",
        "events",
        "mux",
        "runtime",
        "stub",
        "threaded",
        "ttrpc",
        "ttrpc_pb2",
    }
    assert set(nri.__all__) == public - modules
    assert sorted(nri.__all__) == sorted(set(nri.__all__))
