"""Attribute a timeline's wall time to categories, as seen from one device's compute stream.

Time when the compute stream is busy counts as its task's category (or the task's ``parts``
split proportionally); time when it is idle but communication runs counts as exposed
communication of that stream's kind; time when nothing runs is idle (a pipeline bubble).
"""

from __future__ import annotations

from collections import defaultdict

from windtunnel.engine.core import Timeline


def attribute(timeline: Timeline, *, primary: str | tuple[str, ...], others: tuple[str, ...],
              until: float | None = None, idle_label: str = "idle") -> dict[str, float]:
    """Seconds per category over [0, until] for the device whose compute stream(s) are ``primary``."""
    primary = (primary,) if isinstance(primary, str) else tuple(primary)
    horizon = timeline.makespan if until is None else until
    events: list[tuple[float, int, int]] = []  # (time, +1/-1, task)
    considered = set((*primary, *others))
    for task, stream in enumerate(timeline.streams):
        if stream in considered and timeline.end[task] > timeline.start[task]:
            events.append((timeline.start[task], 1, task))
            events.append((timeline.end[task], -1, task))
    events.sort(key=lambda e: (e[0], e[1]))
    active: dict[int, None] = {}
    totals: dict[str, float] = defaultdict(float)
    last = 0.0
    for time, sign, task in events:
        time = min(time, horizon)
        span = time - last
        if span > 0:
            _credit(timeline, active, primary, span, totals, idle_label)
        last = time
        if sign > 0:
            active[task] = None
        else:
            active.pop(task, None)
    if horizon > last:
        _credit(timeline, active, primary, horizon - last, totals, idle_label)
    return dict(totals)


def _credit(timeline: Timeline, active: dict[int, None], primary: tuple[str, ...], span: float,
            totals: dict[str, float], idle_label: str) -> None:
    compute = [t for t in active if timeline.streams[t] in primary]
    if compute:
        task = compute[0]
        parts = timeline.parts[task]
        if parts:
            whole = sum(parts.values()) or 1.0
            for key, value in parts.items():
                totals[key] += span * value / whole
        else:
            totals[timeline.categories[task]] += span
        return
    comms = [t for t in active if timeline.streams[t] not in primary]
    if not comms:
        totals[idle_label] += span
        return
    for task in comms:
        totals[timeline.categories[task]] += span / len(comms)
