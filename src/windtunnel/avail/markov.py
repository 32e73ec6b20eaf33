"""Continuous-time Markov chain of a training job under faults, solved exactly for its steady state.

States (aggregated so the chain stays small): ``(k, phase)`` where

* ``k`` = nodes in repair (0..K). Free spares are ``max(spares - k, 0)``: a node taken out is replaced
  by a spare while one is free, and a repaired node rejoins the spare pool, so ``k`` alone fixes the
  pool. Nodes are repaired independently, each after an exponential time of mean ``repair_s``. K is
  the truncation point, far in the tail of the repair queue (arrivals beyond it are clipped).
* ``phase`` is one of
  - ``UP``: the job runs (an elastic job with ``k > spares`` runs with fewer data-parallel replicas);
  - ``DET_1..DET_m``: detection, an Erlang-m stage of mean ``detect_s``;
  - ``WAIT``: detection done, not enough healthy nodes (``k > spares``); left when a repair brings
    ``k`` back to ``spares``;
  - ``RST_1..RST_m``: restart, an Erlang-m stage of mean ``restart_s``.

Transitions: an unplanned fault of class c (rate per second, ``b_c`` nodes out) moves any state to
``(min(k + b_c, K), DET_1)`` (a fault during recovery restarts the recovery); a planned interruption
moves ``UP`` to ``RST_1``; repairs move ``k`` to ``k - 1`` at rate ``k / repair_s``; the Erlang stages
advance at rate ``m / mean``. With ``m = 1`` the stages are exponential (the step simulation's
``durations=exponential``); fixed durations are approximated by Erlang-m with large m (error O(1/m)).

Rewards: the fraction of wall time in ``UP`` is the availability. In ``UP`` the useful rate, the
checkpoint stall rate and the lost-work rate are the exact renewal-reward values for running intervals
ended at the total event rate (``Mechanics.up_rates``); fail-slow faults remove the stationary fraction
``E[1 - 1/s_eff]``, an elastic shrink the capacity of the missing replicas.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve

from windtunnel.avail.scenario import Scenario
from windtunnel.specs.errors import WindtunnelError


@dataclass(frozen=True)
class MarkovResult:
    """Steady-state results. Fractions of wall time; seconds are over the scenario's horizon."""

    availability: float
    ettr: float
    interruptions_per_day: float
    unexpected_per_day: float
    planned_per_day: float
    lost_seconds_by_cause: dict[str, float]
    states: int
    truncation_nodes: int
    p_waiting: float

    def to_json_dict(self, scenario: Scenario) -> dict:
        """JSON-able result (units in key names)."""
        return {
            "method": "markov", "availability": self.availability, "ettr": self.ettr,
            "interruptions_per_day": self.interruptions_per_day, "unexpected_interruptions_per_day": self.unexpected_per_day,
            "planned_interruptions_per_day": self.planned_per_day,
            "mtbi_s": 86400.0 / self.interruptions_per_day if self.interruptions_per_day > 0 else None,
            "lost_seconds_by_cause": self.lost_seconds_by_cause, "states": self.states,
            "truncation_nodes": self.truncation_nodes, "p_waiting_for_repair": self.p_waiting,
            "inputs": scenario.inputs(), "assumptions": list(scenario.assumptions),
            "warnings": scenario.warnings(),
        }


def _solve_pivot(QT: sp.csc_matrix, pivot: int) -> np.ndarray | None:
    """pi Q = 0 with pi[pivot] = 1 (the reduced sparse system), or None when that pivot gives a bad solution
    (a pivot state of negligible probability makes the system ill-conditioned)."""
    n = QT.shape[0]
    rest = np.r_[0:pivot, pivot + 1:n]
    sub = QT[rest, :].tocsc()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = spsolve(sub[:, rest].tocsc(), -sub[:, [pivot]].toarray().ravel())
    pi = np.empty(n)
    pi[pivot] = 1.0
    pi[rest] = x
    if not np.all(np.isfinite(pi)) or pi.min() < -1e-9 * pi.max():
        return None
    return pi


MAX_REPAIR_STATES = 20_000  # nodes in repair the chain can track (its size grows linearly with them)


def _truncation(scenario: Scenario) -> int:
    mech = scenario.mechanics
    bmax = max([c.nodes_out for c in scenario.rates.stop] + [0])
    if bmax == 0:
        return 0
    mean = sum(c.rate_per_s * c.nodes_out for c in scenario.rates.stop) * mech.repair
    k = int(math.ceil(mean + 12.0 * math.sqrt((mean + 1.0) * bmax) + 12 * bmax))
    return max(1, min(k, max(scenario.nodes, 1) + mech.spares))


def solve_markov(scenario: Scenario, phases: int | None = None) -> MarkovResult:
    """Solve the chain for its stationary distribution (scipy sparse LU) and return the rewards.

    ``phases``: Erlang stages for detection and restart. By default exponential durations use 1 (exact)
    and fixed durations use Richardson extrapolation of m = 16 and m = 32 (2 R(32) - R(16)), which
    cancels the O(1/m) error of the Erlang approximation."""
    if phases is not None:
        if isinstance(phases, bool) or not isinstance(phases, int) or not 1 <= phases <= 256:
            raise WindtunnelError(f"Field 'phases' is {phases!r}; give a whole number of Erlang stages from 1 to 256 "
                                  "(or leave it out).", field="phases")
        return _solve(scenario, phases)
    if scenario.mechanics.exponential:
        return _solve(scenario, 1)
    coarse, fine = _solve(scenario, 16), _solve(scenario, 32)

    def ex(a: float, b: float) -> float:
        return 2.0 * b - a

    return MarkovResult(
        availability=min(1.0, max(0.0, ex(coarse.availability, fine.availability))),
        ettr=min(1.0, max(0.0, ex(coarse.ettr, fine.ettr))),
        interruptions_per_day=ex(coarse.interruptions_per_day, fine.interruptions_per_day),
        unexpected_per_day=fine.unexpected_per_day, planned_per_day=ex(coarse.planned_per_day, fine.planned_per_day),
        lost_seconds_by_cause={k: ex(coarse.lost_seconds_by_cause[k], v) for k, v in fine.lost_seconds_by_cause.items()},
        states=fine.states, truncation_nodes=fine.truncation_nodes, p_waiting=ex(coarse.p_waiting, fine.p_waiting))


def _solve(scenario: Scenario, phases: int) -> MarkovResult:
    mech = scenario.mechanics
    rates = scenario.rates
    spares = mech.spares
    K = _truncation(scenario)
    if K > MAX_REPAIR_STATES:
        raise WindtunnelError(
            f"The Markov chain of this scenario would track up to {K:,} nodes in repair (more than "
            f"{MAX_REPAIR_STATES:,}): too many states to factorise. Use `avail simulate` (Monte Carlo) for it, or "
            "fewer devices / a lower failure rate.", field="devices")
    md = phases if mech.detect > 0 else 0
    mr = phases if mech.restart > 0 else 0
    can_wait = (not mech.elastic) and spares < K
    UP = 0
    DET = 1                       # DET_j = DET + j, j < md
    WAIT = 1 + md                 # only used when can_wait
    RST = 1 + md + (1 if can_wait else 0)
    nph = RST + mr
    n = (K + 1) * nph
    ks = np.arange(K + 1)

    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []

    def add(k_from: np.ndarray, ph_from, k_to: np.ndarray, ph_to, rate) -> None:
        k_from = np.asarray(k_from)
        src = k_from * nph + np.asarray(ph_from)
        dst = np.asarray(k_to) * nph + np.asarray(ph_to)
        rate = np.broadcast_to(np.asarray(rate, dtype=float), src.shape)
        keep = (src != dst) & (rate > 0)
        rows.append(src[keep])
        cols.append(dst[keep])
        vals.append(rate[keep])

    def after_detection(k: np.ndarray) -> np.ndarray:
        start = RST if mr else UP
        if can_wait:
            return np.where(k > spares, WAIT, start)
        return np.full_like(k, start)

    # faults from every phase
    by_nodes: dict[int, float] = {}
    for c in rates.stop:
        if not c.planned:
            by_nodes[c.nodes_out] = by_nodes.get(c.nodes_out, 0.0) + c.rate_per_s
    for b, lam in by_nodes.items():
        k_to = np.minimum(ks + b, K)
        target = np.full_like(ks, DET) if md else after_detection(k_to)
        for ph in range(nph):
            add(ks, ph, k_to, target, lam)
    lam_p = rates.planned_rate_per_s
    if lam_p > 0 and mr:
        add(ks, UP, ks, RST, lam_p)
    # repairs
    if K > 0:
        kk = ks[1:]
        for ph in range(nph):
            to_ph = np.full_like(kk, ph)
            if can_wait and ph == WAIT:
                to_ph = np.where(kk - 1 <= spares, RST if mr else UP, WAIT)
            add(kk, ph, kk - 1, to_ph, kk / mech.repair)
    # Erlang stages
    for j in range(md):
        nxt = np.full_like(ks, DET + j + 1) if j + 1 < md else after_detection(ks)
        add(ks, DET + j, ks, nxt, md / mech.detect)
    for j in range(mr):
        nxt = RST + j + 1 if j + 1 < mr else UP
        add(ks, RST + j, ks, np.full_like(ks, nxt), mr / mech.restart)

    r = np.concatenate(rows) if rows else np.zeros(0, dtype=int)
    c = np.concatenate(cols) if cols else np.zeros(0, dtype=int)
    v = np.concatenate(vals) if vals else np.zeros(0)
    Q = sp.csr_matrix((v, (r, c)), shape=(n, n))
    Q = Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())
    # pi Q = 0 with one component fixed to 1: solve the reduced system, then normalise (replacing a row
    # by ones instead would add a dense row and make the LU fill in). The fixed state must carry real
    # probability for the reduced system to be well conditioned: (round(mean k), phase) for the likely
    # phases in turn, until the solution is sane.
    outflow = -Q.diagonal()
    if rates.failure_rate_per_s + lam_p <= 0.0:
        pi = np.zeros(n)        # nothing ever happens: the job runs from (0, UP) forever
        pi[UP] = 1.0
    elif n > 1:
        # states without outflow (e.g. WAIT with k <= spares) are never entered: pi = 0, out of the system
        live = np.flatnonzero(outflow > 0)
        index = np.full(n, -1)
        index[live] = np.arange(len(live))
        mean_k = sum(c.rate_per_s * c.nodes_out for c in rates.stop) * mech.repair
        k_star = min(int(round(mean_k)), K)
        candidates = [UP, WAIT if can_wait else None, RST if mr else None, DET if md else None,
                      RST + mr - 1 if mr else None, DET + md - 1 if md else None]
        if can_wait and k_star > spares:
            candidates.insert(0, WAIT)
        QT = Q[live][:, live].T.tocsc()
        sub_pi = None
        for ph in dict.fromkeys(c for c in candidates if c is not None):
            pivot = index[k_star * nph + ph]
            if pivot < 0:
                continue
            sub_pi = _solve_pivot(QT, int(pivot))
            if sub_pi is not None:
                break
        if sub_pi is None:
            raise WindtunnelError("The Markov model's linear system is too ill-conditioned to solve for this "
                                  "scenario (field 'method'); use the step simulation (avail simulate) instead.")
        pi = np.zeros(n)
        pi[live] = sub_pi
    else:
        pi = np.ones(1)
    pi = np.clip(pi, 0.0, None)
    pi = pi / pi.sum()
    grid = pi.reshape(K + 1, nph)

    p_up_k = grid[:, UP]
    p_up = float(p_up_k.sum())
    fail_rate = rates.failure_rate_per_s
    useful_rate, ovh_rate, lost_rate = mech.up_rates(fail_rate, lam_p)
    shrink = np.zeros(K + 1)
    if mech.elastic:
        shrink = np.minimum(1.0, np.maximum(ks - spares, 0) * mech.shrink_per_node)
    slow = rates.slow_degradation()
    useful = useful_rate * float(np.sum(p_up_k * (1.0 - shrink))) - useful_rate * slow * p_up
    degraded = useful_rate * p_up - useful
    horizon = scenario.horizon_s
    p_det = float(grid[:, DET:DET + md].sum()) if md else 0.0
    p_wait = float(grid[:, WAIT].sum()) if can_wait else 0.0
    p_rst = float(grid[:, RST:RST + mr].sum()) if mr else 0.0
    lost = {
        "detection": p_det * horizon,
        "waiting_for_repair": p_wait * horizon,
        "restart": p_rst * horizon,
        "recompute": lost_rate * p_up * horizon,
        "checkpoint": ovh_rate * p_up * horizon,
        "degraded": degraded * horizon,
    }
    planned_per_day = lam_p * p_up * 86400.0 if mr else 0.0
    unexpected_per_day = fail_rate * 86400.0
    return MarkovResult(availability=p_up, ettr=useful, interruptions_per_day=unexpected_per_day + planned_per_day,
                        unexpected_per_day=unexpected_per_day, planned_per_day=planned_per_day,
                        lost_seconds_by_cause=lost, states=n, truncation_nodes=K, p_waiting=p_wait)
