"""train explain: the verdict comes from the engine's trace, and every remedy shown is what the engine gives
for its printed plan (README headline job; 20 random feasible jobs; an infeasible job's price of fitting)."""

from __future__ import annotations

import json
import random

import pytest

from conftest import small_dense
from windtunnel.api import simulate_training
from windtunnel.insight import explain_job, explain_training, training_job
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.plan import parse_plan
from windtunnel.train.remedies import apply_change, fires, load_rules, plan_diff

HEADLINE = dict(model="llama3-405b", hardware="h100-sxm", devices=16384, seq_len=8192, global_batch=2048,
                plan="tp=8,pp=16,mbs=1,recompute=selective,sp=true,zero=1")


@pytest.fixture(scope="module", name="headline")
def headline_fixture() -> dict:
    return explain_training(**HEADLINE)


def test_headline_names_the_shortfall_and_the_bubble(headline):
    """The README job does not fit: the verdict says so first, with the shortfall, and names the bubble."""
    memory = headline["memory"]
    assert headline["feasible"] is False and memory["fits"] is False
    assert memory["shortfall_bytes"] == pytest.approx(memory["peak_memory_bytes"] - memory["capacity_bytes"])
    assert memory["shortfall_bytes"] > 0 and memory["largest"] == "activations"
    assert headline["verdict"][0].startswith("does not fit")
    assert "bubble" in headline["verdict"][1]
    assert headline["shares"]["bubble"] > 0.3
    assert "bubble" in (headline["bottleneck"]["resource"], headline["largest_overhead"]["resource"])


def test_headline_first_fitting_remedy_is_verified_by_simulate(headline):
    """The first remedy that fits, simulated from its printed plan, gives the step and memory it claims."""
    remedy = next(r for r in headline["remedies"] if r["feasible"])
    assert remedy["verified"] is True
    again = simulate_training(HEADLINE["model"], HEADLINE["hardware"], HEADLINE["devices"],
                              seq_len=HEADLINE["seq_len"], global_batch=HEADLINE["global_batch"], plan=remedy["plan"])
    assert again.feasible
    assert again.step_time_s <= remedy["step_time_s"] * (1 + 1e-12)
    assert again.peak_memory_bytes == remedy["peak_memory_bytes"]
    assert remedy["gain"] == pytest.approx(again.tokens_per_s / headline["tokens_per_s"] - 1)


def test_shares_sum_to_one_and_bottleneck_is_the_largest(headline):
    shares = headline["shares"]
    assert sum(shares.values()) == pytest.approx(1.0)
    assert all(value > 0 for value in shares.values())
    assert headline["bottleneck"]["resource"] == max(shares, key=shares.get)
    # The seconds are the engine's breakdown, re-split: they add up to the step.
    assert sum(headline["seconds"].values()) == pytest.approx(headline["step_time_s"], rel=1e-9)
    # DP and PP of the headline job cross the scale-out tier, TP stays on the node.
    assert {"scale-out:dp", "node:tp"} <= set(shares)
    assert headline["tiers"]["scale-out"]["carries"] == ["dp", "pp"]


def test_json_contract_is_strict(headline):
    text = json.dumps(headline, allow_nan=False)
    again = json.loads(text)
    for key in ("bottleneck", "shares", "feasible", "remedies"):
        assert key in again
    assert set(again["bottleneck"]) >= {"resource", "share"}
    for remedy in again["remedies"]:
        assert set(remedy) >= {"change", "plan", "feasible", "step_time_s", "peak_memory_bytes", "gain", "verified"}
        assert remedy["verified"] is True


def _random_feasible_jobs(count: int, seed: int = 11):
    rng = random.Random(seed)
    jobs = []
    while len(jobs) < count:
        plan = (f"tp={rng.choice([1, 2, 4, 8])},pp={rng.choice([1, 2, 4])},mbs={rng.choice([1, 2])},"
                f"recompute={rng.choice(['none', 'selective', 'full'])},zero={rng.choice([0, 1, 2, 3])}")
        try:
            job = training_job(small_dense(), rng.choice(["h100-sxm", "a100-80g"]), rng.choice([8, 16, 32]),
                               seq_len=2048, global_batch=rng.choice([32, 64, 128]), plan=plan)
            if simulate_training(job.model, job.cluster, seq_len=2048, global_batch=job.global_batch,
                                 plan=plan).feasible:
                jobs.append(job)
        except WindtunnelError:
            continue
    return jobs


def test_random_feasible_jobs_every_remedy_is_at_least_as_fast_as_claimed():
    """20 random feasible jobs: each remedy fits, is faster than the plan, and simulating its printed plan gives
    no slower step than claimed; none is labelled the price of fitting (the plan already fits)."""
    shown = 0
    for job in _random_feasible_jobs(20):
        document = explain_job(job, top=4)
        assert document["feasible"]
        for remedy in document["remedies"]:
            shown += 1
            assert remedy["feasible"] and remedy["gain"] > 0 and not remedy["price_of_fitting"]
            again = simulate_training(job.model, job.cluster, seq_len=job.seq_len, global_batch=job.global_batch,
                                      plan=remedy["plan"])
            assert again.feasible
            assert again.step_time_s <= remedy["step_time_s"] * (1 + 1e-12)
            assert again.step_time_s < document["step_time_s"]
    assert shown > 20  # the rules and the local search do find faster plans for these jobs


def test_infeasible_plan_remedies_all_fit_and_slower_ones_are_labelled():
    """A plan that does not fit: every remedy fits; one that is slower says it is the price of fitting."""
    job = training_job("llama3-70b", "h100-sxm", 64, seq_len=8192, global_batch=64,
                       plan="tp=8,pp=1,mbs=1,recompute=none,zero=1")
    document = explain_job(job)
    assert not document["feasible"] and document["remedies"]
    for remedy in document["remedies"]:
        assert remedy["feasible"]
        assert remedy["price_of_fitting"] == (remedy["gain"] < 0)
    # The smallest changes lead: the first remedies change one step from the plan.
    assert len(document["remedies"][0]["rules"]) == 1


def test_rules_are_data_with_rationales():
    rules = load_rules()
    assert rules.rules and rules.moves
    for rule in rules.rules:
        assert len(rule.rationale) > 40 and rule.candidates


def test_rule_firing_follows_the_verdict():
    rule = next(r for r in load_rules().rules if r.id == "interleave-stages")
    assert fires(rule, {"feasible": True, "shares": {"bubble": 0.3}})
    assert not fires(rule, {"feasible": True, "shares": {"bubble": 0.01, "compute": 0.99}})
    fit = next(r for r in load_rules().rules if r.id == "recompute-to-fit")
    assert fires(fit, {"feasible": False, "shares": {}}) and not fires(fit, {"feasible": True, "shares": {}})
    dp = next(r for r in load_rules().rules if r.id == "move-dp-inward")
    assert fires(dp, {"feasible": True, "shares": {"scale-out:dp": 0.2}})


def test_apply_change_operators_and_derived_schedule():
    base = parse_plan("tp=8,pp=16,dp=128,vpp=1,mbs=1,recompute=selective,zero=1,schedule=1f1b")
    interleaved = apply_change(base, {"vpp": "x4"})
    assert interleaved.vpp == 4 and interleaved.pipeline_schedule == "interleaved" and interleaved.dp == 0
    assert apply_change(base, {"mbs": "/2"}) is None  # 1 is not divisible by 2
    assert apply_change(base, {"zero": "+1"}).zero == 2
    assert apply_change(base, {"zero": 1}) is None  # no change
    assert plan_diff(base, interleaved) == "dp 128 -> 0, vpp 1 -> 4, schedule 1f1b -> interleaved"


def test_moe_expert_imbalance_is_load_imbalance():
    """The busiest expert rank's extra tokens show as load imbalance, not as compute."""
    def shares(imbalance: float) -> dict:
        job = training_job("mixtral-8x7b", "h100-sxm", 16, seq_len=4096, global_batch=32,
                           plan="tp=2,pp=1,ep=8,mbs=1,recompute=full,zero=1", moe_imbalance=imbalance)
        return explain_job(job, remedies=False)["seconds"]

    balanced, skewed = shares(1.0), shares(1.5)
    assert balanced.get("imbalance", 0.0) == 0.0
    assert skewed["imbalance"] > 0.0
    assert skewed["compute"] == pytest.approx(balanced["compute"], rel=0.05)


def test_balance_stages_remedy_proposes_the_balanced_layout():
    """The DeepSeek-V3 DualPipe recipe on the even split waits on its heaviest rank: train explain offers
    layout=balanced, simulated, faster, and shown as 'layout even -> balanced'."""
    plan = ("tp=1,pp=16,ep=64,precision=fp8,mtp=1,schedule=dualpipe,dispatcher=deepep,moments=bf16,"
            "act_fp8_store=true,recompute_modules=layernorm+mla_up_proj+moe_act")
    document = explain_training(model="deepseek-v3", hardware="h800", devices=2048, seq_len=4096,
                                global_batch=15360, plan=plan)
    balanced = [r for r in document["remedies"] if r["change"] == "layout even -> balanced"]
    assert balanced and balanced[0]["step_time_s"] < document["step_time_s"]
    assert "balance-stages" in balanced[0]["rules"]
