"""GPU selection as ``nvml-mock-ctl -i`` and a scenario's ``gpus`` name GPUs: ``all``, or a
comma-separated list of board indices and GPU UUIDs.

One rule for the command line and the node agent, so a scenario's ``gpus: [0, GPU-…]``
picks what ``nvml-mock-ctl -i 0,GPU-…`` picks.
"""

from __future__ import annotations

from nvml_mock_live.errors import LiveValueError

# Light on purpose: ``nvml-mock-ctl status`` and ``xid`` select GPUs through this module in a
# command that must start about as fast as Python itself.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvml_mock_live import BoardGpu

__all__ = ["select_gpus", "select_indices"]


def select_gpus(board: Sequence[BoardGpu], spec: str) -> list[int]:
    """Board indices from ``all`` or a comma-separated list of indices and UUIDs, in order
    and without repeats. Raises :class:`LiveValueError` naming a part that is no GPU of
    *board*."""
    return select_indices([gpu.uuid for gpu in board], spec)


def select_indices(uuids: Sequence[str], spec: str) -> list[int]:
    """:func:`select_gpus` on a board given as its GPUs' UUIDs, in index order."""
    board = range(len(uuids))
    if spec.strip().lower() == "all":
        return list(board)
    chosen: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part.isdigit():
            index = int(part)
            if index >= len(board):
                raise LiveValueError(
                    "gpu", part, f"is not a GPU of this node (0..{len(board) - 1})"
                )
        else:
            matches = [i for i, uuid in enumerate(uuids) if uuid.lower() == part.lower()]
            if not matches:
                raise LiveValueError(
                    "gpu", part, "is neither an index nor the UUID of a GPU of this node"
                )
            index = matches[0]
        if index not in chosen:
            chosen.append(index)
    if not chosen:
        raise LiveValueError("gpu", spec, "names no GPU (an index, a UUID or all)")
    return chosen
