"""Serving an operator DAG (ONNX or captured) under load: `windtunnel infer simulate|search --model X.onnx`.

A deployment is ``tp=T,pp=P,replicas=R`` (``mixed:`` may prefix it); each replica runs batches of
``batch`` samples forward only (:func:`windtunnel.train.dag_forward.simulate_dag_inference`: latency
of a batch, the interval between pipelined batches, weights and activations per device).

Requests are samples arriving at ``rate`` per second (``poisson:rate=R`` or ``gamma:rate=R,cv=C``),
split evenly over the replicas. A sample waits for its batch to fill (``batch`` samples of the
replica's arrivals: mean ``(batch-1) / (2 rate_r)``), then the batch waits for its replica, a queue of
batches with deterministic service (the batch interval) whose mean wait is Kingman's
``(cv^2 / batch) / 2 * rho / (1 - rho) * interval`` (``rho`` = utilisation); the 99th percentile takes
the exponential tail of that wait (``mean / rho * ln(100 rho)``) and the last-but-one sample's fill
wait. At ``rho >= 1`` the replica is saturated and the latency at load is unbounded (null). The
objective ``--slo latency=50ms`` is judged on that p99 estimate. Units: seconds, samples/s, bytes.
"""

from __future__ import annotations

import math
import re

from windtunnel.specs.errors import WindtunnelError

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}


def _seconds(text: str, field: str) -> float:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e-?\d+)?)\s*(us|ms|s|min)?\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise WindtunnelError(f"Field '{field}' is '{text}'; give a positive duration such as 50ms or 0.2s.", field=field)
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def _pairs(text: str, field: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        if "=" not in item:
            raise WindtunnelError(f"Field '{field}' item '{item}' is not KEY=VALUE.", field=field)
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def parse_dag_deployment(text: str | None) -> tuple[int, int, int]:
    """``tp=2,pp=1,replicas=4`` (optionally ``mixed:``-prefixed) -> (tp, pp, replicas); default 1, 1, 1."""
    body = (text or "").strip()
    if body.startswith("mixed:"):
        body = body[len("mixed:"):]
    if body.startswith(("prefill:", "decode:")) or ";" in body or body.endswith((".yaml", ".yml")):
        raise WindtunnelError(f"Deployment '{text}': an operator-DAG model is served as one forward pass per batch; "
                              "there are no prefill/decode pools or deployment YAMLs: give tp=T,pp=P,replicas=R.",
                              field="deployment")
    values = _pairs(body, "deployment")
    unknown = [k for k in values if k not in ("tp", "pp", "replicas")]
    if unknown:
        raise WindtunnelError(f"Deployment key '{unknown[0]}' does not apply to an operator-DAG model (LLM serving "
                              "only); its keys are tp, pp and replicas (the batch is --batch).", field="deployment")
    try:
        tp, pp, replicas = (int(values.get(k, 1)) for k in ("tp", "pp", "replicas"))
    except ValueError:
        raise WindtunnelError(f"Deployment '{text}': tp, pp and replicas are positive integers.",
                              field="deployment") from None
    if min(tp, pp, replicas) < 1:
        raise WindtunnelError(f"Deployment '{text}': tp, pp and replicas are positive integers.", field="deployment")
    return tp, pp, replicas


def parse_dag_traffic(text: str | None) -> tuple[float, float, str] | None:
    """``poisson:rate=R`` or ``gamma:rate=R,cv=C`` -> (samples/s, cv of the inter-arrival times, text)."""
    if not text:
        return None
    kind, _, body = text.partition(":")
    if kind not in ("poisson", "gamma"):
        raise WindtunnelError(f"Traffic '{text}': an operator-DAG model serves samples arriving at a rate: give "
                              "poisson:rate=R or gamma:rate=R,cv=C (samples/s); traces and closed loops are for LLM "
                              "serving.", field="traffic")
    values = _pairs(body, "traffic")
    tokens = [k for k in values if k not in ("rate", "cv")]
    if tokens:
        raise WindtunnelError(f"Traffic key '{tokens[0]}' does not apply to an operator-DAG model (a sample has no "
                              "input or output tokens; its shape is --batch-shape): use rate and, for gamma, cv.",
                              field="traffic")
    try:
        rate = float(values["rate"])
        cv = float(values.get("cv", 1.0)) if kind == "gamma" else 1.0
    except (KeyError, ValueError):
        raise WindtunnelError(f"Traffic '{text}': rate=R (samples/s, positive) is required.", field="traffic") from None
    if rate <= 0 or cv < 0:
        raise WindtunnelError(f"Traffic '{text}': rate must be positive and cv non-negative.", field="traffic")
    return rate, cv, text


def parse_dag_slo(text: str | None) -> float | None:
    """``latency=50ms`` -> 0.05 (the p99 latency objective at load), or None."""
    if not text:
        return None
    values = _pairs(text, "slo")
    other = [k for k in values if k != "latency"]
    if other:
        raise WindtunnelError(f"SLO key '{other[0]}' does not apply to an operator-DAG model (no tokens: no TTFT or "
                              "TPOT); give --slo latency=50ms (judged on the p99 latency at load).", field="slo")
    return _seconds(values["latency"], "slo") if "latency" in values else None


def load_estimate(result: dict, replicas: int, rate: float, cv: float) -> dict:
    """Latency at load of a served DAG (see the module doc): ``result`` from simulate_dag_inference."""
    batch, latency = result["batch"], result["latency_s"]
    interval = batch * replicas / result["samples_per_s"]
    per_replica = rate / replicas
    rho = per_replica * interval / batch
    fill_mean = (batch - 1) / (2.0 * per_replica)
    fill_p99 = 0.99 * (batch - 1) / per_replica
    out = {"rate_samples_per_s": rate, "cv": cv, "rate_per_replica_samples_per_s": per_replica, "utilization": rho,
           "batch_interval_s": interval, "batch_fill_wait_mean_s": fill_mean, "saturated": rho >= 1.0}
    if rho >= 1.0:
        return {**out, "queue_wait_mean_s": None, "latency_mean_s": None, "latency_p99_s": None}
    wait = (cv * cv / batch) / 2.0 * rho / (1.0 - rho) * interval
    wait_p99 = wait / rho * math.log(100.0 * rho) if rho > 0.01 and wait > 0 else 0.0
    return {**out, "queue_wait_mean_s": wait, "latency_mean_s": fill_mean + wait + latency,
            "latency_p99_s": fill_p99 + wait_p99 + latency}


def serve_dag(model, hardware: str, deployment: str | None = None, *, batch: int = 1, batch_shape=None,
              traffic: str | None = None, slo: str | None = None, framework: str = "megatron") -> dict:
    """Forward-only serving of a DAG model on a deployment, with the latency at load when traffic is given."""
    from windtunnel.train.dag_forward import simulate_dag_inference

    tp, pp, replicas = parse_dag_deployment(deployment)
    load = parse_dag_traffic(traffic)
    objective = parse_dag_slo(slo)
    if objective is not None and load is None:
        raise WindtunnelError("Option '--slo latency=...' is judged at a load: give --traffic poisson:rate=R "
                              "(samples/s) as well.", field="slo")
    result = simulate_dag_inference(model, hardware, tp * pp * replicas, batch=batch, batch_shape=batch_shape,
                                    plan=f"tp={tp},pp={pp}", framework=framework)
    doc = {"kind": "dag_serving", "model": result["model"], "hardware": result["hardware"], "chip": result["chip"],
           "devices": result["devices"], "deployment": f"tp={tp},pp={pp},replicas={replicas}", "batch": batch,
           "batch_shape": result["batch_shape"], "latency_per_batch_s": result["latency_s"],
           "stage_times_s": result["stage_times_s"], "samples_per_s": result["samples_per_s"],
           "samples_per_s_per_device": result["samples_per_s_per_device"],
           "forward_flops_per_batch": result["forward_flops_per_batch"],
           "memory": {"weight_bytes_per_device": result["weight_bytes_per_device"],
                      "activation_bytes_per_device": result["activation_bytes_per_device"],
                      "total_bytes_per_device": result["memory_bytes_per_device"],
                      "capacity_bytes": result["memory_capacity_bytes"], "fits": result["fits_memory"]},
           "load": None, "slo": None}
    if load is not None:
        doc["load"] = {"traffic": load[2], **load_estimate(result, replicas, load[0], load[1])}
    if objective is not None:
        p99 = doc["load"]["latency_p99_s"]
        doc["slo"] = {"latency_s": objective, "judged_on": "load.latency_p99_s",
                      "met": p99 is not None and p99 <= objective and result["fits_memory"]}
    return doc


def search_dag_serving(model, hardware: str, devices: int, *, traffic: str | None = None, slo: str | None = None,
                       batch_shape=None, top: int = 10, framework: str = "megatron",
                       batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)) -> dict:
    """Deployments of a DAG model within ``devices``: tp and pp (powers of two up to 8 and 4), the batch and the
    replicas. With traffic: the fewest devices whose p99 latency at the load meets the SLO (or, without one,
    that are not saturated), then the lowest p99; without: the most samples/s per device."""
    load = parse_dag_traffic(traffic)
    objective = parse_dag_slo(slo)
    if objective is not None and load is None:
        raise WindtunnelError("Option '--slo latency=...' is judged at a load: give --traffic poisson:rate=R.",
                              field="slo")
    rows, errors = [], 0
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4):
            if tp * pp > devices:
                continue
            for batch in batches:
                try:
                    base = serve_dag(model, hardware, f"tp={tp},pp={pp},replicas=1", batch=batch,
                                     batch_shape=batch_shape, framework=framework)
                except WindtunnelError:
                    errors += 1
                    continue
                if not base["memory"]["fits"]:
                    continue
                counts = [devices // (tp * pp)]
                if load is not None:  # the fewest replicas that are not saturated, if within the budget
                    need = math.floor(load[0] / base["samples_per_s"]) + 1
                    counts = sorted({min(need, counts[0]), counts[0]})
                for replicas in counts:
                    rows.append(_row(base, tp, pp, replicas, load, objective))
    if not rows:
        raise WindtunnelError(f"No deployment of {model} fits on {devices} x {hardware} ({errors} candidates failed).",
                              field="devices")
    if load is None:
        rows.sort(key=lambda r: (-r["samples_per_s_per_device"], r["latency_per_batch_s"]))
    else:
        rows.sort(key=lambda r: (not r["meets"], r["devices"] if r["meets"] else 0,
                                 r["latency_p99_s"] if r["latency_p99_s"] is not None else math.inf))
    return {"kind": "dag_serving_search", "model": rows[0]["model"], "hardware": hardware, "devices": devices,
            "traffic": traffic, "slo_latency_s": objective, "candidates": len(rows), "best": rows[0] if rows else None,
            "top": rows[:top]}


def _row(base: dict, tp: int, pp: int, replicas: int, load, objective) -> dict:
    per_replica = base["samples_per_s"]
    row = {"model": base["model"], "deployment": f"tp={tp},pp={pp},replicas={replicas}", "devices": tp * pp * replicas,
           "batch": base["batch"], "latency_per_batch_s": base["latency_per_batch_s"],
           "samples_per_s": per_replica * replicas, "samples_per_s_per_device": base["samples_per_s_per_device"],
           "memory_bytes_per_device": base["memory"]["total_bytes_per_device"], "latency_p99_s": None, "meets": True}
    if load is not None:
        scaled = {"batch": base["batch"], "latency_s": base["latency_per_batch_s"], "samples_per_s": per_replica * replicas}
        estimate = load_estimate(scaled, replicas, load[0], load[1])
        row.update(latency_p99_s=estimate["latency_p99_s"], latency_mean_s=estimate["latency_mean_s"],
                   utilization=estimate["utilization"])
        row["meets"] = not estimate["saturated"] and (objective is None or estimate["latency_p99_s"] <= objective)
    return row
