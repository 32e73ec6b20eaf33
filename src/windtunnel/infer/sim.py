"""The serving simulation: routers and the event loop over instances (:mod:`windtunnel.infer.instance`: continuous
batching, chunked prefill, paged KV cache, preemption, closed-form decode stretches).

Disaggregation. A prefill instance hands a request over when its prefill completes (the first token
is produced there); the request's KV (all layers) moves to the decode instance the decode router
picks, over the innermost network tier that spans both instances, in parallel over the links of the
devices holding it; the decode instance admits it when it arrives.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from windtunnel.cost.collectives import p2p_time
from windtunnel.infer.deployment import InstancePlan
from windtunnel.infer.instance import (  # noqa: F401 - re-exported: the states and events other modules use
    DECODING,
    DONE,
    EV_ARRIVE,
    EV_CONTROL,
    EV_STEP,
    MOVING,
    PREFILLING,
    REJECTED,
    WAITING,
    Instance,
)
from windtunnel.infer.iteration import IterationModel
from windtunnel.infer.prefix import attach_caches, cache_summary, route
from windtunnel.infer.traffic import Workload
from windtunnel.specs.model import ModelSpec

# ---- routers ----------------------------------------------------------------------------------------------


class Router:
    """Spreads requests over a pool: round_robin, least_tokens (least outstanding tokens), kv_aware
    (lowest KV load: reserved plus queued context, as a share of capacity) or cache_aware (the longest cached
    prefix of the request's block hashes, ties to least tokens; :func:`windtunnel.infer.prefix.route`)."""

    def __init__(self, kind: str, pool: list[Instance]) -> None:
        self.kind = kind
        self.pool = pool
        self.next = 0

    def pick(self, hashes: tuple[int, ...] | None = None) -> Instance:
        pool = [inst for inst in self.pool if inst.accepting] or self.pool
        if self.kind == "cache_aware" and hashes is not None:
            return route(pool, hashes)
        if self.kind == "round_robin":
            inst = pool[self.next % len(pool)]
            self.next += 1
            return inst
        if self.kind in ("least_tokens", "cache_aware"):  # cache_aware without block hashes: least tokens
            best, best_load = pool[0], pool[0].outstanding
            for inst in pool[1:]:
                if inst.outstanding < best_load:
                    best, best_load = inst, inst.outstanding
            return best
        best, best_load = pool[0], (pool[0].kv + pool[0].waiting_tokens) / max(1, pool[0].cap)
        for inst in pool[1:]:
            load = (inst.kv + inst.waiting_tokens) / max(1, inst.cap)
            if load < best_load:
                best, best_load = inst, load
        return best


# ---- the simulator -----------------------------------------------------------------------------------------


@dataclass
class SimOutput:
    """Raw per-request results and per-instance series of one run (times in s, sizes in tokens)."""

    arrival: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    generated: np.ndarray
    klass: np.ndarray
    preempted: np.ndarray
    rejected: np.ndarray
    completions: np.ndarray
    instances: list[Instance] = field(default_factory=list)
    transfer_s: np.ndarray | None = None
    events: int = 0
    switches: list[dict] = field(default_factory=list)
    closed_loop: bool = False
    prefix_cache: dict | None = None


class Simulator:
    """Plays a workload on a deployment (a list of resolved instance pools)."""

    def __init__(self, model: ModelSpec, plans: list[InstancePlan], workload: Workload, router: str,
                 *, transfer_cluster=None, controller=None, fitted: dict | None = None,
                 system: str | None = None, efficiencies: dict | None = None) -> None:
        self.model = model
        self.workload = workload
        n = workload.size
        self.prompt = [int(x) for x in workload.prompt]
        self.output = [int(x) for x in workload.output]
        self.arrival = [float(x) for x in workload.arrival] if workload.concurrency is None else [0.0] * n
        self.pf_left = [0] * n
        self.pf_done = [0] * n
        self.gen = [0] * n
        self.first = [-1.0] * n
        self.finish = [-1.0] * n
        self.s0 = [0] * n
        self.c0 = [0] * n
        self.ver = [0] * n
        self.kvres = [0] * n
        self.where = [-1] * n
        self.state = [WAITING] * n
        self.preempted = [0] * n
        self.rejected = [False] * n
        self.completions = [0] * n
        self.transfer = [0.0] * n
        self.preemptions = 0
        self.events: list = []
        self.seq = 0
        self.instances: list[Instance] = []
        self.costs: dict[int, IterationModel] = {}
        for plan in plans:
            # efficiencies: chip id -> Efficiency from a calibration profile (None: the catalog's).
            cost = IterationModel(model, plan, fitted=fitted, system=system,
                                  efficiency=(efficiencies or {}).get(plan.chip.id))
            for _ in range(plan.replicas):
                self.instances.append(Instance(len(self.instances), plan, cost, self))
        self.router_kind = router
        front = [i for i in self.instances if i.role in ("mixed", "prefill")]
        back = [i for i in self.instances if i.role == "decode"]
        self.front = Router(router, front)
        self.back = Router(router, back) if back else None
        self.transfer_cluster = transfer_cluster
        self.controller = controller
        self.switches: list[dict] = []
        self.done = 0
        self.admitted = 0
        self.prompt_sum = 0
        self.output_sum = 0
        self.next_closed = 0
        prefix = [plan.prefix_hit for plan in plans if plan.role in ("mixed", "prefill")]
        self.prefix_hit = prefix[0] if prefix else 0.0
        self.hashes = workload.hashes
        self.caching = attach_caches(self)

    # ---- events ---------------------------------------------------------------------------------
    def push(self, time: float, kind: int, a: int, b: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (time, self.seq, kind, a, b))

    def _admit_new(self, rid: int, now: float) -> None:
        prompt = self.prompt[rid]
        self.admitted += 1
        self.prompt_sum += prompt
        if self.caching:
            self._admit_cached(rid, now)
            return
        cached = int(prompt * self.prefix_hit)
        cached = min(cached, prompt - 1)
        self.pf_left[rid] = prompt - cached
        self.pf_done[rid] = cached
        self.arrival[rid] = now
        self.front.pick().enqueue(rid, now)

    def _admit_cached(self, rid: int, now: float) -> None:
        """Route by the prefix cache (cache_aware) or as usual, reuse the instance's cached prefix, and queue the
        request there once any host-tier hits are loaded."""
        hashes = self.hashes[rid]
        inst = self.front.pick(hashes)
        prompt = self.prompt[rid]
        cached, load_s = inst.cache.lookup(hashes, prompt) if inst.cache is not None else (0, 0.0)
        self.pf_left[rid] = prompt - cached
        self.pf_done[rid] = cached
        self.arrival[rid] = now
        if load_s > 0:
            self.push(now + load_s, EV_ARRIVE, rid, inst.index)
        else:
            inst.enqueue(rid, now)

    def hand_over(self, rid: int, now: float, source: Instance) -> None:
        """A prefill instance finished ``rid``'s prefill: send its KV to a decode instance."""
        target = self.back.pick()
        seconds = self.transfer_seconds(rid, source, target)
        self.transfer[rid] = seconds
        self.pf_left[rid] = 0
        self.push(now + seconds, EV_ARRIVE, rid, target.index)

    def transfer_seconds(self, rid: int, source: Instance, target: Instance) -> float:
        """KV of the request's context (all layers) over the tier spanning both instances, sent in parallel by
        the devices that hold it: the TP ranks of its attention group (GQA: each holds its KV heads; MLA: each
        holds a replica of the latent and sends a share), on every pipeline stage."""
        cluster = self.transfer_cluster or source.plan.cluster
        plan = source.plan
        bytes_total = self.pf_done[rid] * plan.kv_bytes_per_token_model
        lanes = (plan.tp if self.model.mla is not None else min(plan.tp, self.model.kv_heads)) * plan.pp
        span = source.devices + target.devices
        tier = cluster.tier_index_for_span(span)
        eff = source.cost.eff
        return p2p_time(bytes_total / lanes, tier, cluster, eff)

    def complete(self, rid: int, now: float) -> None:
        self.finish[rid] = now
        self.completions[rid] += 1
        self.done += 1
        self.output_sum += self.output[rid]
        if self.workload.concurrency is not None and self.next_closed < len(self.prompt):
            self.push(now + self.workload.think_s, EV_ARRIVE, self.next_closed, -1)
            self.next_closed += 1

    def reject(self, rid: int, now: float) -> None:
        """A request whose context can never fit in an instance's KV cache is dropped (counted)."""
        self.rejected[rid] = True
        self.state[rid] = REJECTED
        self.complete(rid, now)
        self.finish[rid] = -1.0

    # ---- run ------------------------------------------------------------------------------------
    def run(self) -> SimOutput:
        """Play every event; returns the per-request results."""
        n = len(self.prompt)
        events = self.events
        instances = self.instances
        arrivals = self.arrival
        closed = self.workload.concurrency is not None
        if closed:
            first = min(self.workload.concurrency, n)
            for rid in range(first):
                self.push(0.0, EV_ARRIVE, rid, -1)
            self.next_closed = first
            next_external = n
        else:
            next_external = 0
        if self.controller is not None:
            self.controller.install(self)
        count = 0
        pop = heapq.heappop
        while True:
            if next_external < n:
                t_ext = arrivals[next_external]
                if not events or t_ext <= events[0][0]:
                    self._admit_new(next_external, t_ext)
                    next_external += 1
                    count += 1
                    continue
            if not events:
                break
            time, _, kind, a, b = pop(events)
            count += 1
            if kind == EV_STEP:
                inst = instances[a]
                if b == inst.version and inst.busy:
                    inst.finish_step(time)
            elif kind == EV_ARRIVE:
                if b < 0:
                    self._admit_new(a, time)
                else:
                    instances[b].enqueue(a, time)
            elif a == 0:
                self.controller.tick(self, time)
            else:
                self.controller.finish_switch(self, instances[b], time)
        return SimOutput(
            arrival=np.asarray(self.arrival, dtype=float), first=np.asarray(self.first, dtype=float),
            finish=np.asarray(self.finish, dtype=float), prompt=np.asarray(self.prompt, dtype=np.int64),
            output=np.asarray(self.output, dtype=np.int64), generated=np.asarray(self.gen, dtype=np.int64),
            klass=self.workload.klass, preempted=np.asarray(self.preempted, dtype=np.int64),
            rejected=np.asarray(self.rejected, dtype=bool), completions=np.asarray(self.completions, dtype=np.int64),
            instances=instances, transfer_s=np.asarray(self.transfer, dtype=float), events=count,
            switches=self.switches, closed_loop=closed, prefix_cache=cache_summary(instances))
