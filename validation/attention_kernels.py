"""The attention kernel model against published cuDNN attention benchmarks. Writes validation/ATTENTION_KERNELS.md.

Run: `.venv/bin/python validation/attention_kernels.py` (a few seconds).

Data: validation/attention_kernels.csv, 520 kernel times that NVIDIA's cudnn-frontend repository publishes
for its SDPA training benchmark (benchmark/sdpa_benchmark_training/results/*.csv at commit 3929da2e, 2026-05-08:
cuDNN backend 9.19 on H200 (2026-02-27), 9.22 on GB200 and GB300 (2026-04-24)). Each is the median device time
of the attention kernels of one forward or one backward call, read by the PyTorch profiler
(benchmark_single_sdpa.py). Kept: the successful, non-deterministic cuDNN rows of every results file; the
file, GPU and cuDNN backend version stay on each row. Shapes are the benchmark's presets: Llama 3.1
(64 query / 8 key-value heads, head dim 128), DeepSeek-V3 and Kimi K2.6 (MLA: 128 heads, query-key dim 192,
value dim 128), GPT-OSS (head dim 64; sliding window 128 on GB200/GB300, 1024 on H200), Qwen3.5 (head dim 256),
and two video models (head dim 128, no mask); sequence 2,048-32,768, causal ('top_left') or no mask; BF16, FP8
and MXFP8.

Each row is costed as one layer's graph costs its attention (graph/attention_work.attention_work, then
cost.compute.attention_time; the backward as graph/ops.backward_of derives it: 2.5x the FLOPs) on the
catalog chip with the default (Megatron / Transformer Engine) calibration family, the one whose stacks run
cuDNN attention. FP8 and MXFP8 rows run as the plan field fp8_attention does (the FP8 peak at
attention.fp8_ratio of the 16-bit kernel's fraction of its peak).

This checks one kernel, not a training step: the calibrated attention efficiencies are fitted on whole steps
(catalog/calibration.yaml), of earlier software. The report is data for reading the step-level errors, not a
fit: nothing here changes a prediction.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from pathlib import Path

from windtunnel.cost.compute import attention_time
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.graph.attention_work import attention_work
from windtunnel.graph.ops import Op, OpGraph, backward_of
from windtunnel.specs.hardware import load_chip
from windtunnel.specs.yamlio import write_atomic

HERE = Path(__file__).parent
DATA = HERE / "attention_kernels.csv"
REPORT = HERE / "ATTENTION_KERNELS.md"
SOURCE = "NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results (commit 3929da2ef4c1dba1bb8acb68727b9134f26f40c0)"


def read_rows(path: Path = DATA) -> list[dict]:
    """The measurements, one per kernel call."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def predicted_ms(row: dict) -> float:
    """The model's milliseconds for the row's attention call."""
    chip = load_chip(row["chip"])
    eff = efficiency_for(chip)
    window = int(row["window"]) if row["window"] else None
    work = attention_work(int(row["batch"]), int(row["q_heads"]), int(row["kv_heads"]), int(row["q_len"]),
                          int(row["kv_len"]), int(row["qk_dim"]), int(row["v_dim"]), window=window,
                          windowed_fraction=1.0 if window else 0.0, causal=row["mask"] == "causal")
    forward = Op("core_attention", "attention", flops=work.flops, exponentials=work.exponentials,
                 bytes_moved=work.qkv_bytes + work.out_bytes, shape=work.shape,
                 precision="bf16" if row["dtype"] == "bf16" else "fp8")
    op = forward
    if row["pass"] == "bwd":
        graph = OpGraph()
        graph.add(forward)
        op = backward_of(graph).ops[0]
    return attention_time(op, chip, eff) * 1e3


def _shape(row: dict) -> str:
    heads = f"{row['q_heads']}/{row['kv_heads']} heads, d {row['qk_dim']}" + (
        f"/{row['v_dim']}" if row["v_dim"] != row["qk_dim"] else "")
    mask = f"window {row['window']}" if row["window"] else row["mask"]
    return f"{row['config']} ({heads}, {mask})"


def _pairs(items: list[tuple[float, float]]) -> tuple[int, int]:
    """Pairs the model orders as the measurements do, of all pairs whose measurements differ by > 5%."""
    agree = total = 0
    for i, (p1, m1) in enumerate(items):
        for p2, m2 in items[i + 1:]:
            if abs(m1 - m2) <= 0.05 * max(m1, m2):
                continue
            total += 1
            agree += (p1 - p2) * (m1 - m2) > 0
    return agree, total


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "n/a"


def _reading(scored: list[tuple[dict, float, float]]) -> list[str]:
    """Summary lines, each computed from the rows it names."""
    def ratios(**fields: str) -> list[float]:
        """Model / measured of the rows whose fields have these values."""
        return [p / m for row, p, m in scored if all(row[key] == value for key, value in fields.items())]

    chips = sorted({row["chip"] for row, _, _ in scored})
    lines = ["## Reading", ""]
    for chip in chips:
        for phase in ("fwd", "bwd"):
            r = ratios(chip=chip, dtype="bf16", qk_dim="128", v_dim="128", **{"pass": phase})
            if r:
                lines.append(f"- 16-bit, head dim 128, {chip} {phase}: model / measured {_median(r)} over {len(r)} calls")
    mla = ratios(dtype="bf16", qk_dim="192")
    lines.append(f"- 16-bit MLA (query-key dim 192, value 128), GB200 and GB300: {_median(mla)} over {len(mla)} calls")
    for chip in chips:
        r = ratios(chip=chip, dtype="bf16", qk_dim="64")
        if r:
            lines.append(f"- 16-bit, head dim 64 (GPT-OSS, sliding window), {chip}: {_median(r)} over {len(r)} calls")
    # FP8 against 16 bits, same chip, shape, mask, sequence and pass: the speed-up the kernel gains.
    times = {(row["chip"], row["config"], row["mask"], row["q_len"], row["pass"], row["dtype"]): (p, m)
             for row, p, m in scored}
    for fp8 in ("fp8", "mxfp8"):
        for chip in sorted({key[0] for key in times}):
            for phase in ("fwd", "bwd"):
                measured, model = [], []
                for key, (p, m) in times.items():
                    if key[0] != chip or key[4] != phase or key[5] != "bf16":
                        continue
                    other = times.get(key[:5] + (fp8,))
                    if other:
                        model.append(p / other[0])
                        measured.append(m / other[1])
                if measured:
                    lines.append(f"- {fp8.upper()} over 16-bit, {chip} {phase}: measured speed-up {_median(measured)}, "
                                 f"model {_median(model)} ({len(measured)} pairs)")
    return lines + [""]


def main() -> None:
    rows = read_rows()
    scored = [(row, predicted_ms(row), float(row["time_ms"])) for row in rows]
    groups: dict[tuple, list[tuple[float, float, int]]] = defaultdict(list)
    for row, predicted, measured in scored:
        groups[(row["chip"], row["dtype"], _shape(row), row["pass"])].append((predicted, measured, int(row["q_len"])))
    ratios = [p / m for _, p, m in scored]
    # Ranking across shapes and sequence lengths: every pair of calls of one chip, precision and pass.
    agree = total = 0
    for chip, dtype, phase in {(row["chip"], row["dtype"], row["pass"]) for row in rows}:
        a, t = _pairs([(p, m) for row, p, m in scored
                       if (row["chip"], row["dtype"], row["pass"]) == (chip, dtype, phase)])
        agree, total = agree + a, total + t

    lines = ["# The attention kernel model against published cuDNN attention benchmarks", "",
             "Generated by `.venv/bin/python validation/attention_kernels.py` (method in its docstring).", "",
             f"Data: {len(rows)} kernel times from {SOURCE}; copied with their files into "
             "validation/attention_kernels.csv. Ratio = windtunnel's kernel time / the measured one (above 1: the "
             "model's kernel is slower). One kernel, not a step: see the docstring.", "",
             "## Overall", "",
             f"- median ratio {statistics.median(ratios):.2f}; median |log2 ratio| "
             f"{statistics.median(abs(math.log2(r)) for r in ratios):.2f} over {len(ratios)} kernel calls",
             f"- ranking: of the pairs of calls on one chip, in one precision and pass, whose measured times differ "
             f"by more than 5%, the model orders {agree} of {total} ({100.0 * agree / total:.1f}%) as measured", ""]
    lines += _reading(scored)
    for dtype in ("bf16", "fp8", "mxfp8"):
        lines += [f"## {dtype.upper()}", "", "| chip | shape | pass | calls | sequence | median ratio | range |",
                  "|---|---|---|---|---|---|---|"]
        for (chip, kind, shape, phase), items in sorted(groups.items()):
            if kind != dtype:
                continue
            r = [p / m for p, m, _ in items]
            seqs = sorted(s for _, _, s in items)
            lines.append(f"| {chip} | {shape} | {phase} | {len(items)} | {seqs[0]:,}-{seqs[-1]:,} | "
                         f"{statistics.median(r):.2f} | {min(r):.2f}-{max(r):.2f} |")
        lines.append("")
    write_atomic(REPORT, "\n".join(lines).rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
