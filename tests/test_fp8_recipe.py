"""The FP8 recipe of a plan: per-tensor scaling or MXFP8's block scaling, a GEMM kernel family of its own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from conftest import assert_one_clear_error
from windtunnel.calibrate.shipped import _gemm_key
from windtunnel.cost.efficiency import efficiency_for
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_chip, load_hardware
from windtunnel.specs.model import load_model
from windtunnel.specs.plan import parse_plan
from windtunnel.train.step import TrainingJob, simulate

ROOT = Path(__file__).resolve().parents[1]
PLAN = "tp=1,pp=1,mbs=1,recompute=none,precision=fp8"


def _job(plan: str, override: dict | None = None) -> TrainingJob:
    return TrainingJob(model=load_model("llama3-8b"), cluster=load_hardware("b200", 8), plan=parse_plan(plan),
                       seq_len=8192, global_batch=64, fitted_override=override)


def test_mx_plans_run_their_fp8_gemms_at_the_mxfp8_efficiency():
    chip = load_chip("b200")
    tensor, mx = efficiency_for(chip, {}), efficiency_for(chip, {}, fp8_recipe="mx")
    assert tensor.gemm_efficiency("fp8") == tensor.gemm_max["fp8"]
    assert mx.gemm_efficiency("fp8") == tensor.gemm_max["mxfp8"]
    assert mx.gemm_efficiency("bf16") == tensor.gemm_efficiency("bf16")  # 16-bit GEMMs are untouched
    # A calibration that puts MXFP8 GEMMs below per-tensor FP8 ones makes the MX plan slower, and only it.
    override = {"chips": {"b200": {"gemm": {"max_efficiency": {"fp8": 0.6, "mxfp8": 0.5}}}}}
    per_tensor, block = simulate(_job(PLAN, override)), simulate(_job(PLAN + ",fp8_recipe=mx", override))
    assert block.step_time_s > per_tensor.step_time_s * 1.03
    same = {"chips": {"b200": {"gemm": {"max_efficiency": {"fp8": 0.6, "mxfp8": 0.6}}}}}
    assert simulate(_job(PLAN + ",fp8_recipe=mx", same)).step_time_s == pytest.approx(
        simulate(_job(PLAN, same)).step_time_s)


def test_the_recipe_round_trips_and_is_shown_only_when_not_the_default():
    plan = parse_plan(PLAN + ",fp8_recipe=mx")
    assert plan.fp8_recipe == "mx" and "fp8_recipe=mx" in plan.to_string() and "fp8_recipe=mx" in plan.short()
    assert parse_plan(plan.to_string()).fp8_recipe == parse_plan(plan.short()).fp8_recipe == "mx"
    assert "fp8_recipe" not in parse_plan(PLAN).to_string()


def test_mx_needs_fp8_and_a_block_scaled_chip():
    with pytest.raises(WindtunnelError) as bf16:
        simulate(_job("tp=1,pp=1,mbs=1,fp8_recipe=mx"))
    assert bf16.value.field == "fp8_recipe" and "precision=fp8" in str(bf16.value)
    hopper = TrainingJob(model=load_model("llama3-8b"), cluster=load_hardware("h100-sxm", 8),
                         plan=parse_plan(PLAN + ",fp8_recipe=mx"), seq_len=8192, global_batch=64)
    with pytest.raises(WindtunnelError) as h100:
        simulate(hopper)
    assert h100.value.field == "fp8_recipe" and "h100-sxm" in str(h100.value)
    assert [name for name in ("b200", "gb200", "gb300", "b300", "h100-sxm", "a100-80g")
            if load_chip(name).block_scaled_fp8] == ["b200", "gb200", "gb300", "b300"]


def test_cli_error_is_one_clear_paragraph(cli):
    proc = cli("train", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8",
               "--global-batch", "64", "--seq-len", "8192", "--plan", PLAN + ",fp8_recipe=mx")
    assert_one_clear_error(proc, "fp8_recipe", "h100-sxm")


def test_calibration_fits_each_recipe_apart():
    assert [_gemm_key(_job(p)) for p in (PLAN, PLAN + ",fp8_recipe=mx", "tp=1,pp=1,mbs=1")] == ["fp8", "mxfp8", "bf16"]


def test_rows_rule(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "validation"))  # the script's sibling helper, csv_columns.py
    spec = importlib.util.spec_from_file_location("derive_fp8", ROOT / "validation" / "derive_fp8_recipe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.runs_mx({"precision": "fp8", "notes": "DGX-GB300; FP8-MX recipe (MXFP8); model TFLOP/s/GPU 2064"})
    assert module.runs_mx({"precision": "fp8", "notes": "dev branch; force-balanced routing; MXFP8; 1233 TFLOP/s/GPU"})
    assert not module.runs_mx({"precision": "fp8", "notes": "DGX-GB300; FP8-CS recipe (the table writes FP8)"})
    assert not module.runs_mx({"precision": "bf16", "notes": "BF16; the MXFP8 run of the same table is X17"})


def test_rewriting_keeps_line_endings_and_writes_nothing_when_nothing_changes(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "validation"))
    from csv_columns import rewrite

    path = tmp_path / "rows.csv"
    path.write_bytes(b"id,precision,notes,plan_options\r\n1,fp8,FP8-MX recipe (MXFP8),\r\n2,bf16,BF16,\r\n")
    spec = importlib.util.spec_from_file_location("derive_fp8", ROOT / "validation" / "derive_fp8_recipe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert rewrite(path, module._state_mx) == 1
    assert path.read_bytes() == b"id,precision,notes,plan_options\r\n1,fp8,FP8-MX recipe (MXFP8),fp8_recipe=mx\r\n2,bf16,BF16,\r\n"
    before = path.stat().st_mtime_ns
    assert rewrite(path, module._state_mx) == 0 and path.stat().st_mtime_ns == before


def test_search_runs_every_plan_in_the_recipe_asked_for():
    from windtunnel.api import search_training

    kwargs = dict(seq_len=8192, global_batch=64, precision="fp8", top=1, refine=2)
    tensor = search_training("llama3-8b", "b200", 16, **kwargs)
    block = search_training("llama3-8b", "b200", 16, fp8_recipe="mx", **kwargs)
    assert "fp8_recipe=mx" in block.plans[0]["plan"] and "fp8_recipe" not in tensor.plans[0]["plan"]
    assert block.fp8_recipe == "mx" and tensor.fp8_recipe == "tensor"
    with pytest.raises(WindtunnelError, match="h100-sxm"):
        search_training("llama3-8b", "h100-sxm", 16, fp8_recipe="mx", **kwargs)


def test_a_search_space_refuses_mx_without_fp8():
    from windtunnel.train.space import SearchSpace

    with pytest.raises(WindtunnelError) as err:
        SearchSpace(load_model("llama3-8b"), load_hardware("b200", 16), 8192, 64, fp8_recipe="mx")
    assert err.value.field == "fp8_recipe" and "precision fp8" in str(err.value)
