"""The generic search loop: enumerate in chunks -> prune -> screen (vectorised) -> refine the best K.

A *problem* (e.g. the Sim2Train plan space) supplies the pieces; this module streams candidates in
chunks so memory stays bounded, keeps the running best-K and Pareto candidates, refines them on a
backend, saves its progress atomically so an interrupted run resumes without losing refined
results, and reports counts and time per phase. Times are seconds.
"""

from __future__ import annotations

import heapq
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from windtunnel.search.pareto import pareto_mask
from windtunnel.specs.yamlio import write_atomic

CHUNK = 65536
# Screened step-time histogram: log-spaced bins from 1 ms to 1e5 s, enough to place any plan's
# estimate among all screened candidates (a percentile) without keeping them all.
HISTOGRAM_EDGES = np.logspace(-3, 5, 4001)


class Problem(Protocol):
    """What a pillar provides to be searched."""

    total: int

    def fingerprint(self) -> str: ...

    def chunk(self, start: int, stop: int) -> dict[str, np.ndarray]: ...

    def prune(self, chunk: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, int]]: ...

    def prepare(self, chunk: dict[str, np.ndarray], backend: Any) -> None: ...

    def screen(self, chunk: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(estimated seconds, estimated bytes, fits-in-memory mask)."""
        ...

    def label(self, chunk: dict[str, np.ndarray], index: int) -> str: ...

    def cell(self, chunk: dict[str, np.ndarray]) -> np.ndarray:
        """A small integer grid cell per candidate (e.g. TP x PP) for the heatmap."""
        ...

    def refine_task(self) -> Callable[[str], dict]: ...


@dataclass
class SearchState:
    """Everything needed to resume: counts, timings, the screened shortlist and refined results."""

    fingerprint: str
    enumerated: int = 0
    pruned: dict[str, int] = field(default_factory=dict)
    screened: int = 0
    screen_done: bool = False
    shortlist: list[tuple[float, str, float]] = field(default_factory=list)  # (est s, plan, est bytes)
    pareto: list[tuple[float, str, float]] = field(default_factory=list)
    cells: dict[str, float] = field(default_factory=dict)
    refined: dict[str, dict] = field(default_factory=dict)
    elapsed_s: dict[str, float] = field(default_factory=dict)
    histogram: list[int] = field(default_factory=lambda: [0] * (len(HISTOGRAM_EDGES) - 1))

    def percentile_of(self, seconds: float) -> float | None:
        """Fraction of screened candidates whose estimate is faster than ``seconds``."""
        total = sum(self.histogram)
        if not total:
            return None
        index = int(np.searchsorted(HISTOGRAM_EDGES, seconds, side="right")) - 1
        index = min(max(index, 0), len(self.histogram))
        return float(sum(self.histogram[:index])) / total

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def load(cls, path: Path) -> SearchState:
        doc = json.loads(path.read_text(encoding="utf-8"))
        state = cls(fingerprint=doc["fingerprint"])
        for key, value in doc.items():
            setattr(state, key, value)
        state.shortlist = [tuple(x) for x in state.shortlist]
        state.pareto = [tuple(x) for x in state.pareto]
        return state


def run_search(problem: Problem, backend: Any, *, refine: int = 32, pareto_refine: int = 16,
               capacity_bytes: float, state_path: Path | None = None, resume: bool = False,
               progress: Callable[[str, int, int], None] | None = None,
               stop_after_refined: int | None = None) -> SearchState:
    """Search ``problem``: returns the state with every refined result (rank them with :func:`ranked`).

    ``stop_after_refined`` interrupts (KeyboardInterrupt) after that many refinements, for tests of
    resumption. Progress callbacks receive (phase, done, total).
    """
    fingerprint = problem.fingerprint()
    state = SearchState(fingerprint=fingerprint)
    if resume and state_path is not None and state_path.exists():
        loaded = SearchState.load(state_path)
        if loaded.fingerprint == fingerprint:
            state = loaded
    start_all = time.perf_counter()
    if not state.screen_done:
        _screen_phase(problem, backend, state, refine, pareto_refine, capacity_bytes, progress)
        state.screen_done = True
        _save(state, state_path)
    _refine_phase(problem, backend, state, state_path, progress, stop_after_refined)
    state.elapsed_s["total"] = round(sum(v for k, v in state.elapsed_s.items() if k != "total")
                                     + 0.0 * (time.perf_counter() - start_all), 6)
    _save(state, state_path)
    return state


def _save(state: SearchState, path: Path | None) -> None:
    if path is not None:
        write_atomic(path, state.to_json())


def _screen_phase(problem: Problem, backend: Any, state: SearchState, refine: int, pareto_refine: int,
                  capacity: float, progress) -> None:
    total = problem.total
    heap: list[tuple[float, str, float]] = []  # max-heap on time via negation
    pareto: list[tuple[float, str, float]] = []
    timings = {"enumerate_prune": 0.0, "shards": 0.0, "screen": 0.0}
    for start in range(0, total, CHUNK):
        stop = min(total, start + CHUNK)
        t0 = time.perf_counter()
        chunk = problem.chunk(start, stop)
        state.enumerated += stop - start
        keep, reasons = problem.prune(chunk)
        for reason, count in reasons.items():
            state.pruned[reason] = state.pruned.get(reason, 0) + count
        chunk = {k: v[keep] for k, v in chunk.items()}
        t1 = time.perf_counter()
        timings["enumerate_prune"] += t1 - t0
        if len(chunk[next(iter(chunk))]) == 0:
            continue
        problem.prepare(chunk, backend)
        t2 = time.perf_counter()
        timings["shards"] += t2 - t1
        seconds, memory, fits = problem.screen(chunk)
        over = int((~fits).sum())
        if over:
            state.pruned["out of memory"] = state.pruned.get("out of memory", 0) + over
        state.screened += int(fits.sum())
        chosen = np.nonzero(fits)[0]
        counts, _ = np.histogram(np.clip(seconds[chosen], HISTOGRAM_EDGES[0], HISTOGRAM_EDGES[-1]), HISTOGRAM_EDGES)
        state.histogram = [int(a + b) for a, b in zip(state.histogram, counts, strict=True)]
        if len(chosen):
            cells = problem.cell(chunk)
            for cell in np.unique(cells[chosen]):
                best = float(seconds[chosen][cells[chosen] == cell].min())
                key = str(int(cell))
                state.cells[key] = min(best, state.cells.get(key, np.inf))
            order = chosen[np.argsort(seconds[chosen], kind="stable")][:refine]
            for i in order:
                item = (-float(seconds[i]), problem.label(chunk, int(i)), float(memory[i]))
                if len(heap) < refine:
                    heapq.heappush(heap, item)
                elif item > heap[0]:
                    heapq.heapreplace(heap, item)
            # Running Pareto set of (throughput, memory headroom) on the screen's estimates.
            objectives = np.stack([1.0 / seconds[chosen], capacity - memory[chosen]], axis=1)
            front = chosen[pareto_mask(objectives)]
            merged = pareto + [(float(seconds[i]), problem.label(chunk, int(i)), float(memory[i])) for i in front]
            objs = np.array([[1.0 / s, capacity - m] for s, _, m in merged])
            mask = pareto_mask(objs)
            pareto = sorted((m for m, keepit in zip(merged, mask, strict=True) if keepit), key=lambda x: (x[0], x[1]))
        timings["screen"] += time.perf_counter() - t2
        if progress:
            progress("screen", stop, total)
    state.shortlist = sorted(((-t, plan, mem) for t, plan, mem in heap), key=lambda x: (x[0], x[1]))
    if len(pareto) > pareto_refine:
        picks = np.linspace(0, len(pareto) - 1, pareto_refine).round().astype(int)
        pareto = [pareto[i] for i in sorted(set(picks))]
    state.pareto = pareto
    state.elapsed_s.update({k: round(v, 6) for k, v in timings.items()})


def _refine_phase(problem: Problem, backend: Any, state: SearchState, state_path: Path | None, progress,
                  stop_after: int | None) -> None:
    wanted = []
    for _, plan, _ in state.shortlist + state.pareto:
        if plan not in wanted:
            wanted.append(plan)
    todo = [plan for plan in wanted if plan not in state.refined]
    task = problem.refine_task()
    batch = max(1, getattr(backend, "workers", 4))
    t0 = time.perf_counter()
    done_now = 0
    for start in range(0, len(todo), batch):
        items = todo[start:start + batch]
        for plan, result in zip(items, backend.map(task, items), strict=True):
            state.refined[plan] = result
            done_now += 1
            if stop_after is not None and done_now >= stop_after:
                state.elapsed_s["refine"] = round(state.elapsed_s.get("refine", 0.0) + time.perf_counter() - t0, 6)
                _save(state, state_path)
                raise KeyboardInterrupt
        _save(state, state_path)
        if progress:
            progress("refine", len(state.refined), len(wanted))
    state.elapsed_s["refine"] = round(state.elapsed_s.get("refine", 0.0) + time.perf_counter() - t0, 6)


def ranked(state: SearchState) -> list[dict]:
    """Refined results, feasible ones ranked by the engine's step time (ties by plan string)."""
    rows = [dict(r, plan=plan) for plan, r in state.refined.items()]
    feasible = [r for r in rows if r.get("feasible")]
    return sorted(feasible, key=lambda r: (r["step_time_s"], r["plan"]))
