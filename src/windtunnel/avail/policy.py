"""Recovery policies: detection, restart, what a failure rolls back to, spares and repair, checkpointing.

``--policy KIND[,key=value...]``, e.g. ``hot-spare,spares=32,restart=30s``. Every policy goes through the
same sequence after a fail-stop fault: detection (``detect``), then, when the fault took nodes out and
no spare is free, waiting for repair (elastic-shrink instead continues with fewer data-parallel
replicas), then isolation (``isolate``, default 0: counted in the restart) and a restart (``restart``:
rescheduling, process start, state reload); both are reported as restart time. The work
since the last point the policy can roll back to is lost:

* ``restart-from-checkpoint``: the last durable persistent checkpoint;
* ``in-memory-checkpoint``: the last in-memory snapshot (every ``memory-every``; 0 = every step);
* ``hot-spare``: process-level in-place restart with a warm spare swapped in, state from the in-memory
  snapshot (seconds-level recovery);
* ``elastic-shrink``: the surviving data-parallel replicas hold the state; only the current step is lost.

Persistent checkpoints (every ``checkpoint-every`` of running time, costing ``checkpoint-cost``,
blocking, or asynchronous with a ``checkpoint-stall`` and a write that is durable ``checkpoint-cost``
after it starts) are written under every policy. Spares and repairs count nodes (servers).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from windtunnel.avail.units import parse_duration
from windtunnel.specs.errors import WindtunnelError, choices_text, did_you_mean
from windtunnel.specs.validation import build

Kind = Literal["restart-from-checkpoint", "in-memory-checkpoint", "hot-spare", "elastic-shrink"]
Rollback = Literal["checkpoint", "memory", "step"]
POLICY_KINDS = ("restart-from-checkpoint", "in-memory-checkpoint", "hot-spare", "elastic-shrink")

# Defaults per kind, with the reason each number is what it is (they are assumptions, not measurements,
# and every result lists them).
KIND_DEFAULTS: dict[str, dict] = {
    "restart-from-checkpoint": {"detect_s": 150.0, "restart_s": 600.0, "rollback": "checkpoint"},
    "in-memory-checkpoint": {"detect_s": 150.0, "restart_s": 300.0, "rollback": "memory"},
    "hot-spare": {"detect_s": 10.0, "restart_s": 30.0, "rollback": "memory"},
    "elastic-shrink": {"detect_s": 10.0, "restart_s": 60.0, "rollback": "step"},
}
DEFAULT_REASONS = {
    "detect_s": "detection: 150 s for health-check-driven policies (Meta's clusters run health checks every "
                "5 min, reliability.csv A05: mean wait 2.5 min); 10 s for hot-spare and elastic (in-band "
                "heartbeat), an assumption",
    "restart_s": "restart: 600 s for a restart from a persistent checkpoint (Daly's R = 10 min, A16), 300 s "
                 "without a storage reload, 30 s for a process-level in-place restart (the figure Huawei gives for "
                 "its process-level recovery, reliability.csv A20), 60 s to re-form "
                 "communicators after an elastic shrink (assumptions)",
    "repair_s": "repair: a node taken out returns after 24 h on average, exponentially distributed (assumption)",
    "spares": "spares: 2% of the job's nodes when not given (assumption)",
    "checkpoint": "checkpoints: every 30 min, 60 s blocking write when not given (the issue's example)",
    "stall": "asynchronous checkpoint: the training stall is 10% of the write time when not given (assumption)",
}


class RecoveryPolicy(BaseModel):
    """A recovery policy. Times in seconds; spares in nodes (None: 2% of the job's nodes)."""

    model_config = ConfigDict(extra="forbid")
    kind: Kind = "restart-from-checkpoint"
    detect_s: float | None = Field(default=None, ge=0.0)
    restart_s: float | None = Field(default=None, ge=0.0)
    isolate_s: float = Field(default=0.0, ge=0.0)
    spares: int | None = Field(default=None, ge=0)
    repair_s: float = Field(default=86400.0, gt=0.0)
    checkpoint_every_s: float = Field(default=1800.0, gt=0.0)
    checkpoint_cost_s: float = Field(default=60.0, ge=0.0)
    checkpoint_async: bool = False
    checkpoint_stall_s: float | None = Field(default=None, ge=0.0)
    rollback: Rollback | None = None
    memory_every_s: float = Field(default=0.0, ge=0.0)
    memory_cost_s: float = Field(default=0.0, ge=0.0)
    replica_devices: int | None = Field(default=None, ge=1)
    durations: Literal["deterministic", "exponential"] = "deterministic"
    # Fail-slow eviction (windtunnel.avail.failslow): a slow device/node/link is detected after this long and
    # the job restarts without it (a restart, no work lost); None = slow components are left in place.
    evict_slow_s: float | None = Field(default=None, ge=0.0)

    def resolved(self, nodes: int) -> RecoveryPolicy:
        """Fill the per-kind defaults for a job of ``nodes`` nodes; spares beyond the job are an error."""
        defaults = KIND_DEFAULTS[self.kind]
        update: dict = {}
        for key in ("detect_s", "restart_s", "rollback"):
            if getattr(self, key) is None:
                update[key] = defaults[key]
        if self.spares is None:
            update["spares"] = math.ceil(0.02 * nodes)
        elif self.spares > nodes:
            raise WindtunnelError(
                f"Field 'spares' is {self.spares} nodes, larger than the cluster the job runs on ({nodes} nodes); "
                f"give a spare pool between 0 and {nodes} nodes.", field="spares")
        if self.checkpoint_stall_s is None:
            update["checkpoint_stall_s"] = 0.1 * self.checkpoint_cost_s if self.checkpoint_async else self.checkpoint_cost_s
        return self.model_copy(update=update)


_KEYS = {
    "detect": "detect_s", "detection": "detect_s", "isolate": "isolate_s", "isolation": "isolate_s",
    "restart": "restart_s", "spares": "spares", "repair": "repair_s",
    "mttr": "repair_s", "checkpoint-every": "checkpoint_every_s", "checkpoint-cost": "checkpoint_cost_s",
    "async": "checkpoint_async", "checkpoint-async": "checkpoint_async", "stall": "checkpoint_stall_s",
    "checkpoint-stall": "checkpoint_stall_s", "rollback": "rollback", "memory-every": "memory_every_s",
    "memory-cost": "memory_cost_s", "replica-devices": "replica_devices", "durations": "durations",
    "evict-slow": "evict_slow_s",
}
_DURATION_FIELDS = {"evict_slow_s", "detect_s", "isolate_s", "restart_s", "repair_s", "checkpoint_every_s", "checkpoint_cost_s",
                    "checkpoint_stall_s", "memory_every_s", "memory_cost_s"}
_BOOLS = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False, "on": True, "off": False}


def _coerce(field: str, value) -> object:
    if value is None:
        return None
    if field in _DURATION_FIELDS:
        return parse_duration(value, field.removesuffix("_s").replace("_", "-"))
    if field == "checkpoint_async" and isinstance(value, str):
        if value.lower() not in _BOOLS:
            raise WindtunnelError(f"Policy field 'async' must be true or false, got '{value}'.", field="async")
        return _BOOLS[value.lower()]
    if field in ("spares", "replica_devices") and isinstance(value, str):
        try:
            return int(value)
        except ValueError as exc:
            raise WindtunnelError(f"Policy field '{field}' must be a whole number, got '{value}'.", field=field) from exc
    return value


def parse_policy(spec: str | dict | RecoveryPolicy, **overrides) -> RecoveryPolicy:
    """Parse ``KIND[,key=value,...]`` (or a mapping) into a RecoveryPolicy; ``overrides`` (field names of
    RecoveryPolicy, None = keep) win over the spec. Unknown kinds and keys are clear errors."""
    if isinstance(spec, RecoveryPolicy):
        data = spec.model_dump(exclude_unset=True)
        data["kind"] = spec.kind
    elif isinstance(spec, dict):
        data = dict(spec)
    else:
        parts = [p.strip() for p in str(spec).split(",") if p.strip()]
        if not parts:
            raise WindtunnelError(f"Field 'policy' is empty; give one of {choices_text(POLICY_KINDS)}.", field="policy")
        data = {"kind": parts[0]}
        for item in parts[1:]:
            if "=" not in item:
                raise WindtunnelError(f"Policy item '{item}' is not key=value (field 'policy'), e.g. "
                                      "hot-spare,spares=32,restart=30s.", field="policy")
            key, value = (s.strip() for s in item.split("=", 1))
            field = _KEYS.get(key.lower().replace("_", "-"))
            if field is None:
                raise WindtunnelError(f"Unknown policy key '{key}' (field 'policy'){did_you_mean(key, _KEYS)}; valid keys: "
                                      f"{choices_text(set(_KEYS))}.", field="policy")
            data[field] = value
    kind = data.get("kind", "restart-from-checkpoint")
    if isinstance(kind, str):
        kind = data["kind"] = kind.strip().lower().replace("_", "-")
    if kind not in POLICY_KINDS:
        raise WindtunnelError(f"Unknown recovery policy '{kind}' (field 'policy'){did_you_mean(kind, POLICY_KINDS)}; "
                              "valid policies: "
                              f"{choices_text(POLICY_KINDS)}.", field="policy")
    data.update({k: v for k, v in overrides.items() if v is not None})
    data = {k: (v if k == "kind" else _coerce(k, v)) for k, v in data.items()}
    return build(RecoveryPolicy, data, "Recovery policy")
