"""Export a simulated timeline as a Chrome trace (JSON) that Perfetto and chrome://tracing open."""

from __future__ import annotations

import json

from windtunnel.engine.core import Timeline


def chrome_trace(timeline: Timeline, *, title: str = "windtunnel step") -> dict:
    """Trace events: one process per pipeline rank, one thread per stream; times in microseconds."""
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
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"title": title}}


def trace_json(timeline: Timeline, *, title: str = "windtunnel step") -> str:
    """The Chrome trace as deterministic JSON text."""
    return json.dumps(chrome_trace(timeline, title=title), sort_keys=True)
