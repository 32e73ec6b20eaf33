"""Whole-process speed of the CLI (wall seconds, a fresh Python process each run, as a user pays it).

Prints min / median / max over 5 runs (farm-style pairs: each command and its peer measured in the
same run) of ``windtunnel --help``, ``windtunnel train simulate`` on the README's Llama-3 405B job and
on Megatron 530B over 2,520 A100 (TP8 PP35, 280 micro-batches), ``--exact`` beside it, and, when the
``bench`` extra is installed, llm-analysis's own CLI on the same 530B job. Done when (issue 19):
``train simulate`` median <= 0.45 s and ``windtunnel --help`` <= 0.3 s on the 2-core machine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

README_JOB = ["--model", "llama3-405b", "--hardware", "h100-sxm", "--devices", "16384", "--seq-len", "8192",
              "--global-batch", "2048", "--plan", "tp=8,pp=16,cp=1,vpp=1,mbs=1,recompute=selective,sp=true,zero=1"]
MEGATRON_530B = ["--model", "megatron-530b", "--hardware", "a100-80g", "--devices", "2520", "--seq-len", "2048",
                 "--global-batch", "2520", "--plan", "tp=8,pp=35,mbs=1,recompute=full"]
LLM_ANALYSIS_530B = ["--model_name=megatron-lm-530b", "--gpu_name=a100-sxm-80gb", "--dtype_name=w16a16e16",
                     "--log_level=ERROR", "--batch_size_per_gpu=1", "--global_batch_size=2520", "--seq_len=2048",
                     "--activation_recomputation=2", "--tp_size=8", "--pp_size=35", "--total_num_gpus=2520",
                     "--flops_efficiency=0.5", "--hbm_memory_efficiency=0.9"]


def windtunnel_command() -> list[str]:
    """The installed entry point (as a user runs it), else the module."""
    found = shutil.which("windtunnel", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "windtunnel.cli"]


# As a user's installed package runs: bytecode cached (a shell with PYTHONDONTWRITEBYTECODE set would
# recompile every windtunnel module in every process, ~70 ms here); the cache goes to a temporary folder.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "windtunnel-bench-pycache")


def times_of(command: list[str], runs: int = 5) -> list[float]:
    """Wall seconds of ``runs`` fresh processes (one warm-up run first fills the OS file and bytecode caches)."""
    subprocess.run(command, check=True, capture_output=True, env=ENV)
    result = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env=ENV)
        result.append(time.perf_counter() - start)
    return result


def line(label: str, values: list[float]) -> float:
    median = statistics.median(values)
    print(f"{label:58} {min(values):6.3f} {median:7.3f} {max(values):6.3f}")
    return median


def main() -> None:
    wt = windtunnel_command()
    print(f"{'process (5 runs)':58} {'min s':>6} {'median':>7} {'max':>6}")
    line("windtunnel --help", times_of([*wt, "--help"]))
    line("windtunnel train simulate (README Llama-3 405B)", times_of([*wt, "train", "simulate", *README_JOB]))
    ours = line("windtunnel train simulate (Megatron 530B, 280 mb)", times_of([*wt, "train", "simulate", *MEGATRON_530B]))
    line("windtunnel train simulate --exact (Megatron 530B)",
         times_of([*wt, "train", "simulate", *MEGATRON_530B, "--exact"]))
    if importlib.util.find_spec("llm_analysis") is None:
        print("llm-analysis: not installed (pip install -e .[bench]); quoted anchors in benchmarks/README.md")
        return
    peer = line("llm-analysis train (Megatron 530B, same plan)",
                times_of([sys.executable, "-m", "llm_analysis.analysis", "train", *LLM_ANALYSIS_530B]))
    print(f"ratio (windtunnel / llm-analysis, median, whole process): {ours / peer:.2f}x")


if __name__ == "__main__":
    main()
