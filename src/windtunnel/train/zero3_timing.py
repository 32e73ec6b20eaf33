"""Timing of a ZeRO-3 step program on three GPU streams and the host, in time order (a small event loop).

train/zero3_stream.py turns DeepSpeed's fetch, prefetch, release and bucketing rules into a program: the
device operations the host issues, in its order, and the points where the host blocks. Which operations
are issued, and in what order, does not depend on time; when each runs does, and this module decides it.

Streams (each runs its operations one after another, in issue order):

- ``compute``: kernels (``kernel``, holding the compute units) and copies (``copy``, which do not);
- ``nccl``: the process group's collectives (``gather``, ``reduce``);
- ``side``: passes on DeepSpeed's reduce stream (``pass``), kernels that hold the compute units.

An operation starts once its stream is free, the host has issued it and the operations it reads have
ended. A pass (DeepSpeed's reduce stream has the compute's priority), and with ``wait_for_kernel`` a
collective (NCCL's stream at the compute's priority too), that becomes ready while a compute kernel or a
pass runs starts when that one ends: the GPU dispatches the running kernel's remaining blocks first. A
compute kernel that becomes ready while a pass runs waits for the pass the same way. Ties go to the
operation that is already running.

Events are handled in time order, so when an operation becomes ready every kernel that could be running
then has already been placed. Times in seconds.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

STREAM = {"kernel": "compute", "copy": "compute", "gather": "nccl", "reduce": "nccl", "pass": "side"}
# At equal ready times: passes, then collectives, then compute (a pass that starts with a kernel holds it back).
_TIE_ORDER = {"side": 0, "nccl": 1, "compute": 2}


@dataclass(frozen=True)
class DeviceOp:
    """A device operation: ``kind`` (see ``STREAM``), ``seconds``, the operations whose ends it waits for
    (indices into the program), and for a kernel the number of equal kernels it stands for."""

    kind: str
    seconds: float
    after: tuple[int, ...] = ()
    kernels: int = 1


@dataclass(frozen=True)
class HostWait:
    """The host blocks until operation ``target`` ends, plus ``extra`` seconds (a synchronous copy)."""

    target: int
    extra: float = 0.0


Program = list[DeviceOp | HostWait]  # in the host's order


def _running(spans: list[tuple[float, float]], at: float, *, from_start: bool = False) -> float | None:
    """End of the span of ``spans`` (sorted by start) running across ``at``, if any: started strictly
    before it, or with ``from_start`` at it too."""
    index = bisect.bisect_right(spans, (at, math.inf)) - 1
    if index >= 0 and at < spans[index][1] and (spans[index][0] < at or from_start):
        return spans[index][1]
    return None


def time_program(program: Program, *, wait_for_kernel: bool) -> list[float | None]:
    """End time of every device operation of ``program`` (None for host waits); ``wait_for_kernel``: the
    collectives run at the compute's stream priority."""
    ends: list[float | None] = [None] * len(program)
    issued: list[float] = [0.0] * len(program)
    not_before: dict[int, float] = {}  # an operation held back by a running kernel: retry then
    queues: dict[str, deque[int]] = {"compute": deque(), "nccl": deque(), "side": deque()}
    free = {"compute": 0.0, "nccl": 0.0, "side": 0.0}
    kernels: list[tuple[float, float]] = []
    passes: list[tuple[float, float]] = []
    host, position = 0.0, 0
    while True:
        # The host issues everything up to the next wait it cannot pass yet.
        while position < len(program):
            item = program[position]
            if isinstance(item, HostWait):
                if ends[item.target] is None:
                    break
                host = max(host, ends[item.target] + item.extra)
            else:
                issued[position] = host
                queues[STREAM[item.kind]].append(position)
            position += 1
        best: tuple[tuple[float, int, int], str] | None = None
        for name, queue in queues.items():
            if not queue:
                continue
            index = queue[0]
            reads = [ends[i] for i in program[index].after]
            if any(end is None for end in reads):
                continue
            ready = max([free[name], issued[index], not_before.get(index, 0.0), *reads])
            key = (ready, _TIE_ORDER[name], index)
            if best is None or key < best[0]:
                best = (key, name)
        if best is None:
            if position < len(program) or any(queues.values()):
                raise RuntimeError("ZeRO-3 program deadlock: an operation waits for one that never runs")
            return ends
        (ready, _, index), name = best
        op = program[index]
        if op.kind == "kernel":
            held = _running(passes, ready, from_start=True)
        elif name == "side" or (name == "nccl" and wait_for_kernel):
            held = _running(kernels, ready) or _running(passes, ready)
        else:
            held = None
        if held is not None:
            not_before[index] = held
            continue
        queues[name].popleft()
        end = ready + op.seconds
        ends[index] = end
        free[name] = end
        if op.kind == "kernel" and op.seconds > 0:
            step = op.seconds / op.kernels
            kernels += [(ready + step * k, ready + step * (k + 1)) for k in range(op.kernels)]
        elif op.kind == "pass" and op.seconds > 0:
            bisect.insort(passes, (ready, end))
