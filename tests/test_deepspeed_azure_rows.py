"""validation/deepspeed_azure_rows.py: the DeepSpeed-on-Azure bars that became rows X189-X226."""

from __future__ import annotations

import csv

import pytest

from conftest import REPO, validation_script

NEW = {f"X{number}" for number in range(189, 227)}


def _script():
    return validation_script("deepspeed_azure_rows")


def _rows() -> list[dict]:
    with (REPO / "validation" / "extra_training_runs.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_committed_rows_are_the_scripts_output():
    rows = _rows()
    built = _script().build([row for row in rows if row["id"] not in NEW])
    assert built == [row for row in rows if row["id"] in NEW]


def test_each_new_row_is_a_plan_not_already_in_the_file_with_one_micro_batch_per_step():
    rows = _rows()
    plans = [(r["model"], r["seq_len"], r["n_devices"], r["micro_batch"]) for r in rows if "DeepSpeed on Azure" in r["model"]]
    assert len(plans) == len(set(plans)) == 15 + 38
    for row in (r for r in rows if r["id"] in NEW):
        assert int(row["global_batch"]) == int(row["n_devices"]) * int(row["micro_batch"])
        assert row["dp"] == row["n_devices"] and row["framework"] == "megatron-deepspeed"
        assert f"micro batch {row['micro_batch']} and sequence {row['seq_len']}" in row["notes"]
        tflops = float(row["notes"].split(": ", 1)[1].split(" TFLOP/s")[0])
        assert float(row["value"]) == pytest.approx(tflops / 312, abs=6e-5)
        assert f"metric hfu = {tflops}/312" in row["notes"]


def test_the_scales_reproduce_the_labelled_bars():
    script = _script()
    # Figure 6's labelled bars (170.42, 171.37 TFLOP/s) and the text's 165.36 for Figure 7, at their read heights.
    assert script.tflops("6", 596) == pytest.approx(170.42, abs=0.3)
    assert script.tflops("6", 599) == pytest.approx(171.37, abs=0.3)
    assert script.tflops("7", 578) == pytest.approx(165.36, abs=0.1)


def test_a_bar_that_is_already_a_row_is_refused():
    with pytest.raises(ValueError, match="already a row"):
        _script().build(_rows())
