"""Fail-slow as a policy choice: leave a slow component in place, or detect it and evict it.

Without eviction a fail-slow fault (a straggler device or node, a degraded link) slows every synchronous
step by its factor for its whole duration (``faults.JobRates.slow_degradation``). With
``evict-slow=T`` in the policy, an evictable episode (one on a device, node or link; not a job-wide
slowdown such as diurnal throttling) that lasts longer than T is detected after T and the job restarts
without the slow component: the episode's slow phase shrinks to T and it adds a restart, taken like a
planned interruption (the job checkpoints first, so no work is lost; the spare that replaces the
component is not drawn from the repair queue: an approximation). Episodes shorter than T end on their own.
Whether eviction pays depends on the restart time against the slowdown it removes; ``avail target`` and
``train job`` compare both.
"""

from __future__ import annotations

from dataclasses import replace

from windtunnel.avail.faults import JobRates, StopClass


def evict_slow(rates: JobRates, evict_after_s: float | None) -> JobRates:
    """The job's fault processes under an eviction policy (see the module docstring)."""
    if evict_after_s is None:
        return rates
    slow, stop = [], list(rates.stop)
    for c in rates.slow:
        if c.evictable and c.duration_s > evict_after_s:
            slow.append(replace(c, duration_s=max(evict_after_s, 1e-9)))
            stop.append(StopClass(f"{c.name}-eviction", "eviction", c.rate_per_s, 0, True))
        else:
            slow.append(c)
    return JobRates(tuple(stop), tuple(slow))
