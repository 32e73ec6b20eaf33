"""Sampling the fault events of a training job's replications at once (the input of windtunnel.avail.sim):
Poisson arrivals per fault class, their blast radius, repair times and fail-slow episodes, in flat
arrays sorted by (replication, time). Times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windtunnel.avail.scenario import Scenario


class _Inserter:
    """``np.insert`` for several arrays at the same sorted positions, as one scatter each (np.insert sorts
    its positions on every call). ``positions`` index the base array; values go before those elements,
    in order for equal positions."""

    def __init__(self, base_length: int, positions: np.ndarray) -> None:
        self.new_index = np.asarray(positions, dtype=np.int64) + np.arange(len(positions))
        self.base_mask = np.ones(base_length + len(positions), dtype=bool)
        self.base_mask[self.new_index] = False

    def __call__(self, base: np.ndarray, values) -> np.ndarray:
        values = np.asarray(values)
        out = np.empty(len(self.base_mask), dtype=np.result_type(base, values))
        out[self.base_mask] = base
        out[self.new_index] = values
        return out


# ---- evaluation of one sample under one policy ----------------------------------------------------------


@dataclass
class EventSample:
    """Sampled fault events of ``reps`` replications (flat arrays sorted by replication, then time)."""

    reps: int
    horizon: float
    warmup: float
    span: float
    # fail-stop events inside [0, horizon)
    rep: np.ndarray
    t: np.ndarray
    comp: np.ndarray
    nodes_out: np.ndarray
    planned: np.ndarray
    k_after: np.ndarray        # nodes in repair just after the event (arrivals - departures so far)
    dep_pos: np.ndarray        # index in dep_key of the first departure after the event
    e_det: np.ndarray | None   # unit exponentials (durations=exponential)
    e_rst: np.ndarray | None
    # repair queue: every node's departure (sorted keys) and every arrival (keys, nodes), warm-up included
    dep_key: np.ndarray
    arr_key: np.ndarray
    arr_nodes: np.ndarray
    # the same queue as one sorted sequence of changes: key of each change, nodes in repair just after it
    queue_key: np.ndarray
    queue_in_repair: np.ndarray
    # fail-slow intervals clipped to [0, horizon], class index in slowdown-descending order
    slow_rep: np.ndarray
    slow_start: np.ndarray
    slow_end: np.ndarray
    slow_class: np.ndarray
    slow_weights: np.ndarray   # per class: 1/s_next - 1/s_c (progress lost while classes <= c are active)
    slow_factors: np.ndarray   # per class: slowdown

    def key(self, rep: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Sort key of (replication, time)."""
        return rep * self.span + (t + self.warmup)


def _sorted_uniform(rng: np.random.Generator, counts: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Sorted uniform points on [lo, hi) per replication (counts[r] of them), without sorting: normalised
    cumulative sums of exponential spacings. Returns (replication index, time)."""
    reps = len(counts)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    gaps = rng.standard_exponential(total + reps)
    cs = np.cumsum(gaps)
    ends = np.cumsum(counts + 1) - 1
    base = np.concatenate(([0.0], cs[ends[:-1]]))
    tot = cs[ends] - base
    keep = np.ones(total + reps, dtype=bool)
    keep[ends] = False
    rep = np.repeat(np.arange(reps, dtype=np.int64), counts)
    t = lo + (cs[keep] - base[rep]) / tot[rep] * (hi - lo)
    return rep, t


def sample_events(scenario: Scenario, reps: int, rng: np.random.Generator) -> EventSample:
    """Sample the fault events of ``reps`` replications of ``scenario`` (horizon, rates, repair time)."""
    H = scenario.horizon_s
    mech = scenario.mechanics
    stop = scenario.rates.stop
    rates = np.array([c.rate_per_s for c in stop], dtype=float)
    outs = np.array([c.nodes_out for c in stop], dtype=np.int64)
    planned_c = np.array([c.planned for c in stop], dtype=bool)
    lam = float(rates.sum())
    hw_rate = float(rates[outs > 0].sum()) if len(rates) else 0.0
    W = 8.0 * mech.repair if hw_rate > 0 else 0.0   # warm-up: the repair queue starts in steady state
    counts = rng.poisson(lam * (H + W), size=reps) if lam > 0 else np.zeros(reps, dtype=np.int64)
    rep, t = _sorted_uniform(rng, counts, -W, H)
    if lam > 0 and len(t):
        comp = np.searchsorted(np.cumsum(rates) / lam, rng.random(len(t)), side="right")
        comp = np.minimum(comp, len(rates) - 1).astype(np.int16)
    else:
        comp = np.zeros(len(t), dtype=np.int16)
    nodes = outs[comp] if len(outs) else np.zeros(len(t), dtype=np.int64)
    keep = (t >= 0) | (nodes > 0)
    rep, t, comp, nodes = rep[keep], t[keep], comp[keep], nodes[keep]
    # repair queue
    hw = nodes > 0
    n_dep = int(nodes[hw].sum())
    dep_t = np.repeat(t[hw], nodes[hw]) + mech.repair * rng.standard_exponential(n_dep)
    dep_rep = np.repeat(rep[hw], nodes[hw])
    span = max(H, float(dep_t.max()) if n_dep else H) + W + 1.0
    dep_key = np.sort(dep_rep * span + (dep_t + W))
    ev_key = rep * span + (t + W)
    dep_pos = np.searchsorted(dep_key, ev_key, side="right")
    rep_dep_start = np.searchsorted(dep_key, np.arange(reps) * span)
    arr_cum = np.cumsum(nodes)
    rep_first = np.searchsorted(rep, np.arange(reps))
    arr_base = np.concatenate(([0], arr_cum))[rep_first]
    k_after = (arr_cum - arr_base[rep]) - (dep_pos - rep_dep_start[rep])
    arr_key, arr_nodes = ev_key[hw], nodes[hw]
    # arrivals' positions among the departures are already known (dep_pos), so merging is a scatter
    merge = _Inserter(len(dep_key), dep_pos[hw])
    queue_key = merge(dep_key, arr_key)
    queue_in_repair = np.cumsum(merge(np.full(len(dep_key), -1, dtype=np.int64), arr_nodes))
    job = t >= 0
    n_job = int(job.sum())
    e_det = rng.standard_exponential(n_job) if mech.exponential else None
    e_rst = rng.standard_exponential(n_job) if mech.exponential else None
    # fail-slow
    slow = sorted(scenario.rates.slow, key=lambda c: -c.slowdown)
    parts_rep, parts_s, parts_e, parts_c = [], [], [], []
    for ci, c in enumerate(slow):
        n = rng.poisson(c.rate_per_s * (H + c.duration_s), size=reps) if c.rate_per_s > 0 else np.zeros(reps, np.int64)
        r_, s_ = _sorted_uniform(rng, n, -c.duration_s, H)
        e_ = np.minimum(s_ + c.duration_s, H)
        s_ = np.maximum(s_, 0.0)
        parts_rep.append(r_)
        parts_s.append(s_)
        parts_e.append(e_)
        parts_c.append(np.full(len(r_), ci, dtype=np.int64))
    factors = np.array([c.slowdown for c in slow], dtype=float)
    nxt = np.append(factors[1:], 1.0) if len(factors) else np.zeros(0)
    weights = 1.0 / nxt - 1.0 / factors if len(factors) else np.zeros(0)

    def cat(xs: list[np.ndarray], dt) -> np.ndarray:
        return np.concatenate(xs) if xs else np.zeros(0, dtype=dt)

    return EventSample(
        reps=reps, horizon=H, warmup=W, span=span, rep=rep[job], t=t[job], comp=comp[job], nodes_out=nodes[job],
        planned=planned_c[comp[job]] if len(planned_c) else np.zeros(n_job, dtype=bool),
        k_after=k_after[job], dep_pos=dep_pos[job], e_det=e_det, e_rst=e_rst, dep_key=dep_key, arr_key=arr_key,
        arr_nodes=arr_nodes, queue_key=queue_key, queue_in_repair=queue_in_repair, slow_rep=cat(parts_rep, np.int64),
        slow_start=cat(parts_s, float), slow_end=cat(parts_e, float), slow_class=cat(parts_c, np.int64), slow_weights=weights, slow_factors=factors)
