"""A tiny discrete-event engine: tasks on in-order streams with dependencies.

Each stream (a CUDA-stream-like queue on one device) runs its tasks one at a time in submission
order; a task starts when it reaches the head of its stream and every task it depends on has
finished. Completions are events on a heap, so overlap between streams, exposed waiting and idle
bubbles come out of playing the events, not out of a formula. Times are in seconds.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from windtunnel.specs.errors import WindtunnelError


@dataclass
class Timeline:
    """Result of a run: per task start/end (seconds), with names, streams and categories."""

    names: list[str]
    streams: list[str]
    categories: list[str]
    start: list[float]
    end: list[float]
    parts: list[dict[str, float] | None]

    @property
    def makespan(self) -> float:
        """End of the last task (seconds)."""
        return max(self.end, default=0.0)

    def stream_tasks(self, stream: str) -> list[int]:
        return [i for i, s in enumerate(self.streams) if s == stream]


@dataclass
class Engine:
    """Collects tasks, then :meth:`run` plays them event by event."""

    names: list[str] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    deps: list[tuple[int, ...]] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    parts: list[dict[str, float] | None] = field(default_factory=list)

    def task(self, name: str, stream: str, duration: float, deps: tuple[int, ...] | list[int] = (),
             category: str = "compute", parts: dict[str, float] | None = None) -> int:
        """Submit a task (duration in seconds) to the end of ``stream``; returns its id."""
        if duration < 0:
            raise ValueError(f"task '{name}' has negative duration {duration}")
        self.names.append(name)
        self.streams.append(stream)
        self.durations.append(float(duration))
        self.deps.append(tuple(deps))
        self.categories.append(category)
        self.parts.append(parts)
        return len(self.names) - 1

    def run(self) -> Timeline:
        """Play all tasks; raises if the submitted order can never finish (a dependency cycle)."""
        n = len(self.names)
        remaining = [len(d) for d in self.deps]
        dependents: list[list[int]] = [[] for _ in range(n)]
        for task, deps in enumerate(self.deps):
            for dep in deps:
                dependents[dep].append(task)
        queues: dict[str, list[int]] = {}
        for task, stream in enumerate(self.streams):
            queues.setdefault(stream, []).append(task)
        head = dict.fromkeys(queues, 0)
        busy = dict.fromkeys(queues, False)
        start = [0.0] * n
        end = [0.0] * n
        events: list[tuple[float, int]] = []
        durations = self.durations
        streams = self.streams

        def try_start(stream: str, now: float) -> None:
            if busy[stream]:
                return
            queue = queues[stream]
            position = head[stream]
            if position < len(queue):
                task = queue[position]
                if remaining[task] == 0:
                    busy[stream] = True
                    start[task] = now
                    finish = now + durations[task]
                    end[task] = finish
                    heapq.heappush(events, (finish, task))

        for stream in queues:
            try_start(stream, 0.0)
        done = 0
        while events:
            now, task = heapq.heappop(events)
            done += 1
            stream = streams[task]
            busy[stream] = False
            head[stream] += 1
            for user in dependents[task]:
                remaining[user] -= 1
                if remaining[user] == 0:
                    try_start(streams[user], now)
            try_start(stream, now)
        if done != n:
            stuck = [self.names[queues[s][head[s]]] for s in queues if head[s] < len(queues[s])][:4]
            raise WindtunnelError(f"Simulation deadlock: tasks can never start ({', '.join(stuck)}); "
                                  "the schedule's order contradicts its dependencies.")
        return Timeline(self.names, self.streams, self.categories, start, end, self.parts)
