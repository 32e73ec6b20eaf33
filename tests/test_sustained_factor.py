"""Chips of one generation that sustain less of their datasheet peak (power-limited clocks) run every
precision slower, not only the one their calibration rows measure."""

import pytest

from windtunnel.cost.efficiency import _fitted, efficiency_for
from windtunnel.specs.hardware import load_chip


def _fit(chip: str, precision: str = "fp8") -> float:
    return float(_fitted()["chips"][chip]["gemm"]["max_efficiency"][precision])


def _fp8(chip: str) -> float:
    return _fit(chip)


def test_uncalibrated_precision_follows_the_chip_ratio_in_the_calibrated_one():
    chips = ("b200", "gb200", "gb300")
    fitted = [p for p in ("fp8", "mxfp8") if all(p in _fitted()["chips"][c]["gemm"]["max_efficiency"] for c in chips)]
    gb300 = efficiency_for(load_chip("gb300")).gemm_max
    for chip in ("gb200", "b200"):
        gemm = efficiency_for(load_chip(chip)).gemm_max
        assert gemm["fp8"] == pytest.approx(_fp8(chip))  # the fitted value itself is untouched
        # The chip's standing: its mean ratio to the generation's best chip over the precisions it was fitted in.
        factor = sum(_fit(chip, p) / max(_fit(c, p) for c in chips) for p in fitted) / len(fitted)
        if factor < 1:
            assert gemm["bf16"] == pytest.approx(0.75 * factor, abs=1e-4)
            assert gemm["bf16"] < gb300["bf16"]


def test_a_chip_alone_in_its_generation_keeps_its_priors():
    # Hopper's calibration rows are all H100: no sibling to compare with, bf16 keeps the prior.
    assert efficiency_for(load_chip("h100-sxm")).gemm_max["bf16"] == pytest.approx(0.75)
    assert efficiency_for(load_chip("h800")).gemm_max["bf16"] == pytest.approx(0.75)


def test_a_precision_fitted_for_the_chip_is_never_derated():
    fitted = {"chips": {"gb200": {"gemm": {"max_efficiency": {"fp8": 0.40, "bf16": 0.70}}},
                        "gb300": {"gemm": {"max_efficiency": {"fp8": 0.60}}}}}
    gemm = efficiency_for(load_chip("gb200"), fitted).gemm_max
    assert gemm["bf16"] == pytest.approx(0.70) and gemm["fp8"] == pytest.approx(0.40)
    # fp16 was not fitted: it follows the fp8 ratio (0.40 / 0.60).
    assert gemm["fp16"] == pytest.approx(0.75 * 0.40 / 0.60, abs=1e-4)
