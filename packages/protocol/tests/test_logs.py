"""The shared log-line contract: real records through the real handler and formatters."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from nvml_mock_protocol import logs, names

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(autouse=True)
def _restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def _ours() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if h.get_name() == logs.HANDLER_NAME]


def _json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_env_names_are_the_shared_names() -> None:
    assert logs.ENV_LOG_FORMAT is names.ENV_LOG_FORMAT == "NVML_MOCK_LOG_FORMAT"
    assert logs.ENV_LOG_LEVEL is names.ENV_LOG_LEVEL == "NVML_MOCK_LOG_LEVEL"
    assert logs.LOG_FORMATS == ("text", "json")
    assert logs.DEFAULT_LOG_FORMAT in logs.LOG_FORMATS


def test_json_line_carries_the_contract_fields_then_the_context() -> None:
    out = io.StringIO()
    logs.configure_logging("info", "json", out)
    logging.getLogger("nvml_mock_demo.plugin").info(
        "injected %d devices into %s",
        4,
        "web",
        extra={"node": "worker-1", "namespace": "ml", "pod": "web-0", "container": "main"},
    )
    (line,) = _json_lines(out)
    assert list(line) == [*logs.JSON_FIELDS, "node", "namespace", "pod", "container"]
    assert isinstance(line["ts"], str) and TS.match(line["ts"])
    assert line["level"] == "info"
    assert line["logger"] == "nvml_mock_demo.plugin"
    assert line["msg"] == "injected 4 devices into web"
    assert (line["node"], line["namespace"], line["pod"], line["container"]) == (
        "worker-1",
        "ml",
        "web-0",
        "main",
    )
    assert "exc" not in line


def test_json_line_includes_the_exception() -> None:
    out = io.StringIO()
    logs.configure_logging("debug", "json", out)
    try:
        raise KeyError("missing")
    except KeyError:
        logging.getLogger("t").exception("lookup failed", extra={"path": "/x"})
    (line,) = _json_lines(out)
    assert line["level"] == "error"
    assert line["path"] == "/x"
    assert list(line)[-1] == "exc"
    exc = line["exc"]
    assert isinstance(exc, str)
    assert exc.startswith("Traceback (most recent call last):")
    assert exc.rstrip().endswith("KeyError: 'missing'")


def test_json_survives_values_json_cannot_encode_and_non_ascii() -> None:
    out = io.StringIO()
    logs.configure_logging("info", "json", out)
    logging.getLogger("t").warning("päth ☃", extra={"where": object.__new__(_Odd), "n": 3})
    (line,) = _json_lines(out)
    assert line["msg"] == "päth ☃"
    assert "☃" in out.getvalue(), "non-ASCII is written as is, not escaped"
    assert line["where"] == "<odd>"
    assert line["n"] == 3


class _Odd:
    def __str__(self) -> str:
        return "<odd>"


def test_context_cannot_replace_contract_fields_and_private_names_stay_out() -> None:
    out = io.StringIO()
    logs.configure_logging("info", "json", out)
    logging.getLogger("real").info(
        "m", extra={"level": "fake", "logger": "fake", "ts": "fake", "_secret": 1, "ok": True}
    )
    (line,) = _json_lines(out)
    assert (line["level"], line["logger"]) == ("info", "real")
    assert line["ts"] != "fake"
    assert "_secret" not in line
    assert line["ok"] is True


def test_adapter_context_reaches_the_line() -> None:
    out = io.StringIO()
    logs.configure_logging("info", "json", out)
    adapter = logging.LoggerAdapter(logging.getLogger("a"), {"node": "n-3"})
    adapter.info("hello")
    (line,) = _json_lines(out)
    assert line["node"] == "n-3"


def test_text_line_shape_with_context_and_traceback() -> None:
    out = io.StringIO()
    logs.configure_logging("info", "text", out)
    log = logging.getLogger("nvml_mock_demo.store")
    log.info("reloaded", extra={"nodes": 3, "changed": 1})
    try:
        raise RuntimeError("disk gone")
    except RuntimeError:
        log.error("cannot read", exc_info=True)
    lines = out.getvalue().splitlines()
    ts, rest = lines[0].split(" ", 1)
    assert TS.match(ts)
    assert rest == "INFO    nvml_mock_demo.store: reloaded nodes=3 changed=1"
    assert lines[1].split(" ", 1)[1] == "ERROR   nvml_mock_demo.store: cannot read"
    assert lines[2] == "  Traceback (most recent call last):"  # indented: never a line
    assert lines[-1] == "  RuntimeError: disk gone"


def test_level_filters_and_is_case_insensitive() -> None:
    out = io.StringIO()
    logs.configure_logging("WARNING", "json", out)
    log = logging.getLogger("lvl")
    log.info("dropped")
    log.warning("kept")
    assert [line["msg"] for line in _json_lines(out)] == ["kept"]
    assert logging.getLogger().level == logging.WARNING


def test_reconfiguring_replaces_the_handler_instead_of_adding_one() -> None:
    first, second = io.StringIO(), io.StringIO()
    foreign = logging.NullHandler()
    logging.getLogger().addHandler(foreign)
    logs.configure_logging("info", "text", first)
    logs.configure_logging("debug", "json", second)
    assert len(_ours()) == 1
    assert foreign in logging.getLogger().handlers, "handlers it did not install are left alone"
    logging.getLogger("again").debug("once")
    assert first.getvalue() == ""
    assert [line["msg"] for line in _json_lines(second)] == ["once"]
    logging.getLogger().removeHandler(foreign)


@pytest.mark.parametrize(
    ("level", "fmt", "problem"),
    [
        ("info", "xml", "log format must be one of text, json, got 'xml'"),
        ("loud", "json", "log level must be one of debug, info, warning, error, got 'loud'"),
    ],
)
def test_bad_values_are_named_and_change_nothing(level: str, fmt: str, problem: str) -> None:
    out = io.StringIO()
    installed = logs.configure_logging("info", "json", out)
    with pytest.raises(ValueError, match=re.escape(problem)):
        logs.configure_logging(level, fmt)
    assert _ours() == [installed]
    assert logging.getLogger().level == logging.INFO


def test_default_stream_follows_sys_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    logs.configure_logging("info", "json")
    later = io.StringIO()
    monkeypatch.setattr(sys, "stderr", later)
    logging.getLogger("late").info("to the current stderr")
    assert [line["msg"] for line in _json_lines(later)] == ["to the current stderr"]


def test_a_fresh_process_writes_json_lines_to_stderr_only() -> None:
    code = (
        "import logging\n"
        "from nvml_mock_protocol.logs import configure_logging\n"
        "configure_logging('info', 'json')\n"
        "configure_logging('info', 'json')\n"
        "logging.getLogger('proc').info('one line', extra={'pod': 'p'})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == ""
    (line,) = [json.loads(text) for text in done.stderr.splitlines()]
    assert (line["logger"], line["msg"], line["pod"]) == ("proc", "one line", "p")


def test_pod_values_cannot_forge_lines_and_every_line_is_bounded() -> None:
    """The NRI plugin logs values a pod wrote: a newline in NVIDIA_VISIBLE_DEVICES forged a
    log line, NUL bytes reached the log, and lines ran to 100 KB."""
    forged = "0\n2026-12-01T00:00:00.000Z ERROR   nvml_mock_nri: forged\x00\x1b[31m"
    for fmt in ("text", "json"):
        out = io.StringIO()
        logs.configure_logging("info", fmt, out)
        log = logging.getLogger("nvml_mock_nri.plugin")
        log.warning("visible devices %s", forged, extra={"entry": forged, "big": "x" * 100_000})
        try:
            raise ValueError(forged)
        except ValueError:
            log.error("m" * 100_000, exc_info=True)
        text = out.getvalue()
        assert "\x00" not in text and "\x1b" not in text
        lines = text.splitlines()
        assert sum("forged" in line and line.startswith("2026-12-01T00:00") for line in lines) == 0
        assert all(len(line) < 24_000 for line in lines), max(map(len, lines))
        assert "\\n2026-12-01T00:00:00.000Z" in text.replace("\\\\", "\\")
        assert "...(100000 chars)" in text
    logs.configure_logging("info", "text", io.StringIO())


def test_printable_escapes_and_cuts() -> None:
    assert logs.printable("a\nb\x00c\u2028") == "a\\nb\\x00c\\u2028"
    assert logs.printable("x" * 20, 5) == "xxxxx...(20 chars)"
    assert logs.printable("a\nb\x07", keep_newlines=True) == "a\nb\\x07"
