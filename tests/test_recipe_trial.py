"""The per-row Megatron-Bridge recipe table (validation/bridge_recipes.csv) and its mapping to plan fields
(validation/recipe_trial.py): every stated row exists, and every recipe maps to options the plan parser takes."""

from __future__ import annotations

import csv
from pathlib import Path

from conftest import validation_script
from windtunnel.specs.plan import parse_plan

ROOT = Path(__file__).resolve().parents[1]


def _trial():
    return validation_script("recipe_trial")


def test_every_recipe_row_is_a_row_and_maps_to_valid_plan_options():
    trial = _trial()
    table = trial.recipes()
    assert len(table) >= 90  # the rows whose layout matches a preset
    ids = {}
    for name in {file for file, _ in table}:
        with (ROOT / "validation" / name).open(newline="") as handle:
            ids[name] = {row["id"]: row for row in csv.DictReader(handle)}
    for (name, row_id), recipe in table.items():
        row = ids[name][row_id]
        assert row["framework"] == "megatron-bridge" and row["arch"] == "moe" and recipe["source"]
        options = trial.stated_options(recipe, list(trial.FIELDS))
        plan = parse_plan(",".join(filter(None, [row["plan_options"], "precision=" + row["precision"], *options])))
        assert plan.dispatcher in ("alltoall", "deepep", "hybridep")
        # A full-iteration graph is only stated where the recipe says so, and the fused MLP only with MXFP8.
        assert (plan.cuda_graphs == "full") == (recipe["cuda_graph_impl"] == "full_iteration")
        assert plan.expert_gemm != "fused_mlp" or plan.fp8_recipe == "mx"


def test_each_field_states_only_its_own_options():
    trial = _trial()
    recipe = {"dispatcher": "flex-hybridep", "permute_fusion_into_hybridep": "false", "cuda_graph_impl": "none",
              "cuda_graph_scope": "", "moe_a2a_overlap": "true", "cutedsl_fused_grouped_mlp": "false (field absent)",
              "fp8_dot_product_attention": "true"}
    assert trial.stated_options(recipe, ["dispatcher"]) == ["dispatcher=deepep"]
    assert trial.stated_options(recipe, ["cuda graphs"]) == []
    assert trial.stated_options(recipe, ["EP overlap", "fused MLP, FP8 attention"]) == ["ep_overlap=true",
                                                                                         "fp8_attention=true"]
    fused = dict(recipe, permute_fusion_into_hybridep="true", cuda_graph_impl="full_iteration")
    assert trial.stated_options(fused, ["dispatcher", "cuda graphs"]) == ["dispatcher=hybridep", "cuda_graphs=full"]
