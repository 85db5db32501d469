"""The shared settings pattern: declarations, precedence, errors, parsers and the README table."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from nvml_mock_protocol import settings as s


@dataclass(frozen=True, kw_only=True)
class Demo:
    """A small settings object covering each kind of option."""

    port: int = 8090
    """Port."""
    url: str | None = None
    """Base URL."""
    verbose: bool = False
    """Bare switch."""
    color: bool = True
    """Toggle."""
    tags: tuple[str, ...] = ()
    """Tags."""
    wait: float = 5.0
    """Seconds."""
    root: Path
    """Not an option: a positional argument."""


OPTIONS = (
    s.Option("port", "--port", "DEMO_PORT", s.int_range(0, 65535), "listen port", metavar="N"),
    s.Option("url", "--url", "DEMO_URL", s.optional(s.url), "base URL", doc="the `base` URL"),
    s.Option("verbose", "--verbose", "DEMO_VERBOSE", s.boolean, "say more", action="switch"),
    s.Option("color", "--color", "", s.boolean, "colour output", action="toggle"),
    s.Option("tags", "--tags", "DEMO_TAGS", s.csv, "comma-separated tags", aliases=("-t",)),
    s.Option("wait", "--wait", "DEMO_WAIT", s.seconds(60), "50% of it", default_doc="`5` s"),
)
DEFAULTS = Demo(root=Path("/"))


def _parser(*, suppress: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="demo")
    s.add_options(parser, OPTIONS, DEFAULTS, suppress=suppress)
    return parser


def _load(argv: list[str], env: dict[str, str]) -> Demo:
    return s.resolve(Demo, OPTIONS, _parser().parse_args(argv), env, root=Path("/r"))


def test_defaults_when_nothing_is_given() -> None:
    assert _load([], {}) == Demo(root=Path("/r"))


def test_env_twins_then_flags_win() -> None:
    env = {"DEMO_PORT": "9000", "DEMO_URL": "http://h:1/", "DEMO_VERBOSE": "yes", "DEMO_TAGS": "a"}
    assert _load([], env) == Demo(
        port=9000, url="http://h:1", verbose=True, tags=("a",), root=Path("/r")
    )
    got = _load(["--port", "1", "-t", "b, c,b", "--no-color"], env)
    assert (got.port, got.tags, got.color, got.verbose) == (1, ("b", "c"), False, True)


@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_or_blank_env_value_counts_as_unset(blank: str) -> None:
    assert _load([], {"DEMO_PORT": blank, "DEMO_WAIT": blank}) == Demo(root=Path("/r"))


def test_a_flag_given_empty_is_given_and_wins_over_the_env() -> None:
    assert _load(["--url", ""], {"DEMO_URL": "http://h"}).url is None


def test_gather_says_where_each_value_came_from() -> None:
    args = _parser().parse_args(["--port", "7"])
    given = s.gather(OPTIONS, args, {"DEMO_WAIT": "2"})
    assert given == {"port": s.Given("--port", "7", 7), "wait": s.Given("DEMO_WAIT", "2", 2.0)}


@pytest.mark.parametrize(
    ("argv", "env", "key", "value", "reason"),
    [
        (["--port", "http"], {}, "--port", "http", "must be an integer from 0 to 65535"),
        ([], {"DEMO_PORT": "70000"}, "DEMO_PORT", "70000", "from 0 to 65535"),
        (["--url", "ftp://h"], {}, "--url", "ftp://h", "http:// or https://"),
        ([], {"DEMO_VERBOSE": "maybe"}, "DEMO_VERBOSE", "maybe", "1/true/yes/on"),
        (["--wait", "0"], {}, "--wait", "0", "more than 0 and at most 60 seconds"),
        (["--wait", "nan"], {}, "--wait", "nan", "more than 0"),
        (["--wait", "soon"], {}, "--wait", "soon", "must be a number of seconds"),
    ],
)
def test_a_refused_value_names_the_key_the_value_and_the_field(
    argv: list[str], env: dict[str, str], key: str, value: str, reason: str
) -> None:
    with pytest.raises(s.SettingsError) as info:
        _load(argv, env)
    assert (info.value.key, info.value.value) == (key, value)
    assert reason in info.value.reason
    assert info.value.field in {o.field for o in OPTIONS}
    assert str(info.value) == f"{key}={value!r}: {info.value.reason}"


def test_suppressed_flags_on_a_subcommand_keep_the_commands_value() -> None:
    parser = _parser()
    sub = parser.add_subparsers(dest="command", required=True).add_parser("run")
    s.add_options(sub, OPTIONS, DEFAULTS, suppress=True)
    assert parser.parse_args(["--port", "5", "run"]).port == "5"
    assert parser.parse_args(["run", "--port", "6"]).port == "6"
    assert not hasattr(_parser(suppress=True).parse_args([]), "port")


def test_help_names_the_env_twin_and_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--port N listen port (env DEMO_PORT; default 8090)" in out
    assert "-t TAGS, --tags TAGS comma-separated tags (env DEMO_TAGS; default empty)" in out
    assert "colour output (default on)" in out
    assert "50% of it (env DEMO_WAIT; default 5 s)" in out


def test_the_readme_table_comes_from_the_declaration() -> None:
    table = s.options_table(OPTIONS, DEFAULTS)
    assert table.splitlines() == [
        "| flag | env | default | meaning |",
        "| --- | --- | --- | --- |",
        "| `--port N` | `DEMO_PORT` | `8090` | listen port |",
        "| `--url` | `DEMO_URL` | none | the `base` URL |",
        "| `--verbose` | `DEMO_VERBOSE` | off | say more |",
        "| `--color` |  | on | colour output |",
        "| `-t/--tags` | `DEMO_TAGS` | empty | comma-separated tags |",
        "| `--wait` | `DEMO_WAIT` | `5` s | 50% of it |",
    ]
    assert s.table_rows(OPTIONS[:1], DEFAULTS, note="run") == [
        "| `--port N` (run) | `DEMO_PORT` | `8090` | listen port |"
    ]


def test_markdown_table_finds_the_table_and_stops_at_its_end() -> None:
    table = s.options_table(OPTIONS[:2], DEFAULTS)
    document = f"# Title\n\nText.\n\n{table}\n\nMore text.\n| not | this |\n"
    assert s.markdown_table(document) == table
    with pytest.raises(LookupError):
        s.markdown_table("# no table here\n")


def test_check_declaration_finds_unknown_and_repeated_names() -> None:
    assert s.check_declaration(Demo, OPTIONS) == []
    bad = (*OPTIONS, s.Option("nope", "--port", "DEMO_PORT", s.text, "x"))
    assert sorted(s.check_declaration(Demo, bad)) == [
        "env twin DEMO_PORT is declared twice",
        "flag --port is declared twice",
        "nope is not a field of Demo",
    ]


@pytest.mark.parametrize(
    ("parse", "given", "expected"),
    [
        (s.text, "  a b ", "a b"),
        (s.name, " x ", "x"),
        (s.abs_path, "/var/lib/", "/var/lib"),
        (s.abs_path, "/", "/"),
        (s.host_port, ":8080", ("0.0.0.0", 8080)),
        (s.host_port, "[::1]:9", ("::1", 9)),
        (s.host_port, "127.0.0.1:0", ("127.0.0.1", 0)),
        (s.url, "https://h:1/base/", "https://h:1/base"),
        (s.optional(s.url), " ", None),
        (s.seconds(), "0.25", 0.25),
        (s.int_range(1, 64), " 64 ", 64),
        (s.csv, ",a,,b, a", ("a", "b")),
        (s.boolean, "ON", True),
        (s.boolean, "No", False),
        (s.choice("text", "json"), "JSON", "json"),
    ],
)
def test_parsers_accept(parse: s.Parser, given: str, expected: object) -> None:
    assert parse(given) == expected


@pytest.mark.parametrize(
    ("parse", "given", "reason"),
    [
        (s.name, "  ", "must not be empty"),
        (s.abs_path, "rel/dir", "must be an absolute path"),
        (s.host_port, "8080", "must be host:port or :port"),
        (s.host_port, ":65536", "port must be a number from 0 to 65535"),
        (s.host_port, "[::1:80", "in brackets"),
        (s.url, "topo:8090", "http:// or https://"),
        (s.url, "http://h/?q=1", "without query or fragment"),
        (s.seconds(), "-1", "must be more than 0 seconds"),
        (s.seconds(), "inf", "must be more than 0 seconds"),
        (s.int_range(1, 64), "0", "must be an integer from 1 to 64"),
        (s.int_range(1, 64), "1.5", "must be an integer from 1 to 64"),
        (s.boolean, "", "must be one of 1/true/yes/on or 0/false/no/off"),
        (s.choice("raw", "cdi"), "oci", "must be one of raw, cdi"),
    ],
)
def test_parsers_refuse_with_a_reason(parse: s.Parser, given: str, reason: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(given)
    assert reason in str(info.value)


def test_default_text() -> None:
    assert [s.default_text(v) for v in (None, True, "", (), ("a", "b"), 60.0, Path("/x"))] == [
        "none",
        "on",
        "empty",
        "empty",
        "`a,b`",
        "`60`",
        "`/x`",
    ]
    assert s.default_text(math.pi).startswith("`3.14")
