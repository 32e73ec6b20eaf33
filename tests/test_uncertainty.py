"""Bands from residuals (report/bands.py) and what a prediction says about them (train/uncertainty.py)."""

from __future__ import annotations

import json

import pytest

from windtunnel.train.uncertainty import assess, load_bands
from windtunnel.validation.bands import derive_bands, quantile, step_time_ratio
from windtunnel.validation.rows import RowResult

NEMO_RATIOS = [0.9, 0.95, 1.0, 1.05, 1.1, 1.2]  # measured / predicted step time of six validation rows


def _row(i: int, ratio: float, *, stack: str, group: str = "hopper/fp8", arch: str = "dense", chip: str = "h100-sxm",
         seq: int = 4096, devices: int = 64, metric: str = "sec_per_iter", role: str = "validation") -> RowResult:
    """A predicted row with a chosen step-time ratio (a throughput row carries the inverse ratio)."""
    predicted = 10.0
    measured = predicted * ratio if metric == "sec_per_iter" else predicted / ratio
    return RowResult(f"r{i}", metric, measured, predicted, (predicted - measured) / measured, role, "predicted",
                     group=group, arch=arch, framework=stack, fits=True, chip=chip, model="m", seq_len=seq,
                     devices=devices)


@pytest.fixture(name="bands")
def bands_fixture() -> dict:
    rows = [_row(i, r, stack="nemo", seq=2048 if i == 0 else 8192 if i == 1 else 4096,
                 devices=16 if i == 0 else 512 if i == 1 else 64, metric="tokens_per_s_per_device" if i % 2 else "sec_per_iter")
            for i, r in enumerate(NEMO_RATIOS)]
    rows += [_row(10, 1.3, stack="megatron-lm"), _row(11, 1.4, stack="megatron-lm")]
    rows += [_row(20, 0.8, stack="megatron-lm", chip="a100-80g", group="ampere/16bit"),
             _row(21, 1.0, stack="megatron-lm", chip="a100-80g", group="ampere/16bit", devices=8, role="calibration")]
    return derive_bands([("synthetic.csv", rows)])


def test_ratio_sign_of_throughput_rows():
    """A throughput row's step-time ratio is predicted / measured: over-predicting tokens/s means the real
    step is longer than predicted."""
    fast = RowResult("a", "tokens_per_s_per_device", 100.0, 125.0, 0.25, "validation", "predicted")
    slow = RowResult("b", "sec_per_iter", 10.0, 8.0, -0.2, "validation", "predicted")
    assert step_time_ratio(fast) == pytest.approx(1.25)
    assert step_time_ratio(slow) == pytest.approx(1.25)
    assert step_time_ratio(RowResult("c", "peak_memory_gib", 50.0, 60.0, 0.2, "validation", "predicted")) is None


def test_slice_band_is_the_10_90_percentile(bands):
    entry = bands["slices"]["nemo|hopper/fp8|dense"]
    assert entry["validation_rows"] == 6
    assert entry["band"]["from"] == "nemo|hopper/fp8|dense" and entry["band"]["fallback"] is None
    assert entry["band"]["ratio"] == pytest.approx([0.925, 1.15])  # linear interpolation at 0.5 and 4.5
    assert quantile(NEMO_RATIOS, 0.1) == pytest.approx(0.925)
    assert entry["seq_len"] == [2048, 8192] and entry["devices"] == [16, 512] and entry["chips"] == ["h100-sxm"]


def test_thin_slices_fall_back_and_say_so(bands):
    thin = bands["slices"]["megatron-lm|hopper/fp8|dense"]
    assert thin["validation_rows"] == 2
    assert thin["band"]["from"] == "hopper/fp8|dense" and "2 validation rows" in thin["band"]["fallback"]
    ampere = bands["groups"]["ampere/16bit|dense"]  # one validation row: the group itself takes all rows' band
    assert ampere["band"]["from"] == "all" and ampere["calibration_rows"] == 1 and ampere["devices"] == [8, 64]
    assert bands["all"]["validation_rows"] == 9


def test_band_always_contains_the_point_prediction():
    """A slice whose every row ran slower than predicted still has a band that contains the prediction."""
    slow = derive_bands([("s.csv", [_row(i, 1.1 + 0.02 * i, stack="nemo") for i in range(6)])])
    low, high = slow["slices"]["nemo|hopper/fp8|dense"]["band"]["ratio"]
    assert low == 1.0 and high > 1.1


def _assess(bands, **over):
    job = dict(stack="nemo", chip="h100-sxm", generation="hopper", precision="fp8", arch="dense", seq_len=4096,
               devices=64, step_time_s=2.0, tokens_per_s=1.0e6)
    job.update(over)
    return assess(bands, **job)


def test_validated_slice_is_not_extrapolating(bands):
    band, extrapolation = _assess(bands)
    assert extrapolation == {"extrapolating": False, "reasons": []}
    assert band["slice"] == "nemo x hopper/fp8 x dense" and band["rows"] == 6 and band["fallback"] is None
    assert band["step_time_band_s"] == pytest.approx([2.0 * 0.925, 2.0 * 1.15])
    assert band["tokens_per_s_band"] == pytest.approx([1.0e6 / 1.15, 1.0e6 / 0.925])
    assert band["step_time_band_s"][0] <= 2.0 <= band["step_time_band_s"][1]


def test_sequence_length_and_devices_beyond_the_range(bands):
    _, long = _assess(bands, seq_len=131072)
    assert long["extrapolating"]
    assert long["reasons"] == ["sequence length 131072 beyond the validated range (max 8192) for slice nemo x "
                               "hopper/fp8 x dense"]
    _, few = _assess(bands, devices=4)
    assert few["reasons"] == ["4 devices below the validated range (min 16) for slice nemo x hopper/fp8 x dense"]


def test_unmeasured_chip_and_stack_are_extrapolating(bands):
    band, chip = _assess(bands, chip="ascend-910c", generation="ascend", precision="bf16")
    assert chip["extrapolating"]
    assert "chip ascend-910c has no validation rows" in chip["reasons"]
    assert any("no validation rows for stack nemo on ascend/16bit dense models" in r for r in chip["reasons"])
    assert band["slice"] == "all" and "no rows for nemo x ascend/16bit x dense" in band["fallback"]
    band, stack = _assess(bands, stack="torchtitan")
    assert stack["extrapolating"] and "stacks with rows there: megatron-lm, nemo" in stack["reasons"][0]
    assert band["slice"] == "hopper/fp8 x dense"
    _, other_chip = _assess(bands, chip="h800")
    assert "no validation rows for stack nemo on chip h800 (its slice has h100-sxm)" in other_chip["reasons"]


def test_no_step_time_no_band(bands):
    band, extrapolation = _assess(bands, step_time_s=None, tokens_per_s=None)
    assert band is None and extrapolation["extrapolating"] is False


def test_simulate_training_carries_band_and_extrapolation():
    """The API fills both from catalog/bands.yaml; a chip of the catalog without rows is extrapolating."""
    from windtunnel.api import simulate_training
    from windtunnel.specs.hardware import chip_names

    bands = load_bands()
    assert bands is not None, "catalog/bands.yaml is missing: run make validate"
    result = simulate_training("llama3-8b", "h100-sxm", 8, seq_len=4096, global_batch=8, plan="tp=1,pp=1,mbs=1")
    low, high = result.band["step_time_band_s"]
    assert low <= result.step_time_s <= high
    t_low, t_high = result.band["tokens_per_s_band"]
    assert t_low <= result.tokens_per_s <= t_high
    assert set(result.extrapolation) == {"extrapolating", "reasons"}
    unmeasured = [c for c in chip_names() if c not in bands["all"]["chips"]]
    if not unmeasured:
        pytest.skip("every catalog chip has validation rows")
    from windtunnel.specs.hardware import load_hardware

    cluster = load_hardware(unmeasured[0], 8)
    other = simulate_training("llama3-8b", cluster, seq_len=4096, global_batch=8, plan="tp=1,pp=1,mbs=1")
    assert f"chip {unmeasured[0]} has no validation rows" in other.extrapolation["reasons"]


def test_train_simulate_json_has_band_and_extrapolation(cli):
    args = ["train", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
            "--global-batch", "8", "--plan", "tp=1,pp=1,mbs=1"]
    proc = cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"band", "extrapolation"} <= set(data)
    assert data["band"]["step_time_band_s"][0] <= data["step_time_s"] <= data["band"]["step_time_band_s"][1]
    table = cli(*args)
    assert table.returncode == 0, table.stderr
    assert any(line.startswith("│ band ") for line in table.stdout.splitlines()), table.stdout


def test_malformed_bands_file_is_one_clear_error(tmp_path):
    from windtunnel.specs.errors import WindtunnelError

    path = tmp_path / "bands.yaml"
    path.write_text("all: {chips: [h100-sxm]}\n", encoding="utf-8")
    with pytest.raises(WindtunnelError, match="band ratio"):
        load_bands(path)
