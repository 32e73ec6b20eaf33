"""Seconds per category of every rank of a compiled play (train/steady_play.py), in one vectorised
sweep over all ranks, counted as :func:`windtunnel.engine.attribution.attribute` counts one rank.

Per rank and time window [since, until]: the compute stream's tasks give their parts (a played
cost's seconds per category, scaled to the task's clipped span); time when the compute stream is
idle but sends (``pp_comm``) or data-parallel transfers (``dp_comm``) run is exposed communication
of that kind (shared evenly when both run); the rest is ``bubble``. Times are seconds.
"""

from __future__ import annotations

import numpy as np

from windtunnel.train.steady_play import RankPlay


def _flat(ranks: list[RankPlay], starts: str, ends: str, since: np.ndarray, until: np.ndarray):
    """All ranks' intervals of one stream kind, clipped to each rank's window: (rank, start, end, kept)."""
    counts = [len(getattr(rank, starts)) for rank in ranks]
    owner = np.repeat(np.arange(len(ranks)), counts)
    lo = np.concatenate([np.asarray(getattr(rank, starts), dtype=float) for rank in ranks]) if owner.size else np.zeros(0)
    hi = np.concatenate([np.asarray(getattr(rank, ends), dtype=float) for rank in ranks]) if owner.size else np.zeros(0)
    lo = np.clip(lo, since[owner], until[owner])
    hi = np.clip(hi, since[owner], until[owner])
    kept = hi > lo
    return owner, lo, hi, kept


def rank_parts(ranks: list[RankPlay], table: list, since: np.ndarray, until: np.ndarray) -> list[dict[str, float]]:
    """Per rank, seconds per category over its window [since[r], until[r]]."""
    n = len(ranks)
    totals: list[dict[str, float]] = [{} for _ in range(n)]
    owner, lo, hi, kept = _flat(ranks, "starts", "ends", since, until)
    parts = np.concatenate([np.asarray(rank.parts, dtype=np.int64) for rank in ranks]) if owner.size else np.zeros(0, int)
    width = len(table)
    cells = owner[kept] * width + parts[kept]
    spans = np.bincount(cells, weights=hi[kept] - lo[kept], minlength=n * width)
    used = np.bincount(cells, minlength=n * width)
    for cell in np.flatnonzero(used):
        rank, index = divmod(int(cell), width)
        span, entry, mine = float(spans[cell]), table[index], totals[rank]
        if isinstance(entry, str):
            mine[entry] = mine.get(entry, 0.0) + span
            continue
        whole = sum(entry.values()) or 1.0
        for key, value in entry.items():
            mine[key] = mine.get(key, 0.0) + span * value / whole
    # One sweep over every rank's boundaries, sorted by (rank, time): coverage counts per stream kind.
    kinds = [(owner[kept], lo[kept], hi[kept])]
    for starts, ends in (("dp_starts", "dp_ends"), ("pp_starts", "pp_ends")):
        o, s, e, k = _flat(ranks, starts, ends, since, until)
        kinds.append((o[k], s[k], e[k]))
    rank_ids = [np.arange(n), np.arange(n)]
    times = [since, until]
    deltas = [np.zeros((2 * n, 3), dtype=np.int64)]
    for column, (o, s, e) in enumerate(kinds):
        rank_ids += [o, o]
        times += [s, e]
        delta = np.zeros((2 * len(o), 3), dtype=np.int64)
        delta[: len(o), column] = 1
        delta[len(o):, column] = -1
        deltas.append(delta)
    rank_of = np.concatenate(rank_ids)
    time = np.concatenate(times)
    order = np.lexsort((time, rank_of))
    rank_of, time = rank_of[order], time[order]
    cover = np.cumsum(np.concatenate(deltas)[order], axis=0)[:-1]
    same = rank_of[1:] == rank_of[:-1]
    lengths = np.where(same, time[1:] - time[:-1], 0.0)
    segment_rank = rank_of[:-1]
    idle = cover[:, 0] == 0
    on_dp, on_pp = cover[:, 1] > 0, cover[:, 2] > 0
    count = np.maximum(on_dp.astype(int) + on_pp.astype(int), 1)
    exposed = {"dp_comm": np.bincount(segment_rank, weights=lengths * (idle & on_dp) / count, minlength=n),
               "pp_comm": np.bincount(segment_rank, weights=lengths * (idle & on_pp) / count, minlength=n),
               "bubble": np.bincount(segment_rank, weights=lengths * (idle & ~on_dp & ~on_pp), minlength=n)}
    for key, values in exposed.items():
        for rank, value in enumerate(values.tolist()):
            if value:
                totals[rank][key] = totals[rank].get(key, 0.0) + value
    return totals
