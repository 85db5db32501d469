"""``nvidia-imex-ctl [-c CONFIG] (-q | -N [-j]) [-i IP] [-p PORT] [-u PATH]``.

Asks the local IMEX daemon through its command service (``IMEX_CMD_*`` of the config file,
or ``-i``/``-p``/``-u``) and prints:

- ``-q``: the local daemon's own state, one word, as NVIDIA's daemon answers it:
  ``INITIALIZING`` while it starts, ``READY`` while it serves (whatever its peers do: this
  is what NVIDIA's compute-domain daemon probes for, "the local IMEX daemon, not the entire
  domain"), ``SHUTTING_DOWN`` while it stops, and ``UNAVAILABLE`` when no daemon answers
  (the reason on stderr, exit 1);
- ``-N``: the node status in NVIDIA's layout (each node's status, the connection matrix,
  the domain state: a lost peer shows here); with ``-j`` as JSON.

Exit codes: 0 the daemon answered; 1 it could not be reached (refused, timed out after
:data:`TIMEOUT` seconds: never a hang), answered garbage, or the config cannot be used;
2 usage.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
from collections.abc import Sequence
from typing import Final

from nvml_mock_imex import status as st
from nvml_mock_imex.config import load_config
from nvml_mock_imex.errors import ImexError
from nvml_mock_imex.wire import MAX_LINE

__all__ = ["TIMEOUT", "main"]

DEFAULT_CONFIG: Final = "/etc/nvidia-imex/config.cfg"
TIMEOUT: Final = 3.0


class _UnreachableError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nvidia-imex-ctl", description="Query the local IMEX daemon (nvml-mock work-alike)."
    )
    parser.add_argument("-c", "--config", default=DEFAULT_CONFIG, help="IMEX config file")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("-q", action="store_true", help="print this node's state once and exit")
    mode.add_argument("-N", action="store_true", help="print the status of every node")
    parser.add_argument("-j", action="store_true", help="with -N: print JSON")
    parser.add_argument("-i", "--ip", default="", help="command service address")
    parser.add_argument("-p", "--port", type=_port, default=None, help="command service port")
    parser.add_argument("-u", "--unix", default="", help="command service unix socket")
    return parser


def _port(value: str) -> int:
    """A port: plain ASCII digits, 1..65535 (``int`` alone takes ``+4``, ``5_000``)."""
    if not re.fullmatch(r"[0-9]{1,5}", value) or not 1 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port (1..65535)")
    return int(value)


def _target(args: argparse.Namespace) -> tuple[str, object]:
    """Where the command service listens: flags first, then the config file."""
    if args.unix:
        return "unix", args.unix
    ip, port = args.ip, args.port
    if port is None or not ip:
        config = load_config(args.config)
        if not config.cmd_enabled and port is None:
            raise ImexError(
                f"{args.config}: IMEX_CMD_ENABLED is not 1: the daemon has no "
                "command service to query"
            )
        if config.cmd_unix_path and port is None and not ip:
            return "unix", config.cmd_unix_path
        port = config.cmd_port if port is None else port
        ip = ip or config.cmd_bind_ip or config.bind_ip or "127.0.0.1"
        if port is None:
            raise ImexError(f"{args.config}: no IMEX_CMD_PORT")
    return "tcp", (ip, port)


def _ask(kind: str, where: object) -> st.DomainStatus:
    family = (
        socket.AF_UNIX
        if kind == "unix"
        else (
            socket.AF_INET6 if ":" in str(where[0]) else socket.AF_INET  # type: ignore[index]
        )
    )
    shown = where if kind == "unix" else f"{where[0]}:{where[1]}"  # type: ignore[index]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT)
        try:
            sock.connect(where)  # type: ignore[arg-type]
            sock.sendall(b'{"t":"status"}\n')
            data = b""
            while not data.endswith(b"\n") and len(data) <= MAX_LINE:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise _UnreachableError(
                f"unable to connect to the IMEX daemon at {shown}: {reason}"
            ) from None
    try:
        answer = json.loads(data)
        if answer.get("t") != "status":
            raise ValueError(answer.get("reason", "not a status"))
        return st.DomainStatus.from_wire(answer["status"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _UnreachableError(f"the IMEX daemon at {shown} answered no status: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tool; its exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        kind, where = _target(args)
        status = _ask(kind, where)
    except ImexError as exc:
        print(f"nvidia-imex-ctl: {exc}", file=sys.stderr)
        return 1
    except _UnreachableError as exc:
        if args.q:
            print(st.UNAVAILABLE)
        print(f"nvidia-imex-ctl: {exc}", file=sys.stderr)
        return 1
    if args.q:
        print(status.state)
    elif args.j:
        sys.stdout.write(st.render_json(status))
    else:
        sys.stdout.write(st.render_text(status))
    return 0
