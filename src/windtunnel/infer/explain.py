"""Ask the wind tunnel about serving: what bounds TTFT and TPOT at the given traffic, whether the deployment is
overloaded, and deployment changes that help, each one simulated (`infer explain`).

The verdict reads the serving simulation (:func:`windtunnel.infer.api.simulate_serving`): the load (offered vs
served rate: a queue that keeps growing is an overload), SLO attainment, KV use and preemptions; and which
resource TTFT and TPOT depend on, from the same simulation replayed with each resource 25% larger and smaller
(the elasticity d ln(latency) / d ln(resource); the hardware what-ifs of :mod:`windtunnel.specs.whatif`, given
to Sim2Infer as a cluster file with its chip inline). Remedies are data (``serving_rules`` in
``catalog/remedies.yaml``): each proposes pool changes (replicas, batch, prefill chunk, KV precision, TP), and
every one is simulated before it is shown; only changes that raise SLO goodput are listed, best first.
Units: seconds, requests/s, bytes.
"""

from __future__ import annotations

import hashlib
import math
import re
import tempfile
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import yaml

from windtunnel.infer.api import simulate_serving
from windtunnel.infer.deployment import Deployment, parse_deployment
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.whatif import Change, WhatIf, apply_to_cluster, parse_what_if
from windtunnel.specs.yamlio import catalog_dir, read_yaml

# Resources whose elasticity the verdict reads, and what a dependence on each means for serving.
RESOURCES = {"flops": "compute (tensor cores: prefill, large decode batches)",
             "hbm_bandwidth": "HBM bandwidth (decode reads weights and KV every step)",
             "hbm_capacity": "HBM capacity (KV cache: batch size, preemption)",
             "scale_up_bandwidth": "scale-up links (TP all-reduce, EP all-to-all inside the domain)",
             "scale_out_bandwidth": "scale-out links (KV transfer, EP all-to-all across domains)"}
FACTOR = 1.25
_OPERATOR = re.compile(r"^([x/+\-])([0-9]+)$")


def hardware_file(hardware: str, devices: int, what_if: WhatIf, folder: Path) -> str:
    """A cluster YAML of ``hardware`` under ``what_if``, its chip inline (keeping the chip's id, so the chip's
    calibration still applies): what Sim2Infer's ``hardware`` accepts."""
    if what_if.get("host_overhead") is not None:
        raise WindtunnelError("What-if 'host_overhead' is not a serving what-if (the serving host cost is a "
                              "per-pool overhead); valid here: " + ", ".join(RESOURCES) + ", link_latency, "
                              "scale_up_domain.", field="what-if")
    cluster = apply_to_cluster(load_hardware(hardware, devices), what_if)
    doc = {"name": f"{cluster.id} ({what_if.label})", "chip": cluster.chip.model_dump(),
           "tiers": [tier.model_dump() for tier in cluster.tiers]}
    path = folder / f"{cluster.id}-whatif-{hashlib.sha256(what_if.label.encode()).hexdigest()[:12]}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return str(path)


class _Runner:
    """Serving simulations of one model, traffic and SLO on variants of hardware and deployment."""

    def __init__(self, model, hardware: str, traffic, slo, seed: int, folder: Path) -> None:
        self.model, self.hardware, self.traffic, self.slo, self.seed, self.folder = (
            model, hardware, traffic, slo, seed, folder)
        self.runs = 0

    def run(self, deployment, what_if: WhatIf | None = None, devices: int | None = None):
        hardware = self.hardware
        if what_if:
            hardware = hardware_file(self.hardware, devices or 1, what_if, self.folder)
        self.runs += 1
        return simulate_serving(self.model, hardware, deployment, self.traffic, slo=self.slo, seed=self.seed)


def _latency(result, metric: str) -> float:
    values = result.ttft_s if metric == "ttft" else result.tpot_s
    return float(values.get("p90") or values.get("mean") or 0.0)


def _elasticities(runner: _Runner, deployment, base) -> dict[str, dict[str, float | None]]:
    """metric (ttft, tpot) -> resource -> d ln(p90 latency) / d ln(resource)."""
    out: dict[str, dict[str, float | None]] = {"ttft": {}, "tpot": {}}
    for name in RESOURCES:
        results = []
        for factor in (1.0 / FACTOR, FACTOR):
            try:
                results.append(runner.run(deployment, WhatIf((Change(name, factor=factor, text=f"{name}=x{factor:g}"),)),
                                          devices=base.devices))
            except WindtunnelError:
                results.append(None)
        for metric in out:
            low, high = (None if r is None else _latency(r, metric) for r in results)
            out[metric][name] = (math.log(high / low) / (2 * math.log(FACTOR))
                                 if low and high and low > 0 and high > 0 else None)
    return out


def _bound(elasticities: dict[str, float | None]) -> tuple[str | None, float | None]:
    """The resource whose growth shortens the latency most (most negative elasticity); None when none does. (A
    positive one is real too: more KV room batches more sequences per step, and each step takes longer.)"""
    ranked = sorted(((k, v) for k, v in elasticities.items() if v is not None and v < 0), key=lambda kv: (kv[1], kv[0]))
    return ranked[0] if ranked else (None, None)


def serving_verdict(base, elasticities: dict) -> dict:
    """The verdict document of one serving result (with the latency elasticities already measured)."""
    slo = base.slo
    ttft, tpot = _latency(base, "ttft"), _latency(base, "tpot")
    load = dict(base.load)
    bounds = {}
    for metric in ("ttft", "tpot"):
        resource, value = _bound(elasticities[metric])
        bounds[metric] = {"p90_s": ttft if metric == "ttft" else tpot, "resource": resource, "elasticity": value,
                          "description": RESOURCES.get(resource, ""), "elasticities": elasticities[metric]}
    if base.overloaded:
        bounds["ttft"].update(resource="queueing", description="queueing: offered load above capacity, the queue grows")
    verdict = {
        "model": base.model, "hardware": base.hardware, "deployment": base.deployment, "devices": base.devices,
        "overloaded": base.overloaded, "offered_rate": load.get("offered_rate"), "served_rate": load.get("served_rate"),
        "load": load, "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "attainment": base.slo_attainment,
                              "ttft_missed": ttft > slo.ttft_s, "tpot_missed": tpot > slo.tpot_s},
        "goodput_requests_per_s": base.goodput_requests_per_s,
        "kv": {"peak_fraction": base.kv_peak_fraction, "mean_fraction": base.kv_mean_fraction,
               "preemptions": base.preemptions, "rejected": base.rejected},
        "pools": [{"role": p["role"], "label": p["label"], "replicas": p["replicas"],
                   "devices_per_instance": p["devices_per_instance"], "max_batch": p["max_batch"],
                   "max_tokens": p["max_tokens"]} for p in base.pools],
        "utilisation": _utilisation(base), "bounds": bounds,
    }
    verdict["verdict"] = _lines(verdict)
    return verdict


def _utilisation(result) -> dict[str, float]:
    by_role: dict[str, list[float]] = {}
    for instance in result.instances:
        by_role.setdefault(instance["role"], []).append(float(instance.get("utilisation", 0.0)))
    return {role: sum(values) / len(values) for role, values in sorted(by_role.items())}


def _lines(verdict: dict) -> list[str]:
    lines = []
    if verdict["overloaded"]:
        lines.append(f"OVERLOADED: offered {verdict['offered_rate']:.2f} req/s, served {verdict['served_rate']:.2f} "
                     "req/s: the queue keeps growing, TTFT grows with the run")
    else:
        served = verdict["served_rate"] or 0.0
        lines.append(f"keeps up: served {served:.2f} req/s" + (f" of {verdict['offered_rate']:.2f} offered"
                                                               if verdict["offered_rate"] else ""))
    slo = verdict["slo"]
    for metric in ("ttft", "tpot"):
        bound = verdict["bounds"][metric]
        state = "misses" if slo[f"{metric}_missed"] else "meets"
        why = bound["description"] or "nothing measured"
        elasticity = f", elasticity {bound['elasticity']:+.2f}" if bound["elasticity"] is not None else ""
        lines.append(f"{metric.upper()} p90 {bound['p90_s']:.3g} s {state} its {slo[metric + '_s']:.3g} s SLO; bound "
                     f"by {why}{elasticity if bound['resource'] != 'queueing' else ''}")
    kv = verdict["kv"]
    if kv["preemptions"] or kv["peak_fraction"] > 0.95:
        lines.append(f"KV capacity binds: peak {kv['peak_fraction']:.0%} of the cache, {kv['preemptions']} preemptions")
    lines.append(f"SLO attainment {slo['attainment']:.1%}, goodput {verdict['goodput_requests_per_s']:.2f} req/s")
    return lines


# ---- remedies -------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def serving_rules() -> tuple[dict, ...]:
    """The serving remedy rules (catalog/remedies.yaml, ``serving_rules``)."""
    return tuple((read_yaml(catalog_dir("remedies.yaml")) or {}).get("serving_rules") or [])


def _fires(rule: dict, verdict: dict) -> bool:
    when = rule.get("when") or {}
    checks = {"overloaded": verdict["overloaded"], "ttft_missed": verdict["slo"]["ttft_missed"],
              "tpot_missed": verdict["slo"]["tpot_missed"],
              "kv_bound": bool(verdict["kv"]["preemptions"] or verdict["kv"]["peak_fraction"] > 0.95)}
    return any(checks[key] == bool(value) for key, value in when.items()) if when else True


def _pools(deployment: Deployment, selector: str, utilisation: dict[str, float]) -> list[int]:
    roles = [group.role for group in deployment.groups]
    if selector == "all":
        return list(range(len(roles)))
    if selector == "busiest":
        busiest = max(roles, key=lambda role: (utilisation.get(role, 0.0), role))
        return [i for i, role in enumerate(roles) if role == busiest]
    chosen = [i for i, role in enumerate(roles) if role == selector]
    return chosen or [i for i, role in enumerate(roles) if role == "mixed"]


def _changed(deployment: Deployment, change: dict, resolved: list[dict], utilisation: dict) -> Deployment | None:
    groups = list(deployment.groups)
    indices = _pools(deployment, str(change.get("pool", "all")), utilisation)
    if not indices:
        return None
    for index in indices:
        updates = {}
        for key, value in change.items():
            if key == "pool":
                continue
            match = _OPERATOR.match(value) if isinstance(value, str) else None
            if match:
                current = getattr(groups[index], key)
                current = resolved[index].get(key) if current is None else current
                if current is None:
                    return None
                op, number = match.group(1), int(match.group(2))
                if op == "/" and (current % number or current // number < 1):
                    return None
                value = {"x": current * number, "/": current // number, "+": current + number,
                         "-": current - number}[op]
            updates[key] = value
        groups[index] = replace(groups[index], **updates)
    return Deployment(groups=tuple(groups), router=deployment.router)


def _remedies(runner: _Runner, deployment: Deployment, base, verdict: dict, top: int) -> tuple[list[dict], dict]:
    tried: dict[str, object] = {deployment.text(): None}
    shown = []
    invalid = 0
    for rule in serving_rules():
        if not _fires(rule, verdict):
            continue
        for change in rule["try"]:
            candidate = _changed(deployment, dict(change), base.pools, verdict["utilisation"])
            if candidate is None or candidate.text() in tried:
                continue
            try:
                result = runner.run(candidate)
            except WindtunnelError:
                invalid += 1
                tried[candidate.text()] = None
                continue
            tried[candidate.text()] = result
            if result.goodput_requests_per_s <= base.goodput_requests_per_s * (1 + 1e-9):
                continue
            verified = parse_deployment(result.deployment).text() == result.deployment
            if not verified:
                continue
            gain = (result.goodput_requests_per_s / base.goodput_requests_per_s - 1.0
                    if base.goodput_requests_per_s > 0 else None)
            shown.append({
                "change": ", ".join(f"{k}={v}" for k, v in change.items()), "rule": rule["id"],
                "rationale": " ".join(str(rule["rationale"]).split()), "deployment": result.deployment,
                "devices": result.devices, "goodput_requests_per_s": result.goodput_requests_per_s,
                "goodput_per_device": result.goodput_per_device, "gain": gain, "overloaded": result.overloaded,
                "slo_attainment": result.slo_attainment, "ttft_p90_s": _latency(result, "ttft"),
                "tpot_p90_s": _latency(result, "tpot"), "verified": True,
            })
    shown.sort(key=lambda r: (-r["goodput_per_device"], -r["goodput_requests_per_s"], r["deployment"]))
    return shown[:top], {"simulated": sum(1 for v in tried.values() if v is not None), "invalid": invalid}


def explain_serving(model, hardware: str, deployment, traffic, *, slo="ttft=2s,tpot=100ms", seed: int = 0,
                    what_if: str | list[str] | None = None, top: int = 6) -> dict:
    """The `infer explain --json` document: verdict (load, SLO, KV, what bounds TTFT and TPOT) and remedies,
    best first (SLO goodput per device). With ``what_if``, the same on the what-if hardware under ``variant``."""
    from windtunnel.specs.bounds import check_whole

    check_whole("top", top, 1, 10_000)
    what = parse_what_if(what_if)
    dep = parse_deployment(deployment)
    with tempfile.TemporaryDirectory(prefix="windtunnel-explain-") as folder:
        runner = _Runner(model, hardware, traffic, slo, seed, Path(folder))
        document = _explain_one(runner, dep, None, top)
        if what:
            document["variant"] = _explain_one(runner, dep, what, top)
            document["variant"]["what_if"] = what.label
    return document


def _explain_one(runner: _Runner, deployment: Deployment, what: WhatIf | None, top: int) -> dict:
    named = runner.hardware
    if what:
        base = runner.run(deployment)
        runner = _Runner(runner.model, hardware_file(runner.hardware, base.devices, what, runner.folder),
                         runner.traffic, runner.slo, runner.seed, runner.folder)
        named = f"{named} ({what.label})"
    base = runner.run(deployment)
    verdict = serving_verdict(base, _elasticities(runner, deployment, base))
    verdict["hardware"] = named
    verdict["remedies"], verdict["remedy_search"] = _remedies(runner, deployment, base, verdict, top)
    return verdict


def serving_variant(model, hardware: str, deployment, traffic, what_if, devices: int, **options):
    """The serving result of the same run on the what-if hardware (`infer simulate --what-if`); ``options`` are
    :func:`windtunnel.infer.api.simulate_serving`'s keywords."""
    what = parse_what_if(what_if)
    with tempfile.TemporaryDirectory(prefix="windtunnel-whatif-") as folder:
        path = hardware_file(hardware, devices, what, Path(folder))
        result = simulate_serving(model, path, deployment, traffic, **options)
    result.assumptions.append(f"what-if: {what.label} (on {hardware})")
    result.hardware = f"{hardware} ({what.label})"
    return result, what


def searched_hardware(hardware: str, devices: int, what_if) -> tuple[str, str, object]:
    """For `infer search --what-if`: (hardware to search on, its name for the output, cleanup callable). Without
    what-ifs the hardware itself and a no-op; with them a cluster file in a temporary folder the cleanup removes."""
    import shutil

    what = parse_what_if(what_if)
    if not what:
        return hardware, hardware, lambda: None
    folder = Path(tempfile.mkdtemp(prefix="windtunnel-whatif-"))
    return (hardware_file(hardware, devices, what, folder), f"{hardware} ({what.label})",
            lambda: shutil.rmtree(folder, ignore_errors=True))
