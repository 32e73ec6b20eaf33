"""A tiny discrete-event engine: tasks on in-order streams with dependencies.

Each stream (a CUDA-stream-like queue on one device) runs its tasks in submission order; a task
starts when it reaches the head of its stream, every task it depends on has finished, and the
resource its stream runs on is free. By default every stream is its own resource; streams can
share one (two compute streams on one GPU's SMs, two all-to-alls on one NIC), and then the free
resource takes the earliest-submitted ready head among them. Completions are events on a heap,
so overlap, exposed waiting and idle bubbles come out of playing the events, not out of a
formula. Times are in seconds.

When no two streams share a resource, a task starts exactly when its stream predecessor and its
dependencies have finished, and every dependency was submitted before it; the play is then the
longest-path pass in submission order (:meth:`Engine.run` takes it: the same floats as the event
loop, at a fraction of the cost).
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
    resources: dict[str, str] = field(default_factory=dict)

    def share(self, resource: str, *streams: str) -> None:
        """Make ``streams`` run on one ``resource``: at most one of their tasks runs at a time."""
        for stream in streams:
            self.resources[stream] = resource

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
        if not self.resources:
            return self._run_in_order()
        return self._run_events()

    def _run_in_order(self) -> Timeline:
        """Every stream its own resource: start = max(end of the stream's previous task, ends of
        the dependencies), in submission order (dependencies always precede a task)."""
        durations = self.durations
        end: list[float] = []
        start: list[float] = []
        tail: dict[str, float] = {}
        for index, (stream, duration, deps) in enumerate(zip(self.streams, durations, self.deps, strict=True)):
            ready = tail.get(stream, 0.0)
            for dep in deps:
                if not 0 <= dep < index:
                    return self._run_events()  # a dependency submitted later: play the events
                finish = end[dep]
                if finish > ready:
                    ready = finish
            start.append(ready)
            finish = ready + duration
            end.append(finish)
            tail[stream] = finish
        return Timeline(self.names, self.streams, self.categories, start, end, self.parts)

    def _run_events(self) -> Timeline:
        """The event loop (streams sharing resources pick the earliest-submitted ready head)."""
        n = len(self.names)
        remaining = [len(d) for d in self.deps]
        dependents: list[list[int]] = [[] for _ in range(n)]
        for task, deps in enumerate(self.deps):
            for dep in deps:
                dependents[dep].append(task)
        queues: dict[str, list[int]] = {}
        for task, stream in enumerate(self.streams):
            queues.setdefault(stream, []).append(task)
        resource_of = {stream: self.resources.get(stream, stream) for stream in queues}
        members: dict[str, list[str]] = {}
        for stream, resource in resource_of.items():
            members.setdefault(resource, []).append(stream)
        head = dict.fromkeys(queues, 0)
        busy = dict.fromkeys(members, False)
        start = [0.0] * n
        end = [0.0] * n
        events: list[tuple[float, int]] = []
        durations = self.durations
        streams = self.streams

        def try_start(resource: str, now: float) -> None:
            if busy[resource]:
                return
            chosen = -1
            for stream in members[resource]:
                queue = queues[stream]
                position = head[stream]
                if position < len(queue):
                    task = queue[position]
                    if remaining[task] == 0 and (chosen < 0 or task < chosen):
                        chosen = task
            if chosen >= 0:
                busy[resource] = True
                start[chosen] = now
                finish = now + durations[chosen]
                end[chosen] = finish
                heapq.heappush(events, (finish, chosen))

        for resource in members:
            try_start(resource, 0.0)
        done = 0
        while events:
            now, task = heapq.heappop(events)
            done += 1
            stream = streams[task]
            resource = resource_of[stream]
            busy[resource] = False
            head[stream] += 1
            for user in dependents[task]:
                remaining[user] -= 1
                if remaining[user] == 0:
                    try_start(resource_of[streams[user]], now)
            try_start(resource, now)
        if done != n:
            stuck = [self.names[queues[s][head[s]]] for s in queues if head[s] < len(queues[s])][:4]
            raise WindtunnelError(f"Simulation deadlock: tasks can never start ({', '.join(stuck)}); "
                                  "the schedule's order contradicts its dependencies.")
        return Timeline(self.names, self.streams, self.categories, start, end, self.parts)
