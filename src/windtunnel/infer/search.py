"""Deployment search: the fewest devices whose deployment serves the offered traffic at an SLO attainment target.

Objectives (``objective``):

* ``devices`` (default): the fewest devices whose deployment serves the traffic with SLO attainment >=
  ``attainment`` (default 0.99) and without overload (:func:`windtunnel.infer.metrics.load_summary`); ties go
  to the higher attainment, then the higher goodput, then the lower TTFT p90.
* ``cost``: the same with a price per device-hour (``price_per_device_hour``, in the price's currency): the lowest cost per hour
  (the space holds one chip, so the order is the devices order; the figures are reported).
* ``goodput``: with the ``devices`` budget fixed, the most goodput at the attainment target: each deployment's
  highest sustainable load (the traffic's arrivals sped up by a factor found by doubling, then bisection) at
  which it still meets the target; goodput is its goodput there (DistServe's per-GPU goodput, Zhong et al.,
  OSDI 2024: the maximum request rate served within the SLO attainment goal).

The space: :mod:`windtunnel.infer.search_space` (fixed grids of shapes, replica counts and limits).

Method. Candidates are screened in ascending device count on the traffic's first ``requests`` requests
(same seed; exact simulations); screening stops once ``top`` distinct qualifiers are known and every
candidate with as few devices as the ``top``-th has been screened. Candidates whose screening results are
identical (e.g. differing only in a batch limit the traffic never reaches) collapse into the first one
(``equivalent`` lists the rest). Every winner is then re-simulated on the full traffic; only winners that
still meet the target there are shown (with their full-traffic figures), and screening resumes when too
few remain. The baseline is simulated on the full traffic too, so gains compare the same offered load.
Candidates run on a backend of :mod:`windtunnel.search.backends` (local processes or Ray) through a
picklable evaluator that carries its own inputs, so every backend gives the same answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from windtunnel.infer.deployment import (
    Deployment,
    normalise_router,
    parse_deployment,
    resolve_deployment,
)
from windtunnel.infer.metrics import SLO, parse_slo, summarise
from windtunnel.infer.search_space import candidates
from windtunnel.infer.sim import Simulator
from windtunnel.infer.traffic import Workload, parse_traffic
from windtunnel.search.backends import make_backend
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import load_hardware
from windtunnel.specs.model import ModelSpec, load_model

DEFAULT_REQUESTS = 1500
OBJECTIVES = ("devices", "cost", "goodput")
DEFAULT_ATTAINMENT = 0.99
MAX_SPEEDUP = 64.0  # goodput objective: loads up to 64x the offered one are tried
BISECTION_STEPS = 3  # goodput objective: the sustainable speed-up is known to within 2**(1/8) (9%)
FULL_FAILURES_PER_WINNER = 4  # winners that fail on the full traffic, per winner shown, before giving up
FULL_STEPS_DOWN = 4  # goodput objective: a finalist missing the target on the full traffic steps its load down


# ---- evaluation ----------------------------------------------------------------------------------------------


def sped_up(workload: Workload, speed: float) -> Workload:
    """The same requests arriving ``speed`` times as fast (arrival times divided by ``speed``)."""
    if speed == 1.0:
        return workload
    return replace(workload, arrival=workload.arrival / speed, description=workload.description + f" (x{speed:.3g} load)",
                   notes=list(workload.notes))


@dataclass
class Evaluator:
    """Simulates candidate deployments on one workload. Picklable and self-contained (it carries the model,
    hardware, workload, SLO and attainment target), so a backend ships it to its workers and every backend
    gives the same rows."""

    model: ModelSpec
    hardware: str
    workload: Workload
    slo: SLO
    target: float

    def __call__(self, item: tuple[int, str, Deployment, float]) -> dict:
        """One candidate ``(index, kind, deployment, speed)`` -> its result row (``feasible`` False with a
        ``reason`` when it cannot be built)."""
        index, kind, deployment, speed = item
        try:
            plans = resolve_deployment(self.model, self.hardware, deployment)
        except WindtunnelError as exc:
            return {"index": index, "kind": kind, "deployment": deployment.text(), "feasible": False,
                    "reason": _reason(str(exc))}
        devices = sum(p.total_devices for p in plans)
        transfer = load_hardware(self.hardware, devices) if deployment.disaggregated else None
        workload = sped_up(self.workload, speed)
        out = Simulator(self.model, plans, workload, deployment.router, transfer_cluster=transfer).run()
        result = summarise(out, model=self.model.id, hardware=self.hardware, deployment=deployment.text(), traffic={},
                           slo=self.slo, seed=0, devices=devices, pools=[], class_names=workload.class_names,
                           assumptions=[])
        load = result.load
        return {"index": index, "kind": kind, "deployment": deployment.text(), "feasible": True, "devices": devices,
                "speed": speed, "attainment": result.slo_attainment,
                "goodput_requests_per_s": result.goodput_requests_per_s, "goodput_per_device": result.goodput_per_device,
                "served_rate": load["served_rate"], "offered_rate": load["offered_rate"],
                "overloaded": load["overloaded"], "throughput_requests_per_s": result.requests_per_s,
                "output_tokens_per_s": result.output_tokens_per_s, "ttft_p90_s": result.ttft_s["p90"],
                "tpot_p90_s": result.tpot_s["p90"], "e2e_p50_s": result.e2e_s["p50"], "rejected": result.rejected,
                "preemptions": result.preemptions, "kv_peak_fraction": result.kv_peak_fraction,
                "meets_target": bool(result.slo_attainment >= self.target - 1e-12 and not load["overloaded"])}


def _reason(message: str) -> str:
    if "does not fit" in message:
        return "weights do not fit"
    return message.split(";")[0][:120]


def _signature(row: dict) -> tuple:
    """Rows with equal signatures are the same result (a knob the traffic never reaches: a batch limit never hit
    changes only the KV capacity the activations leave, so the KV fraction is left out)."""
    return (row["kind"], row["devices"], row["speed"], row["attainment"], row["goodput_requests_per_s"],
            row["throughput_requests_per_s"], row["output_tokens_per_s"], row["ttft_p90_s"], row["tpot_p90_s"],
            row["e2e_p50_s"], row["preemptions"], row["rejected"])


def _devices_key(row: dict) -> tuple:
    ttft = row["ttft_p90_s"] if row["ttft_p90_s"] is not None else math.inf
    return (row["devices"], -row["attainment"], -row["goodput_requests_per_s"], ttft, row["index"])


def _goodput_key(row: dict) -> tuple:
    """The highest sustainable load first (goodput at the target scales with it), then fewer devices."""
    return (-row["speed"], row["devices"], -row["goodput_requests_per_s"], -row["attainment"], row["index"])


class _Runner:
    """Maps an evaluator over items in batches on a backend, counting simulations and reporting progress."""

    def __init__(self, backend, progress: Callable[[str, int, int], None] | None) -> None:
        self.backend = backend
        self.progress = progress
        self.simulations = 0
        self.batch = max(16, 8 * getattr(backend, "workers", 4))

    def map(self, evaluator: Evaluator, items: list, phase: str, done: int = 0, total: int | None = None) -> list:
        rows: list = []
        total = total if total is not None else done + len(items)
        for start in range(0, len(items), self.batch):
            chunk = items[start:start + self.batch]
            rows.extend(self.backend.map(evaluator, chunk))
            self.simulations += len(chunk)
            if self.progress:
                self.progress(phase, done + start + len(chunk), total)
        return rows


def _collapse(rows: list[dict], distinct: dict[tuple, dict]) -> None:
    """Add feasible rows to ``distinct`` (signature -> first row); a repeat joins its ``equivalent`` list."""
    for row in rows:
        if not row["feasible"]:
            continue
        key = _signature(row)
        if key in distinct:
            distinct[key]["equivalent"].append(row["deployment"])
        else:
            row["equivalent"] = []
            distinct[key] = row


# ---- the fewest devices --------------------------------------------------------------------------------------


def _fewest_devices(items: list, screen: Evaluator, full: Evaluator | None, runner: _Runner, top: int,
                    counts: dict) -> tuple[list[dict], list[dict]]:
    """Screen ``items`` (sorted by devices) in ascending device count until ``top`` distinct qualifiers that
    hold on the full traffic are known; returns (confirmed winners on the full traffic, screened rows)."""
    groups: list[list] = []
    for item in items:
        if groups and groups[-1][0][3] == item[3]:
            groups[-1].append(item)
        else:
            groups.append([item])
    distinct: dict[tuple, dict] = {}
    screened: list[dict] = []
    failed: set[int] = set()
    confirmed: dict[int, dict] = {}
    pos = done = 0

    def alive() -> list[dict]:
        return sorted((r for r in distinct.values() if r["meets_target"] and r["index"] not in failed), key=_devices_key)

    while True:
        while pos < len(groups):
            ranked = alive()
            if len(ranked) >= top and ranked[top - 1]["devices"] < groups[pos][0][3]:
                break
            batch: list = []
            while pos < len(groups) and len(batch) < runner.batch:
                batch.extend(groups[pos])
                pos += 1
            rows = runner.map(screen, [(i, kind, dep, 1.0) for i, kind, dep, _ in batch], "screen", done, len(items))
            done += len(batch)
            screened.extend(rows)
            _collapse(rows, distinct)
        want = [r for r in alive()[:top] if r["index"] not in confirmed]
        if not want or len(failed) >= FULL_FAILURES_PER_WINNER * top:
            break
        if full is None:
            confirmed.update((r["index"], r) for r in want)
            continue
        rows = runner.map(full, [(r["index"], r["kind"], parse_deployment(r["deployment"]), 1.0) for r in want],
                          "re-simulate on the full traffic")
        for screen_row, row in zip(want, rows, strict=True):
            row["equivalent"] = screen_row["equivalent"]
            row["screen"] = {"attainment": screen_row["attainment"], "overloaded": screen_row["overloaded"]}
            if row["meets_target"]:
                confirmed[row["index"]] = row
            else:
                failed.add(row["index"])
    counts["gave_up_after_failures"] = len(failed) >= FULL_FAILURES_PER_WINNER * top
    counts.update(screened=len(screened), distinct=len(distinct), failed_on_full_traffic=len(failed),
                  stopped_at_devices=groups[pos - 1][0][3] if pos else 0, screened_all=pos == len(groups))
    winners = sorted((r for r in confirmed.values() if r["index"] not in failed), key=_devices_key)
    return winners[:top], screened


# ---- the most goodput at the target on a fixed budget ------------------------------------------------------


def _most_goodput(items: list, screen: Evaluator, full: Evaluator | None, runner: _Runner, top: int,
                  counts: dict) -> tuple[list[dict], list[dict]]:
    """Each distinct candidate's highest sustainable speed-up (doubling, then bisection) at the target; the
    ``top`` with the most goodput there, re-simulated on the full traffic at that load."""
    first = runner.map(screen, [(i, kind, dep, 1.0) for i, kind, dep, _ in items], "screen at the offered load")
    distinct: dict[tuple, dict] = {}
    _collapse(first, distinct)
    base = sorted(distinct.values(), key=lambda r: r["index"])
    best: dict[int, dict] = {r["index"]: r for r in base if r["meets_target"]}
    low: dict[int, float] = {i: 1.0 for i in best}
    high: dict[int, float] = {}
    deps = {r["index"]: (r["kind"], parse_deployment(r["deployment"])) for r in base}
    survivors = sorted(best)
    if not best:  # nothing serves the offered load: slow the traffic down until something does
        speed = 0.5
        while not best and speed >= 1.0 / MAX_SPEEDUP:
            rows = runner.map(screen, [(r["index"], *deps[r["index"]], speed) for r in base], f"load x{speed:g}")
            best = {r["index"]: r for r in rows if r["feasible"] and r["meets_target"]}
            low = {i: speed for i in best}
            high = {i: speed * 2 for i in best}
            speed /= 2
    speed = 2.0
    while survivors and speed <= MAX_SPEEDUP:
        rows = runner.map(screen, [(i, *deps[i], speed) for i in survivors], f"load x{speed:g}")
        survivors = []
        for row in rows:
            if row["meets_target"]:
                best[row["index"]], low[row["index"]] = row, speed
                survivors.append(row["index"])
            else:
                high[row["index"]] = speed
        speed *= 2
    finalists = sorted(best.values(), key=_goodput_key)[:2 * top]
    for _ in range(BISECTION_STEPS):
        probe = [(r["index"], *deps[r["index"]], math.sqrt(low[r["index"]] * high[r["index"]]))
                 for r in finalists if r["index"] in high]
        for row in runner.map(screen, probe, "bisect the sustainable load"):
            if row["meets_target"]:
                best[row["index"]], low[row["index"]] = row, row["speed"]
            else:
                high[row["index"]] = row["speed"]
        finalists = sorted((best[r["index"]] for r in finalists), key=_goodput_key)
    winners = finalists
    if full is not None and finalists:
        # the full traffic at each finalist's load; one that misses the target steps down 2**(-1/8) at a time
        winners, pending, failures = [], list(finalists), 0
        for _ in range(FULL_STEPS_DOWN + 1):
            rows = runner.map(full, [(r["index"], *deps[r["index"]], r["speed"]) for r in pending],
                              "re-simulate on the full traffic")
            retry = []
            for screen_row, row in zip(pending, rows, strict=True):
                row["screen"] = {"attainment": screen_row["attainment"], "overloaded": screen_row["overloaded"],
                                 "speed": screen_row["speed"]}
                if row["meets_target"]:
                    winners.append(row)
                else:
                    failures += 1
                    retry.append(screen_row | {"speed": row["speed"] / 2 ** (1 / 8)})
            pending = retry
            if not pending:
                break
        counts["failed_on_full_traffic"] = failures
    for row in winners:
        row["equivalent"] = next(r["equivalent"] for r in base if r["index"] == row["index"])
    counts.update(screened=len(items), distinct=len(distinct), screened_all=True)
    return sorted(winners, key=_goodput_key)[:top], first


# ---- the search ------------------------------------------------------------------------------------------------


def _first(workload: Workload, n: int) -> Workload:
    return replace(workload, arrival=workload.arrival[:n], prompt=workload.prompt[:n], output=workload.output[:n],
                   klass=workload.klass[:n], description=workload.description + f" (first {n})",
                   notes=list(workload.notes), hashes=None if workload.hashes is None else workload.hashes[:n])


def _priced(row: dict | None, price: float | None) -> None:
    if row is not None and row.get("feasible", True) and price is not None:
        row["cost_per_hour"] = row["devices"] * price
        served = row["goodput_requests_per_s"]
        row["cost_per_million_good_requests"] = row["cost_per_hour"] / (served * 3600.0) * 1e6 if served > 0 else None


def _gain(best: dict | None, base: dict | None) -> dict | None:
    """The best against the baseline at the same offered load (the full traffic)."""
    if best is None or base is None or not base["feasible"]:
        return None
    goodput = base["goodput_requests_per_s"]
    return {"devices_saved": base["devices"] - best["devices"], "devices_ratio": best["devices"] / base["devices"],
            "goodput": best["goodput_requests_per_s"] / goodput - 1.0 if goodput > 0 else None,
            "attainment_points": best["attainment"] - base["attainment"], "baseline_meets_target": base["meets_target"],
            "offered_rate": base["offered_rate"], "speed": best["speed"]}


def search_deployments(model: str | ModelSpec, hardware: str, devices: int, traffic: str | Path | dict | Workload, *,
                       slo: str | SLO | dict | None = "ttft=2s,tpot=100ms", seed: int = 0, top: int = 10,
                       baseline: str | None = None, mode: str = "both", requests: int | None = DEFAULT_REQUESTS,
                       workers: int | None = None, attainment: float = DEFAULT_ATTAINMENT, objective: str = "devices",
                       price_per_device_hour: float | None = None, currency: str = "", backend="local",
                       address: str | None = None, progress: Callable[[str, int, int], None] | None = None, router: str | None = None) -> dict:
    """Search deployments of ``model`` on at most ``devices`` devices of ``hardware`` that serve ``traffic`` with
    SLO attainment >= ``attainment`` (see the module docstring for the objectives). ``price_per_device_hour``: in
    ``currency`` ('' when the price was given without one) per device-hour. ``backend``: 'local', 'ray'
    or an object with ``map``/``close``. ``progress(phase, done, total)`` is called as candidates finish.
    ``router`` (e.g. cache_aware for a trace with block hashes) replaces every candidate's router.
    Returns a JSON-ready document: ``feasible`` (False with a ``reason`` when nothing qualifies),
    ``deployments`` (winners, re-simulated on the full traffic), ``best``, ``best_colocated``,
    ``best_disaggregated``, ``baseline`` (with ``gain``), counts and timings."""
    start = time.perf_counter()
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    from windtunnel.specs.bounds import MAX_DEVICES, MAX_REQUESTS, check_number, check_whole

    check_whole("devices", devices, 1, MAX_DEVICES)
    if requests is not None:
        check_whole("requests", requests, 1, MAX_REQUESTS)
    if price_per_device_hour is not None:
        check_number("price", price_per_device_hour, 0.0, 1e6, lo_open=True, what=" per device-hour")
    if objective not in OBJECTIVES:
        raise WindtunnelError(f"Field 'objective' is '{objective}'; valid: {', '.join(OBJECTIVES)}.", field="objective")
    if not 0.0 < attainment <= 1.0:
        raise WindtunnelError(f"Field 'attainment' is {attainment}; valid: a fraction in (0, 1], e.g. 0.99.",
                              field="attainment")
    if objective == "cost" and price_per_device_hour is None:
        raise WindtunnelError("Objective 'cost' needs a price (field 'price': per device-hour, e.g. --price "
                              "2.5/device-hour).",
                              field="price")
    if price_per_device_hour is not None and not price_per_device_hour > 0:
        raise WindtunnelError(f"Field 'price' is {price_per_device_hour}; valid: a positive price per device-hour.",
                              field="price")
    if top < 1:
        raise WindtunnelError(f"Field 'top' must be a positive integer, got {top}.", field="top")
    load_hardware(hardware, devices)
    slo_spec = parse_slo(slo)
    workload = traffic if isinstance(traffic, Workload) else parse_traffic(traffic, seed=seed)
    if workload.concurrency is not None and objective == "goodput":
        raise WindtunnelError("Objective 'goodput' speeds up the arrivals; a closed-loop traffic has none (field "
                              "'traffic': use poisson, gamma or a trace).", field="traffic")
    notes = []
    screen_workload = workload
    if requests is not None and workload.size > requests:
        screen_workload = _first(workload, requests)
        notes.append(f"screening on the first {requests:,} of {workload.size:,} requests; winners and the baseline "
                     "re-simulated on all of them")
    cands = candidates(spec, hardware, devices, mode)
    if router is not None:
        chosen = normalise_router(router)
        cands = [(kind, Deployment(groups=dep.groups, router=chosen)) for kind, dep in cands]
    # (index, kind, deployment, devices), by devices: the candidates' own plan keys give their device counts
    items = sorted(((i, kind, dep, sum(g.replicas * (g.tp or 1) * (g.dp or 1) * g.pp for g in dep.groups))
                    for i, (kind, dep) in enumerate(cands)), key=lambda item: (item[3], item[0]))
    screen = Evaluator(spec, hardware, screen_workload, slo_spec, attainment)
    full = Evaluator(spec, hardware, workload, slo_spec, attainment) if screen_workload is not workload else None
    runner_backend = backend if hasattr(backend, "map") else make_backend(backend, address=address, workers=workers)
    runner = _Runner(runner_backend, progress)
    counts: dict = {"enumerated": len(items)}
    try:
        search = _most_goodput if objective == "goodput" else _fewest_devices
        winners, screened = search(items, screen, full, runner, top, counts)
        baseline_row = None
        if baseline:
            dep = parse_deployment(baseline)
            kind = "disaggregated" if dep.disaggregated else "colocated"
            baseline_row = (full or screen)((-1, kind, dep, 1.0))
    finally:
        if runner_backend is not backend:
            runner_backend.close()
    infeasible: dict[str, int] = {}
    for r in screened:
        if not r["feasible"]:
            infeasible[r["reason"]] = infeasible.get(r["reason"], 0) + 1
    counts["infeasible"] = infeasible
    if counts.get("gave_up_after_failures"):
        notes.append(f"{counts['failed_on_full_traffic']} screening winners missed the target on the full traffic; "
                     "the search stopped there (raise --requests to screen on more of the traffic)")
    counts["simulations"] = runner.simulations + (1 if baseline else 0)
    for rank, row in enumerate(winners, start=1):
        row["rank"] = rank
        _priced(row, price_per_device_hour)
    _priced(baseline_row, price_per_device_hour)
    best = winners[0] if winners else None
    if baseline_row is not None and baseline_row["feasible"]:
        baseline_row["gain"] = _gain(best, baseline_row)
    offered = workload.summary()["mean_rate_per_s"]
    reason = None
    closest = None
    if best is None:
        simulated = [r for r in screened if r["feasible"]]
        closest = max(simulated, key=lambda r: (r["attainment"], -r["devices"], -r["index"]), default=None)
        rate = f" at {offered:.2f} req/s offered" if offered else ""
        reason = (f"cannot be served within {devices} devices: no deployment reaches {attainment:.1%} SLO attainment "
                  f"({slo_spec.text()}){rate} without overload")
        if closest is not None:
            reason += f"; the closest, {closest['deployment']} ({closest['devices']} devices), reaches " \
                      f"{closest['attainment']:.1%}"
    from windtunnel.infer.slo_check import deployment_slo_warnings

    shown = best or closest
    warnings = deployment_slo_warnings(spec, hardware, shown["deployment"], slo_spec, int(workload.prompt.min())) \
        if shown is not None and workload.size else []
    label = {"devices": f"fewest devices with SLO attainment >= {attainment:.1%} at the offered load, not overloaded",
             "cost": f"lowest cost per hour ({(currency + ' ') if currency else ''}{price_per_device_hour} per device-hour) "
                     f"with SLO attainment >= "
                     f"{attainment:.1%} at the offered load, not overloaded",
             "goodput": f"most goodput at SLO attainment >= {attainment:.1%} within {devices} devices (highest "
                        "sustainable load, arrivals sped up)"}[objective]
    return {
        "model": spec.id, "hardware": hardware, "devices": devices, "mode": mode, "objective": objective,
        "objective_text": label, "attainment_target": attainment, "price_per_device_hour": price_per_device_hour,
        "currency": currency,
        "slo": {"ttft_s": slo_spec.ttft_s, "tpot_s": slo_spec.tpot_s}, "seed": seed, "traffic": workload.summary(),
        "offered_rate": offered, "feasible": best is not None, "reason": reason, "closest": closest,
        "deployments": winners, "best": best,
        "best_colocated": next((r for r in winners if r["kind"] == "colocated"), None),
        "best_disaggregated": next((r for r in winners if r["kind"] == "disaggregated"), None),
        "baseline": baseline_row, "candidates": counts, "elapsed_s": time.perf_counter() - start, "notes": notes,
        "warnings": warnings,
    }
