"""Public Python API of Sim2Infer (the CLI ``windtunnel infer ...`` is a thin layer over it)."""

from __future__ import annotations

import time
from pathlib import Path

from windtunnel.infer.deployment import Deployment, InstancePlan, parse_deployment, resolve_deployment
from windtunnel.infer.metrics import SLO, ServingResult, parse_slo, summarise
from windtunnel.infer.sim import Simulator
from windtunnel.infer.traffic import Workload, parse_traffic
from windtunnel.specs.hardware import Cluster, load_hardware
from windtunnel.specs.model import ModelSpec, load_model

__all__ = ["simulate_serving", "search_serving", "compare_dynamic", "ServingResult",
           "parse_deployment", "parse_traffic", "parse_slo"]


def _model(model: str | ModelSpec) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else load_model(model)


def _hardware_name(hardware: str | Cluster) -> str:
    return hardware.id if isinstance(hardware, Cluster) else str(hardware)


def pool_summary(plan: InstancePlan) -> dict:
    """What a pool resolved to: plan, devices, limits, memory (bytes), KV capacity (tokens)."""
    return {"role": plan.role, "label": plan.label(), "chip": plan.chip.id, "tp": plan.tp, "dp": plan.dp, "ep": plan.ep,
            "pp": plan.pp, "replicas": plan.replicas, "devices_per_instance": plan.devices,
            "precision": plan.precision, "kv_precision": plan.kv_precision, "max_batch": plan.max_batch,
            "max_tokens": plan.max_tokens, "batching": plan.batching, "prefix_hit": plan.prefix_hit,
            "prefix_cache": plan.spec.prefix_cache, "host_cache_gib_per_device": plan.spec.host_cache,
            "tbo": plan.tbo, "weight_bytes_per_device": plan.weight_bytes,
            "kv_bytes_per_token_per_device": plan.kv_bytes_per_token,
            "kv_capacity_tokens_per_instance": plan.kv_capacity_tokens}


def assumptions_for(model: ModelSpec, plans: list[InstancePlan], workload: Workload, deployment: Deployment) -> list[str]:
    """The modelling choices a reader needs to judge a result."""
    notes = [
        "iteration time: weight GEMMs, memory-bound kernels, MoE experts hit by the batch, TP all-reduce and EP "
        "all-to-all from the shared cost core; decode attention linear in summed context; prefill attention per chunk",
        "data-parallel attention groups balanced (each holds 1/dp of the sequences and tokens)",
        "KV per sequence = context + one page (paged-allocation upper bound); preemption by recompute, newest first",
        f"router: {deployment.router}",
    ]
    if deployment.disaggregated:
        notes.append("disaggregated: first token at prefill completion; KV moved over the tier spanning both instances; "
                     "TPOT includes transfer and decode queueing; the prefill instance frees the KV at hand-over")
    if model.moe is not None:
        notes.append("MoE routing: uniform over experts x moe_imbalance on the busiest rank; expected distinct "
                     "experts hit by the batch read their weights")
    if model.attention_window and model.windowed_layer_fraction:
        notes.append(f"sliding-window attention (sliding_window = {model.attention_window} tokens) on "
                     f"{model.windowed_layer_fraction:.0%} of the layers: attention reads at most "
                     f"{model.attention_window} keys per query; the KV cache still holds the whole context (no "
                     "out-of-window block freeing)")
    for plan in plans:
        notes.extend(plan.notes)
        if plan.pp > 1:
            notes.append(f"{plan.role}: pp={plan.pp} stages run one batch at a time (no cross-iteration pipelining)")
    if workload.hashes is not None:
        notes.append(f"prefix cache: the traffic's {workload.block_tokens}-token block hashes; a request reuses the "
                     "longest cached prefix on its instance (LRU within the KV memory running sequences leave free, "
                     "optional host tier) and prefills only the rest; pools with prefix_cache=false keep none")
    notes.extend(workload.notes)
    return notes


def simulate_serving(
    model: str | ModelSpec,
    hardware: str,
    deployment: str | Path | dict | Deployment,
    traffic: str | Path | dict | Workload,
    *,
    slo: str | SLO | dict | None = "ttft=2s,tpot=100ms",
    seed: int = 0,
    router: str | None = None,
    controller=None,
    profile: str | Path | None = None,
) -> ServingResult:
    """Simulate serving ``traffic`` on ``deployment`` of ``model`` on ``hardware``.

    model: catalog id, model YAML or HF config.json, or a ModelSpec. hardware: chip id, cluster id or
    cluster YAML (instances may override their chip). deployment: string (``mixed:tp=8,replicas=2`` or
    ``prefill:ep=32,replicas=2;decode:ep=128``), YAML path, mapping or Deployment. traffic: string
    (``poisson:...``, ``gamma:...``, ``trace:path.csv``, ``closed:...``), YAML path, mapping or Workload.
    slo: ``ttft=2s,tpot=100ms``. Same inputs and seed give the same result. profile: a calibration profile
    (``windtunnel calibrate ... --out``) of a chip of the deployment: its GEMM, attention, memory, collective
    and host efficiencies replace the catalog's on that chip's instances (and its memory bandwidth share and
    fp8 GEMM efficiency the serving calibration's), listed in the assumptions.
    """
    wall = time.perf_counter()
    spec = _model(model)
    hw = _hardware_name(hardware)
    dep = parse_deployment(deployment)
    if router is not None:
        from windtunnel.infer.deployment import normalise_router

        dep = Deployment(groups=dep.groups, router=normalise_router(router))
    slo_spec = parse_slo(slo)
    workload = traffic if isinstance(traffic, Workload) else parse_traffic(traffic, seed=seed)
    plans = resolve_deployment(spec, hw, dep)
    devices = sum(p.total_devices for p in plans)
    transfer_cluster = load_hardware(hw, devices) if dep.disaggregated else None
    fitted, efficiencies, notes = serving_profile(profile, plans)
    sim = Simulator(spec, plans, workload, dep.router, transfer_cluster=transfer_cluster, controller=controller,
                    fitted=fitted, efficiencies=efficiencies)
    out = sim.run()
    result = summarise(out, model=spec.id, hardware=hw, deployment=dep.text(), traffic=workload.summary(),
                       slo=slo_spec, seed=seed, devices=devices, pools=[pool_summary(p) for p in plans],
                       class_names=workload.class_names,
                       assumptions=assumptions_for(spec, plans, workload, dep) + notes)
    from windtunnel.infer.slo_check import slo_warnings

    result.warnings = slo_warnings(sim.instances, slo_spec, int(workload.prompt.min()) if workload.size else 0)
    result.wall_s = time.perf_counter() - wall
    return result


def serving_profile(profile: str | Path | None, plans: list[InstancePlan]) -> tuple[dict | None, dict | None, list[str]]:
    """(serving fitted dict, chip id -> Efficiency, assumption lines) of a calibration profile for these
    pools; (None, None, []) without one. The profile must be of a chip some pool runs on."""
    if profile is None:
        return None, None, []
    import copy

    from windtunnel.cost.efficiency import efficiency_for
    from windtunnel.infer.deployment import serving_defaults
    from windtunnel.profile import apply_profile, load_profile, profile_assumption

    loaded = load_profile(profile)
    chips = {plan.chip.id: plan.chip for plan in plans}
    chip = chips.get(loaded.chip)
    overlay, _ = apply_profile(loaded, chip.id if chip else next(iter(chips)), None)
    notes = [profile_assumption(loaded, profile)]
    values = loaded.identified()
    fitted = copy.deepcopy(serving_defaults().get("fitted") or {})
    own = fitted.setdefault("chips", {}).setdefault(loaded.chip, {})
    for name, key in (("memory.bandwidth_efficiency", "memory_bandwidth"), ("gemm.fp8", "gemm_fp8")):
        if name in values:
            own[key] = values[name]
    return fitted, {loaded.chip: efficiency_for(chip, overlay)}, notes


def run_raw(model: ModelSpec, hardware: str, deployment: Deployment, workload: Workload):
    """(plans, raw SimOutput) without summarising: for tests and validation."""
    plans = resolve_deployment(model, hardware, deployment)
    devices = sum(p.total_devices for p in plans)
    transfer_cluster = load_hardware(hardware, devices) if deployment.disaggregated else None
    sim = Simulator(model, plans, workload, deployment.router, transfer_cluster=transfer_cluster)
    return plans, sim.run()


def search_serving(*args, **kwargs) -> dict:
    """Deployment search (see :func:`windtunnel.infer.search.search_deployments`)."""
    from windtunnel.infer.search import search_deployments

    return search_deployments(*args, **kwargs)


def compare_dynamic(*args, **kwargs) -> dict:
    """Static vs dynamic role switching (see :func:`windtunnel.infer.dynamic.compare_dynamic`)."""
    from windtunnel.infer.dynamic import compare_dynamic as run

    return run(*args, **kwargs)
