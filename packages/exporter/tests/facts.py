"""The committed dcgm-exporter facts (``fixtures/``), read for the tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@dataclass(frozen=True)
class Family:
    name: str
    kind: str
    help: str
    default: bool


def families() -> dict[str, Family]:
    found = {}
    for line in (FIXTURES / "dcgm-exporter-counters.csv").read_text().splitlines():
        if not line or line.startswith("#") or line.startswith("label|"):
            continue
        name, kind, help_text, default = line.split("|")
        found[name] = Family(name, kind, help_text, default == "yes")
    return found


def label_keys() -> list[str]:
    return [
        line.split("|")[1]
        for line in (FIXTURES / "dcgm-exporter-counters.csv").read_text().splitlines()
        if line.startswith("label|")
    ]


def dashboard() -> tuple[dict[str, str], list[str]]:
    """(variable -> query, panel expressions) of Grafana dashboard 12239."""
    variables: dict[str, str] = {}
    exprs: list[str] = []
    for line in (FIXTURES / "grafana-12239.promql").read_text().splitlines():
        if line.startswith("variable "):
            _, name, query = line.split(" ", 2)
            variables[name] = query
        elif line.startswith("expr "):
            exprs.append(line[5:])
    return variables, exprs
