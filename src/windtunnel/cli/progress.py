"""Progress of long commands, on stderr only (stdout stays the result: a table or clean JSON).

One helper for every command that can take more than a couple of seconds (train search, infer search,
validate training/inference/all, avail simulate, train job, train sensitivity, calibrate ...): on a
terminal a transient rich bar per phase; otherwise one plain line per update worth telling, never more
often than every ``interval_s`` seconds (default 2, ``WINDTUNNEL_PROGRESS_INTERVAL``) except for a
phase's first and last update, so a log shows ``screen: 1,200/5,000 (24%), 3.1 s`` lines.
``WINDTUNNEL_PROGRESS=0`` silences it.

Usage::

    with progress_reporter() as progress:
        search(..., progress=progress)          # progress(phase, done, total)
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

T = TypeVar("T")


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get("WINDTUNNEL_PROGRESS_INTERVAL", "2")))
    except ValueError:
        return 2.0


class progress_reporter:  # noqa: N801 - a context manager, used like rich's Progress
    """``progress(phase, done, total)`` callback: rich bars on a TTY, throttled lines on a plain stderr."""

    def __init__(self, *, enabled: bool = True, stream: TextIO | None = None, tty: bool | None = None,
                 interval_s: float | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and os.environ.get("WINDTUNNEL_PROGRESS", "1") not in ("0", "false", "off")
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval_s = _interval() if interval_s is None else interval_s
        self.bar = None
        self.tasks: dict[str, int] = {}
        self.started: dict[str, float] = {}
        self.last_line = -float("inf")
        self.finished: set[str] = set()

    def __enter__(self) -> progress_reporter:
        if self.enabled and self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.completed:,}/{task.total:,}"), TimeElapsedColumn(),
                                console=Console(file=self.stream), transient=True)
            self.bar.__enter__()
        return self

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.bar is not None:
            if phase not in self.tasks:
                self.tasks[phase] = self.bar.add_task(phase, total=total)
            self.bar.update(self.tasks[phase], completed=done, total=total)
            return
        first = phase not in self.started
        if first:
            self.started[phase] = now
        last = total > 0 and done >= total
        if last and phase in self.finished:
            return
        if not (first or last or now - self.last_line >= self.interval_s):
            return
        if last:
            self.finished.add(phase)
        share = f" ({done / total:.0%})" if total > 0 else ""
        self.stream.write(f"{phase}: {done:,}/{total:,}{share}, {now - self.started[phase]:.1f} s\n")
        self.stream.flush()
        self.last_line = now

    def note(self, text: str) -> None:
        """One line of status (a phase without a count)."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.console.print(text, markup=False)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def busy(self, label: str):
        """A context for work without a count: a spinner on a TTY; otherwise nothing for a quick job, then a line
        every ``interval_s`` seconds (``label: running, 4.0 s``) and one when it ends."""
        return _Busy(self, label)

    def track(self, items: Iterable[T], phase: str, total: int | None = None) -> Iterator[T]:
        """Iterate ``items`` reporting ``phase: i/total`` as it goes."""
        items = list(items) if total is None else items
        count = len(items) if total is None else total  # type: ignore[arg-type]
        self(phase, 0, count)
        for index, item in enumerate(items, start=1):
            yield item
            self(phase, index, count)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
            self.bar = None


class _Busy:
    def __init__(self, owner: progress_reporter, label: str) -> None:
        self.owner, self.label = owner, label
        self.status = None
        self.thread = None
        self.stop = None
        self.told = False

    def __enter__(self) -> _Busy:
        import threading

        owner = self.owner
        if not owner.enabled:
            return self
        self.started = time.perf_counter()
        if owner.tty:
            from rich.console import Console

            self.status = Console(file=owner.stream).status(self.label)
            self.status.__enter__()
            return self
        self.stop = threading.Event()

        def tick() -> None:
            interval = max(owner.interval_s, 0.05)
            while not self.stop.wait(interval):
                owner.stream.write(f"{self.label}: running, {time.perf_counter() - self.started:.1f} s\n")
                owner.stream.flush()
                self.told = True

        self.thread = threading.Thread(target=tick, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.status is not None:
            self.status.__exit__(*exc)
        if self.thread is not None:
            self.stop.set()
            self.thread.join()
            if self.told:
                self.owner.stream.write(f"{self.label}: done in {time.perf_counter() - self.started:.1f} s\n")
                self.owner.stream.flush()
