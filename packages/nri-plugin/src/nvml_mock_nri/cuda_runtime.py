"""The CUDA runtime opt-in: ``LD_PRELOAD`` of the overlay's runtime work-alikes.

PyTorch and other CUDA wheels load ``libcudart.so.<major>`` from their own wheel directory
by RPATH, which ``LD_LIBRARY_PATH`` cannot override; a preloaded library whose soname is
the one they need satisfies that need before the loader looks anywhere. So a pod annotated
``nvml-mock.nvidia.com/cuda-runtime: "true"`` gets ``LD_PRELOAD`` with the overlay's
work-alikes (:data:`nvml_mock_protocol.names.CUDA_RUNTIME_PRELOADS`, one per CUDA major),
and no other pod ever does: a preload changes every process of a container, so it is never
ambient.

Rules, in :func:`plan_cuda_runtime`:

* Only ``"true"`` (any case, surrounding blanks ignored) opts in. ``"false"`` is a plain no;
  any other value is ignored with a warning that names it (escaped and bounded: it is the
  pod's text), so a typo never passes unnoticed.
* The work-alikes come first, then whatever the pod set: a library the pod preloads itself
  (an allocator, a profiler) still loads, and the runtime's entry points resolve to the
  work-alikes before any other definition. A value that already holds them is left as it is
  (not sent, as for ``PATH``); an empty or absent one becomes the work-alikes alone.
* Only the work-alikes staged in the overlay are preloaded (checked per container, so late
  staging works): the loader would print an error in every process for a missing one. None
  staged is a warning, and nothing is preloaded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Final

from nvml_mock_protocol import names
from nvml_mock_protocol.logs import printable

from nvml_mock_nri.adjust import Decision, Policy
from nvml_mock_nri.selection import Selection

__all__ = ["VALUE_MAX_CHARS", "plan_cuda_runtime", "preload_value"]

logger = logging.getLogger(__name__)

VALUE_MAX_CHARS: Final = 64
"""Longest annotation value quoted in the warning about it."""


def preload_value(current: str | None, libraries: list[str]) -> str | None:
    """The new ``LD_PRELOAD``: *libraries* in front of *current* (entries split on blanks and
    ``:``, as the loader does); None when *current* already holds every one of them."""
    if not current or not current.strip():
        return ":".join(libraries)
    present = set(current.replace(" ", ":").split(":"))
    if all(lib in present for lib in libraries):
        return None
    return ":".join([*libraries, current])


def plan_cuda_runtime(
    policy: Policy,
    decision: Decision,
    *,
    pod_annotations: Mapping[str, str],
    selection: Selection,
    exists: Callable[[str], bool] = os.path.isfile,
) -> None:
    """Add ``LD_PRELOAD`` to *decision* for a pod that opted in (module docstring); a value
    of the annotation that is neither ``true`` nor ``false`` is a warning naming it."""
    value = pod_annotations.get(names.ANNOTATION_CUDA_RUNTIME)
    if value is None:
        return
    answer = value.strip().lower()
    if answer != "true":
        if answer != "false":
            decision.warnings.append(
                f"annotation {names.ANNOTATION_CUDA_RUNTIME}="
                f"'{printable(value, VALUE_MAX_CHARS)}' ignored: only \"true\" preloads the CUDA "
                "runtime work-alike"
            )
        return
    source, target = policy.mount.source, policy.mount.destination
    staged = [rel for rel in names.CUDA_RUNTIME_PRELOADS if exists(f"{source}/{rel}")]
    if not staged:
        decision.warnings.append(
            f"{names.ANNOTATION_CUDA_RUNTIME}: no CUDA runtime work-alike is staged in "
            f"{source} ({', '.join(names.CUDA_RUNTIME_PRELOADS)}); nothing preloaded"
        )
        return
    libraries = [f"{target}/{rel}" for rel in staged]
    new = preload_value(selection.own_preload, libraries)
    if new is not None:
        decision.env.append((names.ENV_LD_PRELOAD, new))
    decision.notes.append(f"CUDA runtime work-alike preloaded: {', '.join(libraries)}")
