"""Speed of the whole-job rehearsal and of `avail target` (issue 15).

Targets: `train job` for a two-phase 16k-device job under 10 s (Llama 3 405B on 16,384 H100, 15T tokens at
8K then 0.8T at 128K, the Llama 3 54-day faults, restart from checkpoint, 20 step-simulation replications
per phase); `avail target` under 10 s (10,240 Ascend 910C, meta-rsc1 faults, hot-spare, with an ETTR target).
Each case runs as the command line does, in a fresh process, timed end to end (median of the repeats).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

JOB = ["train", "job", "--model", "llama3-405b", "--hardware", "h100-sxm", "--devices", "16384",
       "--phase", "seq=8192,tokens=15T,batch=2048,plan=tp=8,pp=16,vpp=7,recompute=full",
       "--phase", "seq=131072,tokens=0.8T,batch=128,plan=tp=8,pp=16,cp=16,vpp=7,recompute=full",
       "--faults", "catalog:llama3-54day", "--policy", "restart-from-checkpoint", "--price", "2.5/device-hour", "--json"]
TARGET = ["avail", "target", "--availability", "0.98", "--ettr", "0.95", "--devices", "10240", "--hardware",
          "ascend-910c", "--faults", "catalog:meta-rsc1", "--policy", "hot-spare,spares=32", "--json"]


def _time(args: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "windtunnel.cli", *args], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(repeats: int = 3) -> None:
    for name, args in (("train job, two phases, 16,384 devices", JOB), ("avail target, 10,240 devices", TARGET)):
        seconds = _time(args, repeats)
        print(f"{name}: {seconds:.2f} s (median of {repeats}; target < 10 s: {'met' if seconds < 10 else 'MISSED'})")


if __name__ == "__main__":
    main()
