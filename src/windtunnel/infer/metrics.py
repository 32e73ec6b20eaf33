"""Serving metrics: latency percentiles, throughput, SLO goodput, KV-cache use and queues over time.

Definitions (times in seconds):

* TTFT: first token time - arrival (the first token is produced by the iteration that completes the
  prefill; in a disaggregated deployment that is on the prefill instance).
* TPOT: (finish - first token) / (output tokens - 1), for requests with more than one output token
  (includes the KV transfer and decode queueing of a disaggregated deployment).
* E2E: finish - arrival.
* Throughput: completed requests (tokens) / makespan, makespan = last finish - first arrival.
* Goodput: requests meeting both SLOs (TTFT <= ttft and TPOT <= tpot) / makespan, the same window as
  throughput (as vLLM's benchmark_serving.py computes request goodput), so goodput = SLO attainment x
  request throughput; rejected requests never meet it. Per device: divided by the deployment's devices.
* Offered rate: (requests - 1) / arrival window (first to last arrival), requests/s; None for a closed loop.
  Served rate: requests that leave the system (finish or are rejected) during the second half of the arrival
  window / half the window (requests/s): equal to the arrival rate there when the deployment keeps up, its
  capacity when it does not. Request throughput (completed / makespan) is reported apart: one very long
  request can stretch the makespan far past the arrivals without any queue.
* Overloaded (rule): over the second half of the arrival window, fewer requests leave than arrive, by more
  than ``OVERLOAD_GROWTH`` (10%) of the arrivals there (and by at least ``OVERLOAD_MIN_REQUESTS``): the number
  of requests in the system keeps growing, so the queue and the makespan run past the arrivals (``drain_s``
  = makespan - arrival window, reported). A served load's in-system count stays level (Little's law: rate x
  latency). Never set for a closed loop (it cannot overload).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from windtunnel.infer.sim import SimOutput
from windtunnel.infer.units import parse_seconds
from windtunnel.specs.errors import WindtunnelError

SERIES_POINTS = 120
OVERLOAD_GROWTH = 0.10
OVERLOAD_MIN_REQUESTS = 5


@dataclass(frozen=True)
class SLO:
    """Latency objectives (seconds); None = no objective on that metric."""

    ttft_s: float | None = 2.0
    tpot_s: float | None = 0.1

    def text(self) -> str:
        parts = []
        if self.ttft_s is not None:
            parts.append(f"ttft={self.ttft_s:g}s")
        if self.tpot_s is not None:
            parts.append(f"tpot={self.tpot_s * 1e3:g}ms")
        return ",".join(parts) or "none"


def parse_slo(text: str | SLO | dict | None) -> SLO:
    """``ttft=2s,tpot=100ms`` (either may be omitted) -> SLO."""
    if text is None:
        return SLO()
    if isinstance(text, SLO):
        return text
    if isinstance(text, dict):
        items = text.items()
    else:
        items = []
        for part in str(text).split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise WindtunnelError(f"SLO item '{part}' is not key=value (field 'slo'); valid keys: ttft, tpot, "
                                      "e.g. --slo ttft=2s,tpot=100ms.", field="slo")
            key, value = part.split("=", 1)
            items.append((key, value))
    values: dict[str, float] = {}
    for key, value in items:
        key = str(key).strip().lower()
        if key not in ("ttft", "tpot"):
            raise WindtunnelError(f"Unknown SLO key '{key}' (field 'slo'); valid keys: ttft, tpot.", field="slo")
        if key in values:
            raise WindtunnelError(f"SLO key '{key}' is given twice (field 'slo'); give it once.", field="slo")
        values[key] = parse_seconds(value, f"slo.{key}", high=86400.0)
        if values[key] <= 0:
            raise WindtunnelError(f"Field 'slo.{key}' is {value!r}; a latency objective must be above 0 s (leave the "
                                  "key out for none).", field="slo")
    return SLO(ttft_s=values.get("ttft"), tpot_s=values.get("tpot"))


def _percentiles(values: np.ndarray) -> dict[str, float | None]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(values.mean())}


@dataclass
class ServingResult:
    """The outcome of one serving simulation (see the module docstring for definitions)."""

    model: str
    hardware: str
    deployment: str
    traffic: dict
    slo: SLO
    seed: int
    devices: int
    pools: list[dict]
    requests: int
    completed: int
    rejected: int
    ttft_s: dict
    tpot_s: dict
    e2e_s: dict
    makespan_s: float
    throughput: dict  # requests_per_s, output/input/total_tokens_per_s (and _per_device): per second of makespan
    goodput: dict  # requests_per_s (and _per_device) meeting the SLO, slo_attainment (fraction of requests)
    preemptions: int
    kv_cache: dict  # peak_fraction, mean_fraction of the deployment's KV capacity
    series: dict
    instances: list[dict]
    per_class: dict
    assumptions: list[str] = field(default_factory=list)
    events: int = 0
    wall_s: float = 0.0
    switches: list[dict] = field(default_factory=list)
    load: dict = field(default_factory=dict)
    prefix_cache: dict | None = None
    warnings: list[str] = field(default_factory=list)  # impossible inputs (an SLO below one iteration), stated

    @property
    def overloaded(self) -> bool:
        return bool(self.load.get("overloaded", False))

    @property
    def served_rate(self) -> float | None:
        """Requests/s leaving the system over the second half of the arrivals (module docstring)."""
        return self.load.get("served_rate")

    @property
    def offered_rate(self) -> float | None:
        """Requests/s arriving (None for a closed loop)."""
        return self.load.get("offered_rate")

    # Flat names of the nested JSON values (used across the serving pillar; the fields are the JSON keys).
    @property
    def requests_per_s(self) -> float:
        return self.throughput["requests_per_s"]

    @property
    def output_tokens_per_s(self) -> float:
        return self.throughput["output_tokens_per_s"]

    @property
    def input_tokens_per_s(self) -> float:
        return self.throughput["input_tokens_per_s"]

    @property
    def goodput_requests_per_s(self) -> float:
        return self.goodput["requests_per_s"]

    @property
    def goodput_per_device(self) -> float:
        return self.goodput["requests_per_s_per_device"]

    @property
    def slo_attainment(self) -> float:
        return self.goodput["slo_attainment"]

    @property
    def kv_peak_fraction(self) -> float:
        return self.kv_cache["peak_fraction"]

    @property
    def kv_mean_fraction(self) -> float:
        return self.kv_cache["mean_fraction"]

    def to_json_dict(self, *, timings: bool = False) -> dict:
        """The JSON contract of ``infer simulate --json``: the same inputs and seed give the same bytes, so the
        wall-clock seconds the simulation took (``wall_s``) are in it only with ``timings``."""
        doc = {
            "model": self.model, "hardware": self.hardware, "deployment": self.deployment, "traffic": self.traffic,
            "slo": {"ttft_s": self.slo.ttft_s, "tpot_s": self.slo.tpot_s}, "seed": self.seed, "devices": self.devices,
            "pools": self.pools, "requests": self.requests, "completed": self.completed, "rejected": self.rejected,
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s, "makespan_s": self.makespan_s,
            "throughput": self.throughput, "goodput": self.goodput, "preemptions": self.preemptions,
            "kv_cache": self.kv_cache,
            "series": self.series, "instances": self.instances, "per_class": self.per_class,
            "assumptions": self.assumptions, "events": self.events,
            "switches": self.switches, "overloaded": self.overloaded, "served_rate": self.load.get("served_rate"),
            "offered_rate": self.load.get("offered_rate"), "load": self.load, "prefix_cache": self.prefix_cache,
            "warnings": self.warnings,
        }
        if timings:
            doc["wall_s"] = self.wall_s
        return doc


def _series(out: SimOutput, start: float, end: float) -> tuple[dict, float, float]:
    """KV use (fraction of the deployment's capacity) and queue length, sampled on a time grid."""
    grid = np.linspace(start, end, SERIES_POINTS + 1)
    kv_total = np.zeros_like(grid)
    queue = np.zeros_like(grid)
    capacity = 0
    for inst in out.instances:
        times = np.asarray(inst.samples_t)
        index = np.searchsorted(times, grid, side="right") - 1
        index = np.clip(index, 0, times.size - 1)
        kv_total += np.asarray(inst.samples_kv, dtype=float)[index]
        queue += np.asarray(inst.samples_q, dtype=float)[index]
        capacity += inst.cap
    fraction = kv_total / max(1, capacity)
    series = {"t_s": [round(float(t), 6) for t in grid], "kv_fraction": [round(float(v), 6) for v in fraction],
              "queue": [int(q) for q in queue]}
    peak_fraction = max((inst.kv_max / inst.cap for inst in out.instances if inst.cap), default=0.0)
    return series, float(peak_fraction), float(fraction.mean())


def load_summary(out: SimOutput, makespan_s: float, closed: bool) -> dict:
    """Offered and served rates (requests/s), arrival window and drain (s), backlog growth and the overload flag
    (rule in the module docstring)."""
    arrival = np.sort(out.arrival)
    n = int(arrival.size)
    window = float(arrival[-1] - arrival[0]) if n > 1 else 0.0
    completed = int(((out.finish >= 0) & ~out.rejected).sum())
    if closed or window <= 0:
        return {"offered_rate": None, "served_rate": completed / makespan_s if makespan_s > 0 else 0.0,
                "arrival_window_s": window, "drain_s": None, "backlog_growth": None, "overloaded": False,
                "rule": "closed loop or a single instant of arrivals: never overloaded; served rate = throughput"}
    # when each request left the system: its finish, or its arrival if rejected; never if unfinished
    left = np.sort(np.where(out.finish >= 0, out.finish, np.where(out.rejected, out.arrival, np.inf)))
    mid, end = arrival[0] + 0.5 * window, arrival[-1]
    arrived = int(np.searchsorted(arrival, end, side="right") - np.searchsorted(arrival, mid, side="right"))
    departed = int(np.searchsorted(left, end, side="right") - np.searchsorted(left, mid, side="right"))
    grew = arrived - departed
    return {"offered_rate": (n - 1) / window, "served_rate": departed / (end - mid), "arrival_window_s": window,
            "drain_s": max(0.0, makespan_s - window), "backlog_growth": grew / max(1, arrived),
            "overloaded": bool(grew > OVERLOAD_GROWTH * arrived and grew >= OVERLOAD_MIN_REQUESTS),
            "rule": f"overloaded when, over the second half of the arrival window, the requests leaving fall short of "
                    f"those arriving by more than {OVERLOAD_GROWTH:.0%} of the arrivals (and by >= "
                    f"{OVERLOAD_MIN_REQUESTS}): the queue keeps growing"}


def _throughput(requests: float, output: float, prompt: float, devices: int) -> dict:
    """Completed requests and tokens per second of makespan, in total and per device."""
    per = 1.0 / devices if devices else 0.0
    return {"requests_per_s": requests, "requests_per_s_per_device": requests * per, "output_tokens_per_s": output,
            "output_tokens_per_s_per_device": output * per, "input_tokens_per_s": prompt,
            "total_tokens_per_s": prompt + output, "total_tokens_per_s_per_device": (prompt + output) * per}


def summarise(out: SimOutput, *, model: str, hardware: str, deployment: str, traffic: dict, slo: SLO, seed: int,
              devices: int, pools: list[dict], class_names: list[str], assumptions: list[str]) -> ServingResult:
    """Turn raw simulation output into a ServingResult."""
    done = (out.finish >= 0) & ~out.rejected
    arrival, first, finish = out.arrival, out.first, out.finish
    ttft = np.where(done, first - arrival, np.nan)
    e2e = np.where(done, finish - arrival, np.nan)
    multi = out.output > 1
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(done & multi, (finish - first) / np.maximum(1, out.output - 1), np.nan)
    start = float(arrival.min()) if arrival.size else 0.0
    end = float(finish[done].max()) if done.any() else start
    makespan = max(end - start, 1e-12)
    ok = done.copy()
    if slo.ttft_s is not None:
        ok &= ttft <= slo.ttft_s + 1e-12
    if slo.tpot_s is not None:
        ok &= ~multi | (tpot <= slo.tpot_s + 1e-12)
    series, kv_peak, kv_mean = _series(out, start, end)
    instances = []
    for inst in out.instances:
        instances.append({"index": inst.index, "role": inst.role, "devices": inst.devices,
                          "kv_capacity_tokens": inst.cap, "kv_peak_tokens": inst.kv_max,
                          "utilisation": inst.busy_time / makespan, "iterations": inst.iterations})
    per_class = {}
    if len(class_names) > 1:
        for index, name in enumerate(class_names):
            mask = out.klass == index
            if not mask.any():
                continue
            per_class[name] = {"requests": int(mask.sum()), "ttft_s": _percentiles(ttft[mask]),
                               "tpot_s": _percentiles(tpot[mask]), "e2e_s": _percentiles(e2e[mask]),
                               "slo_attainment": float(ok[mask].mean())}
    result = ServingResult(
        model=model, hardware=hardware, deployment=deployment, traffic=traffic, slo=slo, seed=seed, devices=devices,
        pools=pools, requests=int(out.prompt.size), completed=int(done.sum()), rejected=int(out.rejected.sum()),
        ttft_s=_percentiles(ttft), tpot_s=_percentiles(tpot), e2e_s=_percentiles(e2e), makespan_s=makespan,
        throughput=_throughput(float(done.sum()) / makespan, float(out.output[done].sum()) / makespan,
                               float(out.prompt[done].sum()) / makespan, devices),
        goodput={"requests_per_s": float(ok.sum()) / makespan,
                 "requests_per_s_per_device": float(ok.sum()) / makespan / devices if devices else 0.0,
                 "slo_attainment": float(ok.mean()) if ok.size else 0.0},
        preemptions=int(out.preempted.sum()), kv_cache={"peak_fraction": kv_peak, "mean_fraction": kv_mean},
        series=series,
        instances=instances, per_class=per_class, assumptions=assumptions, events=out.events, switches=out.switches,
        load=load_summary(out, makespan, out.closed_loop), prefix_cache=out.prefix_cache)
    check_serving_result(result)
    return result


def check_serving_result(result: ServingResult) -> None:
    """No result that cannot be true leaves the simulator: latencies, makespan and rates finite and >= 0,
    attainment and KV fractions in [0, 1] (else an InternalError with the inputs)."""
    from windtunnel.specs.errors import check_result

    inputs = {"model": result.model, "hardware": result.hardware, "deployment": result.deployment,
              "traffic": result.traffic, "seed": result.seed}
    times = {"makespan_s": result.makespan_s, "requests_per_s": result.requests_per_s,
             "output_tokens_per_s": result.output_tokens_per_s, "input_tokens_per_s": result.input_tokens_per_s,
             "goodput_requests_per_s": result.goodput_requests_per_s}
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        times.update({f"{name}.{k}": v for k, v in getattr(result, name).items()})
    for klass, values in result.per_class.items():
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            times.update({f"per_class.{klass}.{name}.{k}": v for k, v in values[name].items()})
    check_result("a serving simulation returned an impossible value", inputs, times=times,
                 shares={"slo_attainment": result.slo_attainment, "kv_peak_fraction": result.kv_peak_fraction,
                         "kv_mean_fraction": result.kv_mean_fraction})


def load_text(load: dict) -> str:
    """One line on offered vs served rate and the overload flag (for the text outputs)."""
    served = f"served {load['served_rate']:.2f} req/s"
    if load.get("offered_rate") is None:
        return f"load: {served} (closed loop: no offered rate)"
    flag = "[bold red]OVERLOADED[/]" if load["overloaded"] else "not overloaded"
    return (f"load: offered {load['offered_rate']:.2f} req/s, {served} (second half of the arrivals); {flag} "
            f"(backlog grew by {load['backlog_growth']:.0%} of that half's arrivals; last request done "
            f"{load['drain_s']:,.1f} s after the last arrival)")
