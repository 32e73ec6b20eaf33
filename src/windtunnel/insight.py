"""Ask the wind tunnel (Python API): explain a training plan, its sensitivity to each resource, what-ifs,
and side-by-side comparisons. The CLI verbs (`train explain`, `train sensitivity`, `compare train`,
`--what-if`) are thin layers over these functions.

Every function takes the job as :func:`windtunnel.api.simulate_training` does (model, hardware, devices,
seq_len in tokens, global_batch in sequences, plan, framework, profile) plus ``what_if``: repeated
``KEY=VALUE`` items (:mod:`windtunnel.specs.whatif`). Results are JSON-able dicts (seconds, bytes, tokens/s).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from windtunnel.profile import Profile, apply_profile
from windtunnel.specs.hardware import Cluster
from windtunnel.specs.model import ModelSpec
from windtunnel.specs.plan import Plan, parse_plan
from windtunnel.specs.whatif import parse_what_if
from windtunnel.train.explain import verdict
from windtunnel.train.remedies import find_remedies
from windtunnel.train.sensitivity import sensitivity
from windtunnel.train.step import TrainingJob
from windtunnel.train.variant import job_variant

__all__ = ["training_job", "explain_training", "training_sensitivity", "compare_training", "best_plan", "to_frames"]


def training_job(model: str | ModelSpec, hardware: str | Cluster, devices: int | None = None, *, seq_len: int,
                 global_batch: int, plan: str | dict | Plan = "", framework: str = "megatron",
                 profile: str | Path | Profile | None = None, moe_imbalance: float = 1.1,
                 flash_attention: bool | None = None, fused_loss: bool | None = None) -> TrainingJob:
    """The TrainingJob that :func:`windtunnel.api.simulate_training` would simulate."""
    from windtunnel.api import resolve_cluster, resolve_model

    spec, dag = resolve_model(model)
    cluster = resolve_cluster(hardware, devices)
    fitted, notes = apply_profile(profile, cluster.chip.id, framework)
    return TrainingJob(model=spec, cluster=cluster, plan=parse_plan(plan), seq_len=seq_len, global_batch=global_batch,
                       flash_attention=flash_attention, fused_loss=fused_loss, moe_imbalance=moe_imbalance,
                       framework=framework, fitted_override=fitted, dag=dag, extra_assumptions=notes)


# Candidates a remedy search simulates, about; beyond this many seconds of serial simulation it uses local processes.
EXPECTED_CANDIDATES = 60
PARALLEL_ABOVE_S = 1.5


def explain_job(job: TrainingJob, *, top: int = 8, remedies: bool = True, workers: int | None = None) -> dict:
    """Verdict (and ranked, verified remedies) for one job: the `train explain --json` document. ``workers``:
    processes simulating the candidates (default: one, or every core when the job's step is slow to simulate;
    the answer is the same)."""
    from windtunnel.specs.bounds import check_whole

    check_whole("top", top, 1, 10_000)
    start = time.perf_counter()
    document, base = verdict(job)
    per_simulation_s = (time.perf_counter() - start) / 2.0  # the verdict plays the step twice
    document.pop("rank_idle_s", None)
    if workers is None:
        slow = per_simulation_s * EXPECTED_CANDIDATES > PARALLEL_ABOVE_S
        workers = min(4, os.cpu_count() or 1) if slow else 1
    if remedies:
        document["remedies"], document["remedy_search"] = find_remedies(job, document, base, top=top,
                                                                        workers=workers)
    else:
        document["remedies"] = []
    return document


def explain_training(model, hardware, devices=None, *, seq_len: int, global_batch: int, plan="",
                     framework: str = "megatron", profile=None, moe_imbalance: float = 1.1,
                     what_if: str | list[str] | None = None, top: int = 8, remedies: bool = True) -> dict:
    """Name what holds the step (shares of step time per resource, memory headroom or shortfall) and propose
    verified remedies. With ``what_if``, the same for the what-if hardware under ``variant``."""
    job = training_job(model, hardware, devices, seq_len=seq_len, global_batch=global_batch, plan=plan,
                       framework=framework, profile=profile, moe_imbalance=moe_imbalance)
    what = parse_what_if(what_if)
    document = explain_job(job, top=top, remedies=remedies)
    if what:
        variant = explain_job(job_variant(job, what), top=top, remedies=remedies)
        variant["what_if"] = what.label
        document["variant"] = variant
    return document


def training_sensitivity(model, hardware, devices=None, *, seq_len: int, global_batch: int, plan="",
                         framework: str = "megatron", profile=None, moe_imbalance: float = 1.1,
                         what_if: str | list[str] | None = None, delta: float = 0.1,
                         resources: list[str] | None = None, search: bool = False, search_top: int = 4) -> dict:
    """Elasticity of the step time to each resource (the `train sensitivity --json` document); ``search``
    re-searches the best plan at every variant (``search_top`` plans refined by the engine each time)."""
    job = job_variant(training_job(model, hardware, devices, seq_len=seq_len, global_batch=global_batch, plan=plan,
                                   framework=framework, profile=profile, moe_imbalance=moe_imbalance), what_if)
    return sensitivity(job, delta=delta, resources=resources,
                       search=(lambda variant: best_plan(variant, refine=search_top)) if search else None)


def best_plan(job: TrainingJob, *, refine: int = 4) -> dict | None:
    """The fastest plan that fits for ``job``'s model, cluster and batch (plan search, local backend)."""
    from windtunnel.search.backends import LocalBackend
    from windtunnel.specs.stack import load_stack
    from windtunnel.train.search import search_training
    from windtunnel.train.space import SearchSpace

    plan = job.plan
    space = SearchSpace(job.model, job.cluster, job.seq_len, job.global_batch, precision=plan.precision,
                        moe_imbalance=job.moe_imbalance, flash_attention=job.flash_attention,
                        fused_loss=job.fused_loss, cuda_graphs=plan.cuda_graphs, grads=plan.grads,
                        moments=plan.moments, dispatcher=plan.dispatcher, framework=load_stack(job.framework).id,
                        fitted_override=job.fitted_override)
    backend = LocalBackend(1)
    try:
        document = search_training(space, backend, top=1, refine_count=refine)
    finally:
        backend.close()
    rows = document["plans"]
    return {"plan": rows[0]["plan"], "step_time_s": rows[0]["step_time_s"]} if rows else None



def compare_training(model, hardware: str | list[str], devices: int, *, seq_len: int, global_batch: int,
                     plans: list[str] | None = None, frameworks: list[str] | None = None,
                     what_ifs: list[str] | None = None, profile=None, moe_imbalance: float = 1.1):
    """Plans, clusters, stacks or what-ifs (each a list; every combination is simulated) side by side: a
    :class:`windtunnel.report.compare.Comparison` (``.to_frame()``, ``.table()``, ``.to_json_dict()``).
    A ``what_ifs`` entry is one comma-separated set of KEY=VALUE items; ``""`` is the hardware as it is."""
    from itertools import product

    from windtunnel.report.compare import Comparison
    from windtunnel.train.step import simulate

    hardwares = [hardware] if isinstance(hardware, str) else list(hardware)
    axes = {"plan": list(plans or [""]), "hardware": hardwares, "framework": list(frameworks or ["megatron"]),
            "what-if": list(what_ifs or [""])}
    varying = [name for name, values in axes.items() if len(values) > 1]
    comparison = Comparison()
    for plan, hw, framework, what in product(*axes.values()):
        job = training_job(model, hw, devices, seq_len=seq_len, global_batch=global_batch, plan=plan,
                           framework=framework, profile=profile, moe_imbalance=moe_imbalance)
        values = {"plan": plan or "(stack defaults)", "hardware": hw, "framework": framework, "what-if": what or "base"}
        label = " | ".join(values[name] for name in varying) or values["plan"]
        comparison.entries.append((label, simulate(job_variant(job, what or None))))
    return comparison


def to_frames(document: dict) -> dict:
    """pandas DataFrames of an explain or sensitivity document: ``shares`` (resource, share, seconds),
    ``remedies`` (one row per remedy) and ``elasticities`` (resource, elasticity, kind), those it has."""
    import pandas as pd

    frames = {}
    if "shares" in document:
        frames["shares"] = pd.DataFrame({"share": document["shares"], "seconds": document["seconds"]}).sort_values(
            "share", ascending=False)
    if "remedies" in document:
        frames["remedies"] = pd.DataFrame(document["remedies"])
    if "elasticities" in document:
        frames["elasticities"] = pd.DataFrame({"elasticity": document["elasticities"],
                                               "kind": document["direction"]})
    return frames
