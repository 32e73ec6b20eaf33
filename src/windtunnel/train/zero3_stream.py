"""DeepSpeed ZeRO-3's step played on the compute stream and the one NCCL stream that runs every parameter
all-gather and gradient reduce-scatter in the order the host issued them (and the reduce stream's passes).

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
- comm/coalesced_collectives.py ``reduce_scatter_coalesced`` (stack ``sharding.grad_predivide``): before
  each reduce-scatter the bucket is divided by the group size in place, a memory-bound kernel on the reduce
  stream; that stream waited for the previous reduce-scatter, which is synchronous.
- GPU scheduling (stack ``sharding.collective_priority``): ProcessGroupNCCL's stream has the compute's
  priority unless asked otherwise, and the GPU dispatches a running kernel's remaining blocks before a
  kernel that arrives meanwhile at that priority; so a collective that becomes ready while a compute kernel
  runs starts when that kernel ends. Beside compute-bound layers this hides; where transfers take about
  as long as the compute it lands on the critical path.

The rules decide a program: which operations the host issues, in what order, and where it blocks; it does
not depend on time. train/zero3_timing.py times it. Times are seconds, sizes parameters. The host costs
nothing except where it blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from windtunnel.train.zero3_timing import DeviceOp, HostWait, time_program

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
              layer_sync_s: float | None = None, wait_for_kernel: bool = False,
              grad_pass: Callable[[float], float] | None = None) -> StreamStep:
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
    ends (train/zero3_timing.py); ``grad_pass(params)``: seconds of the pre-divide pass over a reduce bucket
    (None: no pass); each submodule's forward is one kernel and its backward two (a linear's
    input- and weight-gradient GEMMs). Returns the forward and backward wall times next to their compute
    and transfer times.
    """
    trace = _trace(layer, layers, recompute)
    keeps = _kept(trace, max_reuse)
    program: list[DeviceOp | HostWait] = []
    gathered: dict[tuple[int, int], int] = {}  # submodule -> its gather in the program (absent: released)
    waited: set[tuple[int, int]] = set()
    fetch_events: list[int] = []
    reduce_events: list[int] = []
    last_compute: int | None = None  # the compute stream's last operation issued so far
    available = 0.0
    comm_s = 0.0
    queue = 0  # next trace position the prefetcher may pop
    bucket: list[float] = []
    bucket_ready: int | None = None  # the compute the reduce stream waited for when the bucket last grew

    def device(op: DeviceOp) -> int:
        program.append(op)
        return len(program) - 1

    def throttle(events: list[int], limit: int) -> None:
        # The host blocks on the oldest event while more than ``limit`` are outstanding; with events ending in
        # the order they were issued that is the one ``limit`` + 1 back.
        if len(events) > limit:
            program.append(HostWait(events[len(events) - limit - 1]))

    def issue_gather(key: tuple[int, int], params: float) -> None:
        nonlocal available, comm_s
        seconds = gather(params)
        gathered[key] = device(DeviceOp("gather", seconds))
        comm_s += seconds
        waited.discard(key)
        available += params

    def flush() -> None:
        nonlocal comm_s
        if not bucket:
            return
        throttle(reduce_events, MAX_REDUCE_EVENTS)
        inputs = () if bucket_ready is None else (bucket_ready,)
        if grad_pass is not None:
            # The reduce stream waited for the compute and for its previous (synchronous) reduce-scatter.
            previous = () if not reduce_events else (reduce_events[-1],)
            inputs = (device(DeviceOp("pass", grad_pass(sum(bucket)), inputs + previous)),)
        seconds = reduce(sum(bucket))
        reduced = device(DeviceOp("reduce", seconds, inputs))
        comm_s += seconds
        reduce_events.append(reduced)
        if host_copy is not None:
            program.append(HostWait(reduced, host_copy(sum(bucket))))
        bucket.clear()

    forward_last: int | None = None
    comm_at_forward_end = 0.0
    for at, entry in enumerate(trace):
        if entry.kind != "F" and trace[at - 1].kind == "F":
            forward_last, comm_at_forward_end = last_compute, comm_s
        key, module = (entry.layer, entry.index), layer[entry.index]
        if layer_sync_s is not None and entry.index == 0 and entry.kind != "B":
            last_compute = device(DeviceOp("copy", layer_sync_s))
            program.append(HostWait(last_compute))
        needs: tuple[int, ...] = ()
        if entry.params > 0:
            # fetch_sub_module: gather what is missing and wait for it.
            if key not in gathered:
                issue_gather(key, entry.params)
            if key not in waited:
                throttle(fetch_events, MAX_FETCH_EVENTS)
                fetch_events.append(gathered[key])
                waited.add(key)
            needs = (gathered[key],)
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
            last_compute = device(DeviceOp("kernel", module.bwd_s, needs, kernels=2))
            for grad in module.grads:
                if bucket and sum(bucket) + grad > reduce_bucket:
                    flush()
                bucket.append(grad)
                bucket_ready = last_compute  # the reduce stream waits for the compute issued so far
        else:
            last_compute = device(DeviceOp("kernel", module.fwd_s, needs))
        if entry.params > 0 and not keeps[at]:
            del gathered[key]
            available -= entry.params
    flush()
    ends = time_program(program, wait_for_kernel=wait_for_kernel)
    end = max((e for e in ends if e is not None), default=0.0)
    forward_end = 0.0 if forward_last is None else ends[forward_last]
    copies = layers * (layer_sync_s or 0.0)
    fwd_compute = layers * sum(m.fwd_s for m in layer) + copies
    bwd_compute = layers * sum(m.bwd_s + (m.fwd_s if recompute else 0.0) for m in layer) + (copies if recompute else 0.0)
    return StreamStep(forward_end, end - forward_end, fwd_compute, bwd_compute,
                      comm_at_forward_end, comm_s - comm_at_forward_end)
