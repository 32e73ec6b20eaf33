"""The public Python API: training, serving and availability in one place; the CLI is a thin layer over it.

Sim2Train (simulate_training), Sim2Infer (simulate_serving, search_serving, compare_dynamic,
validate_inference) and what spans pillars (failure_aware_goodput: Sim2Train step times fed into
Sim2Availability) are all reachable from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from windtunnel.graph.capture import capture
from windtunnel.graph.dag import DagModel, load_dag
from windtunnel.graph.resolve import resolve_model
from windtunnel.profile import Profile, apply_profile
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import Cluster, load_hardware
from windtunnel.specs.model import ModelSpec, load_model
from windtunnel.specs.plan import Plan, parse_plan
from windtunnel.train.result import TrainingResult
from windtunnel.train.step import TrainingJob, simulate
from windtunnel.train.uncertainty import annotate

__all__ = ["load_hardware", "load_model", "load_dag", "capture", "parse_plan", "simulate_training", "TrainingResult",
           "TrainingJob", "search_training", "simulate_availability",
           "failure_aware_goodput", "simulate_serving", "search_serving", "compare_dynamic", "validate_inference"]
if TYPE_CHECKING:
    from windtunnel.avail.result import AvailabilityResult
    from windtunnel.infer.api import compare_dynamic, simulate_serving
    from windtunnel.infer.search_result import ServingSearch
    from windtunnel.train.search_result import TrainingSearch
_SERVING = ("simulate_serving", "compare_dynamic")


def __getattr__(name: str):
    """Sim2Infer's entry points, imported on first use (a training command need not load the serving pillar)."""
    if name in _SERVING:
        from windtunnel.infer import api as infer_api

        return getattr(infer_api, name)
    raise AttributeError(f"module 'windtunnel.api' has no attribute {name!r}")


def resolve_cluster(hardware: str | Cluster, devices: int | None) -> Cluster:
    """A hardware argument as a Cluster of ``devices`` devices: a chip id, cluster id or cluster YAML (devices
    required), or a Cluster (its own device count unless ``devices`` is given)."""
    if isinstance(hardware, Cluster):
        return hardware if devices is None else hardware.model_copy(update={"devices": devices})
    if devices is None:
        raise WindtunnelError(f"Field 'devices' is required when hardware is given by name ('{hardware}').",
                              field="devices")
    return load_hardware(hardware, devices)


def simulate_training(
    model: str | ModelSpec | DagModel,
    hardware: str | Cluster,
    devices: int | None = None,
    *,
    seq_len: int,
    global_batch: int,
    plan: str | dict | Plan = "",
    flash_attention: bool | None = None,
    fused_loss: bool | None = None,
    moe_imbalance: float = 1.1,
    keep_trace: bool = False,
    framework: str = "megatron",
    profile: str | Path | Profile | None = None,
    what_if: str | list[str] | None = None,
    batch_shape: str | dict | None = None,
    exact: bool = False,
    trace_detail: str = "block",
    trace_rank: int = 0,
) -> TrainingResult:
    """Simulate one training step.

    model: catalog id, model YAML, HF config.json path, operator-DAG YAML, or a ModelSpec/DagModel. hardware: chip id (its
    default cluster), cluster id, cluster YAML, or a Cluster (then ``devices`` may be omitted).
    seq_len in tokens, global_batch in sequences. framework: the training stack (a built-in id from
    ``windtunnel catalog list``'s stacks, e.g. megatron, pytorch-fsdp, deepspeed, mindspeed, or a stack YAML);
    plan fields the plan leaves unset take the stack's defaults. ``flash_attention``/``fused_loss`` override the
    stack's kernels when not None. ``profile``: a calibration profile (YAML path or Profile, from ``windtunnel
    calibrate ... --out``) of the cluster's chip, overlaid on the shipped calibration and listed in the result's
    assumptions. ``what_if``: hardware what-ifs, ``KEY=VALUE`` items (``hbm_bandwidth=x1.5``, ``hbm_capacity=96GiB``;
    :mod:`windtunnel.specs.whatif`), applied to the cluster and the host before simulating.
    ``batch_shape``: for an ONNX model, its symbolic dimensions (``"nodes=2048,edges=16384"``); then
    ``seq_len`` is 1 and ``global_batch`` counts samples of that shape (tokens_per_s reads samples/s).
    ``exact``: play every micro-batch on the event engine instead of the steady-state path (which plays
    warm-up, a few steady periods and cool-down and extends the rest; within 0.1%, train/steady.py).
    ``trace_detail``: with ``keep_trace``, "block" (pipeline blocks of every rank) or "op" (also the operators of
    pipeline rank ``trace_rank`` on its compute, TP, CP, EP, DP and host streams: ``result.trace_ops``).
    Returns a TrainingResult (seconds, bytes, tokens/s).
    """
    model_spec, dag = resolve_model(model, batch_shape)
    if dag is not None and not isinstance(dag, DagModel):  # ONNX: a sample is one of the bound batch shape
        from windtunnel.graph.graph_model import check_graph_plan

        given = parse_plan(plan)
        seq_len, plan = 1, given.model_copy(update={"sp": False, "tp_overlap": False, "recompute": (
            "none" if given.recompute == "selective" else given.recompute)})
        check_graph_plan(plan)
    cluster = resolve_cluster(hardware, devices)
    fitted, notes = apply_profile(profile, cluster.chip.id, framework)
    job = TrainingJob(model=model_spec, cluster=cluster, plan=parse_plan(plan), seq_len=seq_len,
                      global_batch=global_batch, flash_attention=flash_attention, fused_loss=fused_loss,
                      moe_imbalance=moe_imbalance, framework=framework, fitted_override=fitted,
                      keep_trace=keep_trace, dag=dag, extra_assumptions=notes, exact=exact)
    if what_if:
        from windtunnel.train.variant import job_variant

        job = job_variant(job, what_if)
    if trace_detail not in ("block", "op"):
        raise ValueError(f"trace_detail is '{trace_detail}'; valid: block, op")
    if dag is not None and not isinstance(dag, DagModel):
        result = simulate(job)  # the LLM rows' bands do not describe imported DAGs (validation/NONLLM_REPORT.md)
    else:
        result = annotate(simulate(job), generation=cluster.chip.generation, precision=job.plan.precision,
                          arch="moe" if model_spec.moe else "dense")
    if keep_trace and trace_detail == "op" and result.trace is not None:
        from windtunnel.train.op_trace import op_events

        result.trace_ops = op_events(job, result.trace, trace_rank)
    return result


def failure_aware_goodput(
    model: str | ModelSpec | DagModel,
    hardware: str,
    devices: int,
    *,
    seq_len: int,
    global_batch: int,
    plans: list[str] | str,
    faults: str = "catalog:llama3-54day",
    policy: str = "restart-from-checkpoint",
    checkpoint_every_s: float | None = None,
    storage_bandwidth_bytes_per_s: float = 2.0e12,
    checkpoint_bytes_per_param: float = 14.0,
    horizon_s: float = 54 * 86400.0,
    method: str = "markov",
    replications: int = 200,
    seed: int = 0,
    profile: str | Path | Profile | None = None,
    what_if: str | list[str] | None = None,
) -> list[dict]:
    """Failure-aware goodput of training plans: Sim2Train's step time and tokens/s, times the effective
    training time ratio (ETTR) Sim2Availability gives for the same job under faults.

    For each plan: step_time_s and tokens_per_s from ``simulate_training``; the checkpoint holds
    ``checkpoint_bytes_per_param`` bytes per parameter (default 14: bf16 weights 2 + fp32 master 4 + Adam
    moments 8) and is written at ``storage_bandwidth_bytes_per_s`` (default 2e12 B/s: the sustained
    Tectonic throughput Llama 3 reports, validation/reliability.csv A04), blocking unless the policy says
    asynchronous; the checkpoint interval is Daly's optimum for the job's failure rate unless
    ``checkpoint_every_s`` is given; a data-parallel replica spans tp x pp x cp devices (what an elastic
    shrink loses per failed node). ``method``: "markov" (exact steady state) or "simulate". Returns one dict
    per plan with ``goodput_tokens_per_s`` (tokens per wall-second after faults) and the ranks with and
    without faults (1 = best). ``profile``: a calibration profile of the chip for the step times (see
    :func:`simulate_training`); ``what_if``: hardware what-ifs for the step times (the fault model is the catalog
    hardware's).
    """
    from windtunnel.avail.formulas import daly_interval_s
    from windtunnel.avail.markov import solve_markov
    from windtunnel.avail.policy import parse_policy
    from windtunnel.avail.scenario import make_scenario
    from windtunnel.avail.sim import simulate
    from windtunnel.specs.errors import WindtunnelError

    if method not in ("markov", "simulate"):
        raise WindtunnelError(f"Field 'method' is '{method}'; valid methods: markov, simulate.", field="method")
    if not storage_bandwidth_bytes_per_s > 0:
        raise WindtunnelError(f"Field 'storage-bandwidth' must be > 0 bytes/s, got {storage_bandwidth_bytes_per_s}.",
                              field="storage-bandwidth")
    plan_list = [plans] if isinstance(plans, str) else list(plans)
    spec, _ = resolve_model(model)
    params = spec.total_params()
    ckpt_bytes = params * checkpoint_bytes_per_param
    ckpt_cost = ckpt_bytes / storage_bandwidth_bytes_per_s
    given = parse_policy(policy).model_dump(exclude_unset=True)
    rows = []
    for plan_text in plan_list:
        train = simulate_training(model, hardware, devices, seq_len=seq_len, global_batch=global_batch, plan=plan_text,
                                  profile=profile, what_if=what_if)
        row = {"plan": plan_text, "feasible": train.feasible, "step_time_s": train.step_time_s,
               "tokens_per_s": train.tokens_per_s, "checkpoint_bytes": ckpt_bytes}
        if profile is not None:
            row["profile"] = next(a for a in train.assumptions if a.startswith("profile"))
        if not train.feasible:
            row.update(goodput_tokens_per_s=None, infeasible_reason=train.infeasible_reason)
            rows.append(row)
            continue
        p = parse_plan(plan_text)
        update = {"replica_devices": p.tp * p.pp * p.cp}
        if "checkpoint_cost_s" not in given:
            update["checkpoint_cost_s"] = ckpt_cost
        pol = parse_policy(policy, **update)
        sc = make_scenario(devices, faults, pol, step_time_s=train.step_time_s, horizon_s=horizon_s, hardware=hardware)
        every = checkpoint_every_s or given.get("checkpoint_every_s")
        if every is None:
            mtbf = 1.0 / sc.rates.failure_rate_per_s if sc.rates.failure_rate_per_s > 0 else horizon_s
            every = max(daly_interval_s(sc.mechanics.stall, mtbf), train.step_time_s)
        sc = sc.with_policy(checkpoint_every_s=float(every))
        res = solve_markov(sc) if method == "markov" else simulate(sc, replications, seed)
        row.update(checkpoint_cost_s=sc.policy.checkpoint_cost_s, checkpoint_every_s=sc.mechanics.tau,
                   replica_devices=update["replica_devices"], availability=res.availability, ettr=res.ettr,
                   goodput_tokens_per_s=train.tokens_per_s * res.ettr, method=method)
        rows.append(row)
    ok = [r for r in rows if r["goodput_tokens_per_s"] is not None]
    for key, rank_key in (("tokens_per_s", "rank_fault_free"), ("goodput_tokens_per_s", "rank_with_faults")):
        for rank, r in enumerate(sorted(ok, key=lambda r, key=key: -r[key]), start=1):
            r[rank_key] = rank
    return rows


def validate_inference(csv_path: str | Path) -> dict:
    """Predict every row of an inference-measurement CSV: {'rows': [...], 'summary': {...}}."""
    from windtunnel.validation.inference import read_rows, summarize, validate_rows

    results = validate_rows(read_rows(csv_path))
    return {"rows": [r.as_dict() for r in results], "summary": summarize(results)}


def search_training(
    model: str | ModelSpec,
    hardware: str | Cluster,
    devices: int | None = None,
    *,
    seq_len: int = 4096,
    global_batch: int,
    precision: str = "bf16",
    pins: dict[str, list] | None = None,
    top: int = 20,
    refine: int = 32,
    baseline: str | None = None,
    moe_imbalance: float = 1.1,
    framework: str = "megatron",
    profile: str | Path | Profile | None = None,
    what_if: str | list[str] | None = None,
    cuda_graphs: str = "none",
    workers: int | None = 1,
    progress=None,
    fp8_recipe: str = "tensor",
    fixed: str = "",
) -> TrainingSearch:
    """Search the parallel-plan space for the fastest plans that fit (``windtunnel train search``).

    model, hardware, devices, seq_len (tokens), global_batch (sequences), framework, profile, what_if: as in
    :func:`simulate_training`. ``pins``: dimensions restricted to values, e.g. ``{"tp": [4, 8], "recompute":
    ["none", "full"]}`` (dimensions of windtunnel.train.space.DIMENSIONS). ``top``: plans kept; ``refine``: best
    screened plans re-simulated on the event engine; ``baseline``: a plan whose tokens/s the best is compared
    with. ``fp8_recipe``: every plan's FP8 scaling ('tensor', or 'mx' for MXFP8 on a chip with block-scaled
    FP8). ``fixed``: kernel paths every plan runs, in --plan syntax (e.g. 'expert_gemm=fused_mlp,fp8_attention=true';
    windtunnel.train.space.FIXED_FIELDS). ``workers``: local processes (None: every core). ``progress(phase, done, total)``: called as
    candidates finish. Returns a :class:`TrainingSearch`: its fields are the JSON keys of ``train search
    --json``; plans best first with step_time_s (s), tokens_per_s, mfu (0-1), peak_memory_bytes (bytes);
    ``.to_frame()`` is the plans as a DataFrame.
    """
    from windtunnel.search.backends import make_backend
    from windtunnel.specs.stack import load_stack, with_stack_defaults
    from windtunnel.train.search import search_training as run_search
    from windtunnel.train.search_result import TrainingSearch
    from windtunnel.train.space import SearchSpace
    from windtunnel.train.variant import hardware_variant

    spec, dag = resolve_model(model)
    if dag is not None:
        raise ValueError("search_training takes a transformer model (catalog id, YAML, config.json or ModelSpec)")
    cluster = resolve_cluster(hardware, devices)
    cluster.chip.peak(precision)
    stack = load_stack(framework)
    stack_plan = with_stack_defaults(Plan(), stack)
    fitted, notes = apply_profile(profile, cluster.chip.id, framework)
    cluster, fitted, what = hardware_variant(cluster, fitted, framework, what_if or [])
    space = SearchSpace(spec, cluster, seq_len, global_batch, precision=precision, moe_imbalance=moe_imbalance,
                        choices=dict(pins or {}), cuda_graphs=cuda_graphs, grads=stack_plan.grads,
                        dispatcher=stack_plan.dispatcher, framework=stack.id, fitted_override=fitted,
                        fp8_recipe=fp8_recipe, fixed=fixed)
    runner = make_backend("local", workers=workers)
    try:
        document = run_search(space, runner, top=top, refine_count=refine, baseline=baseline, progress=progress)
    finally:
        runner.close()
    if notes:
        document["profile"] = notes[0]
    if what:
        document["what_if"] = what.label
    return TrainingSearch.from_json_dict(_stamp(document, "search_training", dict(
        model=model, hardware=hardware, devices=devices, seq_len=seq_len, global_batch=global_batch,
        precision=precision, pins=pins, top=top, refine=refine, baseline=baseline, moe_imbalance=moe_imbalance,
        framework=framework, profile=profile, what_if=what_if, cuda_graphs=cuda_graphs)))


def search_serving(model, hardware, devices: int, traffic, **options) -> ServingSearch:
    """Search deployments of ``model`` within ``devices`` devices of ``hardware`` that serve ``traffic`` at an SLO
    attainment target (``windtunnel infer search``; options as :func:`windtunnel.infer.search.search_deployments`:
    slo ``"ttft=2s,tpot=100ms"``, attainment (fraction), objective devices/cost/goodput, price_per_device_hour
    (USD), top, baseline, mode, requests, workers, seed, router, progress). Returns a :class:`ServingSearch`: its
    fields are the JSON keys of ``infer search --json`` (goodput in requests/s, latencies in s, devices counted);
    ``.to_frame()`` is the winning deployments as a DataFrame."""
    from windtunnel.infer.search import search_deployments
    from windtunnel.infer.search_result import ServingSearch

    document = search_deployments(model, hardware, devices, traffic, **options)
    inputs = dict(model=model, hardware=hardware, devices=devices, traffic=traffic,
                  **{k: v for k, v in options.items() if k not in ("progress", "backend")})
    return ServingSearch.from_json_dict(_stamp(document, "search_serving", inputs))


def simulate_availability(
    devices: int,
    *,
    faults: str = "catalog:llama3-54day",
    policy: str | dict = "restart-from-checkpoint",
    step_time_s: float = 10.0,
    horizon_s: float = 54 * 86400.0,
    hardware: str | None = None,
    devices_per_node: int | None = None,
    rate_scale: float = 1.0,
    replications: int = 1000,
    seed: int = 0,
    **policy_overrides,
) -> AvailabilityResult:
    """Monte Carlo of a training job under faults (``windtunnel avail simulate``).

    devices: job size; faults: ``catalog:NAME`` or a fault-profile YAML; policy: ``KIND[,key=value...]``
    (restart-from-checkpoint, in-memory-checkpoint, hot-spare, elastic-shrink); step_time_s: one training step
    (s); horizon_s: wall time per replication (s); devices per node from ``devices_per_node``, else
    ``hardware``; ``policy_overrides``: RecoveryPolicy fields in seconds (checkpoint_every_s, checkpoint_cost_s,
    restart_s, detect_s, repair_s, spares, ...). Same inputs and seed, same result. Returns an
    :class:`AvailabilityResult`: its fields are the JSON keys of ``avail simulate --json`` (availability and ETTR
    as fractions of wall time, seconds lost by cause); ``.to_frame()`` is the seconds lost per cause.
    """
    from windtunnel.avail.policy import parse_policy
    from windtunnel.avail.result import AvailabilityResult
    from windtunnel.avail.scenario import make_scenario
    from windtunnel.avail.sim import simulate

    scenario = make_scenario(devices, faults, parse_policy(policy, **policy_overrides), step_time_s=step_time_s,
                             horizon_s=horizon_s, devices_per_node=devices_per_node, hardware=hardware,
                             rate_scale=rate_scale)
    document = simulate(scenario, replications, seed).to_json_dict()
    return AvailabilityResult.from_json_dict(_stamp(document, "simulate_availability", dict(
        devices=devices, faults=faults, policy=policy, step_time_s=step_time_s, horizon_s=horizon_s, hardware=hardware,
        devices_per_node=devices_per_node, rate_scale=rate_scale, replications=replications, seed=seed,
        **policy_overrides)))


def _stamp(document: dict, function: str, inputs: dict) -> dict:
    """The document with the version and provenance the CLI's JSON carries (the call instead of the command)."""
    from windtunnel.report.provenance import provenance, version

    plain = {k: (v if isinstance(v, (str, int, float, bool, list, dict, type(None))) else str(v))
             for k, v in sorted(inputs.items())}
    return {**document, "windtunnel_version": version(), "provenance": provenance(f"windtunnel.{function}()", plain)}
