"""The `recipe_options` column: the plan fields a run's recipe states where its source publishes only the layout
(validation/state_recipes.py writes it from the traced Megatron-Bridge recipes), applied over `plan_options`."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from conftest import validation_script
from windtunnel.validation.training import build_job, read_rows

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def state_recipes():
    return validation_script("state_recipes")


@pytest.mark.parametrize("name", ["extra_training_runs.csv", "training_runs.csv"])
def test_every_row_states_exactly_its_traced_recipe(state_recipes, name):
    with (ROOT / "validation" / name).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row.get("recipe_options", "") for row in rows] == state_recipes.recipe_column(name, rows)


def test_the_recipe_is_applied_over_the_sources_options():
    row = next(r for r in read_rows(ROOT / "validation" / "extra_training_runs.csv") if r["id"] == "X85")
    assert "fp8_recipe=mx" in row["plan_options"] and "cuda_graphs=full" in row["recipe_options"]
    stated, _, skip = build_job(row)
    defaults, _, _ = build_job(dict(row, recipe_options=""))
    assert skip is None
    assert stated.plan.fp8_recipe == defaults.plan.fp8_recipe == "mx"  # the source's field stays
    assert (stated.plan.cuda_graphs, defaults.plan.cuda_graphs) == ("full", "none")
    assert stated.plan.ep_overlap and not defaults.plan.ep_overlap
    # The recipe's field wins where both name one.
    both, _, _ = build_job(dict(row, plan_options="fp8_recipe=mx,dispatcher=alltoall",
                                recipe_options="dispatcher=hybridep"))
    assert both.plan.dispatcher == "hybridep"


def test_a_bad_recipe_option_skips_the_row_naming_the_column():
    row = next(r for r in read_rows(ROOT / "validation" / "extra_training_runs.csv") if r["id"] == "X85")
    job, _, skip = build_job(dict(row, recipe_options="dispatcher=carrier-pigeon"))
    assert job is None and skip.startswith("recipe_options:") and "dispatcher" in skip
