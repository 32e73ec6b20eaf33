"""Fit the collective model's parameters to benchmark tables (nccl-tests / hccl-tests).

Each table row is predicted with the simulator's own collective model
(:func:`windtunnel.cost.collectives.collective_time`: ring phases per tier, flat ring and tree, each
step's bandwidth ``line rate * tier efficiency * m / (m + half_message_bytes)`` plus the tier's latency)
for the benchmark's group (its ranks and hosts; each host one scale-up domain on clusters of nodes, the
ranks filling rack-scale domains in order on NVL72 / CloudMatrix384, or as ``domain_ranks`` says),
and the parameters ``comm.scale_up_efficiency``, ``comm.scale_out_efficiency``, ``comm.half_message_bytes``
and ``comm.tree_bandwidth_factor`` (where the model runs some rows as a double binary tree) are fitted by
bounded least squares on log time with a weak pull towards the catalog priors. A parameter no row is
sensitive to (the scale-out efficiency of a single-node log), or one the rows cannot tell apart from the
others (one two-node curve fixes a combination of both tiers), keeps its prior and is reported
unidentified. Tier latencies are the cluster's (catalog/hardware), not fitted:
the smallest messages' measured times are reported beside the model's for comparison.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from statistics import median

import numpy as np

from windtunnel.cost.collectives import collective_time, place_group
from windtunnel.cost.efficiency import Efficiency, efficiency_for
from windtunnel.profile import PARAMETERS, FittedParameter, prior_value
from windtunnel.profiling.collective_bench import BenchLog, BenchRow, bus_factor
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import Cluster, load_hardware

NAMES = ("comm.scale_up_efficiency", "comm.scale_out_efficiency", "comm.half_message_bytes",
         "comm.tree_bandwidth_factor")
_FIELDS = {"comm.scale_up_efficiency": "scale_up", "comm.scale_out_efficiency": "scale_out",
           "comm.half_message_bytes": "half_message_bytes", "comm.tree_bandwidth_factor": "tree_bandwidth_factor"}
PRIOR_WEIGHT = 0.01  # weight of log(value/prior)^2 against one row's squared log-time residual
# A parameter is identified when a 10% change of it moves some row's predicted time by >= 0.5%.
SENSITIVITY = 0.05
# Benchmark repeats scatter by about 1% (nccl-tests averages 20 iterations). A parameter whose relative
# standard error at that scatter exceeds MAX_RELATIVE_STDERR is reported unidentified (the rows cannot tell
# it apart from another) and keeps its prior; reported standard errors use the residual scatter (at least 1%).
NOISE_FLOOR = 0.01
MAX_RELATIVE_STDERR = 0.05
# A fit that misses its rows by more than this (rms of log time) describes another machine or placement.
MAX_RMS_LOG_ERROR = 0.15


@dataclass
class CollectiveFit:
    """Fitted comm parameters, fit statistics and a summary of every benchmark run used."""

    chip: str
    cluster: str
    parameters: list[FittedParameter]
    rows_used: int
    rms_log_error: float
    loo_median_abs_error: float | None
    logs: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def fit_stats(self) -> dict:
        return {"rows_used": self.rows_used, "rms_log_error": round(self.rms_log_error, 5), "warnings": self.warnings,
                "loo_median_abs_error": None if self.loo_median_abs_error is None
                else round(self.loo_median_abs_error, 5),
                "loo": "leave-one-message-size-out relative error of the predicted bus bandwidth", "logs": self.logs}


@dataclass(frozen=True)
class _Case:
    """One benchmark run placed on the cluster: what the model needs to predict its rows."""

    log: BenchLog
    cluster: Cluster
    rows: tuple[BenchRow, ...]


def default_domain_ranks(cluster: Cluster, log: BenchLog) -> int:
    """Ranks of the run per scale-up domain when the user does not say: each host is one domain where the
    cluster's innermost tier is a node (DGX/HGX, Atlas 800T A2: tier ``node``); where it spans hosts (NVL72
    racks, CloudMatrix384 supernodes: a larger tier of another name) the run's consecutive ranks fill domains
    of the tier's size."""
    inner = cluster.tiers[0]
    if inner.size is None or inner.name == "node" or inner.size <= log.ranks_per_host:
        return log.ranks_per_host
    return min(inner.size, log.ranks)


def bench_cluster(hardware: str, log: BenchLog, domain_ranks: int | None = None) -> Cluster:
    """The cluster the benchmark ran on: ``hardware`` (chip or cluster id/file) with its innermost tier holding
    ``domain_ranks`` of the run's ranks (default: :func:`default_domain_ranks`)."""
    cluster = load_hardware(hardware, log.ranks)
    domain = domain_ranks or default_domain_ranks(cluster, log)
    if log.ranks % domain:
        raise WindtunnelError(f"{log.label}: {log.ranks} ranks do not split into scale-up domains of {domain} "
                              "(field 'domain_ranks').", field="domain_ranks")
    if len(cluster.tiers) == 1:
        if domain < log.ranks:
            raise WindtunnelError(f"{log.label} spans {log.ranks // domain} scale-up domains, but hardware "
                                  f"'{hardware}' has a single tier; give a cluster with a scale-out tier.",
                                  field="hardware")
        return cluster
    inner = cluster.tiers[0]
    if inner.size is not None and domain > inner.size and len(cluster.tiers) > 1:
        raise WindtunnelError(f"{log.label}: {domain} ranks per scale-up domain, but '{cluster.id}' tier "
                              f"'{inner.name}' holds {inner.size}; pass --domain-ranks or another --cluster.",
                              field="domain_ranks")
    if domain == inner.size or (inner.size is None and domain == log.ranks):
        return cluster
    update: dict = {"size": domain}
    if inner.topology == "mesh" and inner.size and inner.size > 1 and domain > 1:
        # A full mesh's bandwidth is the device's links to all its size-1 peers; the run's domain reaches
        # only domain-1 of them (cost/collectives.tier_bandwidth charges (parties-1)/(size-1) of it).
        update["bandwidth"] = inner.bandwidth * (domain - 1) / (inner.size - 1)
    tiers = [inner.model_copy(update=update), *cluster.tiers[1:]]
    return cluster.model_copy(update={"tiers": tiers})


def predict_time(case: _Case, size: float, eff: Efficiency) -> float:
    """Model seconds for one collective of ``size`` bytes in the benchmark's group."""
    group = place_group("bench", case.log.ranks, 1, case.cluster)
    return collective_time(case.log.collective, size, group, case.cluster, eff)


def _eff_with(base: Efficiency, values: dict[str, float]) -> Efficiency:
    return dataclasses.replace(base, **{_FIELDS[name]: value for name, value in values.items()})


def _residuals(cases: list[_Case], base: Efficiency, values: dict[str, float]) -> np.ndarray:
    eff = _eff_with(base, values)
    return np.array([math.log(predict_time(case, row.size_bytes, eff) / row.time_s)
                     for case in cases for row in case.rows])


def _sensitivity(cases: list[_Case], base: Efficiency, values: dict[str, float], name: str) -> float:
    """max over rows of |d log t / d log value| (finite difference of 10%)."""
    up = dict(values, **{name: values[name] * 1.1})
    delta = _residuals(cases, base, up) - _residuals(cases, base, values)
    return float(np.max(np.abs(delta))) / math.log(1.1) if len(delta) else 0.0


def _solve(cases: list[_Case], base: Efficiency, priors: dict[str, float], free: list[str]):
    """Bounded least squares in log space; returns (values, residuals, jacobian of the row residuals)."""
    from scipy.optimize import least_squares

    if not free:
        return dict(priors), _residuals(cases, base, priors), np.zeros((0, 0))
    lo = np.log([PARAMETERS[n].bounds[0] for n in free])
    hi = np.log([PARAMETERS[n].bounds[1] for n in free])
    x_prior = np.log([priors[n] for n in free])
    rows = sum(len(case.rows) for case in cases)

    def values_of(x) -> dict[str, float]:
        return dict(priors, **{n: float(math.exp(v)) for n, v in zip(free, x, strict=True)})

    def fun(x):
        return np.concatenate([_residuals(cases, base, values_of(x)), math.sqrt(PRIOR_WEIGHT) * (x - x_prior)])

    result = least_squares(fun, np.clip(x_prior, lo + 1e-9, hi - 1e-9), bounds=(lo, hi), method="trf",
                           x_scale=1.0, diff_step=1e-4, xtol=1e-10, ftol=1e-12)
    return values_of(result.x), result.fun[:rows], result.jac[:rows]


def fit_collectives(logs: list[BenchLog], hardware: str, domain_ranks: int | None = None,
                    with_loo: bool = True) -> CollectiveFit:
    """Fit the comm parameters of ``hardware``'s chip (a chip id, cluster id or cluster file) to ``logs``."""
    if not logs:
        raise WindtunnelError("No benchmark logs to fit: give at least one nccl-tests or hccl-tests log.")
    if domain_ranks is not None:
        from windtunnel.specs.bounds import MAX_DEVICES, check_whole

        check_whole("domain-ranks", domain_ranks, 1, MAX_DEVICES)
    cases = []
    for log in logs:
        if log.ranks < 2:
            raise WindtunnelError(f"{log.label}: a collective over one rank measures no communication; run the "
                                  "benchmark over at least 2 devices.", field="ranks")
        rows = tuple(row for row in log.rows if not row.in_place and row.size_bytes > 0 and row.time_s > 0)
        cases.append(_Case(log, bench_cluster(hardware, log, domain_ranks), rows))
    chips = {case.cluster.chip.id for case in cases}
    chip = cases[0].cluster.chip
    if len(chips) > 1:
        raise WindtunnelError(f"Benchmark logs resolve to several chips ({', '.join(sorted(chips))}); fit one chip "
                              "at a time.", field="hardware")
    base = efficiency_for(chip)
    priors = {name: prior_value(chip.id, name) for name in NAMES}
    sensitive = [name for name in NAMES if _sensitivity(cases, base, priors, name) >= SENSITIVITY]
    free = list(sensitive)
    while True:
        values, residuals, jac = _solve(cases, base, priors, free)
        # Identifiability is a property of the design (which sizes, groups and tiers the rows cover): judged at
        # the nominal scatter, so that a model that misfits real curves does not hide what the rows determine.
        design = _stderrs(values, free, residuals, jac, variance=NOISE_FLOOR ** 2)
        relative = {name: design.get(name, math.inf) / values[name] for name in free}
        worst = max(free, key=lambda name: relative[name], default=None)
        if worst is None or relative[worst] <= MAX_RELATIVE_STDERR:
            break
        # The rows constrain only a combination: hold the least determined parameter at its prior.
        free.remove(worst)
    rows_used = len(residuals)
    loo = _leave_one_size_out(cases, base, priors, free) if with_loo and free else None
    source = "calibrate collectives: " + ", ".join(sorted({case.log.path for case in cases}))
    stderr = _stderrs(values, free, residuals, jac)
    held = [name for name in sensitive if name not in free]
    if held:
        source += f" (with {', '.join(held)} held at the prior: the rows constrain only a combination)"

    def why(name: str) -> str:
        if name in held:
            return "prior (the rows do not tell it apart from the other comm parameters)"
        return "prior (no benchmark row is sensitive to it)"

    parameters = [FittedParameter(name=name, value=_rounded(name, values[name]), prior=priors[name],
                                  bounds=PARAMETERS[name].bounds, identified=name in free, stderr=stderr.get(name),
                                  source=source if name in free else why(name))
                  for name in NAMES]
    eff = _eff_with(base, values)
    warnings = [f"{name} reaches its physical bound {values[name]:g}: the rows may not run where the model places "
                "them (ranks per scale-up domain: --domain-ranks)"
                for name in free if min(abs(values[name] / bound - 1.0) for bound in PARAMETERS[name].bounds) < 1e-3]
    rms = float(np.sqrt(np.mean(residuals ** 2))) if rows_used else 0.0
    if rms > MAX_RMS_LOG_ERROR:
        warnings.append(f"the model misses the rows by {rms:.0%} (rms log error): check where the runs placed their "
                        "ranks (--domain-ranks for scale-up domains spanning hosts), --collective and --hardware")
    return CollectiveFit(chip.id, cases[0].cluster.id, parameters, rows_used, rms, loo,
                         [_summary(case, eff) for case in cases], warnings)


def _rounded(name: str, value: float) -> float:
    return round(value, 1) if name == "comm.half_message_bytes" else round(value, 4)


def _stderrs(values: dict[str, float], free: list[str], residuals: np.ndarray, jac: np.ndarray,
             variance: float | None = None) -> dict[str, float]:
    """Standard errors from the rows' own information (no prior term; log space, delta method) at the residual
    variance, or at ``variance`` per row when given; none when rows <= free parameters."""
    dof = len(residuals) - len(free)
    if not free or dof <= 0:
        return {}
    if variance is None:
        variance = max(float(residuals @ residuals) / dof, NOISE_FLOOR ** 2)
    try:
        cov = np.linalg.pinv(jac.T @ jac) * variance
    except np.linalg.LinAlgError:
        return {}
    return {name: float(values[name] * math.sqrt(max(cov[i, i], 0.0))) for i, name in enumerate(free)}


def _leave_one_size_out(cases: list[_Case], base: Efficiency, priors: dict[str, float], free: list[str]) -> float | None:
    """Median |busbw predicted / measured - 1| of each message size's rows, fitted without that size."""
    sizes = sorted({row.size_bytes for case in cases for row in case.rows})
    if len(sizes) < 3:
        return None
    errors = []
    for size in sizes:
        kept = [dataclasses.replace(case, rows=tuple(r for r in case.rows if r.size_bytes != size)) for case in cases]
        values, _, _ = _solve([case for case in kept if case.rows], base, priors, free)
        eff = _eff_with(base, values)
        for case in cases:
            for row in case.rows:
                if row.size_bytes == size:
                    errors.append(abs(row.time_s / predict_time(case, size, eff) - 1.0))
    return float(median(errors)) if errors else None


def _summary(case: _Case, eff: Efficiency) -> dict:
    """What one benchmark run measured next to the fitted model: peak bus bandwidth over the line rate of the
    outermost tier it crosses, and the smallest message's time."""
    log, cluster = case.log, case.cluster
    group = place_group("bench", log.ranks, 1, cluster)
    tier = cluster.tiers[group.outermost_tier]
    rows = sorted(case.rows, key=lambda r: r.size_bytes)
    best = max(rows, key=lambda r: r.busbw) if rows else None
    factor = bus_factor(log.collective, log.ranks)
    return {
        "path": log.path, "tool": log.tool, "collective": log.collective, "ranks": log.ranks, "hosts": log.hosts,
        "rows": len(rows), "tier": tier.name, "line_rate_GBps": tier.bandwidth / 1e9,
        "busbw_max_GBps": round(best.busbw / 1e9, 3) if best else None,
        # Only a single-tier ring's bus bandwidth is bounded by that tier's line rate; a hierarchical run's
        # is not (its outer phase carries 1/domain of the data).
        "busbw_max_over_line_rate": round(best.busbw / tier.bandwidth, 4) if best and len(group.levels) == 1
        else None,
        "busbw_max_model_GBps": round(best.size_bytes * factor / predict_time(case, best.size_bytes, eff) / 1e9, 3)
        if best else None,
        "smallest_size_bytes": rows[0].size_bytes if rows else None,
        "smallest_time_us": round(rows[0].time_s * 1e6, 3) if rows else None,
        "smallest_time_model_us": round(predict_time(case, rows[0].size_bytes, eff) * 1e6, 3) if rows else None,
        "avg_busbw_GBps_reported": None if log.avg_busbw is None else round(log.avg_busbw / 1e9, 3),
        # The bus-bandwidth curve: [size bytes, measured GB/s, fitted model GB/s] per row.
        "busbw_curve": [[row.size_bytes, round(row.busbw / 1e9, 3),
                         round(row.size_bytes * factor / predict_time(case, row.size_bytes, eff) / 1e9, 3)]
                        for row in rows],
    }
