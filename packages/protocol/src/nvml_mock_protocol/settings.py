"""Flags with env twins, declared once: the settings pattern every nvml-mock command follows.

A command's configuration is one frozen dataclass whose fields carry the defaults
and a docstring each. Beside it, a table of :class:`Option` declares how each field
is spelled on the command line and in the environment, and how its text becomes a
typed value. From that one table:

- :func:`add_options` puts the flags on an ``argparse`` parser, each help line
  naming its env twin and its default;
- :func:`resolve` builds the settings object with the precedence flag, then env
  twin, then the dataclass default. An empty (or blank) env value counts as
  unset, so a Helm template that renders ``""`` changes nothing;
- :func:`options_table` renders the README's ``flag | env | default | meaning``
  table, which a test per package compares with the README (:func:`markdown_table`).

A value a parser refuses raises :class:`SettingsError` naming the flag or env var
it came from, the text as given and the reason; each command maps it onto its own
config error, so its exit codes stay its own. Parsers take text and return the
typed value or raise ``ValueError`` with a reason that reads after
``<key>=<value>: `` (``must be a number of seconds``). The common kinds are here;
a package writes its own for what only it knows (a cliqueId, a CDI device name).

Importing this module loads only the standard library: check-fabric starts in every
workload container and must start fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import PurePath
from typing import Any, Final, Literal, TypeVar
from urllib.parse import urlsplit

from nvml_mock_protocol.errors import ProtocolPackageError

__all__ = [
    "TABLE_HEADER",
    "Given",
    "Option",
    "Parser",
    "SettingsError",
    "abs_path",
    "add_options",
    "boolean",
    "check_declaration",
    "choice",
    "csv",
    "default_text",
    "gather",
    "host_port",
    "int_range",
    "markdown_table",
    "name",
    "optional",
    "options_table",
    "resolve",
    "seconds",
    "table_rows",
    "text",
    "url",
]

T = TypeVar("T")
Parser = Callable[[str], Any]
"""Text in, typed value out; ``ValueError`` with a reason for text that cannot be used."""
Action = Literal["value", "switch", "toggle"]

TABLE_HEADER: Final = "| flag | env | default | meaning |\n| --- | --- | --- | --- |"
"""The first two lines of every README options table."""

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


class SettingsError(ProtocolPackageError):
    """A flag or env value a parser refused; names where it came from and why.

    ``key`` is the flag (``--port``) or env var (``NVML_MOCK_TOPOLOGY_PORT``) the text
    came from, ``value`` the text as given, ``reason`` what is wrong with it, and
    ``field`` the settings field it was meant for.
    """

    def __init__(self, key: str, value: str, reason: str, *, field: str = "") -> None:
        super().__init__(f"{key}={value!r}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason
        self.field = field


@dataclass(frozen=True)
class Option:
    """One setting: its field, its flag, its env twin, and how its text is parsed.

    The five positional fields are what every declaration needs; the rest are
    keyword-only, so a package may subclass this to add positional fields of its own
    (the NRI plugin's runtime config key) without its declarations changing shape.
    """

    field: str
    """Name of the settings dataclass field it fills."""
    flag: str
    """Long flag, ``--like-this``; the flag wins over the env twin."""
    env: str
    """Env twin; empty for the few flags that have none."""
    parse: Parser
    """Text to typed value, ``ValueError`` with a reason otherwise."""
    help: str
    """One line for ``--help``, and the README's meaning unless :attr:`doc` says more."""
    _: KW_ONLY
    metavar: str | None = None
    """Placeholder of the value in ``--help`` and in the README's flag cell."""
    doc: str | None = None
    """The README's meaning cell (Markdown); :attr:`help` when None."""
    default_doc: str | None = None
    """The README's default cell (Markdown); from the dataclass default when None."""
    action: Action = "value"
    """``value`` takes one argument; ``switch`` is a bare ``--flag`` (true); ``toggle``
    is ``--flag`` / ``--no-flag``. Switches and toggles go through :attr:`parse` as
    ``"true"`` / ``"false"``, like their env twins."""
    aliases: tuple[str, ...] = ()
    """Other spellings of the flag (``-o``), shown before it."""


@dataclass(frozen=True)
class Given:
    """A value that was set by a flag or an env twin, and where it came from."""

    key: str
    """The flag or env var."""
    text: str
    """The text as given."""
    value: Any
    """The parsed value."""


# The README and --help.


def default_text(default: object) -> str:
    """A default as the README's default cell shows it: ``off``, ``empty``, `` `5` ``."""
    if default is None:
        return "none"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, (tuple, list, frozenset, set)):
        return f"`{','.join(str(item) for item in default)}`" if default else "empty"
    if isinstance(default, float):
        return f"`{default:g}`"
    if isinstance(default, (str, PurePath)):
        return f"`{default}`" if str(default) else "empty"
    return f"`{default}`"


def _default_cell(option: Option, defaults: object) -> str:
    if option.default_doc is not None:
        return option.default_doc
    return default_text(getattr(defaults, option.field))


def _flag_cell(option: Option) -> str:
    spelled = "/".join((*option.aliases, option.flag))
    if option.action == "value" and option.metavar:
        spelled += f" {option.metavar}"
    return f"`{spelled}`"


def table_rows(options: Iterable[Option], defaults: object, *, note: str = "") -> list[str]:
    """README table rows for ``options``; ``note`` follows each flag (``(stage)``)."""
    rows = []
    for option in options:
        flag = _flag_cell(option) + (f" ({note})" if note else "")
        env = f"`{option.env}`" if option.env else ""
        meaning = option.doc if option.doc is not None else option.help
        cells = (flag, env, _default_cell(option, defaults), meaning)
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def options_table(options: Iterable[Option], defaults: object) -> str:
    """The README's ``flag | env | default | meaning`` table for ``options``.

    ``defaults`` is the settings object built with no flag and no env (its dataclass
    defaults); an option's :attr:`Option.default_doc` wins over it.
    """
    return "\n".join([TABLE_HEADER, *table_rows(options, defaults)])


def markdown_table(document: str, header: str = TABLE_HEADER) -> str:
    """The table in ``document`` that starts with ``header``, up to its last row.

    Raises ``LookupError`` when the document has no such table.
    """
    lines = document.splitlines()
    head = header.splitlines()
    for start in range(len(lines) - len(head) + 1):
        if lines[start : start + len(head)] == head:
            end = start + len(head)
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            return "\n".join(lines[start:end])
    raise LookupError(f"no table starting with {head[0]!r}")


def _help(option: Option, defaults: object) -> str:
    default = _default_cell(option, defaults).replace("`", "")
    where = f"env {option.env}; " if option.env else ""
    # argparse formats help with %-interpolation.
    return f"{option.help} ({where}default {default})".replace("%", "%%")


def add_options(
    parser: argparse.ArgumentParser,
    options: Iterable[Option],
    defaults: object,
    *,
    suppress: bool = False,
) -> None:
    """Add one flag per option to ``parser``; a flag not given reads as None.

    ``defaults`` supplies the defaults the help lines show. With ``suppress`` a flag
    not given leaves no attribute at all, so the same flags may sit on a command and
    on its subcommands without the subcommand's absence resetting the command's value.
    """
    for option in options:
        kwargs: dict[str, Any] = {
            "dest": option.field,
            "default": argparse.SUPPRESS if suppress else None,
            "help": _help(option, defaults),
        }
        if option.action == "switch":
            kwargs.update(action="store_const", const="true")
        elif option.action == "toggle":
            kwargs.update(action=argparse.BooleanOptionalAction)
        else:
            kwargs.update(metavar=option.metavar or option.field.upper())
        parser.add_argument(*option.aliases, option.flag, **kwargs)


# Resolution.


def gather(
    options: Iterable[Option], args: argparse.Namespace, environ: Mapping[str, str]
) -> dict[str, Given]:
    """The values set by a flag or an env twin, by field; the flag wins.

    Fields set by neither are absent, so the dataclass default applies. A flag given
    an empty value is still given (``--health-addr ""`` disables); an env twin that
    is empty or blank is not. Raises :class:`SettingsError` for a value its parser
    refuses.
    """
    found: dict[str, Given] = {}
    for option in options:
        flag_value = getattr(args, option.field, None)
        if flag_value is not None:
            key = option.flag
            raw = (
                ("true" if flag_value else "false") if isinstance(flag_value, bool) else flag_value
            )
        elif option.env and environ.get(option.env, "").strip():
            key, raw = option.env, environ[option.env]
        else:
            continue
        try:
            value = option.parse(str(raw))
        except ValueError as exc:
            raise SettingsError(key, str(raw), str(exc), field=option.field) from None
        found[option.field] = Given(key, str(raw), value)
    return found


def resolve(
    cls: type[T],
    options: Iterable[Option],
    args: argparse.Namespace,
    environ: Mapping[str, str],
    **extra: Any,
) -> T:
    """The frozen settings ``cls(...)`` from flags, env twins and the dataclass defaults.

    ``extra`` fills fields that are not options (a positional argument). Raises
    :class:`SettingsError` naming the flag or env var and its value.
    """
    values = {name: given.value for name, given in gather(options, args, environ).items()}
    return cls(**values, **extra)


def check_declaration(cls: type, options: Sequence[Option]) -> list[str]:
    """What is wrong with a declaration: unknown or repeated fields, flags or env twins."""
    fields = {f.name for f in dataclasses.fields(cls)}
    problems = [
        f"{o.field} is not a field of {cls.__name__}" for o in options if o.field not in fields
    ]
    for what, spelled in (
        ("field", [o.field for o in options]),
        ("flag", [o.flag for o in options]),
        ("env twin", [o.env for o in options if o.env]),
    ):
        problems += [f"{what} {s} is declared twice" for s in set(spelled) if spelled.count(s) > 1]
    return problems


# Parsers for the common kinds.


def text(value: str) -> str:
    """Any text, without surrounding blanks."""
    return value.strip()


def name(value: str) -> str:
    """Non-empty text, without surrounding blanks."""
    value = value.strip()
    if not value:
        raise ValueError("must not be empty")
    return value


def optional(parse: Callable[[str], T]) -> Callable[[str], T | None]:
    """``parse``, with blank text meaning None (no value)."""

    def parse_optional(value: str) -> T | None:
        return parse(value) if value.strip() else None

    return parse_optional


def abs_path(value: str) -> str:
    """An absolute path, without a trailing ``/``."""
    value = value.strip()
    if not value.startswith("/"):
        raise ValueError("must be an absolute path")
    return value.rstrip("/") or "/"


def host_port(value: str) -> tuple[str, int]:
    """``host:port`` or ``:port`` (all addresses), IPv6 hosts in brackets; port 0..65535."""
    value = value.strip()
    host, sep, port = value.rpartition(":")
    if not sep:
        raise ValueError("must be host:port or :port")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("port must be a number from 0 to 65535")
    if host.startswith("[") != host.endswith("]"):
        raise ValueError("an IPv6 host must be written in brackets, e.g. [::1]:8080")
    return host.strip("[]") or "0.0.0.0", int(port)


def url(value: str) -> str:
    """An ``http://`` or ``https://`` base URL with a host, without a trailing ``/``."""
    value = value.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise ValueError("must be a base URL without query or fragment")
    return value.rstrip("/")


def seconds(maximum: float = math.inf) -> Callable[[str], float]:
    """A number of seconds above 0 and at most ``maximum``."""
    bound = "" if math.isinf(maximum) else f" and at most {maximum:g}"

    def parse_seconds(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise ValueError("must be a number of seconds") from None
        if not (0 < number <= maximum and math.isfinite(number)):  # NaN fails too
            raise ValueError(f"must be more than 0{bound} seconds")
        return number

    return parse_seconds


def int_range(minimum: int, maximum: int) -> Callable[[str], int]:
    """A decimal integer from ``minimum`` to ``maximum``."""

    def parse_int(value: str) -> int:
        try:
            number = int(value.strip(), 10)
        except ValueError:
            raise ValueError(f"must be an integer from {minimum} to {maximum}") from None
        if not minimum <= number <= maximum:
            raise ValueError(f"must be an integer from {minimum} to {maximum}")
        return number

    return parse_int


def csv(value: str) -> tuple[str, ...]:
    """Comma-separated items, blanks dropped, each once, in the order given."""
    return tuple(dict.fromkeys(item.strip() for item in value.split(",") if item.strip()))


def boolean(value: str) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off``, in any case."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("must be one of 1/true/yes/on or 0/false/no/off")


def choice(*values: str) -> Callable[[str], str]:
    """One of ``values``, in any case; returned lower case."""

    def parse_choice(value: str) -> str:
        lowered = value.strip().lower()
        if lowered not in values:
            raise ValueError(f"must be one of {', '.join(values)}")
        return lowered

    return parse_choice
