"""Whole-job rehearsal: Sim2Train's step for each phase of a run, Sim2Availability's faults for the same
cluster, plan and policy, and what the run costs: wall-clock time to train, device-hours, energy, money.

A job is one or more phases run back to back on the same cluster (sequence length, token budget, global
batch, plan). For each phase:

1. Sim2Train simulates one step of the plan: step time (s), tokens/s, the plan as validated (dp, ZeRO).
2. The checkpoint's size and write time follow from the plan (``job_costs.checkpoint_cost``); the
   interval is Daly's optimum for the job's failure rate and that write time unless given.
3. The blast radius follows from the placement: a node failure stops a synchronous job (every policy
   but elastic-shrink waits for the failed node's TP x PP x CP group to be restored); elastic shrink
   drops the data-parallel replica (tp x pp x cp devices) that held the node.
4. Sim2Availability's Markov model gives the effective training time ratio (ETTR) of that scenario;
   the phase takes ``tokens / tokens_per_s / ETTR`` seconds of wall time. The step simulation re-checks
   the ETTR (confidence interval) and yields the timeline of one sampled run.
5. Device-hours are devices x wall time (what a reservation is billed and what model cards report);
   energy uses the chip's catalog power and the rule in ``job_costs``; cost = device-hours x price
   (plus energy x energy price when given); no price is invented.

This module spans two pillars (train and avail) and so lives at the top of the package, as api.py does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from windtunnel.job.costs import (
    DEFAULT_IDLE_FRACTION,
    IDLE_REASON,
    busy_fraction,
    checkpoint_cost,
    phase_energy_kwh,
)
from windtunnel.job.units import format_tokens, parse_tokens
from windtunnel.specs.errors import WindtunnelError

PHASE_KEYS = {"seq": "seq_len", "seq-len": "seq_len", "seq_len": "seq_len", "tokens": "tokens",
              "batch": "global_batch", "global-batch": "global_batch", "global_batch": "global_batch",
              "name": "name", "devices": "devices"}
DEFAULT_STORAGE_BANDWIDTH = 2.0e12
SEARCH_REFINE = 16  # plans refined by the event engine when a phase says plan=search
STORAGE_REASON = ("checkpoint storage bandwidth 2 TB/s when not given: the sustained Tectonic throughput Llama 3 "
                  "reports (validation/reliability.csv A04)")


@dataclass
class Phase:
    """One phase of a job: sequence length (tokens), token budget, global batch (sequences), plan."""

    name: str
    seq_len: int
    tokens: float
    global_batch: int
    plan: str = ""
    devices: int | None = None   # None: the job's --devices


def parse_phase(text: str, index: int, *, default_batch: int | None = None) -> Phase:
    """``seq=8192,tokens=15T,batch=2048,plan=tp=8,pp=16,...`` -> Phase. Items whose key is a phase key
    (seq, tokens, batch, devices, name) are the phase's; ``plan=`` and every other item form the plan (``plan=search``:
    Sim2Train's plan search picks it, ranked by goodput after the job's faults). ``batch`` is
    in sequences, or in tokens with a ``tok`` suffix (``batch=16Mtok``)."""
    fields: dict = {"name": f"phase{index + 1}"}
    plan_items: list[str] = []
    for raw in str(text).split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if sep and key in PHASE_KEYS:
            fields[PHASE_KEYS[key]] = value.strip()
        elif sep and key == "plan":
            if value.strip():
                plan_items.append(value.strip())
        elif sep:
            plan_items.append(item)
        else:
            raise WindtunnelError(f"Phase item '{item}' is not key=value (field 'phase'); give e.g. "
                                  "seq=8192,tokens=15T,batch=2048,plan=tp=8,pp=16.", field="phase")
    missing = [k for k in ("seq_len", "tokens") if k not in fields]
    if missing:
        raise WindtunnelError(f"Phase '{text}' lacks {' and '.join('seq' if m == 'seq_len' else m for m in missing)} "
                              "(field 'phase'); give e.g. seq=8192,tokens=15T,batch=2048,plan=tp=8,pp=16.",
                              field="phase")
    seq = _whole(fields["seq_len"], "phase seq")
    tokens = parse_tokens(fields["tokens"], "phase tokens")
    batch_text = fields.get("global_batch")
    if batch_text is None:
        if default_batch is None:
            raise WindtunnelError(f"Phase '{text}' gives no batch and there is no --global-batch (field 'phase'); "
                                  "give batch=SEQUENCES or batch=16Mtok.", field="phase")
        batch = default_batch
    elif str(batch_text).lower().endswith(("tok", "tokens")):
        batch_tokens = parse_tokens(batch_text, "phase batch")
        batch = max(1, round(batch_tokens / seq))
    else:
        batch = _whole(batch_text, "phase batch")
    devices = _whole(fields["devices"], "phase devices") if "devices" in fields else None
    return Phase(name=str(fields["name"]), seq_len=seq, tokens=tokens, global_batch=batch, plan=",".join(plan_items),
                 devices=devices)


def _whole(text, field: str) -> int:
    try:
        value = int(str(text))
    except ValueError:
        value = 0
    if value < 1:
        raise WindtunnelError(f"Field '{field}' has value '{text}'; it must be a positive whole number.", field=field)
    return value


@dataclass
class JobInputs:
    """Everything a rehearsal needs besides the phases (units in names)."""

    model: str
    hardware: str
    devices: int
    faults: str = "catalog:llama3-54day"
    policy: str = "restart-from-checkpoint"
    checkpoint_every_s: float | None = None
    storage_bandwidth_bytes_per_s: float | None = None
    price_per_device_hour: float | None = None
    currency: str = ""
    energy_price_per_kwh: float | None = None
    pue: float = 1.0
    idle_fraction: float | None = None
    device_power_w: float | None = None
    framework: str = "megatron"
    profile: str | Path | None = None
    replications: int = 20
    seed: int = 0
    timeline_bins: int = 400
    assumptions: list[str] = field(default_factory=list)


def _scenario_for(inp: JobInputs, train, plan, ckpt, useful_s: float):
    """The availability scenario of one phase and the checkpoint interval it uses (s)."""
    from windtunnel.avail.formulas import daly_interval_s
    from windtunnel.avail.policy import parse_policy
    from windtunnel.avail.scenario import make_scenario

    given = parse_policy(inp.policy).model_dump(exclude_unset=True)
    update: dict = {"replica_devices": plan.tp * plan.pp * plan.cp}
    if "checkpoint_cost_s" not in given:
        update["checkpoint_cost_s"] = ckpt.write_s
    if given.get("checkpoint_async") and "checkpoint_stall_s" not in given:
        update["checkpoint_stall_s"] = ckpt.async_stall_s
    every = inp.checkpoint_every_s or given.get("checkpoint_every_s")
    update["checkpoint_every_s"] = every or 3600.0
    pol = parse_policy(inp.policy, **update)
    horizon = max(useful_s, train.step_time_s)
    sc = make_scenario(inp.devices, inp.faults, pol, step_time_s=train.step_time_s, horizon_s=horizon,
                       hardware=inp.hardware)
    rule = "given"
    if every is None:
        rate = sc.rates.failure_rate_per_s
        mtbf = 1.0 / rate if rate > 0 else horizon
        every = max(daly_interval_s(sc.mechanics.stall, mtbf), train.step_time_s)
        rule = f"Daly's optimum for MTBF {mtbf / 3600:.3g} h and a {sc.mechanics.stall:.3g} s stall"
        if sc.policy.checkpoint_async:
            every = max(every, sc.policy.checkpoint_cost_s - (sc.policy.checkpoint_stall_s or 0.0))
    return sc.with_policy(checkpoint_every_s=float(every)), rule


def _blast_radius(sc, plan) -> dict:
    replica = plan.tp * plan.pp * plan.cp
    elastic = sc.policy.kind == "elastic-shrink"
    return {"node_devices": sc.devices_per_node, "replica_devices": replica, "data_parallel_replicas": plan.dp,
            "stops": ("one data-parallel replica (its tp x pp x cp group), "
                      f"{sc.mechanics.shrink_per_node:.3%} of capacity per node short") if elastic
            else f"the whole job (synchronous training; the failed node's {replica}-device replica must be restored)"}


def rehearse_phase(inp: JobInputs, phase: Phase, *, keep_timeline: bool = True) -> dict:
    """Rehearse one phase (see the module docstring); returns its row (units in key names)."""
    from windtunnel.api import resolve_model, simulate_training
    from windtunnel.avail.markov import solve_markov
    from windtunnel.avail.sim import simulate
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.plan import parse_plan

    search_note = None
    if phase.plan.strip().lower() == "search":
        phase, search_note = _searched_phase(inp, phase)
    train = simulate_training(inp.model, inp.hardware, inp.devices, seq_len=phase.seq_len,
                              global_batch=phase.global_batch, plan=phase.plan, framework=inp.framework,
                              profile=inp.profile)
    if not train.feasible:
        raise WindtunnelError(f"Phase '{phase.name}' (seq {phase.seq_len}, batch {phase.global_batch}, plan "
                              f"'{phase.plan or 'defaults'}') is infeasible: {train.infeasible_reason}. Give another "
                              "plan for this phase (field 'phase').", field="phase")
    spec, _ = resolve_model(inp.model)
    plan = parse_plan(train.plan)
    chip = load_hardware(inp.hardware, inp.devices).chip
    ckpt = checkpoint_cost(spec.total_params(), devices=inp.devices, dp=plan.dp, zero=plan.zero, replicas=plan.dp_replicas,
                           moments=plan.moments,
                           storage_bandwidth_bytes_per_s=inp.storage_bandwidth_bytes_per_s or DEFAULT_STORAGE_BANDWIDTH,
                           host_link_bytes_per_s=chip.host_link_bandwidth)
    useful_s = phase.tokens / train.tokens_per_s
    sc, interval_rule = _scenario_for(inp, train, plan, ckpt, useful_s)
    mk = solve_markov(sc)
    if mk.ettr <= 0:
        raise WindtunnelError(f"Phase '{phase.name}' makes no progress under faults '{inp.faults}' and policy "
                              f"'{inp.policy}' (ETTR 0): the job never runs long enough to checkpoint. Give a "
                              "shorter checkpoint write, more spares or fewer faults.", field="faults")
    wall_s = useful_s / mk.ettr
    scale = wall_s / sc.horizon_s
    lost = {k: v * scale for k, v in mk.lost_seconds_by_cause.items()}
    sim_sc = _with_horizon(sc, wall_s)
    sim = simulate(sim_sc, inp.replications, inp.seed, keep_timeline=keep_timeline)
    util = busy_fraction(train.breakdown, train.step_time_s)
    power = inp.device_power_w or chip.power_w
    energy = None
    if power:
        energy = phase_energy_kwh(devices=inp.devices, wall_s=wall_s, lost_s_by_cause=lost, max_power_w=power,
                                  idle_fraction=DEFAULT_IDLE_FRACTION if inp.idle_fraction is None else inp.idle_fraction,
                                  utilisation=util, pue=inp.pue)
    lo, hi = sim.ci95("ettr")
    row = {
        "name": phase.name, "devices": inp.devices, "seq_len": phase.seq_len, "tokens": phase.tokens, "tokens_text": format_tokens(phase.tokens),
        "global_batch": phase.global_batch, "plan": train.plan, "step_time_s": train.step_time_s,
        "tokens_per_s": train.tokens_per_s, "mfu": train.mfu, "steps": math.ceil(phase.tokens / (phase.seq_len * phase.global_batch)),
        "fault_free_time_s": useful_s, "wall_s": wall_s, "ettr": mk.ettr, "availability": mk.availability,
        "goodput_tokens_per_s": train.tokens_per_s * mk.ettr,
        "interruptions": mk.interruptions_per_day * wall_s / 86400.0,
        "unexpected_interruptions": mk.unexpected_per_day * wall_s / 86400.0,
        "lost_seconds_by_cause": lost, "device_hours": inp.devices * wall_s / 3600.0,
        "checkpoint": {"bytes": ckpt.total_bytes, "writer_ranks": ckpt.writer_ranks, "shard_bytes": ckpt.shard_bytes,
                       "write_s": ckpt.write_s, "stall_s": sc.mechanics.stall, "async": sc.policy.checkpoint_async,
                       "every_s": sc.mechanics.tau, "interval_rule": interval_rule, "rule": ckpt.rule},
        "blast_radius": _blast_radius(sc, plan),
        "failures_per_day": sc.rates.failure_rate_per_s * 86400.0,
        "energy_kwh": None if energy is None else energy["energy_kwh"], "power": energy,
        "simulated": {"method": "simulate", "replications": inp.replications, "seed": inp.seed,
                      "ettr": sim.ettr, "ettr_ci95": [lo, hi],
                      "wall_s_ci95": [useful_s / hi if hi > 0 else None, useful_s / lo if lo > 0 else None]},
        "band_tokens_per_s": (train.band or {}).get("tokens_per_s_band"),
        "scenario_assumptions": list(sc.assumptions),
        "scenario_warnings": [f"phase {phase.name}: {w}" for w in sc.warnings()],
    }
    if search_note is not None:
        row["plan_search"] = search_note
    if keep_timeline and sim.timeline is not None:
        from windtunnel.avail.timeline import build_timeline

        row["_timeline"] = build_timeline(sim.timeline, sim_sc, max(wall_s / inp.timeline_bins, train.step_time_s))
    return row


def _searched_phase(inp: JobInputs, phase: Phase) -> tuple[Phase, dict]:
    """``plan=search``: Sim2Train's plan search for the phase, its refined plans ranked by goodput after the
    job's faults (``job_search``); the phase runs the best plan with faults."""
    from windtunnel.api import resolve_model
    from windtunnel.job.search import rank_with_faults
    from windtunnel.search.backends import make_backend
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.stack import load_stack
    from windtunnel.train.search import search_training
    from windtunnel.train.space import SearchSpace

    spec, dag = resolve_model(inp.model)
    if dag is not None:
        raise WindtunnelError("plan=search needs a transformer model, not an operator DAG (field 'phase').", field="phase")
    space = SearchSpace(spec, load_hardware(inp.hardware, inp.devices), phase.seq_len, phase.global_batch,
                        framework=load_stack(inp.framework).id)
    backend = make_backend("local", workers=None)
    try:
        doc = search_training(space, backend, top=SEARCH_REFINE, refine_count=SEARCH_REFINE)
    finally:
        backend.close()
    if not doc["plans"]:
        raise WindtunnelError(f"Phase '{phase.name}': the plan search found no plan that fits (seq {phase.seq_len}, "
                              f"batch {phase.global_batch}, {inp.devices} devices); give a plan (field 'phase').",
                              field="phase")
    fa = rank_with_faults(doc, inp)
    note = {"refined": len(doc["plans"]), "best_fault_free": fa["best_fault_free"],
            "best_with_faults": fa["best_with_faults"], "best_plan_changes": fa["best_plan_changes"]}
    return Phase(phase.name, phase.seq_len, phase.tokens, phase.global_batch, fa["best_with_faults"], phase.devices), note


def _with_horizon(sc, horizon_s: float):
    from windtunnel.avail.scenario import Scenario

    return Scenario(sc.devices, sc.devices_per_node, sc.rates, sc.policy, sc.step_time_s, float(horizon_s),
                    sc.profile_id, sc.assumptions)


def rehearse_job(inp: JobInputs, phases: list[Phase], *, keep_timeline: bool = True) -> dict:
    """Rehearse a whole job: its phases back to back. Returns the ``train job --json`` document."""
    if not phases:
        raise WindtunnelError("A job needs at least one phase (field 'phase'): give --tokens with --seq-len and "
                              "--global-batch, or one --phase per phase.", field="phase")
    from dataclasses import replace

    rows = [rehearse_phase(replace(inp, devices=p.devices) if p.devices else inp, p, keep_timeline=keep_timeline)
            for p in phases]
    wall = sum(r["wall_s"] for r in rows)
    useful = sum(r["fault_free_time_s"] for r in rows)
    device_hours = sum(r["device_hours"] for r in rows)
    energies = [r["energy_kwh"] for r in rows]
    energy = None if any(e is None for e in energies) else sum(energies)
    cost, breakdown = None, {}
    if inp.price_per_device_hour is not None:
        breakdown["devices"] = device_hours * inp.price_per_device_hour
    if inp.energy_price_per_kwh is not None and energy is not None:
        breakdown["energy"] = energy * inp.energy_price_per_kwh
    if breakdown:
        cost = sum(breakdown.values())
    lost: dict[str, float] = {}
    for r in rows:
        for k, v in r["lost_seconds_by_cause"].items():
            lost[k] = lost.get(k, 0.0) + v
    assumptions = list(inp.assumptions)
    if inp.storage_bandwidth_bytes_per_s is None:
        assumptions.append(STORAGE_REASON)
    if energy is not None:
        if inp.idle_fraction is None:
            assumptions.append(IDLE_REASON)
        assumptions.append("energy: device power = idle + (board power - idle) x compute fraction of the step while "
                           f"running, idle while down or checkpointing; facility energy = IT energy x PUE {inp.pue:g}; "
                           "hosts, network and storage not counted beyond PUE")
    else:
        assumptions.append(f"energy: no board power for chip of '{inp.hardware}' in the catalog and no --device-power "
                           "given, so energy_kwh is null")
    if inp.price_per_device_hour is None:
        assumptions.append("cost: no --price given, so cost is null (no price is invented)")
    assumptions.append("phases run back to back (on the job's devices unless a phase gives devices=); switching "
                       "phases costs nothing beyond a checkpoint; the fault rates are stationary over the run")
    assumptions.append("device-hours = the job's devices x wall time (down time included, as model cards count); "
                       "spare nodes held by the policy are not counted")
    warnings: list[str] = []
    for r in rows:
        for a in r.pop("scenario_assumptions"):
            if a not in assumptions:
                assumptions.append(a)
        warnings.extend(r.pop("scenario_warnings"))
    doc = {
        "model": inp.model, "hardware": inp.hardware, "devices": inp.devices, "faults": inp.faults,
        "policy": inp.policy, "tokens": sum(p.tokens for p in phases),
        "time_to_train_s": wall, "time_to_train_days": wall / 86400.0, "fault_free_time_s": useful,
        "ettr": useful / wall, "interruptions": sum(r["interruptions"] for r in rows),
        "unexpected_interruptions": sum(r["unexpected_interruptions"] for r in rows),
        "lost_seconds_by_cause": lost, "device_hours": device_hours, "energy_kwh": energy, "pue": inp.pue,
        "cost": cost, "cost_breakdown": breakdown or None, "currency": inp.currency or None,
        "price_per_device_hour": inp.price_per_device_hour, "energy_price_per_kwh": inp.energy_price_per_kwh,
        "phases": rows, "assumptions": assumptions, "warnings": warnings,
    }
    return doc


def job_timeline(doc: dict) -> list[dict]:
    """The run's progress vs wall time (one sampled run per phase, phases back to back): rows of
    t_s, phase, state (the bin's dominant state), worst_state (the worst seen in it), useful_throughput (fraction
    of fault-free speed), tokens (trained so far)."""
    out, t0, base = [], 0.0, 0.0
    for r in doc["phases"]:
        tl = r.get("_timeline")
        if tl is None:
            continue
        bin_s, done = tl["bin_s"], 0.0
        for t, s, w, u in zip(tl["t_s"], tl["state"], tl["worst_state"], tl["useful_throughput"], strict=True):
            if t >= r["wall_s"]:
                break
            done = min(r["tokens"], done + u * min(bin_s, r["wall_s"] - t) * r["tokens_per_s"])
            out.append({"t_s": t0 + t, "phase": r["name"], "state": s, "worst_state": w, "useful_throughput": u,
                        "tokens": base + done})
        t0 += r["wall_s"]
        base += r["tokens"]
    return out


def strip_private(doc: dict) -> dict:
    """The document without per-phase timelines (kept for plots and CSV, not for JSON)."""
    return {**doc, "phases": [{k: v for k, v in r.items() if not k.startswith("_")} for r in doc["phases"]]}
