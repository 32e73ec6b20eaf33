"""Chips of one generation sustain different fractions of their peaks (power budgets): a chip's calibrated
standing against the generation's best chip scales the precisions it has no calibration for
(cost/efficiency.py _sustained_factor), and a chip with no calibration rows stands where its generation's fit
stands."""

from __future__ import annotations

import pytest

from windtunnel.cost.efficiency import _sustained_factor, efficiency_for
from windtunnel.specs.hardware import load_chip

FITTED = {
    "generations": {"blackwell": {"gemm": {"max_efficiency": {"fp8": 0.50}}}},
    "chips": {"gb300": {"gemm": {"max_efficiency": {"fp8": 0.60}}},
              "b200": {"gemm": {"max_efficiency": {"fp8": 0.45}}}},
}


def test_a_calibrated_chip_scales_by_its_standing():
    assert _sustained_factor(load_chip("gb300"), FITTED) == 1.0  # the best chip keeps the priors
    assert _sustained_factor(load_chip("b200"), FITTED) == pytest.approx(0.45 / 0.60)


def test_an_uncalibrated_chip_stands_where_its_generation_fit_stands():
    assert _sustained_factor(load_chip("b300"), FITTED) == pytest.approx(0.50 / 0.60)
    # A generation with no calibrated chip gives nothing to stand against.
    assert _sustained_factor(load_chip("h200"), {"generations": {"hopper": FITTED["generations"]["blackwell"]}}) == 1.0


def test_the_shipped_b300_bf16_rate_is_derated_like_its_fp8():
    b300, gb300 = efficiency_for(load_chip("b300")), efficiency_for(load_chip("gb300"))
    assert b300.gemm_max["bf16"] < gb300.gemm_max["bf16"]
    assert b300.gemm_max["bf16"] / gb300.gemm_max["bf16"] == pytest.approx(
        (b300.gemm_max["fp8"] / gb300.gemm_max["fp8"] + b300.gemm_max["mxfp8"] / gb300.gemm_max["mxfp8"]) / 2, abs=2e-3)
