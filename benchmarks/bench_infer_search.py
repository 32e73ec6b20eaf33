"""Speed of the serving deployment search: DeepSeek-V3 on up to 256 Ascend 910C devices at 20 req/s offered
(the issue 16 scenario), every local core, in a fresh process; prints the wall time, the winners with their
SLO attainment re-simulated on the full traffic, and the candidate counts. Target (issue 16): < 30 s.

The timer covers everything of the search (traffic generation, enumeration, screening, re-simulation of the
winners and of the baseline on the full traffic); only the Python import of windtunnel is outside it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 30.0

CHILD = r"""
import json, time
from windtunnel.infer.search import search_deployments
start = time.perf_counter()
doc = search_deployments("deepseek-v3", "ascend-910c", 256,
                         "poisson:rate=20,input=lognormal(2000,0.8),output=lognormal(400,1.0)",
                         slo="ttft=2s,tpot=100ms", top=5, baseline="prefill:ep=32,replicas=2;decode:ep=128,replicas=1")
doc["wall_s"] = time.perf_counter() - start
print(json.dumps(doc))
"""


def main() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, cwd=str(ROOT))
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    print("infer search: deepseek-v3 on <= 256 x ascend-910c, poisson 20 req/s (lognormal 2000/400 tokens), "
          "SLO ttft=2s,tpot=100ms, attainment >= 99%")
    for row in doc["deployments"]:
        print(f"  #{row['rank']} {row['deployment']}: {row['devices']} devices, attainment {row['attainment']:.1%}, "
              f"goodput {row['goodput_requests_per_s']:.2f} req/s, served {row['served_rate']:.2f} of "
              f"{row['offered_rate']:.2f} req/s, overloaded {row['overloaded']}")
    base = doc["baseline"]
    gain = base.get("gain") or {}
    print(f"  baseline {base['deployment']}: {base['devices']} devices, attainment {base['attainment']:.1%}; best "
          f"saves {gain.get('devices_saved')} devices at the same offered load")
    counts = doc["candidates"]
    print(f"candidates {counts['enumerated']:,} enumerated, {counts['screened']:,} screened, {counts['distinct']:,} "
          f"distinct, {counts['simulations']:,} simulations")
    verdict = "meets" if doc["wall_s"] < TARGET_S else "misses"
    print(f"wall: {doc['wall_s']:.1f} s ({verdict} the < {TARGET_S:.0f} s target)")


if __name__ == "__main__":
    main()
