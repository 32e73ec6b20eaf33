"""`calibrate training --out`, `--profile` on simulate/validate: JSON contracts, the shipped calibration untouched."""

from __future__ import annotations

import hashlib
import json

import pytest

from conftest import assert_one_clear_error
from profile_synth import SHAPES, measured_rows, write_csv
from windtunnel.specs.yamlio import catalog_dir

SIMULATE = ["train", "simulate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "16", "--seq-len", "4096",
            "--global-batch", "64", "--plan", "tp=2,pp=1", "--json"]


def _digest() -> str:
    return hashlib.sha256(catalog_dir("calibration.yaml").read_bytes()).hexdigest()


@pytest.fixture(scope="module", name="fit")
def fit_fixture(tmp_path_factory):
    """A profile fitted by the CLI on five synthetic rows (hash of the shipped calibration before and after)."""
    tmp = tmp_path_factory.mktemp("calibrate")
    rows, _ = measured_rows(shapes=[SHAPES[i] for i in (0, 1, 4, 6, 7)])
    csv_path = write_csv(rows, tmp / "runs.csv")
    before = _digest()
    from conftest import run_cli

    proc = run_cli("calibrate", "training", str(csv_path), "--out", str(tmp / "p.yaml"), "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), tmp / "p.yaml", csv_path, before


def test_calibrate_json_contract_and_the_shipped_calibration_is_unchanged(fit):
    document, path, _, before = fit
    assert _digest() == before
    assert path.exists()
    assert set(document) >= {"parameters", "loo_median_abs_error", "rows_used", "chip", "stack", "profile"}
    assert document["rows_used"] == ["S1", "S2", "S3", "S4", "S5"]
    assert 0 <= document["loo_median_abs_error"] < 0.1
    for p in document["parameters"]:
        assert set(p) >= {"name", "value", "prior", "bounds", "identified"}
        assert p["bounds"][0] <= p["value"] <= p["bounds"][1]
    assert any(p["identified"] for p in document["parameters"])
    assert any(not p["identified"] for p in document["parameters"])


def test_simulate_with_profile_changes_the_result_and_lists_it(cli, fit):
    _, path, _, _ = fit
    plain = json.loads(cli(*SIMULATE).stdout)
    proc = cli(*SIMULATE, "--profile", str(path))
    assert proc.returncode == 0, proc.stderr
    profiled = json.loads(proc.stdout)
    assert profiled["step_time_s"] != pytest.approx(plain["step_time_s"], rel=1e-3)
    lines = [a for a in profiled["assumptions"] if a.startswith("profile")]
    assert len(lines) == 1 and str(path) in lines[0] and "chip h100-sxm" in lines[0] and "gemm.bf16" in lines[0]
    assert not any(a.startswith("profile") for a in plain["assumptions"])


def test_profile_of_another_chip_is_one_clear_error(cli, fit):
    _, path, _, _ = fit
    args = [a if a != "h100-sxm" else "a100-80g" for a in SIMULATE]
    assert_one_clear_error(cli(*args, "--profile", str(path)), "chip 'h100-sxm'", "'a100-80g'")


def test_validate_with_profile_reports_before_and_after(cli, fit):
    _, path, csv_path, _ = fit
    proc = cli("validate", "training", str(csv_path), "--profile", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {"median_abs_error_before", "median_abs_error_after", "summary", "summary_before", "rows"} <= set(doc)
    assert doc["n_held_out"] == 0  # every row was fitted on
    row = doc["rows"][0]
    assert {"error_before", "error", "predicted_before", "predicted", "profile", "held_out"} <= set(row)
    assert doc["summary"]["calibration_median_abs_error"] < doc["summary_before"]["calibration_median_abs_error"]


def test_calibrate_needs_out_and_a_chip(cli, tmp_path):
    assert_one_clear_error(cli("calibrate", "training", "validation/training_runs_2.csv"), "--out")
    proc = cli("calibrate", "training", "validation/training_runs_2.csv", "--out", str(tmp_path / "x.yaml"))
    assert_one_clear_error(proc, "span chips", "--hardware")
    assert not (tmp_path / "x.yaml").exists()


def test_profile_reaches_serving_goodput_and_the_api(fit):
    from windtunnel.api import failure_aware_goodput, simulate_training
    from windtunnel.infer.api import simulate_serving

    _, path, _, _ = fit
    serving = dict(model="llama3-8b", hardware="h100-sxm", deployment="mixed:tp=1,replicas=1",
                   traffic="poisson:rate=2,input=512,output=128,requests=60")
    plain, profiled = simulate_serving(**serving), simulate_serving(**serving, profile=path)
    assert profiled.tpot_s["mean"] != pytest.approx(plain.tpot_s["mean"], rel=1e-4)
    assert any(str(path) in a for a in profiled.assumptions) and not any("profile" in a for a in plain.assumptions)
    job = dict(seq_len=4096, global_batch=256, plans=["tp=2"])
    (base,), (mine,) = (failure_aware_goodput("llama3-8b", "h100-sxm", 64, **job, profile=p) for p in (None, path))
    assert mine["tokens_per_s"] != pytest.approx(base["tokens_per_s"], rel=1e-3) and "profile" in mine
    api = simulate_training("llama3-8b", "h100-sxm", 16, seq_len=4096, global_batch=64, plan="tp=2", profile=path)
    assert any(a.startswith(f"profile '{path}'") for a in api.assumptions)


def test_calibrate_refuses_the_package_before_fitting(cli):
    target = catalog_dir("calibration.yaml")
    before = _digest()
    proc = cli("calibrate", "training", "validation/training_runs_2.csv", "--hardware", "ascend-910b", "--out", str(target))
    assert_one_clear_error(proc, "inside the installed windtunnel package")
    assert _digest() == before


def test_profile_of_another_stack_family_is_one_clear_error(cli, fit):
    _, path, _, _ = fit  # fitted on megatron rows
    assert_one_clear_error(cli(*SIMULATE, "--framework", "pytorch-fsdp", "--profile", str(path)),
                           "stack 'megatron'", "'pytorch-fsdp'")
    search = ["train", "search", "--model", "llama3-8b", "--hardware", "a100-80g", "--devices", "16",
              "--global-batch", "64", "--profile", str(path)]
    assert_one_clear_error(cli(*search), "chip 'h100-sxm'")


def test_training_fit_builds_on_other_inputs_in_the_profile_and_is_idempotent(cli, fit, tmp_path):
    from windtunnel.profile import FittedParameter, Profile, load_profile, save_profile

    _, _, csv_path, _ = fit
    path = tmp_path / "mine.yaml"
    collectives = "windtunnel calibrate collectives nccl.log"
    save_profile(Profile(chip="h100-sxm", parameters=[FittedParameter(
        name="comm.scale_out_efficiency", value=0.7, prior=0.85, bounds=(0.3, 0.98), identified=True,
        source=collectives)]), path)
    args = ("calibrate", "training", str(csv_path), "--out", str(path), "--no-loo", "--json")
    first = json.loads(cli(*args).stdout)
    scale_out = next(p for p in first["parameters"] if p["name"] == "comm.scale_out_efficiency")
    assert scale_out["prior"] == 0.7  # the collective benchmark's value is the training fit's prior
    text = path.read_text(encoding="utf-8")
    assert cli(*args).returncode == 0
    assert path.read_text(encoding="utf-8") == text  # re-running the same fit changes nothing
    assert any(i.get("kind") == "training_csv" for i in load_profile(path).inputs)
