"""The literal discrete-time-step loop, one replication at a time: the reference the vectorised simulation
(``windtunnel.avail.sim``) is checked against on the same sampled faults. Slow (a Python loop over
every training step), so only for short horizons and tests.

Per step: its duration is ``step_time_s`` times the slowdown of the slowest fail-slow fault active when
the step starts; after a step, once the running time since the last checkpoint reaches ``tau`` the job
stalls for the checkpoint, which becomes durable ``lag`` later. A fail-stop fault stops the job at once:
an unplanned one loses all progress since the last durable checkpoint and starts detection, waiting
while more nodes are in repair than there are spares, and restart (a further fault restarts that
sequence); a planned one keeps the progress (the job checkpoints first) and costs a restart.

It covers rollback to persistent checkpoints (restart-from-checkpoint; blocking or asynchronous), spares
and waiting for repair, planned interruptions and fail-slow faults; not the in-memory or per-step
rollbacks nor elastic shrinking. Where it and the vectorised engine differ, the step grid is the
reason: under a slowdown this loop checkpoints at the first step boundary past ``tau``, the vectorised
engine at ``tau`` of running time exactly.
"""

from __future__ import annotations

import numpy as np

from windtunnel.avail.scenario import Mechanics
from windtunnel.avail.sim import EventSample


def reference_run(sample: EventSample, mech: Mechanics, step_time_s: float) -> dict[str, float]:
    """Seconds by cause, useful progress (s at full speed) and interruption counts for replication 0 of
    ``sample``, step by step (``step_time_s`` seconds per fault-free step)."""
    H, W, span = sample.horizon, sample.warmup, sample.span
    m0 = sample.rep == 0
    ev_t = sample.t[m0]
    ev_planned = sample.planned[m0]
    n = len(ev_t)
    det = mech.detect * (sample.e_det[m0] if sample.e_det is not None else np.ones(n))
    rst = mech.restart * (sample.e_rst[m0] if sample.e_rst is not None else np.ones(n))
    arr = sample.arr_key < span
    arr_t, arr_n = sample.arr_key[arr] - W, sample.arr_nodes[arr]
    dep_t = np.sort(sample.dep_key[sample.dep_key < span] - W)
    s0 = sample.slow_rep == 0
    slow = list(zip(sample.slow_start[s0], sample.slow_end[s0], sample.slow_factors[sample.slow_class[s0]], strict=True))

    def wait_end(x: float, upto: float) -> float:
        """First time >= x at which at most ``spares`` nodes are in repair, counting arrivals up to ``upto``."""
        arrived = int(arr_n[arr_t <= upto].sum())
        y = x
        while arrived - int(np.searchsorted(dep_t, y, side="right")) > mech.spares:
            later = dep_t[dep_t > y]
            y = later[0]
        return y

    def slowdown(x: float) -> float:
        return max([f for a, b, f in slow if a <= x < b] + [1.0])

    out = dict.fromkeys(("detection", "waiting_for_repair", "restart", "recompute", "checkpoint", "degraded",
                         "useful"), 0.0)
    out["unexpected"] = out["planned"] = 0.0
    t, i = 0.0, 0

    def next_event_time() -> float:
        return ev_t[i] if i < n else np.inf

    def recover(t: float, j: int) -> tuple[float, int]:
        """Recovery from event j at time t: returns (time running resumes, index of the next event)."""
        while True:
            planned = bool(ev_planned[j])
            det_end = t if planned else t + det[j]
            y = det_end if (planned or mech.elastic) else wait_end(det_end, t)
            done = y + rst[j]
            k = j + 1
            while k < n and ev_t[k] < done and ev_planned[k]:
                k += 1          # planned interruptions while down are skipped
            stop = min(done, H)
            hit = k < n and ev_t[k] < stop
            e = ev_t[k] if hit else stop
            out["detection"] += min(e, det_end) - t
            out["waiting_for_repair"] += max(min(e, y) - det_end, 0.0)
            out["restart"] += max(e - y, 0.0)
            if not hit:
                return stop, k
            out["unexpected"] += 1
            t, j = e, k

    while t < H:
        # one running interval, step by step
        while i < n and ev_t[i] < t:
            i += 1
        run_start = t
        committed = committed_wall = 0.0       # progress (s at full speed) and wall compute at the last durable checkpoint
        progress = wall = 0.0                  # since the run started
        ckpt_stall = 0.0                       # stalls so far, and stalls up to the last durable checkpoint
        durable_stall = 0.0
        since_ckpt = 0.0
        pending: list[tuple[float, float, float, float]] = []   # (durable at, progress, wall, stalls)
        nxt = min(next_event_time(), H)
        stop_kind = "horizon"
        while True:
            while pending and pending[0][0] <= t:
                _, committed, committed_wall, durable_stall = pending.pop(0)
            if t >= nxt:
                stop_kind = "horizon" if nxt >= H else ("planned" if ev_planned[i] else "failure")
                break
            f = slowdown(t)
            dur = step_time_s * f
            if t + dur > nxt:
                if nxt >= H or ev_planned[i]:
                    progress += (nxt - t) / f
                    wall += nxt - t
                t = nxt
                continue
            t += dur
            progress += step_time_s
            wall += dur
            since_ckpt += dur
            if since_ckpt >= mech.tau - 1e-9:
                since_ckpt = 0.0
                end = t + mech.stall
                if end > nxt:
                    ckpt_stall += nxt - t
                    t = nxt
                    continue
                ckpt_stall += mech.stall
                t = end
                pending.append((t + mech.lag, progress, wall, ckpt_stall))
        while pending and pending[0][0] <= t:
            _, committed, committed_wall, durable_stall = pending.pop(0)
        if stop_kind == "failure":
            out["useful"] += committed
            out["degraded"] += committed_wall - committed
            out["checkpoint"] += durable_stall
            out["recompute"] += (t - run_start) - committed_wall - durable_stall
            out["unexpected"] += 1
        else:
            out["useful"] += progress
            out["degraded"] += wall - progress
            out["checkpoint"] += ckpt_stall
            out["recompute"] += (t - run_start) - wall - ckpt_stall
        if stop_kind == "horizon":
            break
        if stop_kind == "planned":
            out["planned"] += 1
        t, i = recover(t, i)
    return out
