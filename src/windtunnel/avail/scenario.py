"""A scenario (job size, fault rates, recovery policy, step time, horizon) and the run-interval mechanics
both engines share.

The job alternates between running intervals and down intervals (detection, waiting for repair,
restart). What a running interval of length ``u`` yields is decided here, once, for the step simulation
(vectorised over intervals) and the Markov model (in expectation over exponential intervals):

* rollback to a persistent checkpoint: the interval is cut into segments of ``tau`` compute (a whole
  number of training steps) plus the checkpoint's stall; a checkpoint is durable ``lag`` seconds after
  its segment ends (0 when blocking, the background write otherwise). An interval ended by a failure
  keeps only the work of durable checkpoints; the rest is lost (recomputed later). An interval ended
  by a planned interruption or by the horizon keeps everything (the job checkpoints before stopping).
* rollback to an in-memory snapshot or to the current step: a failure loses ``u mod Tm`` (the time since
  the last snapshot, ``Tm`` = snapshot interval + its cost, or one step), and persistent checkpoints and
  snapshots cost their stalls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from windtunnel.avail.faults import FaultProfile, JobRates, devices_per_server, job_rates, load_faults
from windtunnel.avail.policy import DEFAULT_REASONS, RecoveryPolicy, parse_policy
from windtunnel.specs.errors import WindtunnelError


@dataclass(frozen=True)
class Mechanics:
    """Numbers the engines use (seconds)."""

    rollback_checkpoint: bool
    tau: float          # compute between persistent checkpoints (whole steps)
    stall: float        # training stall per persistent checkpoint
    lag: float          # a checkpoint is durable this long after its segment ends
    tm: float           # rollback period of in-memory snapshots / steps (memory and step rollback)
    mem_stall: float    # stall per in-memory snapshot
    detect: float
    restart: float
    repair: float
    spares: int
    elastic: bool
    shrink_per_node: float  # elastic: fraction of capacity lost per node short of the job's size
    exponential: bool       # detection and restart exponentially distributed (else fixed)

    @property
    def period(self) -> float:
        """Persistent checkpoint period: compute plus stall (s)."""
        return self.tau + self.stall

    def account(self, u: np.ndarray, failure_ended: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(useful compute, checkpoint stalls, lost work) in seconds for running intervals of length ``u``
        ended by a failure (True) or by a planned stop or the horizon (False)."""
        u = np.asarray(u, dtype=float)
        failure_ended = np.asarray(failure_ended, dtype=bool)
        period = self.period
        if self.rollback_checkpoint:
            # failure-ended: only durable checkpoints count; the rest (kept) below, for the few others
            durable = np.floor((u - self.lag) / period)
            np.maximum(durable, 0.0, out=durable)
            useful = durable * self.tau
            ovh = durable * self.stall
            keep = np.flatnonzero(~failure_ended)
            if len(keep):
                uk = u[keep]
                taken = np.floor(uk / period)
                rem = uk - taken * period
                useful[keep] = taken * self.tau + np.minimum(rem, self.tau)
                ovh[keep] = taken * self.stall + np.maximum(rem - self.tau, 0.0)
            lost = u - useful - ovh
            return useful, ovh, lost
        ovh = np.floor(u / period) * self.stall + (np.floor(u / self.tm) * self.mem_stall if self.mem_stall else 0.0)
        lost = np.where(failure_ended, np.mod(u, self.tm), 0.0)
        ovh = np.minimum(ovh, u - lost)
        return u - lost - ovh, ovh, lost

    def up_rates(self, fail_rate: float, planned_rate: float) -> tuple[float, float, float]:
        """Expected (useful, stall, lost) seconds per second of running time when running intervals end at
        rate ``fail_rate + planned_rate`` (per second, exponential): the Markov model's reward in UP."""
        lam = fail_rate + planned_rate
        period = self.period
        if lam <= 0.0:
            if self.rollback_checkpoint:
                return self.tau / period, self.stall / period, 0.0
            ovh = self.stall / period + self.mem_stall / self.tm
            return 1.0 - ovh, ovh, 0.0
        p_fail = fail_rate / lam
        n_taken = _inv_expm1(lam * period)                    # E[floor(u / period)]
        mean_u = 1.0 / lam
        if self.rollback_checkpoint:
            n_durable = math.exp(-lam * self.lag) * n_taken   # E[#durable checkpoints before a failure]
            # E[min(u mod period, tau)] for exponential u
            q = math.exp(-lam * period)
            e_min = (-math.expm1(-lam * self.tau) / lam - self.tau * q) / (-math.expm1(-lam * period))
            e_rem = mean_u - period * n_taken
            useful_f, ovh_f = n_durable * self.tau, n_durable * self.stall
            useful_k = n_taken * self.tau + e_min
            ovh_k = n_taken * self.stall + (e_rem - e_min)
            useful = p_fail * useful_f + (1 - p_fail) * useful_k
            ovh = p_fail * ovh_f + (1 - p_fail) * ovh_k
            return useful * lam, ovh * lam, 1.0 - (useful + ovh) * lam
        ovh = n_taken * self.stall + (self.mem_stall * _inv_expm1(lam * self.tm) if self.mem_stall else 0.0)
        lost = p_fail * (mean_u - self.tm * _inv_expm1(lam * self.tm))
        return 1.0 - (ovh + lost) * lam, ovh * lam, lost * lam


def _inv_expm1(x: float) -> float:
    """1 / (exp(x) - 1) without overflow for large x (x > 0)."""
    return math.exp(-x) / -math.expm1(-x)


@dataclass(frozen=True)
class Scenario:
    """One availability question: a job, its fault processes, a policy, a step time and a horizon."""

    devices: int
    devices_per_node: int
    rates: JobRates
    policy: RecoveryPolicy
    step_time_s: float
    horizon_s: float
    profile_id: str = ""
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def nodes(self) -> int:
        """Nodes (servers) in the job."""
        return math.ceil(self.devices / self.devices_per_node)

    @property
    def mechanics(self) -> Mechanics:
        """The numbers both engines run on."""
        return _mechanics(self)

    def with_policy(self, **update) -> Scenario:
        """The same scenario with some policy fields changed (validated again)."""
        policy = self.policy.model_copy(update=update)
        _validate(policy, self.step_time_s, self.nodes)
        return Scenario(self.devices, self.devices_per_node, self.rates, policy, self.step_time_s, self.horizon_s,
                        self.profile_id, self.assumptions)

    def warnings(self) -> list[str]:
        """Inputs that cannot describe a working job (stated in text and in the JSON ``warnings``, never silent):
        a blocking checkpoint that costs as much as its interval, an interval shorter than a step."""
        p, m, out = self.policy, self.mechanics, []
        if p.checkpoint_every_s < self.step_time_s:
            out.append(f"checkpoint interval {p.checkpoint_every_s:g} s is shorter than one training step "
                       f"({self.step_time_s:g} s): it was rounded up to one step ({m.tau:g} s)")
        if not p.checkpoint_async and p.checkpoint_cost_s >= m.tau:
            out.append(f"checkpoint cost ({p.checkpoint_cost_s:g} s) >= checkpoint interval ({m.tau:g} s): the job "
                       "spends at least half its running time writing checkpoints; give a longer --checkpoint-every "
                       "(with its unit, e.g. 30min), a faster write or asynchronous checkpoints")
        if p.rollback == "memory" and p.memory_cost_s >= max(p.memory_every_s, self.step_time_s):
            out.append(f"in-memory checkpoint cost ({p.memory_cost_s:g} s) >= its interval "
                       f"({max(p.memory_every_s, self.step_time_s):g} s): most of the running time goes to snapshots")
        return out

    def inputs(self) -> dict:
        """The scenario as plain JSON-able data (units in key names)."""
        p = self.policy
        return {
            "devices": self.devices, "devices_per_node": self.devices_per_node, "nodes": self.nodes,
            "faults": self.profile_id, "policy": p.kind, "spares_nodes": p.spares, "detect_s": p.detect_s,
            "isolate_s": p.isolate_s, "restart_s": p.restart_s, "repair_s": p.repair_s, "checkpoint_every_s": self.mechanics.tau,
            "checkpoint_cost_s": p.checkpoint_cost_s, "checkpoint_async": p.checkpoint_async,
            "checkpoint_stall_s": p.checkpoint_stall_s, "rollback": p.rollback, "step_time_s": self.step_time_s,
            "horizon_s": self.horizon_s, "durations": p.durations,
            "failures_per_day": self.rates.failure_rate_per_s * 86400.0,
            "planned_per_day": self.rates.planned_rate_per_s * 86400.0,
        }


def _whole_steps(seconds: float, step: float) -> float:
    return step * max(1.0, math.ceil(seconds / step - 1e-9))


def _mechanics(s: Scenario) -> Mechanics:
    p = s.policy
    tau = _whole_steps(p.checkpoint_every_s, s.step_time_s)
    stall = float(p.checkpoint_stall_s if p.checkpoint_async else p.checkpoint_cost_s)
    lag = max(p.checkpoint_cost_s - stall, 0.0) if p.checkpoint_async else 0.0
    if p.rollback == "memory":
        tm, mem_stall = _whole_steps(max(p.memory_every_s, s.step_time_s), s.step_time_s) + p.memory_cost_s, p.memory_cost_s
    else:
        tm, mem_stall = s.step_time_s, 0.0
    replica = p.replica_devices or s.devices_per_node
    shrink = min(1.0, max(replica, s.devices_per_node) / s.devices)
    return Mechanics(rollback_checkpoint=p.rollback == "checkpoint", tau=tau, stall=stall, lag=lag, tm=tm,
                     mem_stall=mem_stall, detect=float(p.detect_s), restart=float(p.restart_s) + p.isolate_s,
                     repair=p.repair_s,
                     spares=int(p.spares), elastic=p.kind == "elastic-shrink", shrink_per_node=shrink,
                     exponential=p.durations == "exponential")


def _validate(policy: RecoveryPolicy, step: float, nodes: int) -> None:
    if policy.spares is not None and policy.spares > nodes:
        raise WindtunnelError(
            f"Field 'spares' is {policy.spares} nodes, larger than the cluster the job runs on ({nodes} nodes); "
            f"give a spare pool between 0 and {nodes} nodes.", field="spares")
    if policy.checkpoint_async:
        tau = _whole_steps(policy.checkpoint_every_s, step)
        lag = policy.checkpoint_cost_s - (policy.checkpoint_stall_s or 0.0)
        if lag > tau:
            raise WindtunnelError(
                f"Field 'checkpoint-every' ({tau:g} s) is shorter than the asynchronous checkpoint write "
                f"({policy.checkpoint_cost_s:g} s): a write would still run when the next one starts; give an "
                f"interval of at least {math.ceil(lag):d} s or a faster write.", field="checkpoint-every")


MAX_DEVICES = 10_000_000  # ten times the largest clusters built (about 1e5-1e6 accelerators)
MAX_HORIZON_S = 100 * 365.25 * 86400.0


def make_scenario(
    devices: int,
    faults: str | FaultProfile,
    policy: str | dict | RecoveryPolicy = "restart-from-checkpoint",
    *,
    step_time_s: float,
    horizon_s: float,
    devices_per_node: int | None = None,
    hardware: str | None = None,
    rate_scale: float = 1.0,
) -> Scenario:
    """Build a Scenario. ``devices``: job size; ``faults``: catalog:NAME, a profile YAML or a FaultProfile;
    ``policy``: ``KIND[,key=value]``; ``step_time_s``: one training step (s); ``horizon_s``: wall time (s);
    devices per node from ``devices_per_node``, else from ``hardware`` (chip/cluster id or YAML), else 8."""
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        raise WindtunnelError(f"Field 'devices' must be a positive whole number, got {devices!r}.", field="devices")
    for name, value in (("step-time", step_time_s), ("horizon", horizon_s)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise WindtunnelError(f"Field '{name}' must be a positive duration in seconds, got {value!r}.", field=name)
    # Bounds of the questions the models answer (beyond them the samplers overflow or exhaust memory).
    if devices > MAX_DEVICES:
        raise WindtunnelError(f"Field 'devices' is {devices:,}; availability is modelled for jobs of up to "
                              f"{MAX_DEVICES:,} devices.", field="devices")
    if horizon_s > MAX_HORIZON_S:
        raise WindtunnelError(f"Field 'horizon' is {horizon_s:g} s; give at most {MAX_HORIZON_S:g} s (100 years).",
                              field="horizon")
    assumptions: list[str] = []
    if devices_per_node is None:
        if hardware is not None:
            from windtunnel.specs.hardware import load_hardware

            cluster = load_hardware(hardware, devices)
            devices_per_node = devices_per_server(cluster.id, cluster.node_size)
            assumptions.append(f"{devices_per_node} devices per node (server) from hardware '{hardware}' ({cluster.id})")
        else:
            devices_per_node = 8
            assumptions.append("8 devices per node (no --hardware or --devices-per-node given)")
    if isinstance(devices_per_node, bool) or not isinstance(devices_per_node, int) or not 1 <= devices_per_node <= MAX_DEVICES:
        raise WindtunnelError(f"Field 'devices-per-node' must be a whole number from 1 to {MAX_DEVICES:,}, got "
                              f"{devices_per_node!r}.", field="devices-per-node")
    devices_per_node = min(devices_per_node, devices)
    profile = load_faults(faults)
    if rate_scale != 1.0:
        profile = profile.scaled(rate_scale)
    pol = parse_policy(policy) if not isinstance(policy, RecoveryPolicy) else policy
    nodes = math.ceil(devices / devices_per_node)
    if "checkpoint_every_s" in pol.model_fields_set and pol.checkpoint_every_s > horizon_s:
        raise WindtunnelError(f"Field 'checkpoint-every' is {pol.checkpoint_every_s:g} s, longer than the horizon "
                              f"({horizon_s:g} s): no checkpoint would ever be written; give an interval shorter than "
                              "the horizon (or leave it out: Daly's optimum).", field="checkpoint-every")
    _validate(pol, step_time_s, nodes)
    given = pol.model_dump(exclude_unset=True)
    resolved = pol.resolved(nodes)
    for key, reason in DEFAULT_REASONS.items():
        if key in ("detect_s", "restart_s", "repair_s", "spares") and key not in given:
            assumptions.append(reason)
    if "checkpoint_every_s" not in given and "checkpoint_cost_s" not in given:
        assumptions.append(DEFAULT_REASONS["checkpoint"])
    if resolved.checkpoint_async and "checkpoint_stall_s" not in given:
        assumptions.append(DEFAULT_REASONS["stall"])
    assumptions.append(f"recovery durations {resolved.durations}; a failure during recovery restarts the recovery "
                       "(detection, then waiting for repair when no spare is free, then the restart)")
    rates = job_rates(profile, devices, devices_per_node)
    if resolved.evict_slow_s is not None:
        from windtunnel.avail.failslow import evict_slow

        rates = evict_slow(rates, resolved.evict_slow_s)
        assumptions.append(f"fail-slow eviction after {resolved.evict_slow_s:g} s: a longer slow episode on a device, "
                           "node or link becomes that much slowdown plus a restart without it (no work lost)")
    return Scenario(devices=devices, devices_per_node=int(devices_per_node), rates=rates,
                    policy=resolved, step_time_s=float(step_time_s), horizon_s=float(horizon_s),
                    profile_id=profile.id, assumptions=tuple(assumptions))
