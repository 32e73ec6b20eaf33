"""Speed of one simulated training step (wall seconds, in-process), steady-state path against the full
event simulation (``exact=True``), and against llm-analysis measured in the same run.

Per job: median and min wall time over repeats of a cold simulation (a fresh step builder each time;
the catalog's YAML is parsed once per process and excluded, as a user's session pays it once), the
micro-batches the steady path played of the step's total, the same for ``exact=True``, and the
largest relative difference between the two over step time and every breakdown entry. Done when
(issue 19): <= 5 ms for the README's Llama-3 405B job and <= 20 ms for Megatron 530B on 2,520 A100
(TP8 PP35, 280 micro-batches), within 0.1% of exact.

Peer: llm-analysis (``pip install -e .[bench]``; analytic, no timeline) on the same model, cluster and
plan, in-process (one ``train()`` call) and as a process (``python -m llm_analysis.analysis train``);
its figures and the ratio are printed when it is installed. Calculon/Vidur do not install offline:
their figures are quoted with sources in benchmarks/README.md.
"""

from __future__ import annotations

import functools
import statistics
import subprocess
import sys
import time

from windtunnel.api import simulate_training
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.train import steady
from windtunnel.train.step import TrainingJob, _StepBuilder

# (label, model, hardware, devices, seq_len, global batch, plan, llm-analysis model, gpu, recomputation)
JOBS = [
    ("Llama-3 405B x16384 H100 (README)", "llama3-405b", "h100-sxm", 16384, 8192, 2048,
     "tp=8,pp=16,cp=1,vpp=1,mbs=1,recompute=selective,sp=true,zero=1", None, None, 0),
    ("Llama-3 405B x16384 H100 vpp=4", "llama3-405b", "h100-sxm", 16384, 8192, 2048,
     "tp=8,pp=16,vpp=4,mbs=1,recompute=full,sp=true,zero=1,tp_overlap=true", None, None, 0),
    ("Megatron 530B x2520 A100 TP8 PP35", "megatron-530b", "a100-80g", 2520, 2048, 2520,
     "tp=8,pp=35,mbs=1,recompute=full", "megatron-lm-530b", "a100-sxm-80gb", 2),
    ("GPT-3 175B x1024 A100 TP8 PP8", "gpt3-175b", "a100-80g", 1024, 2048, 1536,
     "tp=8,pp=8,mbs=1,recompute=full,zero=1", "megatron-lm-175b", "a100-sxm-80gb", 2),
    ("GPT-3 175B x1024 A100 TP8 PP8 vpp=4", "gpt3-175b", "a100-80g", 1024, 2048, 1536,
     "tp=8,pp=8,vpp=4,mbs=1,recompute=selective,sp=true,zero=1", None, None, 0),
    ("DeepSeek-V3 x2048 H800 1F1B", "deepseek-v3", "h800", 2048, 4096, 15360,
     "tp=1,pp=16,ep=64,mbs=1,recompute=full,zero=1", None, None, 0),
    ("DeepSeek-V3 x2048 H800 DualPipe", "deepseek-v3", "h800", 2048, 4096, 15360,
     "tp=1,pp=16,ep=64,mbs=1,recompute=full,zero=1,schedule=dualpipe", None, None, 0),
]
# llm-analysis 0.2.2 cannot express Llama-3 405B: it requires the FFN width to be a multiple of the hidden
# width (53,248 / 16,384 = 3.25), so the peer runs on the two GPT-style jobs it ships configurations for.


def _timed(fn, repeats: int) -> tuple[float, float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), result


def largest_difference(fast, exact) -> float:
    """Largest relative difference over step time and every breakdown entry (0 when identical)."""
    worst = abs(fast.step_time_s - exact.step_time_s) / exact.step_time_s
    for key, value in exact.breakdown.items():
        if value:
            worst = max(worst, abs(fast.breakdown.get(key, 0.0) - value) / abs(value))
    return worst


def llm_analysis_call(model: str, gpu: str, recompute: int, devices: int, seq_len: int, batch: int, plan: str):
    """A closure running llm-analysis's train() for the job, or None when it is not installed."""
    try:
        from llm_analysis.analysis import train
    except ImportError:
        return None
    fields = dict(item.split("=") for item in plan.split(","))
    kwargs = dict(model_name=model, gpu_name=gpu, dtype_name="w16a16e16", log_level="ERROR", batch_size_per_gpu=1,
                  global_batch_size=batch, seq_len=seq_len, activation_recomputation=recompute,
                  tp_size=int(fields.get("tp", 1)), pp_size=int(fields.get("pp", 1)), total_num_gpus=devices,
                  flops_efficiency=0.5, hbm_memory_efficiency=0.9)
    return lambda: train(**kwargs), kwargs


def process_times(command: list[str], repeats: int = 5) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main(repeats: int = 7) -> None:
    load_model("llama3-405b")  # parse the catalog once, as any session does
    load_hardware("h100-sxm", 8)
    print(f"{'job':42} {'fast ms':>8} {'min':>6} {'played':>9} {'exact ms':>9} {'speedup':>8} {'max diff':>9}")
    peers = []
    for label, model, hardware, devices, seq_len, batch, plan, peer_model, gpu, recompute in JOBS:
        kwargs = dict(seq_len=seq_len, global_batch=batch, plan=plan)
        fast_median, fast_min, fast = _timed(
            functools.partial(simulate_training, model, hardware, devices, **kwargs, exact=False), repeats)
        exact_median, _, exact = _timed(
            functools.partial(simulate_training, model, hardware, devices, **kwargs, exact=True), max(1, repeats // 3))
        job = TrainingJob(load_model(model), load_hardware(hardware, devices), parse_plan(plan), seq_len, batch)
        played = steady.play_step(_StepBuilder(job)).played_micro_batches
        print(f"{label:42} {fast_median * 1e3:8.2f} {fast_min * 1e3:6.2f} {played:4d}/{fast.micro_batches:<4d} "
              f"{exact_median * 1e3:9.1f} {exact_median / fast_median:7.1f}x {largest_difference(fast, exact):9.1e}")
        if peer_model:
            call = llm_analysis_call(peer_model, gpu, recompute, devices, seq_len, batch, plan)
            peers.append((label, fast_median, call))
    print()
    if not peers or peers[0][2] is None:
        print("llm-analysis: not installed (pip install -e .[bench]); quoted anchors in benchmarks/README.md")
        return
    print(f"{'llm-analysis, same job':42} {'in-proc ms':>10} {'ratio':>8} {'process s (min/median/max)':>28}")
    for label, fast_median, (call, kwargs) in peers:
        peer_median, _, _ = _timed(call, repeats)
        args = [f"--{k}={v}" for k, v in kwargs.items()]
        times = process_times([sys.executable, "-m", "llm_analysis.analysis", "train", *args], repeats=5)
        print(f"{label:42} {peer_median * 1e3:10.2f} {fast_median / peer_median:7.1f}x "
              f"{min(times):9.2f} / {statistics.median(times):.2f} / {max(times):.2f}")
    print("ratio: windtunnel's in-process step over llm-analysis's (analytic formulas, no timeline, no bubble play)")


if __name__ == "__main__":
    main()
