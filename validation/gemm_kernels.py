"""The GEMM kernel model against OpenXLA's measured matmul table. Writes validation/GEMM_KERNELS.md.

Run: `.venv/bin/python validation/gemm_kernels.py` (a few seconds).

Data: validation/gemm_kernels.csv, the matmul throughputs OpenXLA embeds in its GPU compiler for its cost model
(openxla/xla `xla/service/gpu/model/matmul_interpolator_data.h` at commit e97611c4c4, 2026-02-13, read from the
ROCm/xla mirror that carries it): for H100 (`sm_90`) and B200 (`sm_100_B200`), 375 shapes each, b x (m x k) @
(k x n) with b in {1, 2, 4} and m, n, k in {256, 512, 1024, 2048, 4096}, in FLOP/s (2 b m n k / seconds).
Kept: H100 BF16, B200 BF16 and B200 FP8 (e4m3 x e4m3 -> bf16). The H100 FP8 table is left out: at its largest
shapes it runs above the H100's dense FP8 peak (1,979 TFLOP/s), which no kernel can, so it is not a measurement
of that chip (the CSV's `kept` and `reason` columns).

Each shape is costed as a layer's GEMM is (cost.compute.gemm_time, count = b, the activation operand already
in its precision) on the catalog chip with the default (Megatron / Transformer Engine) calibration family.

What the table sets. A GEMM's efficiency in the model is its calibrated maximum times the padding of its output
tiles over the chip's compute units (waves) times k / (k + k_half): the main loop's prologue and epilogue
weigh on a short reduction. The level of each (chip, precision) is fitted on training steps
(catalog/calibration.yaml), not here. The shape of the curve, k_half, is this table's: per generation, the value
of the grid K_HALF_GRID whose log2(model / measured), each (chip, precision)'s mean removed, has the smallest root
mean square over the kept shapes of at least 2^28 FLOPs (the smaller ones are launch-bound, which kernel_overhead_s models). The
catalog's generations.<generation>.gemm.k_half carries it (catalog/efficiency.yaml), and a test checks that it is
this script's choice.

What the table says of XLA's FP8. The B200 table measures the same shapes in BF16 and FP8 through XLA's own
cuBLASLt calls, so it gives the ratio of the two precisions' fractions of their peaks. A level is a plateau, so the
ratio is taken over the shapes of at least 2^36 FLOPs (the table's largest tenth, nearest a training step's GEMMs,
which run 2^40 and more): the median over those shapes of (FP8 FLOP/s / FP8 peak) / (BF16 FLOP/s / BF16 peak). The
jax stack (MaxText's native FP8: XLA rewrites the dots into cuBLASLt FP8 calls) carries it as
kernels.fp8_gemm_of_bf16, and a test checks that it is this script's figure.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import statistics
from collections import defaultdict
from pathlib import Path

from windtunnel.cost.compute import gemm_time
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.specs.hardware import load_chip
from windtunnel.specs.yamlio import write_atomic

HERE = Path(__file__).parent
DATA = HERE / "gemm_kernels.csv"
REPORT = HERE / "GEMM_KERNELS.md"
SOURCE = "openxla/xla xla/service/gpu/model/matmul_interpolator_data.h (commit e97611c4c4, 2026-02-13)"
K_HALF_GRID = (0, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
MIN_FLOPS = 2 ** 28  # below this the table's shapes are launch-bound (microseconds)
PLATEAU_FLOPS = 2 ** 36  # the shapes whose fraction of peak stands for a precision's level


def read_rows(path: Path = DATA) -> list[dict]:
    """The kept measurements, one per shape and precision."""
    with path.open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["kept"] == "true"]


def flops(row: dict) -> float:
    return 2.0 * int(row["b"]) * int(row["m"]) * int(row["n"]) * int(row["k"])


def measured_s(row: dict) -> float:
    return flops(row) / float(row["flops_per_s"])


@functools.cache
def _profile(chip_id: str):
    """(chip, its default efficiency profile): read once per chip, not once per row and grid value."""
    chip = load_chip(chip_id)
    return chip, efficiency_for(chip)


def predicted_s(row: dict, k_half: float | None = None) -> float:
    """The model's seconds for the row's batched GEMM (``k_half``: instead of the catalog's)."""
    chip, eff = _profile(row["chip"])
    if k_half is not None:
        eff = dataclasses.replace(eff, k_half=float(k_half))
    return gemm_time(int(row["m"]), int(row["n"]), int(row["k"]), row["precision"], chip, eff,
                     count=int(row["b"]), cast_input=False)


def spread(rows: list[dict], k_half: float | None = None) -> float:
    """Root mean square of log2(model / measured) over the rows of at least MIN_FLOPS, each (chip, precision)'s
    mean removed (its level is the step calibration's)."""
    logs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        if flops(row) >= MIN_FLOPS:
            logs[(row["chip"], row["precision"])].append(math.log2(predicted_s(row, k_half) / measured_s(row)))
    squares = [(x - statistics.fmean(values)) ** 2 for values in logs.values() for x in values]
    return math.sqrt(statistics.fmean(squares))


def generation(row: dict) -> str:
    return _profile(row["chip"])[0].generation


def best_k_half(rows: list[dict]) -> dict[str, int]:
    """Per generation, the grid's k_half with the smallest spread over all of its kept rows (ties: the smaller)."""
    by: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by[generation(row)].append(row)
    return {gen: min(K_HALF_GRID, key=lambda value: (round(spread(items, value), 6), value))
            for gen, items in sorted(by.items())}


def fp8_of_bf16(rows: list[dict]) -> dict[str, tuple[float, int]]:
    """Per chip measured in both precisions: (median over its shapes of at least PLATEAU_FLOPS of the FP8
    fraction of the FP8 peak per the BF16 fraction of the BF16 peak, number of shapes)."""
    rates: dict[tuple[str, tuple], dict[str, float]] = defaultdict(dict)
    for row in rows:
        if flops(row) >= PLATEAU_FLOPS:
            chip = _profile(row["chip"])[0]
            shape = (row["b"], row["m"], row["n"], row["k"])
            rates[(row["chip"], shape)][row["precision"]] = float(row["flops_per_s"]) / chip.peak(row["precision"])
    ratios: dict[str, list[float]] = defaultdict(list)
    for (chip_id, _), by_precision in rates.items():
        if {"bf16", "fp8"} <= set(by_precision):
            ratios[chip_id].append(by_precision["fp8"] / by_precision["bf16"])
    return {chip_id: (round(statistics.median(values), 3), len(values)) for chip_id, values in sorted(ratios.items())}


def main() -> None:
    rows = read_rows()
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["chip"], row["precision"])].append(row)
    chosen = best_k_half(rows)
    lines = ["# The GEMM kernel model against OpenXLA's measured matmul table", "",
             "Generated by `.venv/bin/python validation/gemm_kernels.py` (method in its docstring).", "",
             f"Data: {len(rows)} measured matmuls from {SOURCE}, copied into validation/gemm_kernels.csv. Ratio = "
             "windtunnel's GEMM time / the measured one (above 1: the model's kernel is slower). One kernel, not a "
             "step: each (chip, precision)'s level is fitted on training steps, this table sets the curve's shape.",
             "", "## The reduction-length constant k_half", "",
             f"Root mean square of log2(model / measured), each chip and precision's mean removed, over the shapes of at "
             f"least 2^{int(math.log2(MIN_FLOPS))} FLOPs, for each k_half of the grid (the chosen one is the smallest):", "",
             "| generation | " + " | ".join(str(v) for v in K_HALF_GRID) + " | chosen |",
             "|---|" + "---|" * (len(K_HALF_GRID) + 1)]
    by_generation: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_generation[generation(row)].append(row)
    for gen, items in sorted(by_generation.items()):
        lines.append(f"| {gen} | " + " | ".join(f"{spread(items, v):.3f}" for v in K_HALF_GRID) + f" | {chosen[gen]} |")
    lines += ["", "## Model / measured with the catalog's constants", "",
              "| chip | precision | shapes | median ratio | median abs log2, >= 2^28 FLOPs | "
              "by reduction length k = 256 / 512 / 1024 / 2048 / 4096 (median, >= 2^28 FLOPs) |",
              "|---|---|---|---|---|---|"]
    for (chip, precision), items in sorted(groups.items()):
        ratios = [predicted_s(row) / measured_s(row) for row in items]
        big = [(row, predicted_s(row) / measured_s(row)) for row in items if flops(row) >= MIN_FLOPS]
        centre = statistics.median(r for _, r in big)
        by_k = defaultdict(list)
        for row, r in big:
            by_k[int(row["k"])].append(r / centre)
        lines.append(f"| {chip} | {precision} | {len(items)} | {statistics.median(ratios):.2f} | "
                     f"{statistics.median(abs(math.log2(r / centre)) for _, r in big):.2f} | "
                     + " / ".join(f"{statistics.median(by_k[k]):.2f}" for k in sorted(by_k)) + " |")
    lines += ["", "A ratio column above is relative to the (chip, precision)'s own median, so it shows the shape of "
              "the curve only; below 1 at short k means the measured kernels lose more there than the model does.", "",
              "## XLA's FP8 GEMMs against its BF16 ones", "",
              f"Median over the shapes of at least 2^{int(math.log2(PLATEAU_FLOPS))} FLOPs of (FP8 fraction of the FP8 "
              "peak) / (BF16 fraction of the BF16 peak), same shape (the jax stack's kernels.fp8_gemm_of_bf16):", "",
              "| chip | shapes | FP8 fraction / BF16 fraction |", "|---|---|---|"]
    for chip_id, (ratio, count) in fp8_of_bf16(rows).items():
        lines.append(f"| {chip_id} | {count} | {ratio:.3f} |")
    lines += ["", "Smaller shapes lose more in FP8 than in BF16 (their kernels finish in half the time, so the fixed "
              "costs weigh twice); the model's wave padding, k_half and launch overhead stand for that.", ""]
    write_atomic(REPORT, "\n".join(lines).rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
