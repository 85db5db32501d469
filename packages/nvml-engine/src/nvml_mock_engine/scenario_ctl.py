"""``nvml-mock-ctl scenario list|show|status``: the cluster's scenarios, from the topology service.

Read-only: it asks ``GET /v1/scenarios`` and ``GET /v1/scenarios/{name}`` of the service
at ``--url`` (env ``NVML_MOCK_TOPOLOGY_URL``), so it works from any pod or a laptop with a
port-forward. Changing scenarios is done on the scenario document (the chart's
``scenarios`` value, or its ConfigMap), never through this command. Exit codes: 0 done,
1 the service cannot be reached or refused (the message says why), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from typing import Any, Final

from nvml_mock_protocol import settings as s

from nvml_mock_engine.errors import AnswerTooLargeError, CtlUsageError, LiveLayerError
from nvml_mock_engine.http_answers import (
    ERROR_MAX_BYTES,
    failure_reason,
    read_bounded,
)
from nvml_mock_engine.settings import ENV_TOPOLOGY_URL

__all__ = ["URL_OPTION", "add_scenario_verb"]

URL_OPTION: Final = s.Option(
    "url",
    "--url",
    ENV_TOPOLOGY_URL,
    s.url,
    "the topology service's base URL",
    metavar="URL",
)
_STATE_COLUMNS: Final = ("pending", "applied", "cleared", "failed", "excluded")


def add_scenario_verb(verbs: Any) -> None:
    """Add ``scenario`` and its actions to ``nvml-mock-ctl``'s verbs."""
    scenario = verbs.add_parser(
        "scenario",
        help="the cluster's scenarios and their status (from the topology service)",
        description="List the scenarios the topology service serves, show one, or its "
        "status on every node it picked.",
    )
    actions = scenario.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (
        ("list", "every scenario with its nodes per state"),
        ("show", "one scenario as in the document, and its counts"),
        ("status", "one scenario's state on every node"),
    ):
        action = actions.add_parser(name, help=text, description=text)
        if name != "list":
            action.add_argument("name", metavar="NAME", help="the scenario's name")
        s.add_options(action, (URL_OPTION,), argparse.Namespace(url=None))
        action.add_argument("--json", action="store_true", help="the service's JSON answer")
        action.set_defaults(handler=_run)


def _get(base: str, path: str) -> Any:
    # The HTTP and TLS stack only for the scenario verb: every other verb of nvml-mock-ctl
    # imports this module to register it, and would pay a third of its start-up for it.
    import urllib.error
    import urllib.request

    url = base + path
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            return json.loads(read_bounded(response))
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(read_bounded(exc, ERROR_MAX_BYTES)).get("detail", exc.reason)
        except (ValueError, AttributeError, OSError):
            detail = exc.reason
        finally:
            exc.close()
        raise LiveLayerError(f"{url}: {exc.code} {detail}") from None
    except AnswerTooLargeError as exc:
        raise LiveLayerError(f"{url}: {exc}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = failure_reason(exc, 15)
        raise LiveLayerError(f"cannot reach the topology service at {base}: {reason}") from None


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return (
        datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def _run(args: argparse.Namespace) -> int:
    given = s.gather((URL_OPTION,), args, os.environ)
    if "url" not in given:
        raise CtlUsageError(f"scenario: give --url or set {ENV_TOPOLOGY_URL}")
    base: str = given["url"].value
    if args.action == "list":
        data = _get(base, "/v1/scenarios")
        if args.json:
            print(json.dumps(data, indent=2))
            return 0
        print(
            f"{'NAME':<32} {'START':<21} {'NODES':>5} "
            + " ".join(f"{c:>8}" for c in _STATE_COLUMNS)
        )
        for row in data["scenarios"]:
            counts = " ".join(f"{row['states'].get(c, 0):>8}" for c in _STATE_COLUMNS)
            print(f"{row['name']:<32} {_when(row['startMs']):<21} {row['nodes']:>5} {counts}")
        print(f"scenarios revision {data['revision']} from {data.get('source') or '(none)'}")
        if data.get("reloadError"):
            print(f"the newest scenario file was refused: {data['reloadError']}")
        return 0
    from urllib.parse import quote

    data = _get(base, "/v1/scenarios/" + quote(args.name, safe=""))
    if args.json:
        print(
            json.dumps(
                data
                if args.action == "status"
                else {k: v for k, v in data.items() if k != "nodes"},
                indent=2,
            )
        )
        return 0
    if args.action == "show":
        print(
            f"scenario {data['name']} (revision {data['revision']}, first start "
            f"{_when(data['startMs'])})"
        )
        print(json.dumps(data["scenario"], indent=2))
        print("nodes: " + ", ".join(f"{c} {data['states'].get(c, 0)}" for c in _STATE_COLUMNS))
        return 0
    print(f"{'NODE':<40} {'STATE':<9} {'RUN':>3} {'APPLIED':<21} {'CLEARED':<21} GPUS / REASON")
    for row in data["nodes"]:
        tail = row.get("reason") or " ".join(row.get("gpus", ())) or "-"
        print(
            f"{row['node']:<40} {row['state']:<9} {row.get('run', 0):>3} "
            f"{_when(row.get('appliedMs')):<21} {_when(row.get('clearedMs')):<21} {tail}"
        )
    return 0
