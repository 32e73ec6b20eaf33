"""The typed result of a plan search: the `train search --json` document, key for key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from windtunnel.specs.results import JsonResult


@dataclass
class TrainingSearch(JsonResult):
    """Ranked plans of one job. ``plans``: refined plans, best first, each with ``rank``, ``plan`` (accepted by
    ``--plan``), ``step_time_s`` (s), ``tokens_per_s``, ``tokens_per_s_per_device`` (tokens/s), ``mfu`` (0-1),
    ``peak_memory_bytes`` and ``memory_headroom_bytes`` (bytes per device), ``screen_step_time_s`` (s, the
    analytic screen) and ``breakdown`` (s per category). ``to_frame()``: the plans as a DataFrame."""

    TABLE = "plans"
    OPTIONAL = ("baseline", "profile", "what_if", "failure_aware", "framework", "fp8_recipe", "fixed",
                "windtunnel_version", "provenance")

    model: str
    hardware: str
    chip: str
    devices: int
    seq_len: int  # tokens
    global_batch: int  # sequences per step
    precision: str
    cuda_graphs: str
    grads: str
    moments: str
    dispatcher: str
    plans: list[dict[str, Any]]
    pareto: list[dict[str, Any]]  # tokens/s vs memory headroom front, same keys as plans
    candidates: dict[str, Any]  # enumerated, pruned {reason: count}, screened, refined
    screen_vs_engine: dict[str, Any]  # median/max |screen - engine| / engine on the refined plans
    heatmap_tp_pp_step_time_s: dict[str, float]  # best screened step time (s) per "tp=..,pp=.."
    elapsed_s: dict[str, float]  # wall seconds per phase
    baseline: dict[str, Any] | None = None  # the --baseline plan's result and the best plan's gain (fraction)
    profile: str | None = None  # the calibration profile used
    what_if: str | None = None  # the hardware what-if searched on
    failure_aware: dict[str, Any] | None = None  # goodput ranking after faults (train search --faults)
    framework: str | None = None  # the training stack searched with
    fp8_recipe: str | None = None  # every plan's FP8 scaling ('tensor' or 'mx')
    fixed: str | None = None  # kernel paths every plan runs, in --plan syntax (train search --fixed)
    windtunnel_version: str | None = None  # the version that produced it
    provenance: dict[str, Any] | None = None  # the command or API call, its inputs, catalog and input-file digests
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def best(self) -> dict[str, Any] | None:
        """The best plan's row (None when no plan fits)."""
        return self.plans[0] if self.plans else None
