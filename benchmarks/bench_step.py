"""Speed of one simulated training step (wall seconds), for the two reference jobs of the Sim2Train issue.

Prints, per job, the median wall time over repeats of a cold simulation (a fresh builder each time;
the catalog's YAML is parsed once per process and excluded, as a user's session would pay it once)
and the events played per second. Target: each under 1 s on a 2-core machine. There is no peer
baseline for one step here; Calculon's published rate (~400 plans/s analytic, no event timeline) is
the closest public reference and is quoted, not measured, in the issue.
"""

from __future__ import annotations

import statistics
import time

from windtunnel.api import simulate_training
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import load_model

JOBS = [
    ("llama3-405b", "h100-sxm", 16384, 8192, 2048, "tp=8,pp=16,cp=1,vpp=1,mbs=1,recompute=selective,sp=true,zero=1"),
    ("llama3-405b", "h100-sxm", 16384, 8192, 2048, "tp=8,pp=16,vpp=4,mbs=1,recompute=full,sp=true,zero=1,tp_overlap=true"),
    ("deepseek-v3", "h800", 2048, 4096, 15360, "tp=1,pp=16,ep=64,mbs=1,recompute=full,zero=1"),
    ("deepseek-v3", "h800", 2048, 4096, 15360, "tp=1,pp=16,ep=64,mbs=1,recompute=full,zero=1,schedule=dualpipe"),
]


def main(repeats: int = 5) -> None:
    load_model("llama3-405b")  # parse the catalog once, as any session does
    load_hardware("h100-sxm", 8)
    print(f"{'job':74} {'median s':>9} {'min s':>7} {'tasks':>7} {'tasks/s':>9}")
    for model, hardware, devices, seq_len, batch, plan in JOBS:
        times = []
        tasks = 0
        for _ in range(repeats):
            start = time.perf_counter()
            result = simulate_training(model, hardware, devices, seq_len=seq_len, global_batch=batch, plan=plan,
                                       keep_trace=True)
            times.append(time.perf_counter() - start)
            tasks = len(result.trace.names)
        median = statistics.median(times)
        label = f"{model} x{devices} {hardware} {plan}"[:74]
        print(f"{label:74} {median:9.3f} {min(times):7.3f} {tasks:7d} {tasks / median:9.0f}")


if __name__ == "__main__":
    main()
