"""The work-alike's command registry: every mode and sub-command, its options and its run.

The real tool has two kinds of command: a *mode* chosen by a flag among the top-level
options (``-L``, ``-q``, ``--query-gpu=``, ``-r``, and the table when none is given) and a
*sub-command* named by the first word (``topo``, ``nvlink``, ``dmon``, ...), whose options
are its own (``-c`` is a count in ``dmon`` and the capabilities in ``nvlink``). Both are a
:class:`Command` here, declared in one module of :mod:`._commands`; the parser
(:func:`._options.parse`) and the runner (:func:`._app.run`) only read this registry.

How to add a command
--------------------
1. Write ``_commands/<name>.py`` with a module-level ``COMMANDS`` tuple of
   :class:`Command` objects. A top-level mode sets ``select`` (the option keys that pick it)
   and leaves ``word`` empty; a sub-command sets ``word`` and leaves ``select`` empty.
   ``options`` lists every option the command accepts, the ones that select it included;
   reuse the shared ones below (:data:`ID`, :data:`LIBRARY`, :data:`FILENAME`,
   :data:`LOOP`, :data:`LOOP_MS`) so each flag is declared once.
2. ``build(values, environ)`` gets the parsed ``{key: text}`` (a switch's value is ``""``)
   after the parser has checked that every option given is one the command declares; it
   checks what only the command knows (ranges, combinations) and returns an
   :class:`~._options.Options` (``common_fields`` fills ``-i``/``-f``/loop/library). Anything
   the fixed fields do not hold goes in ``extra``.
3. ``run(options, write)`` does the work and returns the exit code; it raises
   :class:`~._errors.SmiError` for a failure the real tool reports (message and exit code).
4. Add the module's name to :data:`MODE_MODULES` (a mode; the parser loads these in order
   until it knows every flag given) or :data:`SUBCOMMAND_MODULES` (a sub-command; the module
   is named as its word, and only that word loads it).

Rules the tests check (``tests/smi/test_smi_registry.py``): two top-level commands that share
a flag declare it with the same :class:`Option`; no flag selects two commands; a command
module imports nothing but this module and :mod:`._options`/:mod:`._errors` at import time
(the parser may load every mode module to read a command line, so the renderers are imported
inside ``run``).
A top-level command with an empty ``select`` is the default (the table); there is one.

Why not ``argparse``: the real tool answers any bad combination with one fixed message and
exit code 2 that scripts match, accepts ``--id=3`` beside ``--id 3``, and ``-l`` with or
without a number; and ``argparse`` alone costs more start-up time than ``-L`` may take.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._options import Options

    Build = Callable[[Mapping[str, str], Mapping[str, str]], Options]
    Run = Callable[[Options, Callable[[str], None]], int]

MODE_MODULES = (
    "list",
    "query",
    "report",
    "reset",
    "setters",
    "mig_mode",
    "version",
    "help",
    "table",
)
"""The modules of :mod:`._commands` that declare top-level modes, the most used first: the
parser loads them in this order only until it knows every flag it was given (``-L`` loads
one), so each mode costs the others nothing but its place in the line."""

DEFAULT_MODULE = "table"
"""The module of the mode no flag selects; a bare ``nvidia-smi`` loads it alone."""

SUBCOMMAND_MODULES = (
    "dmon",
    "mig",
    "nvlink",
    "pmon",
    "topo",
)
"""The modules of :mod:`._commands` that declare sub-commands, each named as its first word;
one is loaded only when the first word names it, so they cost the other commands nothing."""

COMMAND_MODULES = MODE_MODULES + SUBCOMMAND_MODULES


class Option:
    """One flag of one command: its spellings, the key it is parsed into, and its kind.

    ``value``: the flag takes an argument (``-i 0`` or ``-i=0``); otherwise it is a switch,
    which refuses ``=``. ``default``: the argument is optional, and this is its value when the
    next word is not a number (``-l`` alone repeats every 5 seconds).
    """

    __slots__ = ("default", "key", "names", "value")

    names: tuple[str, ...]
    key: str
    value: bool
    default: str | None

    def __init__(
        self, names: tuple[str, ...], key: str, *, value: bool = False, default: str | None = None
    ) -> None:
        self.names = names
        self.key = key
        self.value = value or default is not None
        self.default = default

    def __repr__(self) -> str:
        return f"Option({self.names!r}, {self.key!r})"


class Command:
    """One mode or sub-command: how it is picked, what it accepts, how it is built and run."""

    __slots__ = ("build", "name", "options", "run", "select", "word")

    name: str
    word: str
    select: tuple[str, ...]
    options: tuple[Option, ...]
    build: Build
    run: Run

    def __init__(
        self,
        name: str,
        *,
        options: tuple[Option, ...],
        build: Build,
        run: Run,
        select: tuple[str, ...] = (),
        word: str = "",
    ) -> None:
        self.name = name
        self.word = word
        self.select = select
        self.options = options
        self.build = build
        self.run = run

    def keys(self) -> frozenset[str]:
        """Every option key this command accepts."""
        return frozenset(o.key for o in self.options)

    def __repr__(self) -> str:
        return f"Command({self.name!r})"


# The options several commands share, declared once.
ID = Option(("-i", "--id"), "id", value=True)
LIBRARY = Option(("--nvml-lib",), "library", value=True)
FILENAME = Option(("-f", "--filename"), "filename", value=True)
LOOP = Option(("-l", "--loop"), "loop", default="5")
LOOP_MS = Option(("-lms", "--loop-ms"), "loop-ms", value=True)

_loaded: dict[str, tuple[Command, ...]] = {}


def _module(name: str) -> tuple[Command, ...]:
    if name not in _loaded:
        # ``__import__`` rather than ``importlib``: the package costs start-up time
        module = __import__(f"{__package__}._commands.{name}", fromlist=["COMMANDS"])
        _loaded[name] = tuple(module.COMMANDS)
    return _loaded[name]


def commands() -> list[Command]:
    """Every registered command, in :data:`COMMAND_MODULES` order."""
    return [c for name in COMMAND_MODULES for c in _module(name)]


def by_name(name: str) -> Command:
    """The command called ``name``; ``KeyError`` if none is (a programming error).

    The loaded modules are searched first: the parser has loaded the one that ran, and the
    sub-command modules that were not asked for stay unloaded."""
    for loaded in list(_loaded.values()):
        for command in loaded:
            if command.name == name:
                return command
    for command in commands():
        if command.name == name:
            return command
    raise KeyError(name)


def by_word(word: str) -> Command | None:
    """The sub-command named by the first word ``word``, if any."""
    if word not in SUBCOMMAND_MODULES:
        return None
    for command in _module(word):
        if command.word == word:
            return command
    return None


def top_level() -> list[Command]:
    """The modes chosen by a top-level flag, and the default (the table); loads them all."""
    return [c for name in MODE_MODULES for c in _module(name)]


_spellings: dict[str, Option] = {}
_modes_read: list[str] = []


def mode_option(spelling: str) -> Option | None:
    """The top-level :class:`Option` spelled ``spelling``, loading mode modules in
    :data:`MODE_MODULES` order only until one declares it; ``None`` when none does."""
    if not _spellings:
        for option in (ID, LIBRARY, FILENAME, LOOP, LOOP_MS):
            _spellings.update(dict.fromkeys(option.names, option))
    while spelling not in _spellings and len(_modes_read) < len(MODE_MODULES):
        module = MODE_MODULES[len(_modes_read)]
        for command in _module(module):
            for option in command.options:
                for name in option.names:
                    _spellings.setdefault(name, option)
        _modes_read.append(module)
    return _spellings.get(spelling)


def selected(keys: set[str]) -> list[Command]:
    """The modes that these parsed option keys select. Only loaded modules can be among them:
    a selecting flag was found in the module that declares it (and no key selects two modes)."""
    return [
        c for name in MODE_MODULES if name in _loaded for c in _loaded[name] if set(c.select) & keys
    ]


def default_mode() -> Command:
    """The mode no flag selects (the table), from :data:`DEFAULT_MODULE`."""
    return next(c for c in _module(DEFAULT_MODULE) if not c.select)


def option_table(group: list[Command]) -> dict[str, Option]:
    """Each spelling of each flag the commands of ``group`` accept, to its :class:`Option`."""
    table: dict[str, Option] = {}
    for command in group:
        for option in command.options:
            for name in option.names:
                table.setdefault(name, option)
    return table
