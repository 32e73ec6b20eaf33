"""Export a simulated timeline as a Chrome trace (JSON) that Perfetto and chrome://tracing open."""

from __future__ import annotations

import json

from windtunnel.engine.core import Timeline

OP_LANES = {"compute": "ops: compute", "tp": "ops: TP", "cp": "ops: CP", "ep": "ops: EP", "dp": "ops: DP",
            "pp": "ops: PP", "host": "ops: host"}


def chrome_trace(timeline: Timeline, *, title: str = "windtunnel step", ops: tuple[list, dict] | None = None) -> dict:
    """Trace events: one process per pipeline rank, one thread per stream; times in microseconds. ``ops``: the
    per-operator events of one rank and their summary (train/op_trace.op_events), drawn as that rank's
    ``ops: compute``, ``ops: TP``, ``ops: CP``, ``ops: EP``, ``ops: DP``, ``ops: PP`` and ``ops: host`` threads."""
    events: list[dict] = []
    pids: dict[str, int] = {}
    tids: dict[str, int] = {}
    for stream in timeline.streams:
        rank = stream.split(".", 1)[0]
        if rank not in pids:
            pids[rank] = len(pids)
            events.append({"ph": "M", "name": "process_name", "pid": pids[rank], "tid": 0,
                           "args": {"name": f"pipeline rank {rank.lstrip('r')}"}})
        if stream not in tids:
            tids[stream] = len(tids)
            lane = stream.split(".", 1)[1] if "." in stream else "compute"
            events.append({"ph": "M", "name": "thread_name", "pid": pids[rank], "tid": tids[stream],
                           "args": {"name": lane}})
    for task, stream in enumerate(timeline.streams):
        duration = timeline.end[task] - timeline.start[task]
        if duration <= 0:
            continue
        rank = stream.split(".", 1)[0]
        args = {"category": timeline.categories[task]}
        if timeline.parts[task]:
            args.update({k: round(v * 1e6, 3) for k, v in timeline.parts[task].items()})
        events.append({"ph": "X", "name": timeline.names[task], "cat": timeline.categories[task],
                       "pid": pids[rank], "tid": tids[stream], "ts": round(timeline.start[task] * 1e6, 3),
                       "dur": round(duration * 1e6, 3), "args": args})
    other = {"title": title}
    if ops is not None:
        op_list, summary = ops
        rank = f"r{summary['rank']}"
        if rank not in pids:
            pids[rank] = len(pids)
        lanes: dict[str, int] = {}
        for lane in (*OP_LANES.values(), *sorted({_lane(e.stream) for e in op_list} - set(OP_LANES.values()))):
            lanes[lane] = len(tids) + len(lanes)
            events.append({"ph": "M", "name": "thread_name", "pid": pids[rank], "tid": lanes[lane],
                           "args": {"name": lane}})
        for e in op_list:
            events.append({"ph": "X", "name": e.name, "cat": e.category, "pid": pids[rank],
                           "tid": lanes[_lane(e.stream)], "ts": round(e.start * 1e6, 3),
                           "dur": round((e.end - e.start) * 1e6, 3)})
        other["operators"] = summary
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _lane(stream: str) -> str:
    base = stream.split(".", 1)[0]
    return OP_LANES.get(base, f"ops: {stream}")


def trace_json(timeline: Timeline, *, title: str = "windtunnel step", ops: tuple[list, dict] | None = None) -> str:
    """The Chrome trace as deterministic, compact JSON text."""
    return json.dumps(chrome_trace(timeline, title=title, ops=ops), sort_keys=True, separators=(",", ":"))
