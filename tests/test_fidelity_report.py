"""`windtunnel validate all`: one accuracy report over every reference CSV (report/fidelity.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

from conftest import assert_one_clear_error, tiny_training_csv
from windtunnel.validation.fidelity import (
    SLICE_MIN_ROWS,
    FileResults,
    over_memory,
    over_target,
    rank_pairs,
    ranking,
    slice_stats,
)
from windtunnel.validation.rows import RowResult

ROOT = Path(__file__).resolve().parents[1]
TINY_IDS = ("21", "23", "24", "11")  # a calibration row, two GPT-3 175B step times on 64 A100s, one H100 TFLOP/s row


def _r(rid: str, measured: float, predicted: float, *, metric: str = "tokens_per_s_per_device", model: str = "m",
       chip: str = "h100-sxm", role: str = "validation", devices: int = 64, fits: bool | None = True,
       release: str = "", job_key: str = "") -> RowResult:
    return RowResult(rid, metric, measured, predicted, (predicted - measured) / measured, role, "predicted",
                     group="hopper/16bit", framework="nemo", fits=fits, chip=chip, model=model, seq_len=4096,
                     devices=devices, release=release, job_key=job_key)


def test_ranking_counts_concordant_pairs_within_model_and_chip():
    rows = [
        _r("a", 1.0, 1.1), _r("b", 2.0, 2.5), _r("c", 3.0, 2.4),  # (a,b) (a,c) concordant, (b,c) discordant
        _r("d", 2.0, 9.0),  # same measured value as b: the pair (b,d) has no order; (a,d) concordant, (c,d) discordant
        _r("e", 5.0, 0.1, metric="mfu"),  # another metric: never paired
        _r("f", 5.0, 0.1, chip="b200"),  # another chip: never paired
        _r("g", 5.0, 0.1, model="other"),  # another model shape: never paired
        _r("h", 9.0, 0.1, role="calibration"),  # calibration rows are not scored
    ]
    rank = ranking(rows)
    assert (rank["pairs"], rank["concordant"]) == (5, 3)
    assert rank["share"] == pytest.approx(3 / 5)
    assert [(g["model"], g["rows"], g["pairs"]) for g in rank["groups"]] == [("m", 4, 5)]


def test_ranking_orders_plans_within_one_release():
    """Rows of two software releases are not ordered against each other: across releases the measured order is
    also the software's. One job measured in two releases is still a repeat, and sets the spread."""
    rows = [
        _r("a", 1.0, 1.2, release="r1"), _r("b", 2.0, 1.1, release="r1"),  # discordant, same release: counted
        _r("c", 3.0, 0.5, release="r2"),  # discordant with a and b, but another release: not a pair
        _r("d", 2.1, 0.4, release="r2", job_key="k"), _r("e", 2.0, 1.3, release="r1", job_key="k"),  # one job twice
    ]
    rank = ranking(rows)
    # r1: (a,b) discordant, (a,e) concordant, (b,e) measured equal; r2: (c,d) concordant; (d,e) a repeat.
    assert (rank["pairs"], rank["concordant"]) == (3, 2)
    assert [(g["pairs"], g["concordant"]) for g in rank["groups"]] == [(3, 2)]
    assert rank["repeats"]["pairs"] == 1 and rank["repeats"]["median_spread"] > 0
    # Without releases every pair of distinct jobs with distinct measurements counts: 10 - (b,e) - (d,e).
    assert ranking([dataclasses.replace(r, release="") for r in rows])["pairs"] == 8


def test_release_column_rule(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "validation"))  # the script's sibling helper, csv_columns.py
    spec = importlib.util.spec_from_file_location("derive_release", ROOT / "validation" / "derive_release_column.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    release_of = module.release_of
    assert release_of("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (25.11 NeMo container)") == "nemo-25.11"
    assert release_of("archive at 067f987d, 26.02.01 NeMo container (the page's tables)") == "nemo-26.02.01"
    assert release_of("NVIDIA/NeMo docs/source/performance/performance_summary.md (NeMo 24.07, DGX-H100)") == "nemo-24.07"
    assert release_of("README at 741c886 (release v25.04; container nvcr.io/nvidia/jax:25.01-maxtext-py3; x)") \
        == "jax:25.01-maxtext-py3"
    assert release_of("run FW_VERSION 2024.03.04 = image ghcr.io/nvidia/jax:pax-2024-03-04; configure.sh") \
        == "jax:pax-2024-03-04"
    assert release_of("torchtitan team, Dec 2024; torch 1963fc8, torchao eab345c, torchtitan 9dec370)") \
        == "torchtitan-9dec370"
    assert release_of("Narayanan et al. SC21 Table 1") == ""


def test_ranking_compares_step_times_as_throughput():
    """Two step-time rows on different device counts: B has half the devices, so it is the faster per device
    although its step is longer; the prediction makes B slower per device, a discordant pair, even though
    it orders the step times as measured."""
    a = _r("A", 1.0, 1.0, metric="sec_per_iter", devices=64)
    b = _r("B", 1.5, 2.5, metric="sec_per_iter", devices=32)
    rank = ranking([a, b], {"A": 64e3, "B": 64e3})
    assert (rank["pairs"], rank["concordant"]) == (1, 0)
    assert ranking([a, b])["pairs"] == 0  # without tokens per step a step time is not a throughput


def test_tied_predictions_are_not_concordant():
    rank = rank_pairs([(_r("a", 1.0, 2.0), None), (_r("b", 2.0, 2.0), None)])
    assert (rank["pairs"], rank["concordant"], rank["tied_predictions"]) == (1, 0, 1)
    assert ranking([_r("a", 1.0, 2.0)])["share"] is None


def test_slices_and_plans_over_memory():
    rows = [_r("a", 1.0, 1.1), _r("b", 1.0, 0.7, fits=False), _r("c", 1.0, 2.0, role="calibration", fits=False)]
    stats = slice_stats(rows, lambda r: [r.framework])
    # Throughput rows: measured / predicted step time is predicted / measured throughput (1.1 and 0.7).
    assert stats == [{"slice": "nemo", "median_abs_error": pytest.approx(0.2), "max_abs_error": pytest.approx(0.3),
                      "rows": 2, "median_step_time_ratio": pytest.approx(0.9)}]
    assert over_memory([FileResults("x/runs.csv", rows)]) == ["runs.csv:b"]


def test_slices_over_target_need_enough_rows_and_say_which_way_they_err():
    fast = [_r(f"f{i}", 1.0, 1.2 + 0.01 * i) for i in range(SLICE_MIN_ROWS)]  # throughput 20-24% high: too fast
    few = [_r(f"s{i}", 2.0, 1.0, metric="sec_per_iter") for i in range(SLICE_MIN_ROWS - 1)]  # too few rows to count
    for r in few:
        r.framework = "jax"
    stats = slice_stats(fast + few, lambda r: [r.framework])
    by = {s["slice"]: s for s in stats}
    assert by["nemo"]["median_step_time_ratio"] > 1 and by["jax"]["median_step_time_ratio"] == pytest.approx(2.0)
    assert [s["slice"] for s in over_target(stats)] == ["nemo"]
    within = [_r(f"w{i}", 1.0, 1.05) for i in range(SLICE_MIN_ROWS)]
    assert over_target(slice_stats(within, lambda r: [r.framework])) == []


def _tiny_csv(tmp_path):
    return tiny_training_csv(tmp_path, TINY_IDS)[0]


def test_validate_all_writes_report_bands_and_lists_regressions(cli, tmp_path):
    path = _tiny_csv(tmp_path)
    report, bands = tmp_path / "ACCURACY.md", tmp_path / "bands.yaml"
    proc = cli("validate", "all", str(path), "--out", str(report), "--bands-out", str(bands), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["id"] for r in doc["rows"]] == ["11", "21", "23", "24"]
    assert {r["file"] for r in doc["rows"]} == {"tiny.csv"}
    assert doc["summary"]["n_validation"] == 3 and doc["summary"]["n_calibration"] == 1
    assert doc["target"]["median_abs_error"] == 0.12 and isinstance(doc["target"]["over"], list)
    assert all("median_step_time_ratio" in s for stats in doc["slices"].values() for s in stats)
    assert doc["ranking"]["pairs"] == 1  # rows 23 and 24: same model shape, same chip, step times as throughput
    stacks = {s["slice"]: s["rows"] for s in doc["slices"]["stack"]}
    assert stacks == {"megatron-lm": 1, "megatron-lm-2021": 2}
    text = report.read_text(encoding="utf-8")
    assert "## Ranking quality" in text and "tiny.csv:23" in text
    assert bands.read_text(encoding="utf-8").startswith("# Error bands of training predictions")

    # A baseline in which row 23 was exact: its |error| grew, so it is listed; the other rows are not.
    worse = dict(doc, rows=[dict(r, error=0.0 if r["id"] == "23" else r["error"]) for r in doc["rows"]])
    old = tmp_path / "old.json"
    old.write_text(json.dumps(worse), encoding="utf-8")
    again = cli("validate", "all", str(path), "--baseline", str(old), "--json")
    assert again.returncode == 0, again.stderr
    assert [w["row"] for w in json.loads(again.stdout)["regressions"]["worse"]] == ["tiny.csv:23"]
    human = cli("validate", "all", str(path), "--baseline", str(old))
    assert human.returncode == 0 and "tiny.csv:23" in human.stdout


def test_validate_all_errors_are_one_clear_paragraph(cli, tmp_path):
    assert_one_clear_error(cli("validate", "all", str(tmp_path / "nope.csv")), "nope.csv")
    path = _tiny_csv(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("[]", encoding="utf-8")
    assert_one_clear_error(cli("validate", "all", str(path), "--baseline", str(bad)), "bad.json", "validate all --json")


def test_repeat_measurements_are_not_ranked_and_set_the_spread():
    """Rows of one job (equal job_key) are repeats: never a ranking pair; their relative difference is the
    measurement spread, and pairs of distinct jobs closer than it count only in the all-pairs figure."""
    rows = [_r("a1", 100.0, 120.0), _r("a2", 110.0, 120.0),  # one job measured twice: spread 10%
            _r("b", 105.0, 100.0),  # within 5% of a1 and a2: counted in all pairs only ((a1,b) discordant)
            _r("c", 200.0, 300.0)]  # far from every other: concordant with a1, a2 and b
    for r, key in zip(rows, ("A", "A", "B", "C"), strict=True):
        r.job_key = key
    rank = ranking(rows)
    assert rank["repeats"] == {"pairs": 1, "median_spread": pytest.approx(0.1), "max_spread": pytest.approx(0.1)}
    assert (rank["pairs"], rank["concordant"]) == (5, 4)  # only (a1,b) discordant; the repeat (a1,a2) is no pair
    wide = rank["beyond_spread"]
    assert wide["spread"] == pytest.approx(0.1)
    assert (wide["pairs"], wide["concordant"]) == (3, 3)  # (a1,c) (a2,c) (b,c); (a1,b) and (a2,b) differ by < 10%
    assert ranking(rows, spread=0.0)["beyond_spread"]["pairs"] == 5  # a given spread replaces the repeats'
