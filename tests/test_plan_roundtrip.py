"""Plans printed in the compact table form (Plan.short) parse back into the same plan (`--plan` round trip)."""

from __future__ import annotations

import random

import pytest

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.plan import Plan, parse_plan


def _random_plan(rng: random.Random) -> Plan:
    tp = rng.choice([1, 2, 4, 8])
    recompute = rng.choice(["none", "selective", "full"])
    return parse_plan({
        "tp": tp, "pp": rng.choice([1, 2, 4, 8]), "cp": rng.choice([1, 2]), "ep": rng.choice([1, 4]),
        "vpp": rng.choice([1, 2]), "mbs": rng.choice([1, 2, 4]), "recompute": recompute,
        "recompute_layers": rng.choice([-1, 2]) if recompute == "full" else -1,
        "sp": rng.choice([True, False]), "tp_overlap": rng.choice([True, False]), "zero": rng.choice([0, 1, 3]),
        "ep_overlap": rng.choice([True, False]), "precision": rng.choice(["bf16", "fp8"]),
        "schedule": rng.choice([None, "dualpipe"]), "cp_algo": rng.choice(["ring", "ulysses"]),
        "cp_overlap": rng.choice([True, False]),
    })


def test_short_form_round_trips():
    rng = random.Random(7)
    for _ in range(300):
        plan = _random_plan(rng)
        again = parse_plan(plan.short())
        assert again.short() == plan.short()
        for name in ("tp", "pp", "cp", "ep", "vpp", "mbs", "recompute", "recompute_layers", "zero", "precision",
                     "ep_overlap", "pipeline_schedule", "sequence_parallel"):
            assert getattr(again, name) == getattr(plan, name), (name, plan.short())
        if plan.cp > 1:  # cp_overlap only means something with context parallelism
            name = "cp_overlap"
            assert getattr(again, name) == getattr(plan, name), (name, plan.short())


def test_bare_flags_and_recompute_layers():
    plan = parse_plan("tp=4,pp=8,recompute=full:2,sp,tp_overlap,zero=1,dualpipe")
    assert plan.sp and plan.tp_overlap and plan.recompute == "full" and plan.recompute_layers == 2
    assert plan.schedule == "dualpipe"
    with pytest.raises(WindtunnelError) as info:
        parse_plan("tp=4,fast")
    assert "'fast'" in str(info.value) and "bare flags" in str(info.value)
