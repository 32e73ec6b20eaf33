"""The typed result of an availability Monte Carlo: the `avail simulate --json` document, key for key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from windtunnel.specs.results import JsonResult


@dataclass
class AvailabilityResult(JsonResult):
    """Replications of one job under faults. ``availability``: fraction of wall time the job is up;
    ``ettr``: effective training time ratio, useful (kept) training time / wall time (0-1);
    ``lost_seconds_by_cause``: mean seconds per replication lost to each cause; ``ci95``: 95% confidence
    intervals of the means. ``to_frame()``: one row per cause (seconds lost, share of the horizon, CI)."""

    OPTIONAL = ("windtunnel_version", "provenance")

    method: str
    replications: int
    seed: int
    availability: float  # fraction of wall time
    ettr: float  # fraction of wall time
    interruptions_per_day: float
    unexpected_interruptions: float  # per replication (horizon)
    planned_interruptions: float  # per replication (horizon)
    failures_while_running: float  # per replication (horizon)
    mtbi_s: float | None  # mean time between interruptions (s)
    lost_seconds_by_cause: dict[str, float]  # s per replication
    useful_seconds: float  # s per replication
    ci95: dict[str, Any]
    inputs: dict[str, Any]  # the resolved scenario (units in key names)
    assumptions: list[str]
    warnings: list[str] = field(default_factory=list)
    windtunnel_version: str | None = None  # the version that produced it
    provenance: dict[str, Any] | None = None  # the command or API call, its inputs, catalog and input-file digests
    extra: dict[str, Any] = field(default_factory=dict)

    def to_frame(self, table: str | None = None):
        """Seconds lost per cause (mean per replication), their share of the horizon and 95% CI."""
        import pandas as pd

        if table is not None:
            return super().to_frame(table)
        horizon = float(self.inputs.get("horizon_s") or 0.0)
        ci = self.ci95.get("lost_seconds_by_cause", {})
        return pd.DataFrame([{"cause": cause, "lost_s": seconds,
                              "share_of_horizon": seconds / horizon if horizon else None,
                              "ci95_low_s": (ci.get(cause) or [None, None])[0],
                              "ci95_high_s": (ci.get(cause) or [None, None])[1]}
                             for cause, seconds in self.lost_seconds_by_cause.items()])
