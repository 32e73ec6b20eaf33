"""Attribute a timeline's wall time to categories, as seen from one device's compute stream.

Time when the compute stream is busy counts as its task's category (or the task's ``parts``
split proportionally); time when it is idle but communication runs counts as exposed
communication of that stream's kind (split evenly when several run at once); time when nothing
runs is idle (a pipeline bubble). Streams run one task at a time, so each stream's tasks are
disjoint intervals and the sweep below is a vectorised pass over their boundaries.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from windtunnel.engine.core import Timeline


def attribute(timeline: Timeline, *, primary: str | tuple[str, ...], others: tuple[str, ...],
              until: float | None = None, idle_label: str = "idle", tasks: list[int] | None = None,
              background: tuple[str, ...] = ()) -> dict[str, float]:
    """Seconds per category over [0, until] for the device whose compute stream(s) are ``primary``.

    ``background`` streams (the host issuing kernels) claim only idle time that no stream in
    ``others`` covers: a device waiting for the host's next launch, not for a transfer.

    ``tasks`` optionally restricts the scan to these task ids (e.g. one device's), for speed.
    Compute streams listed in ``primary`` must not overlap each other (they share the device).
    """
    primary = (primary,) if isinstance(primary, str) else tuple(primary)
    horizon = timeline.makespan if until is None else until
    candidates = range(len(timeline.streams)) if tasks is None else tasks
    totals: dict[str, float] = defaultdict(float)
    compute: list[tuple[float, float]] = []
    comm: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    wanted = set(others) | set(background)
    own = set(primary)
    all_streams, starts, ends = timeline.streams, timeline.start, timeline.end
    all_parts, categories = timeline.parts, timeline.categories
    wholes: dict[int, float] = {}  # sum of a parts dict (tasks share their played cost's dict)
    for task in candidates:
        stream = all_streams[task]
        if stream in own:
            start, end = starts[task], ends[task]
            if end > horizon:
                end = horizon
            if end <= start:
                continue
            compute.append((start, end))
            parts = all_parts[task]
            span = end - start
            if parts:
                whole = wholes.get(id(parts))
                if whole is None:
                    whole = wholes[id(parts)] = sum(parts.values()) or 1.0
                for key, value in parts.items():
                    totals[key] += span * value / whole
            else:
                totals[categories[task]] += span
        elif stream in wanted:
            start, end = starts[task], ends[task]
            if end > horizon:
                end = horizon
            if end > start:
                comm[stream].append((start, end, categories[task]))
    # Idle compute time, split among whatever communication runs then.
    streams = sorted(stream for stream in comm if stream not in background)
    behind = sorted(stream for stream in comm if stream in background)
    boundaries = [0.0, horizon]
    for start, end in compute:
        boundaries += (start, end)
    for stream in streams + behind:
        for start, end, _ in comm[stream]:
            boundaries += (start, end)
    edges = np.unique(np.clip(np.asarray(boundaries), 0.0, horizon))
    if len(edges) < 2:
        return dict(totals)
    middles = (edges[:-1] + edges[1:]) / 2.0
    lengths = np.diff(edges)
    idle = ~_covered(middles, compute)
    active = [_covered(middles, [(s, e) for s, e, _ in comm[stream]]) for stream in streams]
    count = np.sum(active, axis=0) if active else np.zeros(len(middles))
    for stream, covered in zip(streams, active, strict=True):
        _add_by_task(totals, middles, np.where(idle & covered, lengths / np.maximum(count, 1), 0.0), comm[stream])
    waiting = idle & (count == 0)
    for stream in behind:
        covered = _covered(middles, [(s, e) for s, e, _ in comm[stream]])
        _add_by_task(totals, middles, np.where(waiting & covered, lengths, 0.0), comm[stream])
        waiting &= ~covered
    bubble = float(lengths[waiting].sum())
    if bubble:
        totals[idle_label] += bubble
    return dict(totals)


def _add_by_task(totals: dict[str, float], middles: np.ndarray, share: np.ndarray,
                 tasks: list[tuple[float, float, str]]) -> None:
    """Add each segment's ``share`` of seconds to the category of the stream task covering it."""
    if not share.any():
        return
    cumulative = np.concatenate([[0.0], np.cumsum(share)])
    bounds = np.searchsorted(middles, np.asarray([(start, end) for start, end, _ in tasks]))
    values = (cumulative[bounds[:, 1]] - cumulative[bounds[:, 0]]).tolist()
    for (_, _, category), value in zip(tasks, values, strict=True):
        if value:
            totals[category] += value


def _covered(points: np.ndarray, intervals: list[tuple[float, float]]) -> np.ndarray:
    """For sorted points, whether each lies inside one of the (disjoint) intervals."""
    if not intervals:
        return np.zeros(len(points), dtype=bool)
    bounds = np.asarray(sorted(intervals))
    index = np.searchsorted(bounds[:, 0], points, side="right") - 1
    valid = index >= 0
    ends = np.where(valid, bounds[np.maximum(index, 0), 1], -np.inf)
    return valid & (points < ends)
