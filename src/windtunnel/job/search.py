"""Failure-aware plan ranking for `train search --faults`: each refined plan's tokens/s from the search, times
the ETTR Sim2Availability gives that plan under the faults and policy (its own checkpoint size and write time,
Daly interval and blast radius, as in ``windtunnel.job.run``), ranked by goodput (tokens per wall-second) beside
the fault-free rank. Top-level because it spans the train and avail pillars."""

from __future__ import annotations

from types import SimpleNamespace

from windtunnel.job.costs import checkpoint_cost
from windtunnel.job.run import DEFAULT_STORAGE_BANDWIDTH, JobInputs, _scenario_for


def rank_with_faults(document: dict, inp: JobInputs, *, horizon_s: float = 30 * 86400.0) -> dict:
    """Add goodput after faults and both ranks to the search document's refined plans (in place); returns the
    ``failure_aware`` block (rows sorted by goodput, and whether the best plan changed)."""
    from windtunnel.api import resolve_model
    from windtunnel.avail.markov import solve_markov
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.plan import parse_plan

    spec, _ = resolve_model(inp.model)
    chip = load_hardware(inp.hardware, inp.devices).chip
    rows = document["plans"]
    for row in rows:
        plan = parse_plan(row["plan"])
        ckpt = checkpoint_cost(spec.total_params(), devices=inp.devices, dp=plan.dp, zero=plan.zero, replicas=plan.dp_replicas, moments=plan.moments,
                               storage_bandwidth_bytes_per_s=inp.storage_bandwidth_bytes_per_s or DEFAULT_STORAGE_BANDWIDTH,
                               host_link_bytes_per_s=chip.host_link_bandwidth)
        sc, rule = _scenario_for(inp, SimpleNamespace(step_time_s=row["step_time_s"]), plan, ckpt, horizon_s)
        res = solve_markov(sc)
        row.update(rank_fault_free=row["rank"], ettr=res.ettr, availability=res.availability,
                   goodput_tokens_per_s=row["tokens_per_s"] * res.ettr, checkpoint_write_s=ckpt.write_s,
                   checkpoint_every_s=sc.mechanics.tau, checkpoint_writer_ranks=ckpt.writer_ranks,
                   replica_devices=plan.tp * plan.pp * plan.cp)
    for rank, row in enumerate(sorted(rows, key=lambda r: (-r["goodput_tokens_per_s"], r["rank"])), start=1):
        row["rank_with_faults"] = rank
    ordered = sorted(rows, key=lambda r: r["rank_with_faults"])
    best_free = min(rows, key=lambda r: r["rank"])["plan"] if rows else None
    best_faults = ordered[0]["plan"] if ordered else None
    return {"faults": inp.faults, "policy": inp.policy, "storage_bandwidth_bytes_per_s":
            inp.storage_bandwidth_bytes_per_s or DEFAULT_STORAGE_BANDWIDTH,
            "ranking": [{"plan": r["plan"], "rank_with_faults": r["rank_with_faults"], "rank_fault_free": r["rank"],
                         "tokens_per_s": r["tokens_per_s"], "ettr": r["ettr"],
                         "goodput_tokens_per_s": r["goodput_tokens_per_s"]} for r in ordered],
            "best_plan_changes": best_free != best_faults, "best_fault_free": best_free, "best_with_faults": best_faults,
            "rule": "goodput = tokens/s x ETTR (Markov) of the plan's own checkpoint write, Daly interval and replica "
                    "(tp x pp x cp) under the faults and policy"}
