"""Speed of Sim2Availability: the vectorised step simulation and the Markov model.

Target (the Sim2Availability issue): one simulated year of a 100,000-device cluster with 1,000 replications
in under 10 s. Prints, per case, the median wall time over repeats, the fault events processed per second,
and the ratio against a baseline measured in the same run: the literal step-by-step loop
(``windtunnel.avail.stepref``), timed on one replication of a shorter horizon and scaled linearly to the same
work (training steps x replications).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from windtunnel.avail.markov import solve_markov
from windtunnel.avail.scenario import make_scenario
from windtunnel.avail.sim import sample_events, simulate
from windtunnel.avail.stepref import reference_run

DAY = 86400.0
CASES = [
    ("llama3-54day rates, restart-from-checkpoint", "catalog:llama3-54day", "restart-from-checkpoint"),
    ("meta-rsc1 rates, hot-spare", "catalog:meta-rsc1", "hot-spare"),
    ("meta-rsc1 rates, elastic-shrink (capacity integrated over time)", "catalog:meta-rsc1", "elastic-shrink,spares=50"),
]


def _median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main(repeats: int = 3) -> None:
    devices, reps, horizon, step = 100_000, 1000, 365 * DAY, 12.0
    # baseline: the literal step loop on one replication of 6 hours, per training step
    base_sc = make_scenario(devices, "catalog:llama3-54day", "restart-from-checkpoint", step_time_s=step,
                            horizon_s=6 * 3600.0, hardware="h100-sxm")
    sample = sample_events(base_sc, 1, np.random.default_rng(0))
    loop_s, _ = _median_time(lambda: reference_run(sample, base_sc.mechanics, step), 1)
    per_step = loop_s / (base_sc.horizon_s / step)
    loop_estimate = per_step * (horizon / step) * reps
    print(f"baseline: literal step loop {per_step * 1e6:.1f} us per training step -> {loop_estimate / 3600:.0f} h "
          f"for {reps} replications of a year of {step:g} s steps")
    print(f"{'case (100,000 devices, 1 year, 1,000 replications)':66} {'median s':>9} {'events/s':>11} "
          f"{'vs loop':>9} {'target':>8}")
    for label, faults, policy in CASES:
        sc = make_scenario(devices, faults, policy, step_time_s=step, horizon_s=horizon, hardware="h100-sxm")
        wall, res = _median_time(lambda sc=sc: simulate(sc, reps, seed=1), repeats)
        events = float(np.sum(res.per_rep["interruptions"]))
        print(f"{label:66} {wall:9.2f} {events / wall:11.3g} {loop_estimate / wall:8.0f}x "
              f"{'< 10 s' if wall < 10 else 'MISSED':>8}")
    for label, faults, policy in CASES:
        sc = make_scenario(devices, faults, policy, step_time_s=step, horizon_s=horizon, hardware="h100-sxm")
        wall, res = _median_time(lambda sc=sc: solve_markov(sc), repeats)
        print(f"markov: {label:58} {wall:9.3f} s ({res.states} states, availability {res.availability:.4f})")


if __name__ == "__main__":
    main()
