"""Discrete-time-step Monte Carlo of a training job under faults, vectorised over replications with numpy.

Semantics (the same a literal step-by-step loop has; ``windtunnel.avail.stepref`` is that loop, and the
tests check the two agree on the same sampled faults):

* fail-stop faults arrive as Poisson processes (rates per second from the fault profile); each takes
  ``nodes_out`` nodes out of the job (its blast radius) into repair (exponential, mean ``repair_s``);
  a spare replaces each while one is free.
* after an unplanned fault the job detects it (``detect_s``), waits while more nodes are in repair than
  there are spares (not for elastic-shrink, which runs on fewer data-parallel replicas instead), and
  restarts (``restart_s``); a fault during recovery starts the recovery again. A planned interruption
  costs a restart only, and is skipped when it falls while the job is already down.
* while running, every training step takes ``step_time_s`` times the slowdown of the slowest active
  fail-slow fault; checkpoints (every ``tau`` of running time, a whole number of steps) stall the job;
  a failure loses the work since the last durable checkpoint (or snapshot, or step).

Instead of iterating millions of steps in Python, each replication's fault events are sampled at once
and the intervals between them are processed analytically (``Mechanics.account``): a running interval
of length u holds floor(u / period) checkpoint segments; the partial one is lost on a failure. Time is
continuous, so the step grid is exact up to where checkpoints fall (whole steps). Fail-slow and elastic
capacity losses are integrated exactly over the running time that was not rolled back, and scaled by
the compute share of that time (checkpoint stalls run at full speed).

All replications of a chunk live in flat arrays sorted by (replication, time); a key
``rep * span + time`` keeps replications apart in one sorted array, so searches need no Python loop.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from dataclasses import dataclass, field

import numpy as np

from windtunnel.avail.events import EventSample, _Inserter, sample_events
from windtunnel.avail.scenario import Mechanics, Scenario

__all__ = ["CAUSES", "EventSample", "SimResult", "evaluate", "sample_events", "simulate", "simulate_variants"]

CAUSES = ("detection", "waiting_for_repair", "restart", "recompute", "checkpoint", "degraded")
_EVENTS_PER_CHUNK = 1_500_000
_PARALLEL_CHUNKS = 8  # below this many chunks a process pool costs more than it saves


def _coverage(starts: np.ndarray, ends: np.ndarray):
    """G(x) = measure of the union of disjoint sorted intervals [starts, ends) below x (keys)."""
    cum = np.concatenate(([0.0], np.cumsum(ends - starts)))

    def g(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, x, side="right") - 1
        ic = np.maximum(i, 0)
        partial = np.clip(x - starts[ic], 0.0, ends[ic] - starts[ic]) if len(starts) else np.zeros_like(x)
        return np.where(i >= 0, cum[ic] + partial, 0.0) if len(starts) else np.zeros_like(x)

    return g


def _merge_union(keys_s: np.ndarray, keys_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals given by keys (any order): disjoint sorted (start, end) keys."""
    if len(keys_s) == 0:
        return keys_s, keys_e
    order = np.argsort(keys_s, kind="stable")
    s, e = keys_s[order], keys_e[order]
    run_max = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_max[:-1]
    gid = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(len(out_s))
    np.maximum.at(out_e, gid, e)
    return out_s, out_e


@dataclass
class Evaluation:
    """Per-replication totals (seconds over the horizon, counts), and the pieces of replication 0's timeline."""

    seconds: dict[str, np.ndarray]
    useful: np.ndarray
    unexpected: np.ndarray
    planned: np.ndarray
    failures_while_running: np.ndarray
    timeline: dict | None = None


def evaluate(sample: EventSample, mech: Mechanics, *, keep_timeline: bool = False) -> Evaluation:
    """Apply a policy's mechanics to sampled events: per-replication time by cause (seconds)."""
    R, H = sample.reps, sample.horizon
    span, W = sample.span, sample.warmup

    def bc(idx: np.ndarray, w: np.ndarray) -> np.ndarray:
        return np.bincount(idx, weights=w, minlength=R)[:R]

    # -- failure chains (unplanned events)
    any_planned = bool(sample.planned.any())
    fm = ~sample.planned if any_planned else slice(None)
    frep, ft = sample.rep[fm], sample.t[fm]
    n_f = len(ft)
    # fixed durations stay scalars (broadcast), sampled ones are arrays
    det_d = mech.detect * sample.e_det[fm] if sample.e_det is not None else mech.detect
    rst_d = mech.restart * sample.e_rst[fm] if sample.e_rst is not None else mech.restart
    own_end = ft + det_d
    wait_until = None
    if not mech.elastic and len(sample.dep_key):
        need = sample.k_after[fm] - mech.spares
        w = np.flatnonzero(need > 0)
        if len(w):
            wait_until = np.full(n_f, -np.inf)
            idx = np.minimum(sample.dep_pos[fm][w] + need[w] - 1, len(sample.dep_key) - 1)
            wait_until[w] = sample.dep_key[idx] - frep[w] * span - W
            np.maximum(own_end, wait_until, out=own_end)
    own_end += rst_d
    first = np.ones(n_f, dtype=bool)
    first[1:] = frep[1:] != frep[:-1]
    start = first.copy()
    start[1:] |= ft[1:] >= own_end[:-1]
    last = np.ones(n_f, dtype=bool)
    last[:-1] = start[1:]
    t_next = np.append(ft[1:], H)
    seg_end = np.where(last, np.minimum(own_end, H), t_next)
    g = seg_end - ft
    seg_det = np.minimum(g, det_d)
    if wait_until is None:
        seg_wait = np.zeros(n_f)
    else:
        seg_wait = np.minimum(np.maximum(g - det_d, 0.0), np.maximum(wait_until - ft - det_d, 0.0))
    seg_rst = g - seg_det - seg_wait
    chain_id = np.cumsum(start) - 1
    n_c = int(start.sum())
    c_rep, c_begin = frep[start], ft[start]
    c_end = np.minimum(own_end[last], H)
    c_det = np.bincount(chain_id, seg_det, minlength=n_c)
    c_wait = np.bincount(chain_id, seg_wait, minlength=n_c)
    c_rst = np.bincount(chain_id, seg_rst, minlength=n_c)

    # -- planned interruptions: skipped inside a failure chain or inside the previous planned restart
    pm = sample.planned if any_planned else np.zeros(0, dtype=np.int64)
    prep, pt = sample.rep[pm], sample.t[pm]
    p_rst = mech.restart * (sample.e_rst[pm] if sample.e_rst is not None else np.ones(len(pt)))
    c_key = c_rep * span + (c_begin + W)
    p_key = prep * span + (pt + W)
    ci = np.searchsorted(c_key, p_key, side="right") - 1
    cic = np.maximum(ci, 0)
    inside = (ci >= 0) & (c_rep[cic] == prep) & (pt < c_end[cic]) if n_c else np.zeros(len(pt), dtype=bool)
    prep, pt, p_rst, p_key = prep[~inside], pt[~inside], p_rst[~inside], p_key[~inside]
    dup = np.zeros(len(pt), dtype=bool)
    dup[1:] = (prep[1:] == prep[:-1]) & (pt[1:] < pt[:-1] + p_rst[:-1])
    prep, pt, p_rst, p_key = prep[~dup], pt[~dup], p_rst[~dup], p_key[~dup]
    nxt = np.searchsorted(c_key, p_key, side="right")
    nxt_c = np.minimum(nxt, max(n_c - 1, 0))
    nxt_start = np.where((nxt < n_c) & (c_rep[nxt_c] == prep), c_begin[nxt_c], np.inf) if n_c else np.full(len(pt), np.inf)
    p_end = np.minimum(np.minimum(pt + p_rst, nxt_start), H)

    # -- all down intervals, merged in (rep, start) order: chains, with planned intervals inserted
    d_fail = np.ones(n_c, dtype=bool)
    d_rep, d_beg, d_end, d_det, d_wait, d_rst = c_rep, c_begin, c_end, c_det, c_wait, c_rst
    if len(pt):
        insert = _Inserter(n_c, np.searchsorted(c_key, p_key, side="left"))
        d_rep = insert(c_rep, prep)
        d_beg = insert(c_begin, pt)
        d_end = insert(c_end, p_end)
        d_fail = insert(d_fail, False)
        d_det = insert(c_det, 0.0)
        d_wait = insert(c_wait, 0.0)
        d_rst = insert(c_rst, p_end - pt)

    # -- running intervals: before each down interval, and from the last one to the horizon
    n_d = len(d_beg)
    d_first = np.ones(n_d, dtype=bool)
    d_first[1:] = d_rep[1:] != d_rep[:-1]
    prev_end = np.where(d_first, 0.0, np.concatenate(([0.0], d_end[:-1])))
    u = np.maximum(d_beg - prev_end, 0.0)
    useful, ovh, lost = mech.account(u, d_fail)
    d_last = np.ones(n_d, dtype=bool)
    d_last[:-1] = d_first[1:]
    final_start = np.zeros(R)
    final_start[d_rep[d_last]] = d_end[d_last]
    f_useful, f_ovh, f_lost = mech.account(np.maximum(H - final_start, 0.0), np.zeros(R, dtype=bool))

    sec = {
        "detection": bc(d_rep, d_det), "waiting_for_repair": bc(d_rep, d_wait), "restart": bc(d_rep, d_rst),
        "recompute": bc(d_rep, lost) + f_lost, "checkpoint": bc(d_rep, ovh) + f_ovh,
    }
    committed = bc(d_rep, useful) + f_useful
    compute_share = np.divide(committed, committed + sec["checkpoint"], out=np.zeros(R),
                              where=(committed + sec["checkpoint"]) > 0)

    need_c = keep_timeline or len(sample.slow_start) > 0 or (mech.elastic and len(sample.arr_key) > 0)
    if need_c:
        # committed running time C = running intervals minus their rolled-back tails, in (rep, time) order
        insert = _Inserter(n_d, np.searchsorted(d_rep, np.arange(R), side="right"))
        c_rep_all = insert(d_rep, np.arange(R))
        c_s = insert(prev_end, final_start)
        c_e = np.maximum(insert(d_beg - lost, H), c_s)
        ck_s, ck_e = c_rep_all * span + c_s, c_rep_all * span + c_e

    degraded = np.zeros(R)
    if len(sample.slow_start):
        g_c = _coverage(ck_s, ck_e)
        for cls, weight in enumerate(sample.slow_weights):
            m = sample.slow_class <= cls
            s_k = sample.slow_rep[m] * span + sample.slow_start[m]
            e_k = sample.slow_rep[m] * span + sample.slow_end[m]
            us, ue = _merge_union(s_k, e_k)
            covered = g_c(ue) - g_c(us)
            degraded += weight * bc(np.floor_divide(us, span).astype(np.int64), covered)
    shrink = np.zeros(R)
    if mech.elastic and len(sample.arr_key):
        # capacity lost while more nodes are in repair than spares, integrated over committed running time
        keys = sample.queue_key
        f = np.minimum(1.0, np.maximum(sample.queue_in_repair - mech.spares, 0) * mech.shrink_per_node)
        integral = np.concatenate(([0.0], np.cumsum(f[:-1] * np.diff(keys))))

        def F(x: np.ndarray) -> np.ndarray:
            j = np.searchsorted(keys, x, side="right") - 1
            jc = np.maximum(j, 0)
            return np.where(j >= 0, integral[jc] + f[jc] * (x - keys[jc]), 0.0)

        shift = W
        shrink = bc(c_rep_all, F(ck_e + shift) - F(ck_s + shift))
    degraded = (degraded + shrink) * compute_share
    sec["degraded"] = degraded
    unexpected = np.bincount(frep, minlength=R)[:R].astype(float)
    planned = np.bincount(prep, minlength=R)[:R].astype(float)
    running_fail = np.bincount(d_rep[d_fail & (u > 0)], minlength=R)[:R].astype(float)
    timeline = None
    if keep_timeline:
        d0, f0, c0 = d_rep == 0, frep == 0, c_rep_all == 0
        timeline = {
            "failure_segments": np.column_stack((ft[f0], seg_det[f0], seg_wait[f0], seg_rst[f0])),
            "planned": np.column_stack((d_beg[d0 & ~d_fail], d_end[d0 & ~d_fail])),
            "committed": np.column_stack((c_s[c0], c_e[c0])),
            "runs": np.column_stack((np.append(prev_end[d0], final_start[0]), np.append(d_beg[d0], H),
                                     np.append(lost[d0], 0.0))),
            "slow": np.column_stack((sample.slow_start, sample.slow_end, sample.slow_class))[sample.slow_rep == 0],
            "repair_arrivals": np.column_stack(((sample.arr_key - W)[sample.arr_key < span],
                                                sample.arr_nodes[sample.arr_key < span])),
            "repair_departures": (sample.dep_key - W)[sample.dep_key < span],
        }
    return Evaluation(seconds=sec, useful=committed - degraded, unexpected=unexpected, planned=planned,
                      failures_while_running=running_fail, timeline=timeline)


# ---- Monte Carlo driver ----------------------------------------------------------------------------------


def _ci95(x: np.ndarray) -> list[float]:
    mean = float(np.mean(x))
    if len(x) < 2:
        return [mean, mean]
    half = 1.959963984540054 * float(np.std(x, ddof=1)) / math.sqrt(len(x))
    return [mean - half, mean + half]


@dataclass
class SimResult:
    """Per-replication arrays and their summaries (means and 95% confidence intervals of the mean)."""

    scenario: Scenario
    replications: int
    seed: int
    per_rep: dict[str, np.ndarray]
    timeline: dict | None = field(default=None)

    def mean(self, name: str) -> float:
        """Mean over replications of a per-replication quantity."""
        return float(np.mean(self.per_rep[name]))

    def ci95(self, name: str) -> list[float]:
        """95% confidence interval of the mean (normal approximation)."""
        return _ci95(self.per_rep[name])

    @property
    def availability(self) -> float:
        """Fraction of wall time the job runs (not detecting, waiting or restarting)."""
        return self.mean("availability")

    @property
    def ettr(self) -> float:
        """Effective training time ratio: useful progress (s at full speed) / wall time (s)."""
        return self.mean("ettr")

    def to_json_dict(self) -> dict:
        """The ``avail simulate --json`` contract (units in key names)."""
        days = self.scenario.horizon_s / 86400.0
        inter = self.mean("interruptions")
        out = {
            "method": "simulate", "replications": self.replications, "seed": self.seed,
            "availability": self.availability, "ettr": self.ettr,
            "interruptions_per_day": inter / days,
            "unexpected_interruptions": self.mean("unexpected"), "planned_interruptions": self.mean("planned"),
            "failures_while_running": self.mean("failures_while_running"),
            "mtbi_s": self.scenario.horizon_s / inter if inter > 0 else None,
            "lost_seconds_by_cause": {c: self.mean(c) for c in CAUSES},
            "useful_seconds": self.mean("useful"),
            "ci95": {
                "availability": self.ci95("availability"), "ettr": self.ci95("ettr"),
                "interruptions_per_day": [x / days for x in self.ci95("interruptions")],
                "unexpected_interruptions": self.ci95("unexpected"),
                "lost_seconds_by_cause": {c: self.ci95(c) for c in CAUSES},
            },
            "inputs": self.scenario.inputs(), "assumptions": list(self.scenario.assumptions),
            "warnings": self.scenario.warnings(),
        }
        return out


def _per_rep(ev: Evaluation, H: float) -> dict[str, np.ndarray]:
    down = ev.seconds["detection"] + ev.seconds["waiting_for_repair"] + ev.seconds["restart"]
    out = {c: ev.seconds[c] for c in CAUSES}
    out.update(availability=1.0 - down / H, ettr=ev.useful / H, useful=ev.useful, unexpected=ev.unexpected,
               planned=ev.planned, interruptions=ev.unexpected + ev.planned,
               failures_while_running=ev.failures_while_running)
    return out


def _check_work(scenario: Scenario, replications: int) -> None:
    """Replications and replications x horizon x failure rate (the events to sample) within what runs in minutes."""
    from windtunnel.specs.bounds import MAX_REPLICATIONS, MAX_SIM_EVENTS
    from windtunnel.specs.errors import WindtunnelError

    if replications > MAX_REPLICATIONS:
        raise WindtunnelError(f"Field 'replications' is {replications:,}; give at most {MAX_REPLICATIONS:,}.",
                              field="replications")
    rates = scenario.rates
    events = (rates.failure_rate_per_s + rates.planned_rate_per_s) * scenario.horizon_s * replications
    if events > MAX_SIM_EVENTS:
        raise WindtunnelError(f"{replications:,} replications of a {scenario.horizon_s:g} s horizon sample about "
                              f"{events:.3g} failures, more than the {MAX_SIM_EVENTS:.0e} a simulation plays; lower "
                              "'replications' or 'horizon' (or use `avail markov`).", field="replications")


def chunk_plan(scenario: Scenario, replications: int) -> list[int]:
    """Replications per chunk (bounded memory); depends only on the inputs, so results are reproducible."""
    rates = scenario.rates
    W = 8.0 * scenario.mechanics.repair if rates.hardware_rate_per_s > 0 else 0.0
    per_rep = (rates.failure_rate_per_s + rates.planned_rate_per_s) * (scenario.horizon_s + W) * 2 + 10
    per_chunk = max(1, min(replications, int(_EVENTS_PER_CHUNK // per_rep)))
    sizes = [per_chunk] * (replications // per_chunk)
    if replications % per_chunk:
        sizes.append(replications % per_chunk)
    return sizes


def _run_chunk(job: tuple) -> list[tuple[dict[str, np.ndarray], dict | None]]:
    """Sample one chunk of replications and evaluate every policy on it (a top-level function so that a
    process pool can run it)."""
    scenario, mechanics, size, seq, keep = job
    sample = sample_events(scenario, size, np.random.default_rng(seq))
    out = []
    for mech in mechanics:
        ev = evaluate(sample, mech, keep_timeline=keep)
        out.append((_per_rep(ev, scenario.horizon_s), ev.timeline))
    return out


def _keep_freed_memory() -> None:
    """Pool-worker initializer: ask glibc to keep freed large blocks in the heap. By default it hands
    every array above a few MB back to the kernel when freed, so each chunk faults its ~100 MB of pages
    in again (a third of the wall time in a large run). Without glibc (macOS, musl) this does nothing.
    Interrupts are the parent's (search.backends.quiet_worker)."""
    from windtunnel.search.backends import quiet_worker

    quiet_worker()
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 256 << 20)
    mallopt(m_trim_threshold, 512 << 20)


def simulate_variants(scenario: Scenario, mechanics: list[Mechanics], replications: int = 1000, seed: int = 0,
                      *, keep_timeline: bool = False) -> list[dict[str, np.ndarray]]:
    """Evaluate several policies' mechanics on the same sampled faults (common random numbers)."""
    if not isinstance(replications, int) or replications < 1:
        from windtunnel.specs.errors import WindtunnelError

        raise WindtunnelError(f"Field 'replications' must be a positive whole number, got {replications!r}.",
                              field="replications")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        from windtunnel.specs.errors import WindtunnelError

        raise WindtunnelError(f"Field 'seed' must be a whole number >= 0, got {seed!r}.", field="seed")
    _check_work(scenario, replications)
    sizes = chunk_plan(scenario, replications)
    seqs = np.random.SeedSequence(seed).spawn(len(sizes))
    parts: list[list[dict[str, np.ndarray]]] = [[] for _ in mechanics]
    timelines: list[dict | None] = [None for _ in mechanics]
    jobs = [(scenario, mechanics, size, seq, keep_timeline and ci == 0)
            for ci, (size, seq) in enumerate(zip(sizes, seqs, strict=True))]
    workers = os.cpu_count() or 1
    if len(jobs) >= _PARALLEL_CHUNKS and workers > 1:
        # Chunks are independent (each has its own seed sequence), so a pool of processes gives the
        # same numbers as one process, in the same order.
        with multiprocessing.get_context("fork").Pool(workers, initializer=_keep_freed_memory) as pool:
            results = pool.map(_run_chunk, jobs, chunksize=max(1, len(jobs) // (4 * workers)))
    else:
        results = [_run_chunk(job) for job in jobs]
    for chunk in results:
        for mi, (per_rep, timeline) in enumerate(chunk):
            parts[mi].append(per_rep)
            if timeline is not None:
                timelines[mi] = timeline
    out = []
    for mi in range(len(mechanics)):
        merged = {k: np.concatenate([p[k] for p in parts[mi]]) for k in parts[mi][0]}
        if keep_timeline:
            merged["_timeline"] = timelines[mi]  # type: ignore[assignment]
        out.append(merged)
    return out


def simulate(scenario: Scenario, replications: int = 1000, seed: int = 0, *, keep_timeline: bool = False) -> SimResult:
    """Monte Carlo of ``scenario``: ``replications`` independent runs of ``horizon_s`` seconds each."""
    per_rep = simulate_variants(scenario, [scenario.mechanics], replications, seed, keep_timeline=keep_timeline)[0]
    timeline = per_rep.pop("_timeline", None)
    return SimResult(scenario=scenario, replications=replications, seed=seed, per_rep=per_rep,
                     timeline=timeline)  # type: ignore[arg-type]
