"""The timeline of one replication: the job's state and useful throughput over time (CSV, JSON, text and SVG).

States: ``running``, ``checkpoint`` (stalled writing), ``recompute`` (running, but the work is later lost
to a failure and done again), ``detection``, ``waiting_for_repair``, ``restart``. Useful throughput is
the fraction of the fault-free rate the job makes progress at: 1 / (slowest active slowdown) times the
data-parallel capacity left (elastic shrink) while running, 0 otherwise. Each bin reports the state
seen most and the mean throughput over ``samples`` evenly spaced instants (one per bin when a bin is
one training step: then the timeline is literally per step).
"""

from __future__ import annotations

import io
import json

import numpy as np

from windtunnel.avail.scenario import Scenario

STATES = ("running", "checkpoint", "recompute", "detection", "waiting_for_repair", "restart")
_LETTER = {"running": "#", "checkpoint": "c", "recompute": "x", "detection": "d", "waiting_for_repair": "w",
           "restart": "r"}


def _segments(tl: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Down and lost segments of the timeline as sorted (start, end, state index) arrays."""
    starts, ends, codes = [], [], []
    fs = tl["failure_segments"]
    if len(fs):
        t, det, wait, rst = fs[:, 0], fs[:, 1], fs[:, 2], fs[:, 3]
        for a, b, code in ((t, t + det, 3), (t + det, t + det + wait, 4), (t + det + wait, t + det + wait + rst, 5)):
            starts.append(a)
            ends.append(b)
            codes.append(np.full(len(a), code))
    pl = tl["planned"]
    if len(pl):
        starts.append(pl[:, 0])
        ends.append(pl[:, 1])
        codes.append(np.full(len(pl), 5))
    runs = tl["runs"]
    if len(runs):
        starts.append(runs[:, 1] - runs[:, 2])
        ends.append(runs[:, 1])
        codes.append(np.full(len(runs), 2))
    if not starts:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=int)
    s, e, c = np.concatenate(starts), np.concatenate(ends), np.concatenate(codes)
    keep = e > s
    s, e, c = s[keep], e[keep], c[keep]
    order = np.argsort(s, kind="stable")
    return s[order], e[order], c[order]


def state_at(tl: dict, scenario: Scenario, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(state index, useful throughput fraction, nodes in repair) at times ``x`` (s) of replication 0."""
    mech = scenario.mechanics
    x = np.asarray(x, dtype=float)
    s, e, c = _segments(tl)
    i = np.searchsorted(s, x, side="right") - 1
    ic = np.maximum(i, 0)
    inside = (i >= 0) & (x < e[ic]) if len(s) else np.zeros(len(x), dtype=bool)
    state = np.where(inside, c[ic] if len(s) else 0, 0)
    # checkpoint stalls inside committed running time
    runs = tl["runs"]
    j = np.searchsorted(runs[:, 0], x, side="right") - 1
    jc = np.maximum(j, 0)
    off = x - runs[jc, 0]
    in_ckpt = (np.mod(off, mech.period) >= mech.tau) & (j >= 0)
    state = np.where((state == 0) & in_ckpt, 1, state)
    # slowdown and capacity while running
    factor = np.ones(len(x))
    sl = tl["slow"]
    if len(sl):
        for a, b, cls in sl:
            f = scenario_slow_factors(scenario)[int(cls)]
            m = (x >= a) & (x < b)
            factor[m] = np.maximum(factor[m], f)
    arr, dep = tl["repair_arrivals"], tl["repair_departures"]
    k = np.zeros(len(x))
    if len(arr):
        cum = np.cumsum(arr[:, 1])
        ia = np.searchsorted(arr[:, 0], x, side="right") - 1
        k = np.where(ia >= 0, cum[np.maximum(ia, 0)], 0) - np.searchsorted(np.sort(dep), x, side="right")
    capacity = np.ones(len(x))
    if mech.elastic:
        capacity = 1.0 - np.minimum(1.0, np.maximum(k - mech.spares, 0) * mech.shrink_per_node)
    throughput = np.where(state == 0, capacity / factor, 0.0)
    return state, throughput, k


def scenario_slow_factors(scenario: Scenario) -> list[float]:
    """Fail-slow factors in the order the simulation indexes classes (slowest first)."""
    return sorted((c.slowdown for c in scenario.rates.slow), reverse=True)


def build_timeline(tl: dict, scenario: Scenario, bin_s: float | None = None, *, start_s: float = 0.0,
                   end_s: float | None = None) -> dict:
    """Bin replication 0's timeline between ``start_s`` and ``end_s`` (default: the horizon): per bin its start
    (s), dominant state, worst state seen, mean useful throughput, nodes in repair."""
    H, step = scenario.horizon_s, scenario.step_time_s
    end = H if end_s is None else min(end_s, H)
    length = max(end - start_s, step)
    if bin_s is None:
        bin_s = step if length / step <= 100_000 else length / 2000.0
    nbins = int(np.ceil(length / bin_s))
    samples = 1 if abs(bin_s - step) < 1e-9 else 8
    edges = start_s + np.arange(nbins) * bin_s
    offsets = (np.arange(samples) + 0.5) / samples * bin_s
    x = np.minimum((edges[:, None] + offsets[None, :]).ravel(), np.nextafter(H, 0))
    state, thr, k = state_at(tl, scenario, x)
    state, thr, k = state.reshape(nbins, samples), thr.reshape(nbins, samples), k.reshape(nbins, samples)
    counts = np.stack([(state == s).sum(axis=1) for s in range(len(STATES))], axis=1)
    dominant = counts.argmax(axis=1)
    severity = np.array([0, 1, 2, 3, 5, 4])[state]          # running < checkpoint < recompute < detection < restart < waiting
    worst = np.take_along_axis(state, severity.argmax(axis=1)[:, None], axis=1)[:, 0]
    return {"bin_s": bin_s, "samples_per_bin": samples, "t_s": edges.tolist(),
            "state": [STATES[d] for d in dominant], "worst_state": [STATES[d] for d in worst],
            "useful_throughput": thr.mean(axis=1).tolist(),
            "nodes_in_repair": k[:, samples // 2].astype(int).tolist()}


def timeline_csv(timeline: dict) -> str:
    """The binned timeline as CSV (t_s, state, useful_throughput, nodes_in_repair)."""
    buf = io.StringIO()
    buf.write("t_s,state,useful_throughput,nodes_in_repair\n")
    for t, s, u, k in zip(timeline["t_s"], timeline["state"], timeline["useful_throughput"],
                          timeline["nodes_in_repair"], strict=True):
        buf.write(f"{t:.6g},{s},{u:.6g},{k}\n")
    return buf.getvalue()


def timeline_json(timeline: dict) -> str:
    """The binned timeline as JSON."""
    return json.dumps(timeline, sort_keys=True) + "\n"


def timeline_text(timeline: dict, width: int = 96, height: int = 6, y_min: float = 0.0,
                  strip: bool | None = None) -> str:
    """A text plot: useful throughput over time (rows from ``y_min`` at the bottom to 100% at the top) and a strip
    of the worst state per column (# running, c checkpoint, x recompute, d detection, w waiting for repair,
    r restart); by default the strip is shown when a column spans at most an hour (wider ones all hold some
    interruption)."""
    thr = np.asarray(timeline["useful_throughput"])
    states = timeline.get("worst_state", timeline["state"])
    n = len(thr)
    cols = min(width, n)
    bounds = np.linspace(0, n, cols + 1).astype(int)
    mean = np.array([thr[a:b].mean() if b > a else 0.0 for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    letters = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        chunk = states[a:b]
        worst = next((s for s in ("waiting_for_repair", "restart", "detection", "recompute", "checkpoint")
                      if s in chunk), None)
        letters.append(_LETTER[worst] if worst else "#")
    lines = []
    for row in range(height, 0, -1):
        level = y_min + (1.0 - y_min) * row / height
        half = 0.5 * (1.0 - y_min) / height
        lines.append(f"{level:5.0%} |" + "".join("#" if m >= level - half else " " for m in mean))
    lines.append("      +" + "-" * cols)
    t0 = timeline["t_s"][0]
    t1 = timeline["t_s"][-1] + timeline["bin_s"]
    if strip is None:
        strip = (t1 - t0) / cols <= 3600.0
    if strip:
        lines.append("state |" + "".join(letters))
    unit, size = ("days", 86400.0) if t1 - t0 >= 3 * 86400.0 else ("h", 3600.0)
    lines.append(f"       {t0 / size:.3g} .. {t1 / size:.3g} {unit}, {cols} columns of {(t1 - t0) / cols / 60:.3g} min"
                 + ("; the strip shows the worst state in each column" if strip else ""))
    return "\n".join(lines) + "\n"


def timeline_svg(timeline: dict, title: str = "useful throughput") -> str:
    """A small self-contained SVG line plot of useful throughput over time (days)."""
    thr = np.asarray(timeline["useful_throughput"])
    t = np.asarray(timeline["t_s"]) / 86400.0
    w, h, pad = 900, 260, 40
    tmax = max(float(t[-1]) if len(t) else 1.0, 1e-9)
    pts = " ".join(f"{pad + (w - 2 * pad) * ti / tmax:.1f},{h - pad - (h - 2 * pad) * yi:.1f}" for ti, yi in zip(t, thr, strict=True))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">'
            f'<text x="{pad}" y="20">{title}</text>'
            f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>'
            f'<text x="{pad - 30}" y="{pad + 4}">100%</text><text x="{pad - 20}" y="{h - pad + 4}">0</text>'
            f'<text x="{w - pad - 60}" y="{h - 10}">{tmax:.3g} days</text>'
            f'<polyline fill="none" stroke="steelblue" stroke-width="1" points="{pts}"/></svg>\n')
