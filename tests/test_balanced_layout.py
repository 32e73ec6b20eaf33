"""layout=balanced: the pipeline split that evens the busiest rank's time per micro-batch (specs.layout.balanced_split),
within the even split's layers per stage, reported as a layout string that pins it."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.layout import balanced_split, expand_layout, layout_string


def _loads(split, weight, rank_of):
    loads: dict[int, float] = {}
    for s, stage in enumerate(split):
        loads[rank_of(s)] = loads.get(rank_of(s), 0.0) + sum(weight[m] for m in stage)
    return loads


def test_heavy_head_takes_layers_off_the_last_stage():
    units = [["embedding"], *[["dense"]] * 8, ["head"]]
    weight = {"embedding": 0.0, "dense": 1.0, "head": 2.0}
    split = balanced_split(units, [sum(weight[m] for m in u) for u in units], 4, lambda s: s)
    loads = _loads(split, weight, lambda s: s)
    assert max(loads.values()) == 3.0  # the even split (2, 2, 2, 2 layers) leaves the last stage at 4
    assert split[-1].count("dense") <= 1 and split[0][0] == "embedding" and split[-1][-1] == "head"
    assert [st.count("t") for st in expand_layout(layout_string(split))] == [st.count("dense") for st in split]


def test_mirrored_ranks_balance_pairs_and_respect_the_layer_cap():
    units = [["embedding"], *[["moe"]] * 12, ["head"]]
    weight = {"embedding": 0.0, "moe": 1.0, "head": 3.0}
    pairs = lambda s: min(s, 3 - s)  # noqa: E731  DualPipe: rank r runs stages r and pp-1-r
    split = balanced_split(units, [sum(weight[m] for m in u) for u in units], 4, pairs, max_layers=4)
    loads = _loads(split, weight, pairs)
    assert max(loads.values()) == 8.0  # 12 layers + a head of 3 over two pairs: 8 and 7 is the best
    assert all(stage.count("moe") <= 4 for stage in split)
    capped = balanced_split(units, [sum(weight[m] for m in u) for u in units], 4, pairs, max_layers=3)
    assert [stage.count("moe") for stage in capped] == [3, 3, 3, 3]
    with pytest.raises(WindtunnelError, match="layout"):
        balanced_split(units, [1.0] * len(units), 3, lambda s: s, max_layers=3)


DSV3 = ("deepseek-v3", "h800", 2048)
PLAN = ("tp=1,pp=16,ep=64,precision=fp8,mtp=1,schedule=dualpipe,dispatcher=deepep,moments=bf16,act_fp8_store=true,"
        "recompute_modules=layernorm+mla_up_proj+moe_act")


def test_balanced_dualpipe_step_is_faster_fits_and_its_layout_pins_it():
    even = simulate_training(*DSV3, seq_len=4096, global_batch=15360, plan=PLAN)
    balanced = simulate_training(*DSV3, seq_len=4096, global_batch=15360, plan=PLAN + ",layout=balanced")
    assert balanced.step_time_s < even.step_time_s and balanced.feasible
    line = next(a for a in balanced.assumptions if "stages balanced" in a)
    chosen = line.split("layout ")[1].split(" ")[0]
    stages = expand_layout(chosen)
    assert len(stages) == 16 and "".join(stages).count("t") == 61 and chosen.endswith("mL") and max(s.count("t") for s in stages) <= 4
    pinned = simulate_training(*DSV3, seq_len=4096, global_batch=15360, plan=PLAN + f",layout={chosen}")
    assert pinned.step_time_s == pytest.approx(balanced.step_time_s, rel=1e-12)


def test_balanced_interleaved_runs_and_too_many_stages_is_an_error():
    result = simulate_training("llama3-8b", "h100-sxm", 64, seq_len=4096, global_batch=128,
                               plan="tp=2,pp=4,vpp=2,layout=balanced")
    assert any("stages balanced" in a for a in result.assumptions)
    with pytest.raises(WindtunnelError, match="pp"):
        simulate_training("llama3-8b", "h100-sxm", 64, seq_len=4096, global_batch=128, plan="tp=1,pp=8,vpp=8,layout=balanced")


def test_search_refinement_keeps_the_faster_of_even_and_balanced():
    """The search's refinement plays a pipelined plan both ways and keeps the faster feasible split; a plan that
    pins a layout, or has no pipeline, is played as given."""
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.model import load_model
    from windtunnel.specs.plan import parse_plan
    from windtunnel.train.space import SearchSpace, refine

    space = SearchSpace(load_model("deepseek-v3"), load_hardware("h800", 2048), 4096, 15360)
    even = simulate_training(*DSV3, seq_len=4096, global_batch=15360, plan=PLAN)
    refined = refine(space, parse_plan(PLAN))
    assert refined.feasible and refined.step_time_s < even.step_time_s
    assert "layout=balanced" in refined.plan
    pinned = refine(space, parse_plan(PLAN + ",layout=balanced"))
    assert pinned.step_time_s == pytest.approx(refined.step_time_s, rel=1e-12)
    flat = refine(space, parse_plan("tp=8,pp=1,ep=64,precision=fp8,dispatcher=deepep"))
    assert "layout" not in flat.plan
