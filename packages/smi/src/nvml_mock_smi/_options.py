"""Command-line parsing with the real tool's grammar and its error messages.

The grammar is the registry's (:mod:`._registry`): each command declares its options, and
:func:`parse` only reads those declarations, so a new command needs no change here. The
result is one frozen :class:`Options`. The library path has a flag (``--nvml-lib``, not in
``-h``) and an env twin (``NVML_MOCK_SMI_LIB``); the flag wins.
"""

from __future__ import annotations

from ._errors import EXIT_INVALID_ARGUMENT, INVALID_ARGS_MESSAGE, SmiError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import TypedDict

    from ._registry import Option

    class Common(TypedDict):
        """The fields the shared options fill (see :func:`common_fields`)."""

        ids: tuple[str, ...]
        library: str | None
        filename: str | None
        loop_seconds: float | None


ENV_LIBRARY = "NVML_MOCK_SMI_LIB"


class Options:
    """Everything one run was asked to do; immutable once built.

    A plain slotted class rather than a dataclass or named tuple: importing ``dataclasses``
    or ``typing`` costs more start-up time than a whole ``-L`` run is allowed.
    """

    __slots__ = (
        "command",
        "csv_header",
        "csv_units",
        "display",
        "extra",
        "filename",
        "ids",
        "library",
        "loop_seconds",
        "mode",
        "query_fields",
        "xml",
    )

    command: str
    """The registry name of the command that runs (:func:`._registry.by_name`)."""
    mode: str
    """What the command was asked to do, when it does more than one thing: table | list |
    query | query-gpu | query-apps | help | help-query-gpu | help-query-apps | version |
    topo | nvlink-status | nvlink-caps | reset"""
    extra: Mapping[str, str]
    """A command's own parsed options that no field below holds (key -> text)."""
    xml: bool
    display: tuple[str, ...]
    ids: tuple[str, ...]
    query_fields: tuple[str, ...]
    csv_header: bool
    csv_units: bool
    filename: str | None
    loop_seconds: float | None
    library: str | None

    def __init__(
        self,
        *,
        command: str = "table",
        mode: str = "",
        extra: Mapping[str, str] | None = None,
        xml: bool = False,
        display: tuple[str, ...] = (),
        ids: tuple[str, ...] = (),
        query_fields: tuple[str, ...] = (),
        csv_header: bool = True,
        csv_units: bool = True,
        filename: str | None = None,
        loop_seconds: float | None = None,
        library: str | None = None,
    ) -> None:
        values = {
            "command": command,
            "mode": mode or command,
            "extra": dict(extra or {}),
            "xml": xml,
            "display": display,
            "ids": ids,
            "query_fields": query_fields,
            "csv_header": csv_header,
            "csv_units": csv_units,
            "filename": filename,
            "loop_seconds": loop_seconds,
            "library": library,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Options is immutable (tried to set {name})")

    def __repr__(self) -> str:
        return "Options(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"


def bad() -> SmiError:
    """The real tool's one answer to any bad combination of arguments (exit code 2)."""
    return SmiError(INVALID_ARGS_MESSAGE, EXIT_INVALID_ARGUMENT)


def split_list(value: str) -> tuple[str, ...]:
    """``"0, 3,"`` -> ``("0", "3")``: the comma lists of ``-i``, ``-d`` and the queries."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> Options:
    """Parse ``argv`` (without the program name); raise :class:`SmiError` on bad input.

    The first word picks a sub-command, whose own options are then read; or else each flag
    is looked up among the modes' options (:func:`._registry.mode_option`) and the mode is
    the command that one of them selects (the table when none does).
    Every option given must be one the chosen command declares; the command's ``build``
    checks the rest.
    """
    from . import _registry

    args = list(argv)
    command = _registry.by_word(args[0]) if args else None
    if command is not None:
        args.pop(0)
        values = _scan(args, _registry.option_table([command]).get)
    else:
        values = _scan(args, _registry.mode_option)
        chosen = _registry.selected(set(values))
        if len(chosen) > 1:
            raise bad()
        command = chosen[0] if chosen else _registry.default_mode()
    if not set(values) <= command.keys():
        raise bad()
    return command.build(values, environ)


def _scan(args: list[str], find: Callable[[str], Option | None]) -> dict[str, str]:
    """``{key: value}`` of ``args``, each flag looked up with ``find``; a switch's value is
    ``""``."""
    values: dict[str, str] = {}
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        option = find(name)
        if option is None:
            raise bad()
        if not option.value:
            if eq:
                raise bad()
            values[option.key] = ""
            i += 1
            continue
        if eq:
            value = inline
        elif option.default is not None and (
            # a number, or a list of them (``-cci 0,0,0``), is the optional argument
            i + 1 >= len(args) or not args[i + 1].replace(",", "").isdigit()
        ):
            value = option.default
        else:
            if i + 1 >= len(args):
                raise bad()
            value = args[i + 1]
            i += 1
        if option.key in values:
            raise bad()
        values[option.key] = value
        i += 1
    return values


def common_fields(values: Mapping[str, str], environ: Mapping[str, str]) -> Common:
    """The :class:`Options` fields the shared options fill: ``ids``, ``library``,
    ``filename`` and ``loop_seconds`` (absent options give their defaults)."""
    ids = split_list(values["id"]) if "id" in values else ()
    if "id" in values and not ids:
        raise bad()
    return {
        "ids": ids,
        "library": library(values, environ),
        "filename": values.get("filename"),
        "loop_seconds": _loop(values),
    }


def library(values: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    """The NVML library to load: ``--nvml-lib``, then ``NVML_MOCK_SMI_LIB``, else the
    loader's search (``None``)."""
    return values.get("library") or environ.get(ENV_LIBRARY) or None


def csv_format(value: str) -> tuple[bool, bool]:
    """``--format=csv[,noheader][,nounits]`` -> (header, units)."""
    parts = {p.strip().lower() for p in value.split(",") if p.strip()}
    if "csv" not in parts or parts - {"csv", "noheader", "nounits"}:
        raise bad()
    return "noheader" not in parts, "nounits" not in parts


def _loop(values: Mapping[str, str]) -> float | None:
    if "loop" in values and "loop-ms" in values:
        raise bad()
    try:
        if "loop" in values:
            seconds = float(int(values["loop"]))
        elif "loop-ms" in values:
            seconds = int(values["loop-ms"]) / 1000
        else:
            return None
    except ValueError:
        raise bad() from None
    if seconds <= 0:
        raise bad()
    return seconds
