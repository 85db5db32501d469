"""Print what each tox env's tests did, after ``make test``.

``tox run-parallel`` shows only each env's status; a newcomer cannot see how many tests
ran, how many were skipped and why. Every pytest env writes a JUnit report into its own
``{env_tmp_dir}`` (see tox.ini); this reads those reports, newer than the start of the
run, and prints one line per env with passed / skipped / failed / errors, then the skip
reasons, so "passed" never hides "skipped because clang is missing". Standard library
only, so it runs with the interpreter that bootstrapped the tool venv. A missing or
unreadable report is said as such; it never changes the exit status of ``make test``.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPORT = Path("tmp") / "junit.xml"
MAX_REASONS = 3


@dataclass
class EnvResult:
    env: str
    passed: int = 0
    skipped: int = 0
    failed: int = 0
    errors: int = 0
    seconds: float = 0.0
    reasons: Counter[str] = field(default_factory=Counter)


def _reason(text: str) -> str:
    """pytest writes ``path:line: reason``; keep the reason, on one short line."""
    parts = text.split(": ", 1)
    reason = parts[1] if len(parts) == 2 and ":" in parts[0] else text
    reason = " ".join(reason.split())
    return reason if len(reason) <= 110 else reason[:107] + "..."


def read_report(env: str, path: Path) -> EnvResult:
    """One env's counts from its JUnit XML; raises ``ET.ParseError`` or ``OSError``."""
    result = EnvResult(env)
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        result.seconds += float(case.get("time") or 0)
        outcome = {child.tag for child in case}
        if "failure" in outcome:
            result.failed += 1
        elif "error" in outcome:
            result.errors += 1
        elif "skipped" in outcome:
            result.skipped += 1
            skip = case.find("skipped")
            text = "" if skip is None else (skip.get("message") or skip.text or "")
            result.reasons[_reason(text) or "(no reason given)"] += 1
        else:
            result.passed += 1
    return result


def summarize(tox_dir: Path, since: float) -> list[str]:
    lines: list[str] = []
    results: list[EnvResult] = []
    unreadable: list[str] = []
    for path in sorted(tox_dir.glob(f"*/{REPORT}")):
        env = path.parts[-3]
        try:
            if path.stat().st_mtime < since:
                continue
            results.append(read_report(env, path))
        except (OSError, ET.ParseError) as exc:
            unreadable.append(f"{env} ({type(exc).__name__}: {exc})")
    if not results and not unreadable:
        return ["test counts: no pytest report from this run (did any test env run?)"]
    width = max([len(r.env) for r in results] + [len("total")])
    header = (
        f"  {'env':<{width}}  {'passed':>6}  {'skipped':>7}  {'failed':>6}  {'errors':>6}"
        f"  {'time':>7}"
    )
    lines += ["test counts per tox env:", header]
    total = EnvResult("total")
    for r in results:
        lines.append(
            f"  {r.env:<{width}}  {r.passed:>6}  {r.skipped:>7}  {r.failed:>6}  {r.errors:>6}"
            f"  {r.seconds:>6.1f}s"
        )
        total.passed += r.passed
        total.skipped += r.skipped
        total.failed += r.failed
        total.errors += r.errors
        total.seconds += r.seconds
    lines.append(
        f"  {'total':<{width}}  {total.passed:>6}  {total.skipped:>7}  {total.failed:>6}"
        f"  {total.errors:>6}  {total.seconds:>6.1f}s"
    )
    for r in results:
        for reason, count in r.reasons.most_common(MAX_REASONS):
            lines.append(f"  skipped in {r.env} ({count}): {reason}")
        left = len(r.reasons) - MAX_REASONS
        if left > 0:
            lines.append(f"  skipped in {r.env}: {left} other reason(s)")
    for item in unreadable:
        lines.append(f"  no readable report: {item}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tox-dir", type=Path, default=Path(".tox"))
    parser.add_argument(
        "--since", type=float, default=0.0, help="ignore reports older than this (epoch seconds)"
    )
    args = parser.parse_args(argv)
    sys.stdout.write("\n".join(summarize(args.tox_dir, args.since)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
