"""Closed forms: Young's and Daly's optimum checkpoint intervals, job mean time to failure from node rates.

Young (1974, reliability.csv A15): T_c = sqrt(2 T_s T_f), T_s the checkpoint save time, T_f the mean
time to failure. Daly (2006, A16): tau_opt = sqrt(2 d M) [1 + sqrt(d / 2M) / 3 + (d / 2M) / 9] - d for
d < 2M, else M (d: dump time, M: mean time to interrupt). Both give compute time between checkpoints.
Meta's job MTTF model (Kokolis et al. 2025, A06): MTTF = 1 / (N_nodes r_f), r_f failures per node-day.
"""

from __future__ import annotations

import math

from windtunnel.specs.errors import WindtunnelError

MAX_DURATION_S = 100 * 365.25 * 86400.0  # a century: the longest horizon the models take


def _positive(name: str, value: float, allow_zero: bool = False, high: float = MAX_DURATION_S) -> float:
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    ok = math.isfinite(number) and (number >= 0 if allow_zero else number > 0) and number <= high
    if not ok:
        rule = ">= 0" if allow_zero else "> 0"
        raise WindtunnelError(f"Field '{name}' must be a finite number {rule} and at most {high:g}, got {value!r}.",
                              field=name)
    return number


def young_interval_s(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """Young's optimum checkpoint interval (s): sqrt(2 x checkpoint cost (s) x MTBF (s))."""
    return math.sqrt(2.0 * _positive("checkpoint-cost", checkpoint_cost_s, True) * _positive("mtbf", mtbf_s))


def daly_interval_s(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum compute interval between checkpoints (s)."""
    d = _positive("checkpoint-cost", checkpoint_cost_s, True)
    m = _positive("mtbf", mtbf_s)
    if d >= 2.0 * m:
        return m
    x = d / (2.0 * m)
    return math.sqrt(2.0 * d * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - d


def exact_interval_s(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """The interval that maximises the useful fraction tau / (exp((tau + d) / M) - 1) of Daly's exponential
    model (s): what Daly's formula approximates, solved numerically (scipy)."""
    from scipy.optimize import minimize_scalar

    d = _positive("checkpoint-cost", checkpoint_cost_s, True)
    m = _positive("mtbf", mtbf_s)

    def log_expm1(z: float) -> float:  # log(e^z - 1) without overflow (a checkpoint far longer than the MTBF)
        return z + math.log1p(-math.exp(-z)) if z > 30.0 else math.log(math.expm1(z))

    # The same maximum in log space: log tau - log(exp((tau + d) / M) - 1).
    res = minimize_scalar(lambda t: log_expm1((t + d) / m) - math.log(t), bounds=(1e-9 * m, 10.0 * m),
                          method="bounded", options={"xatol": 1e-9 * m})
    return float(res.x)


def mttf_s(failures_per_1000_node_days: float, devices: int, devices_per_node: int = 8) -> float:
    """Job mean time to failure (s) of a job of ``devices`` devices (nodes of ``devices_per_node``) when each node
    fails ``failures_per_1000_node_days`` times per 1000 node-days: 1 / (N_nodes x r_f)."""
    rate = _positive("failures-per-1000-node-days", failures_per_1000_node_days, high=1e9)
    from windtunnel.specs.bounds import MAX_DEVICES

    if not isinstance(devices, int) or isinstance(devices, bool) or not 1 <= devices <= MAX_DEVICES:
        raise WindtunnelError(f"Field 'devices' must be a whole number from 1 to {MAX_DEVICES:,}, got {devices!r}.",
                              field="devices")
    if not isinstance(devices_per_node, int) or not 1 <= devices_per_node <= MAX_DEVICES:
        raise WindtunnelError(f"Field 'devices-per-node' must be a positive whole number, got {devices_per_node!r}.",
                              field="devices-per-node")
    nodes = math.ceil(devices / devices_per_node)
    return 86400.0 * 1000.0 / (nodes * rate)
