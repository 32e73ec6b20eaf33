"""Speed of `train explain` and `train sensitivity` (wall seconds) on the README jobs (issue 14: target < 5 s each).

Per job: the explain (verdict + every remedy candidate simulated and the shown ones re-verified) and the
sensitivity over all what-if keys, each as the median of cold runs in one process (the catalog's YAML parsed
once beforehand, as a session pays it once; the engine's per-process caches are what a CLI call starts
without, so the first run of each job is also printed). Prints candidates simulated per second.
"""

from __future__ import annotations

import statistics
import time
from functools import partial

from windtunnel.insight import explain_training, training_sensitivity
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import load_model

JOBS = [
    ("llama3-405b", "h100-sxm", 16384, 8192, 2048, "tp=8,pp=16,mbs=1,recompute=selective,sp=true,zero=1"),
    ("deepseek-v3", "ascend-910c", 384, 4096, 1152, "tp=1,pp=12,ep=32,vpp=2,mbs=1,recompute=full,zero=1"),
    ("deepseek-v3", "h800", 2048, 4096, 15360, "tp=1,pp=16,ep=64,mbs=1,recompute=full,zero=1"),
    ("llama3-8b", "h100-sxm", 64, 8192, 256, "mbs=1,recompute=full"),
]


def _timed(function, repeats: int) -> tuple[float, float, object]:
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = function()
        times.append(time.perf_counter() - start)
    return times[0], statistics.median(times), value


def main(repeats: int = 3) -> None:
    load_model("llama3-405b")
    load_hardware("h100-sxm", 8)
    print(f"{'job':64} {'explain first/median s':>23} {'sims':>5} {'sims/s':>7} {'sensitivity s':>14}")
    for model, hardware, devices, seq_len, batch, plan in JOBS:
        kwargs = dict(seq_len=seq_len, global_batch=batch, plan=plan)
        first, median, document = _timed(partial(explain_training, model, hardware, devices, **kwargs), repeats)
        sims = document["remedy_search"]["simulated"]
        _, sens, _ = _timed(partial(training_sensitivity, model, hardware, devices, **kwargs), repeats)
        label = f"{model} x{devices} {hardware} {plan}"[:64]
        print(f"{label:64} {first:11.2f} /{median:9.2f} {sims:5d} {sims / median:7.0f} {sens:14.2f}")


if __name__ == "__main__":
    main()
