"""The typed result of a deployment search: the `infer search --json` document, key for key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from windtunnel.specs.results import JsonResult


@dataclass
class ServingSearch(JsonResult):
    """Deployments of one model that serve a traffic at an SLO attainment target. ``deployments``: the winners,
    re-simulated on the whole traffic, best first, each with ``rank``, ``deployment`` (accepted by
    ``--deployment``), ``kind`` (colocated / disaggregated), ``devices``, ``attainment`` (0-1),
    ``goodput_requests_per_s`` (req/s), ``ttft_p90_s`` / ``tpot_p90_s`` (s), ``served_rate`` /
    ``offered_rate`` (req/s). ``to_frame()``: the deployments as a DataFrame."""

    TABLE = "deployments"
    OPTIONAL = ("what_if", "windtunnel_version", "provenance")

    model: str
    hardware: str
    devices: int  # the device budget
    mode: str  # both, disaggregated or colocated
    objective: str  # devices, cost or goodput
    objective_text: str
    attainment_target: float  # fraction of requests within the SLO
    price_per_device_hour: float | None  # in currency per device-hour
    currency: str  # the price's currency as given ('' when none was)
    slo: dict[str, float | None]  # ttft_s, tpot_s (seconds)
    seed: int
    traffic: dict[str, Any]
    offered_rate: float | None  # requests/s (None for a closed loop)
    feasible: bool
    reason: str | None  # why nothing qualifies (when not feasible)
    closest: dict[str, Any] | None  # the nearest miss when not feasible
    deployments: list[dict[str, Any]]
    best: dict[str, Any] | None
    best_colocated: dict[str, Any] | None
    best_disaggregated: dict[str, Any] | None
    baseline: dict[str, Any] | None  # the --baseline deployment at the same load, with its gain
    candidates: dict[str, Any]  # counts per phase
    elapsed_s: float  # wall seconds
    notes: list[str]
    warnings: list[str]
    what_if: str | None = None
    windtunnel_version: str | None = None  # the version that produced it
    provenance: dict[str, Any] | None = None  # the command or API call, its inputs, catalog and input-file digests
    extra: dict[str, Any] = field(default_factory=dict)
