"""Deployment search: the most SLO goodput per device for a device budget and a traffic.

The space (fixed grids, so a larger budget's candidates contain a smaller budget's):

* instance shapes - dense models: tensor parallel 1, 2, 4, 8 (within a node); MoE models: TP 8 with the
  experts on the same 8 devices, and data-parallel attention with expert parallelism over 8 to 256
  devices (tp=1, dp=ep=N; two-batch overlap when the EP group spans nodes);
* co-located (mixed) pools: a shape, a replica count and a prefill chunk size (per attention group);
* disaggregated pools: a prefill shape and count, a decode shape and count (the prefill:decode ratio), and
  a decode batch limit;
* replica counts from a fixed grid (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, ...), every combination
  within the budget.

Every candidate whose weights fit is simulated on the same workload (the first ``requests`` requests of
the traffic; same seed), so results are exact simulations, not estimates, and the best goodput per
device can only rise with the budget. Candidates run in parallel local processes. Ranking: goodput per
device, then goodput. The best co-located and best disaggregated deployments are reported separately;
``baseline`` is simulated the same way and the best's gain over it reported.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass
from pathlib import Path

from windtunnel.infer.deployment import Deployment, InstanceSpec, parse_deployment, resolve_deployment
from windtunnel.infer.metrics import SLO, parse_slo, summarise
from windtunnel.infer.sim import Simulator
from windtunnel.infer.traffic import Workload, parse_traffic
from windtunnel.search.backends import LocalBackend
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import ModelSpec, load_model
from windtunnel.specs.yamlio import write_atomic

REPLICA_GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512)
DEFAULT_REQUESTS = 1500
MODES = ("both", "disaggregated", "colocated")


@dataclass(frozen=True)
class Shape:
    """An instance shape: parallel plan keys and devices per instance."""

    tp: int
    dp: int = 1
    ep: int | None = None
    tbo: bool = False

    @property
    def devices(self) -> int:
        return self.tp * self.dp

    def keys(self) -> dict:
        keys = {"tp": self.tp}
        if self.dp > 1:
            keys["dp"] = self.dp
        if self.ep is not None:
            keys["ep"] = self.ep
        if self.tbo:
            keys["tbo"] = True
        return keys


def shapes_for(model: ModelSpec, node: int, budget: int) -> list[Shape]:
    """Instance shapes of the space for ``model`` on nodes of ``node`` devices, at most ``budget`` devices."""
    out: list[Shape] = []
    if model.moe is None:
        for tp in (1, 2, 4, 8):
            if tp <= node and model.heads % tp == 0 and tp <= budget:
                out.append(Shape(tp=tp))
        return out
    if budget >= 8 and model.heads % 8 == 0 and node >= 8:
        out.append(Shape(tp=8, ep=8))
    for n in (8, 16, 32, 64, 128, 256):
        if n <= budget and n <= model.moe.experts:
            out.append(Shape(tp=1, dp=n, ep=n, tbo=n > node))
    return out


def _spec(role: str, shape: Shape, replicas: int, **extra) -> InstanceSpec:
    return InstanceSpec(role=role, replicas=replicas, **shape.keys(), **extra)


def candidates(model: ModelSpec, hardware: str, budget: int, mode: str = "both") -> list[tuple[str, Deployment]]:
    """Every candidate deployment within ``budget`` devices, in a deterministic order."""
    if mode not in MODES:
        raise WindtunnelError(f"Field 'mode' is '{mode}'; valid: {', '.join(MODES)}.", field="mode")
    node = load_hardware(hardware, 1).node_size
    shapes = shapes_for(model, node, budget)
    out: list[tuple[str, Deployment]] = []
    if mode in ("both", "colocated"):
        for shape in shapes:
            for replicas in REPLICA_GRID:
                if replicas * shape.devices > budget:
                    break
                for chunk in (2048, 8192):
                    spec = _spec("mixed", shape, replicas, max_tokens=chunk)
                    out.append(("colocated", Deployment(groups=(spec,))))
    if mode in ("both", "disaggregated"):
        prefill_shapes = [s for s in shapes if s.devices <= 64]
        for p_shape in prefill_shapes:
            for d_shape in shapes:
                for n_p in REPLICA_GRID:
                    if n_p * p_shape.devices + d_shape.devices > budget:
                        break
                    for n_d in REPLICA_GRID:
                        if n_p * p_shape.devices + n_d * d_shape.devices > budget:
                            break
                        for decode_batch in (128, 512):
                            groups = (_spec("prefill", p_shape, n_p, max_tokens=16384),
                                      _spec("decode", d_shape, n_d, max_batch=decode_batch))
                            out.append(("disaggregated", Deployment(groups=groups)))
    return out


# ---- evaluation ----------------------------------------------------------------------------------------------

_CONTEXT: dict = {}


def _evaluate(item: tuple[int, str, Deployment]) -> dict:
    """Simulate one candidate (runs in a worker; the model, workload and SLO come from the forked context)."""
    index, kind, deployment = item
    model, hardware, workload, slo = (_CONTEXT[k] for k in ("model", "hardware", "workload", "slo"))
    try:
        plans = resolve_deployment(model, hardware, deployment)
    except WindtunnelError as exc:
        return {"index": index, "kind": kind, "deployment": deployment.text(), "feasible": False,
                "reason": _reason(str(exc))}
    devices = sum(p.total_devices for p in plans)
    transfer = load_hardware(hardware, devices) if deployment.disaggregated else None
    out = Simulator(model, plans, workload, deployment.router, transfer_cluster=transfer).run()
    result = summarise(out, model=model.id, hardware=hardware, deployment=deployment.text(), traffic={}, slo=slo,
                       seed=0, devices=devices, pools=[], class_names=workload.class_names, assumptions=[])
    return {"index": index, "kind": kind, "deployment": deployment.text(), "feasible": True, "devices": devices,
            "goodput_per_s": result.goodput_requests_per_s, "goodput_per_s_per_device": result.goodput_per_device,
            "slo_attainment": result.slo_attainment, "throughput_per_s": result.requests_per_s,
            "output_tokens_per_s": result.output_tokens_per_s, "ttft_p90_s": result.ttft_s["p90"],
            "tpot_p90_s": result.tpot_s["p90"], "e2e_p50_s": result.e2e_s["p50"], "preemptions": result.preemptions,
            "kv_peak_fraction": result.kv_peak_fraction}


def _reason(message: str) -> str:
    if "does not fit" in message:
        return "weights do not fit"
    return message.split(";")[0][:120]


def _rank_key(row: dict) -> tuple:
    return (-row["goodput_per_s_per_device"], -row["goodput_per_s"], row["devices"], row["index"])


def search_deployments(model: str | ModelSpec, hardware: str, devices: int, traffic: str | Path | dict | Workload, *,
                       slo: str | SLO | dict | None = "ttft=2s,tpot=100ms", seed: int = 0, top: int = 10,
                       baseline: str | None = None, mode: str = "both", requests: int | None = DEFAULT_REQUESTS,
                       workers: int | None = None) -> dict:
    """Search deployments of ``model`` on at most ``devices`` devices of ``hardware`` for the most SLO goodput
    per device on ``traffic`` (its first ``requests`` requests; None = all). Returns a JSON-ready document:
    ranked ``deployments``, ``best_colocated``, ``best_disaggregated``, ``baseline`` (with ``gain``), counts
    and timings."""
    start = time.perf_counter()
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    if devices < 1:
        raise WindtunnelError(f"Field 'devices' must be a positive integer, got {devices}.", field="devices")
    load_hardware(hardware, devices)
    slo_spec = parse_slo(slo)
    workload = traffic if isinstance(traffic, Workload) else parse_traffic(traffic, seed=seed)
    notes = []
    if requests is not None and workload.size > requests:
        workload = _first(workload, requests)
        notes.append(f"workload: the first {requests:,} requests of the traffic (pass requests=None for all)")
    items = [(i, kind, dep) for i, (kind, dep) in enumerate(candidates(spec, hardware, devices, mode))]
    enumerated = len(items)
    _CONTEXT.update(model=spec, hardware=hardware, workload=workload, slo=slo_spec)
    backend = LocalBackend(workers)
    try:
        rows = backend.map(_evaluate, items)
        baseline_row = None
        if baseline:
            dep = parse_deployment(baseline)
            kind = "disaggregated" if dep.disaggregated else "colocated"
            baseline_row = _evaluate((-1, kind, dep))
    finally:
        backend.close()
        _CONTEXT.clear()
    feasible = sorted((r for r in rows if r["feasible"]), key=_rank_key)
    infeasible: dict[str, int] = {}
    for r in rows:
        if not r["feasible"]:
            infeasible[r["reason"]] = infeasible.get(r["reason"], 0) + 1
    for rank, row in enumerate(feasible, start=1):
        row["rank"] = rank
    best = {kind: next((r for r in feasible if r["kind"] == kind), None) for kind in ("colocated", "disaggregated")}
    if baseline_row is not None and baseline_row["feasible"] and feasible:
        base = baseline_row["goodput_per_s_per_device"]
        baseline_row["gain"] = (feasible[0]["goodput_per_s_per_device"] / base - 1.0) if base > 0 else None
    elif baseline_row is not None:
        baseline_row["gain"] = None
    return {
        "model": spec.id, "hardware": hardware, "devices": devices, "mode": mode,
        "slo": {"ttft_s": slo_spec.ttft_s, "tpot_s": slo_spec.tpot_s}, "seed": seed,
        "traffic": workload.summary(), "objective": "goodput per device (requests/s meeting the SLO / devices used)",
        "deployments": feasible[:top], "best_colocated": best["colocated"], "best_disaggregated": best["disaggregated"],
        "baseline": baseline_row,
        "max_goodput_per_s": max((r["goodput_per_s"] for r in feasible), default=0.0),
        "candidates": {"enumerated": enumerated, "simulated": len(feasible), "infeasible": infeasible},
        "elapsed_s": time.perf_counter() - start, "notes": notes,
    }


def _first(workload: Workload, n: int) -> Workload:
    return Workload(workload.arrival[:n], workload.prompt[:n], workload.output[:n], workload.klass[:n],
                    workload.class_names, workload.description + f" (first {n})", workload.concurrency,
                    workload.think_s, list(workload.notes))


# ---- outputs ----------------------------------------------------------------------------------------------------


def _row_text(row: dict) -> str:
    return (f"{row['deployment']}: {row['devices']} devices, goodput {row['goodput_per_s']:.3f} req/s "
            f"({row['goodput_per_s_per_device']:.4f} per device), SLO attainment {row['slo_attainment']:.1%}")


def search_table(document: dict, console) -> None:
    """Ranked deployments, the best of each kind, the baseline, counts and time."""
    from rich.table import Table

    table = Table(title=f"best deployments: {document['model']} on <= {document['devices']} x {document['hardware']}")
    for column in ("#", "deployment", "dev", "goodput/dev", "goodput", "SLO met", "TTFT p90 ms", "TPOT p90 ms"):
        table.add_column(column, overflow="fold", justify="left" if column == "deployment" else "right")
    for row in document["deployments"]:
        table.add_row(str(row["rank"]), row["deployment"], str(row["devices"]), f"{row['goodput_per_s_per_device']:.4f}",
                      f"{row['goodput_per_s']:.3f}", f"{row['slo_attainment']:.1%}",
                      "-" if row["ttft_p90_s"] is None else f"{row['ttft_p90_s'] * 1e3:,.0f}",
                      "-" if row["tpot_p90_s"] is None else f"{row['tpot_p90_s'] * 1e3:,.1f}")
    console.print(table)
    for kind in ("colocated", "disaggregated"):
        row = document[f"best_{kind}"]
        console.print(f"best {kind}: " + (_row_text(row) if row else "none feasible"))
    baseline = document.get("baseline")
    if baseline:
        if not baseline["feasible"]:
            console.print(f"baseline {baseline['deployment']}: infeasible ({baseline['reason']})")
        else:
            gain = baseline.get("gain")
            console.print(f"baseline {_row_text(baseline)}; best is "
                          + (f"{gain:+.1%} goodput per device" if gain is not None else "not comparable (zero goodput)"))
    counts = document["candidates"]
    console.print(f"candidates: {counts['enumerated']:,} enumerated, {counts['simulated']:,} simulated, "
                  + ", ".join(f"{n} {reason}" for reason, n in counts["infeasible"].items())
                  + f"; {document['elapsed_s']:.1f} s")
    for note in document["notes"]:
        console.print(f"note: {note}")


def write_search_html(document: dict, path: str | Path) -> None:
    """A self-contained HTML report: ranked table, best of each kind, goodput per device against devices."""
    import plotly.graph_objects as go
    from plotly.io import to_html

    rows = document["deployments"]
    figure = go.Figure()
    for kind in ("colocated", "disaggregated"):
        chosen = [r for r in rows if r["kind"] == kind]
        figure.add_trace(go.Scatter(x=[r["devices"] for r in chosen], y=[r["goodput_per_s_per_device"] for r in chosen],
                                    mode="markers", name=kind, text=[r["deployment"] for r in chosen]))
    figure.update_layout(title="Goodput per device of the best deployments", xaxis_title="devices",
                         yaxis_title="goodput per device (req/s)")
    table = "".join(
        f"<tr><td>{r['rank']}</td><td><code>{html.escape(r['deployment'])}</code></td><td>{r['kind']}</td>"
        f"<td>{r['devices']}</td><td>{r['goodput_per_s_per_device']:.4f}</td><td>{r['goodput_per_s']:.3f}</td>"
        f"<td>{r['slo_attainment']:.1%}</td></tr>" for r in rows)
    best = "".join(f"<li>best {kind}: {html.escape(_row_text(document[f'best_{kind}']))}</li>"
                   for kind in ("colocated", "disaggregated") if document[f"best_{kind}"])
    baseline = document.get("baseline")
    if baseline and baseline.get("feasible"):
        gain = baseline.get("gain")
        best += (f"<li>baseline {html.escape(_row_text(baseline))}; best "
                 + (f"<b>{gain:+.1%}</b>" if gain is not None else "n/a") + " goodput per device</li>")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>windtunnel serving search</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}</style>
</head><body><h1>Serving search: {html.escape(document['model'])} on up to {document['devices']} x
{html.escape(document['hardware'])}</h1><p>SLO: TTFT {document['slo']['ttft_s']} s, TPOT {document['slo']['tpot_s']} s;
traffic: {html.escape(str(document['traffic']['description']))} ({document['traffic']['requests']} requests)</p>
<ul>{best}</ul><table><tr><th>#</th><th>deployment</th><th>kind</th><th>devices</th><th>goodput/device</th>
<th>goodput req/s</th><th>SLO met</th></tr>{table}</table>
<h2>Candidates</h2><pre>{html.escape(json.dumps(document['candidates'], indent=1))}</pre>
{to_html(figure, full_html=False, include_plotlyjs=True)}</body></html>"""
    write_atomic(path, page)

