"""DeepSpeed ZeRO-3's step played on two streams: the compute stream and the one NCCL stream that runs
every parameter all-gather and gradient reduce-scatter in the order the host issued them.

DeepSpeed 0.6.2 gathers a layer's parameters one submodule at a time and reduce-scatters its gradients
in buckets, all through one process group (the engine's and ``zero.Init``'s data-parallel group), and
PyTorch's ProcessGroupNCCL runs all of a group's collectives on one stream per device. So a prefetch
gather issued in the backward waits in that stream behind the reduce-scatters issued before it, and each
of those waits for the compute that produced its gradients. Whether the transfers hide under the
compute then depends on the order, not only on the sizes, which is what this module plays.

The rules follow the code (microsoft/DeepSpeed v0.6.2, commit 32d97976):

- partitioned_param_coordinator.py ``fetch_sub_module``: gather the running submodule's parameters if
  they are not in flight, make the compute stream wait for them, then prefetch the next parameters of
  the recorded trace while fewer than min(max_live - available, prefetch_bucket) are popped (at least
  one, so with weight matrices larger than the bucket the prefetch runs one matrix ahead). The host
  blocks on the oldest gather once more than two are waited for and not complete
  (``__max_ongoing_fetch_events = 2``).
- ``release_sub_module`` / ``__params_to_release``: after a submodule runs its parameters are released
  unless the trace uses them again before more than max_reuse parameters of other submodules.
- stage3.py ``reduce_independent_p_g_buckets_and_remove_grads``: a gradient that would overflow a
  non-empty bucket flushes it first; the flush is one reduce-scatter on the reduce stream, which waited
  for the compute stream when each gradient was added (``__add_grad_to_ipg_bucket``); the host blocks
  on the oldest reduce-scatter once more than two are outstanding (``__max_param_reduce_events = 2``);
  the epilogue flushes the last bucket and synchronizes.
- GPU scheduling (stack ``sharding.collective_priority``): ProcessGroupNCCL's stream has the compute's
  priority unless asked otherwise, and the GPU dispatches a running kernel's remaining blocks before a
  kernel that arrives meanwhile at that priority; so a collective that becomes ready while a compute kernel
  runs starts when that kernel ends. Beside compute-bound layers this hides; where transfers take about
  as long as the compute it lands on the critical path.

Times are seconds, sizes parameters. The host costs nothing except where it blocks.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

# The coordinator's and the optimizer's limits on queued events (hard-coded in DeepSpeed 0.6.2).
MAX_FETCH_EVENTS = 2
MAX_REDUCE_EVENTS = 2


@dataclass(frozen=True)
class Submodule:
    """One submodule call: ``params`` gathered (0: none, or all persistent), forward and backward compute
    seconds, and the gradients (parameters) its backward produces in hook order. ``hooked``: the call runs
    DeepSpeed's module hooks, so its fetch prefetches along the trace even without parameters of its own
    (a norm, a dropout, a container); False: compute with no module of its own."""

    params: float
    fwd_s: float
    bwd_s: float
    grads: tuple[float, ...] = ()
    hooked: bool = True


@dataclass(frozen=True)
class StreamStep:
    """A played step: forward and backward wall seconds, their compute seconds, and the seconds the
    collective stream was busy in each."""

    forward_s: float
    backward_s: float
    forward_compute_s: float
    backward_compute_s: float
    forward_comm_s: float
    backward_comm_s: float

    @property
    def forward_exposed_s(self) -> float:
        return max(0.0, self.forward_s - self.forward_compute_s)

    @property
    def backward_exposed_s(self) -> float:
        return max(0.0, self.backward_s - self.backward_compute_s)


@dataclass(frozen=True)
class _Entry:
    """One fetch of the trace: pass ('F' forward, 'R' recomputed forward, 'B' backward), layer, submodule."""

    kind: str
    layer: int
    index: int
    params: float


class _Streams:
    """The host clock, the compute stream and the collective stream, with the host's event throttles.

    Collectives are queued as handles and timed lazily, in stream order, when something waits for one:
    by then every compute kernel that could be running when the collective becomes eligible has been
    issued (a kernel issued later starts after the waiter, which starts after the collective ends). With
    ``wait_for_kernel`` a collective that becomes eligible while a compute kernel runs starts when that
    kernel ends: the GPU dispatches the running kernel's remaining blocks before those of a kernel that
    arrives later at the same stream priority, so the collective finds no free compute units until then."""

    def __init__(self, gather: Callable[[float], float], reduce: Callable[[float], float],
                 wait_for_kernel: bool = False) -> None:
        self.gather, self.reduce = gather, reduce
        self.wait_for_kernel = wait_for_kernel
        self.host = self.compute = 0.0
        self.comm_busy = 0.0
        self.fetch_events: deque[int] = deque()
        self.reduce_events: deque[int] = deque()
        self._queued: list[tuple[float, float]] = []  # (seconds, not before) per collective, in stream order
        self._ends: list[float] = []  # end times of the collectives timed so far
        self._kernels: list[tuple[float, float]] = []  # compute kernels (start, end), in time order

    def collective(self, seconds: float, ready: float = 0.0) -> int:
        """Queue a collective behind everything on the stream, once issued and its input is ready; returns
        its handle (see :meth:`done`)."""
        self._queued.append((seconds, max(self.host, ready)))
        self.comm_busy += seconds
        return len(self._queued) - 1

    def done(self, handle: int) -> float:
        """End time of collective ``handle``, timing it and those queued before it."""
        while len(self._ends) <= handle:
            seconds, not_before = self._queued[len(self._ends)]
            start = max(self._ends[-1] if self._ends else 0.0, not_before)
            if self.wait_for_kernel:
                at = bisect.bisect_right(self._kernels, (start, math.inf)) - 1
                if at >= 0 and self._kernels[at][0] < start < self._kernels[at][1]:
                    start = self._kernels[at][1]
            self._ends.append(start + seconds)
        return self._ends[handle]

    @property
    def comm(self) -> float:
        """End of the collective stream (times everything queued)."""
        return self.done(len(self._queued) - 1) if self._queued else 0.0

    def run(self, seconds: float, ready: float, kernels: int = 1) -> float:
        """Run a compute submodule of ``kernels`` equal kernels after the previous one, its input transfer
        and its issue by the host."""
        begin = max(self.compute, self.host, ready)
        self.compute = begin + seconds
        if seconds > 0:
            self._kernels += [(begin + seconds * k / kernels, begin + seconds * (k + 1) / kernels)
                              for k in range(kernels)]
        return self.compute

    def throttle(self, events: deque[int], host: float, limit: int) -> float:
        """Host time after the throttle: completed events are dropped, then it waits for the oldest while
        more than ``limit`` remain."""
        while events and self.done(events[0]) <= host:
            events.popleft()
        if len(events) > limit:
            host = max(host, self.done(events.popleft()))
        return host


def _trace(layer: list[Submodule], layers: int, recompute: bool) -> list[_Entry]:
    """Fetch order of a step: every layer forward, then per layer from the last its recomputed forward
    (full recomputation) and its backward in reverse submodule order."""
    out = [_Entry("F", li, mi, m.params) for li in range(layers) for mi, m in enumerate(layer)]
    for li in reversed(range(layers)):
        if recompute:
            out += [_Entry("R", li, mi, m.params) for mi, m in enumerate(layer)]
        out += [_Entry("B", li, mi, layer[mi].params) for mi in reversed(range(len(layer)))]
    return out


def _kept(trace: list[_Entry], max_reuse: float) -> list[bool]:
    """Per fetch of the trace, whether the submodule keeps its parameters after running: the trace uses
    them again before more than ``max_reuse`` parameters of the submodules in between are traversed
    (``__params_to_release`` checks the running total before each later submodule it visits)."""
    prefix = [0.0]
    for entry in trace:
        prefix.append(prefix[-1] + entry.params)
    kept = [False] * len(trace)
    last: dict[tuple[int, int], int] = {}
    for at in reversed(range(len(trace))):
        key = (trace[at].layer, trace[at].index)
        if key in last:
            kept[at] = prefix[last[key]] - prefix[at + 1] <= max_reuse
        last[key] = at
    return kept


def play_step(layer: list[Submodule], layers: int, *, recompute: bool, gather: Callable[[float], float],
              reduce: Callable[[float], float], prefetch_bucket: float, max_live: float, max_reuse: float,
              reduce_bucket: float, host_copy: Callable[[float], float] | None = None,
              layer_sync_s: float | None = None, wait_for_kernel: bool = False) -> StreamStep:
    """Play one step of ``layers`` identical layers (``layer``: its submodules in forward order).

    ``gather(params)`` / ``reduce(params)``: seconds of one all-gather / reduce-scatter of that many
    parameters. ``host_copy(params)``: with optimizer CPU offload, seconds of the synchronous copy of a
    reduced bucket's gradient partition to host memory; the host waits for the bucket's reduce-scatter and
    that copy before it issues anything more (stage3.py ``__partition_grads``: ``fp32_grad_tensor.copy_``
    without non_blocking, in the gradient hook). ``layer_sync_s``: with CPU checkpointing, seconds of the
    synchronous copy of a layer's checkpoint on the compute stream at the start of its forward (to the host)
    and of its recomputation (back): the host waits for the compute stream and the copy before it fetches
    the layer's parameters (DeepSpeed checkpointing.py ``CheckpointFunction``); the copy counts as compute,
    so only the overlap the waits lose shows as exposed. ``wait_for_kernel``: the collectives run at the
    compute's stream priority, so one that becomes ready while a compute kernel runs starts when that kernel
    ends (see :class:`_Streams`); each submodule's forward is one kernel and its backward two (a linear's
    input- and weight-gradient GEMMs). Returns the forward and backward wall times next to their compute
    and transfer times.
    """
    trace = _trace(layer, layers, recompute)
    keeps = _kept(trace, max_reuse)
    s = _Streams(gather, reduce, wait_for_kernel)
    gathered: dict[tuple[int, int], int] = {}  # submodule -> handle of its gather (absent: released)
    waited: set[tuple[int, int]] = set()
    available = 0.0
    queue = 0  # next trace position the prefetcher may pop
    bucket: list[float] = []
    bucket_ready = 0.0

    def issue_gather(key: tuple[int, int], params: float) -> None:
        nonlocal available
        gathered[key] = s.collective(s.gather(params))
        waited.discard(key)
        available += params

    def flush() -> None:
        nonlocal bucket_ready
        if not bucket:
            return
        s.host = s.throttle(s.reduce_events, s.host, MAX_REDUCE_EVENTS)
        reduced = s.collective(s.reduce(sum(bucket)), bucket_ready)
        s.reduce_events.append(reduced)
        if host_copy is not None:
            s.host = max(s.host, s.done(reduced) + host_copy(sum(bucket)))
        bucket.clear()

    forward_end = 0.0
    comm_at_forward_end = 0.0
    for at, entry in enumerate(trace):
        if entry.kind != "F" and trace[at - 1].kind == "F":
            forward_end, comm_at_forward_end = s.compute, s.comm_busy
        key, module = (entry.layer, entry.index), layer[entry.index]
        if layer_sync_s is not None and entry.index == 0 and entry.kind != "B":
            s.compute = max(s.compute, s.host) + layer_sync_s
            s.host = s.compute
        ready = 0.0
        if entry.params > 0:
            # fetch_sub_module: gather what is missing and wait for it.
            if key not in gathered:
                issue_gather(key, entry.params)
            if key not in waited:
                s.host = s.throttle(s.fetch_events, s.host, MAX_FETCH_EVENTS)
                s.fetch_events.append(gathered[key])
                waited.add(key)
            ready = s.done(gathered[key])
        if module.hooked:
            # Then, on every hooked call, prefetch along the trace.
            queue = max(queue, at + 1)
            budget, popped = min(max_live - available, prefetch_bucket), 0.0
            while queue < len(trace) and popped < budget:
                ahead = trace[queue]
                queue += 1
                popped += ahead.params
                if ahead.params > 0 and (ahead.layer, ahead.index) not in gathered:
                    issue_gather((ahead.layer, ahead.index), ahead.params)
        if entry.kind == "B":
            s.run(module.bwd_s, ready, kernels=2)
        else:
            s.run(module.fwd_s, ready)
        if entry.kind == "B":
            for grad in module.grads:
                if bucket and sum(bucket) + grad > reduce_bucket:
                    flush()
                bucket.append(grad)
                bucket_ready = s.compute  # the reduce stream waits for the compute issued so far
        if entry.params > 0 and not keeps[at]:
            del gathered[key]
            available -= entry.params
    flush()
    end = max(s.compute, s.comm)
    copies = layers * (layer_sync_s or 0.0)
    fwd_compute = layers * sum(m.fwd_s for m in layer) + copies
    bwd_compute = layers * sum(m.bwd_s + (m.fwd_s if recompute else 0.0) for m in layer) + (copies if recompute else 0.0)
    return StreamStep(forward_end, end - forward_end, fwd_compute, bwd_compute,
                      comm_at_forward_end, s.comm_busy - comm_at_forward_end)
