"""The GEMM kernel check against OpenXLA's measured matmul table (validation/gemm_kernels.py): the data, the
reduction-length constant the catalog takes from it, and the report."""

from __future__ import annotations

import math

from conftest import report_as_committed, validation_script
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.specs.hardware import load_chip


def _script():
    return validation_script("gemm_kernels")


def test_every_kept_measurement_is_a_catalog_chip_below_its_peak_with_a_finite_prediction():
    script = _script()
    rows = script.read_rows()
    assert len(rows) == 3 * 375
    for row in rows:
        chip = load_chip(row["chip"])
        assert float(row["flops_per_s"]) <= chip.peak(row["precision"])
        predicted = script.predicted_s(row)
        assert math.isfinite(predicted) and predicted > 0


def test_catalog_k_half_is_the_tables_choice_per_generation():
    """The catalog carries, per generation with measurements, the k_half the script picks; a short reduction
    then costs more than the old prior gave it."""
    script = _script()
    chosen = script.best_k_half(script.read_rows())
    assert set(chosen) == {"hopper", "blackwell"}
    for generation, chip in (("hopper", "h100-sxm"), ("blackwell", "b200")):
        assert efficiency_for(load_chip(chip)).k_half == chosen[generation]
        # The chosen value spreads less than the old prior of 64 over the same shapes.
        rows = [row for row in script.read_rows() if script.generation(row) == generation]
        assert script.spread(rows, chosen[generation]) < script.spread(rows, 64)


def test_a_short_reduction_runs_slower_per_flop_than_a_long_one():
    script = _script()
    rows = {(r["chip"], r["precision"], r["b"], r["m"], r["n"], r["k"]): r for r in script.read_rows()}
    short, long = rows[("h100-sxm", "bf16", "1", "4096", "4096", "256")], rows[("h100-sxm", "bf16", "1", "4096", "4096", "4096")]
    rate = {name: script.flops(row) / script.predicted_s(row) for name, row in (("short", short), ("long", long))}
    measured = {name: float(row["flops_per_s"]) for name, row in (("short", short), ("long", long))}
    assert rate["short"] < 0.75 * rate["long"] and measured["short"] < 0.75 * measured["long"]


def test_report_is_the_scripts_own(tmp_path, monkeypatch):
    written, committed = report_as_committed(_script(), tmp_path, monkeypatch)
    assert written == committed


def test_jax_stack_fp8_ratio_is_the_tables_figure_and_sets_the_xla_familys_fp8_level():
    """The jax stack's kernels.fp8_gemm_of_bf16 is the script's B200 plateau ratio (PaxML inherits it: its TE
    layers issue FP8 GEMMs as XLA dots); an XLA-family FP8 plan runs its GEMMs at the family's own BF16 fit times
    it, while a Megatron-family stack keeps the Megatron family's FP8 fit."""
    from windtunnel.specs.stack import load_stack

    script = _script()
    ratio, shapes = script.fp8_of_bf16(script.read_rows())["b200"]
    assert shapes >= 30 and 0.8 < ratio <= 1.0
    assert load_stack("jax").kernels.fp8_gemm_of_bf16 == ratio
    assert load_stack("paxml").kernels.fp8_gemm_of_bf16 == ratio
    assert load_stack("megatron").kernels.fp8_gemm_of_bf16 is None
    h100 = load_chip("h100-sxm")
    xla_bf16 = efficiency_for(h100, family="xla").gemm_max["bf16"]
    jax_fp8 = efficiency_for(h100, family="xla", fp8_of_bf16=ratio).gemm_max["fp8"]
    assert jax_fp8 == round(xla_bf16 * ratio, 4)
    assert efficiency_for(h100, family="xla").gemm_max["fp8"] == efficiency_for(h100).gemm_max["fp8"] != jax_fp8
    # A family with an FP8 fit of its own keeps it: the ratio only fills a missing precision.
    eager = efficiency_for(h100, family="pytorch-eager")
    assert efficiency_for(h100, family="pytorch-eager", fp8_of_bf16=ratio).gemm_max["fp8"] == eager.gemm_max["fp8"]
