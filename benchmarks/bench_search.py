"""Speed of the Sim2Train plan search end to end (enumerate, prune, screen, refine the best 32).

Prints per problem: candidates enumerated, screened (passed pruning and memory) and refined with the
event engine, wall seconds per phase and in total, and screened candidates per wall-second. Target
(issue 3): each problem under 60 s on this 2-core machine with >= 10,000 candidates screened. For
reference, the issue reports Calculon evaluating ~400 plans/s on this machine with no pruning, and
its reduced GPT-3 175B space of 116,424 plans taking 4 min 51 s; that figure is quoted, not rerun here.
"""

from __future__ import annotations

import time

from windtunnel.search.backends import LocalBackend
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import load_model
from windtunnel.train.search import search_training
from windtunnel.train.space import SearchSpace

PROBLEMS = [
    ("DeepSeek-V3, 8,192 H800", "deepseek-v3", "h800", 8192, 4096, 15360, {}),
    ("Llama-3-405B, 16,384 H100", "llama3-405b", "h100-sxm", 16384, 8192, 2048, {}),
    # Calculon's problem and dimensions: TP, PP, interleaving, recompute, optimizer sharding, TP-comm
    # style (sequence parallel) and overlap, micro-batch, network tier per group (rank order).
    ("GPT-3 175B, 1,024 A100 80GB (Calculon's space)", "gpt3-175b", "a100-80g", 1024, 2048, 256,
     {"mbs": [1, 2, 4, 8, 16], "vpp": [1, 2, 3, 4, 6, 8, 12]}),
    ("DeepSeek-V3, 10,752 Ascend 910C (28 CloudMatrix384)", "deepseek-v3", "ascend-910c", 10752, 4096, 10752, {}),
    ("DeepSeek-V3, 98,304 H800", "deepseek-v3", "h800", 98304, 4096, 98304, {}),
    ("Llama-3 405B, 100,000 H100 (dense)", "llama3-405b", "h100-sxm", 100000, 8192, 16000, {}),
]


def main() -> None:
    for title, model, hardware, devices, seq_len, batch, pins in PROBLEMS:
        space = SearchSpace(load_model(model), load_hardware(hardware, devices), seq_len, batch, choices=pins)
        backend = LocalBackend()
        start = time.perf_counter()
        document = search_training(space, backend, top=5, refine_count=32)
        wall = time.perf_counter() - start
        backend.close()
        counts = document["candidates"]
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in document["elapsed_s"].items() if k != "total")
        best = document["plans"][0] if document["plans"] else None
        print(f"{title}: {counts['enumerated']:,} enumerated, {counts['screened']:,} screened, "
              f"{counts['refined']} refined in {wall:.1f} s wall ({counts['screened'] / wall:,.0f} screened/s; "
              f"{phases})")
        if best:
            print(f"    best: {best['plan']}  step {best['step_time_s']:.3f} s, MFU {best['mfu']:.1%}")


if __name__ == "__main__":
    main()
