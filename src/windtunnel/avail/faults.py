"""Fault profiles: per-component failure rates with their sources, and the job-level rates they imply.

A profile (YAML, see ``catalog/faults/llama3-54day.yaml`` for the field reference) lists components;
each has a mode (fail-stop, or fail-slow with a slowdown factor and a duration), a rate per
component-hour (given directly, per 1000 node-days, or derived from an observed count), and a blast
radius: how many nodes it takes out of the job until repaired. For a job of a given size the profile
becomes a list of fail-stop classes and fail-slow classes with rates per second (``JobRates``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from windtunnel.specs.errors import WindtunnelError, choices_text, did_you_mean
from windtunnel.specs.validation import build
from windtunnel.specs.yamlio import catalog_dir, exists, read_yaml

Component = Literal["accelerator", "hbm", "host", "nic", "switch", "software", "maintenance", "infrastructure"]
Mode = Literal["fail-stop", "fail-slow"]
Per = Literal["device", "node", "switch", "job"]
Blast = Literal["device", "node", "switch", "none"]


class FaultComponent(BaseModel):
    """One cause of faults. Rates are per component-hour (``per`` says which component)."""

    model_config = ConfigDict(extra="forbid")
    component: Component
    mode: Mode = "fail-stop"
    per: Per = "device"
    rate_per_hour: float | None = Field(default=None, ge=0.0)
    count: float | None = Field(default=None, ge=0.0)
    per_1000_node_days: float | None = Field(default=None, ge=0.0)
    blast_radius: Blast = "node"
    planned: bool = False
    slowdown: float | None = Field(default=None, ge=1.0)
    duration_s: float | None = Field(default=None, gt=0.0)
    source: str = Field(min_length=3)

    @model_validator(mode="after")
    def _check(self) -> FaultComponent:
        given = [n for n in ("rate_per_hour", "count", "per_1000_node_days") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of rate_per_hour, count (with the profile's observation) or "
                             f"per_1000_node_days; got {', '.join(given) or 'none'}")
        if self.per_1000_node_days is not None and self.per != "node":
            raise ValueError("per_1000_node_days needs per: node")
        if self.mode == "fail-slow":
            if self.slowdown is None or self.duration_s is None:
                raise ValueError("a fail-slow component needs slowdown (>= 1, step-time multiplier) and duration_s")
            if self.planned:
                raise ValueError("planned applies to fail-stop components only")
        elif self.slowdown is not None or self.duration_s is not None:
            raise ValueError("slowdown and duration_s apply to fail-slow components only")
        return self


class Observation(BaseModel):
    """The window in which counted faults were observed: hours, job size, devices per node."""

    model_config = ConfigDict(extra="forbid")
    hours: float = Field(gt=0.0)
    devices: int = Field(gt=0)
    devices_per_node: int = Field(gt=0)
    source: str = Field(min_length=3)


class Topology(BaseModel):
    """Blast radius of a switch failure, in nodes."""

    model_config = ConfigDict(extra="forbid")
    nodes_per_switch: int = Field(default=1, ge=1)
    source: str = "not stated"


class FaultProfile(BaseModel):
    """A named set of fault components with sources."""

    model_config = ConfigDict(extra="forbid")
    id: str = ""
    name: str = ""
    description: str = ""
    observation: Observation | None = None
    topology: Topology = Field(default_factory=Topology)
    components: dict[str, FaultComponent] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_counts(self) -> FaultProfile:
        missing = [k for k, c in self.components.items() if c.count is not None and self.observation is None]
        if missing:
            raise ValueError(f"components {', '.join(missing)} give a count but the profile has no observation "
                             "(hours, devices, devices_per_node) to divide it by")
        return self

    def rate_per_unit_hour(self, name: str) -> float:
        """Rate of component ``name`` per component-hour (events per hour per device, node, switch or job)."""
        comp = self.components[name]
        if comp.rate_per_hour is not None:
            return comp.rate_per_hour
        if comp.per_1000_node_days is not None:
            return comp.per_1000_node_days / 1000.0 / 24.0
        obs = self.observation
        assert obs is not None and comp.count is not None
        units = units_in_job(comp.per, obs.devices, obs.devices_per_node, self.topology.nodes_per_switch)
        return comp.count / (obs.hours * units)

    def scaled(self, factor: float) -> FaultProfile:
        """The same profile with every rate multiplied by ``factor`` (for what-if sweeps)."""
        if not (factor >= 0 and math.isfinite(factor)):
            raise WindtunnelError(f"Field 'rate_scale' must be a finite number >= 0, got {factor}.", field="rate_scale")
        comps = {k: c.model_copy(update={"rate_per_hour": self.rate_per_unit_hour(k) * factor, "count": None,
                                         "per_1000_node_days": None})
                 for k, c in self.components.items()}
        return self.model_copy(update={"components": comps, "id": f"{self.id}x{factor:g}"})


def single_cause_profile(mtbf_s: float, *, planned: bool = False, name: str = "uniform") -> FaultProfile:
    """A profile with one job-level fail-stop cause of mean time between failures ``mtbf_s`` (seconds),
    taking no hardware out (Daly's and Young's setting: failures at a constant rate, then a restart)."""
    if not (mtbf_s > 0 and math.isfinite(mtbf_s)):
        raise WindtunnelError(f"Field 'mtbf' must be a positive duration, got {mtbf_s}.", field="mtbf")
    comp = FaultComponent(component="infrastructure", per="job", rate_per_hour=3600.0 / mtbf_s,
                          blast_radius="none", planned=planned, source="given on the command line (--mtbf)")
    return FaultProfile(id=name, name=f"one cause, MTBF {mtbf_s:g} s", components={name: comp})


def units_in_job(per: str, devices: int, devices_per_node: int, nodes_per_switch: int) -> int:
    """How many components of kind ``per`` a job of ``devices`` devices has."""
    nodes = math.ceil(devices / devices_per_node)
    if per == "device":
        return devices
    if per == "node":
        return nodes
    if per == "switch":
        return math.ceil(nodes / nodes_per_switch)
    return 1


# ---- loading -----------------------------------------------------------------------------------------


def profile_names() -> list[str]:
    """Ids of the built-in fault profiles (``catalog:NAME``)."""
    return sorted(p.stem for p in catalog_dir("faults").glob("*.yaml") if not p.name.startswith("_"))


@lru_cache(maxsize=16)
def _load_catalog_profile(name: str) -> FaultProfile:
    path = catalog_dir("faults", f"{name}.yaml")
    return build(FaultProfile, {"id": name, **(read_yaml(path) or {})}, f"Fault profile '{name}'")


def load_faults(spec: str | Path | FaultProfile) -> FaultProfile:
    """Resolve ``--faults``: ``catalog:NAME``, a bare catalog name, or a fault-profile YAML file."""
    if isinstance(spec, FaultProfile):
        return spec
    text = str(spec)
    name = text[len("catalog:"):] if text.lower().startswith("catalog:") else text
    by_key = {n.lower().replace("_", "-"): n for n in profile_names()}
    if name.strip().lower().replace("_", "-") in by_key:  # case and '_' vs '-' forgiven
        return _load_catalog_profile(by_key[name.strip().lower().replace("_", "-")])
    path = Path(text)
    if not text.startswith("catalog:") and path.suffix in (".yaml", ".yml"):
        if not exists(path):
            raise WindtunnelError(f"Fault profile file not found: '{path}' (field 'faults').", field="faults")
        doc = read_yaml(path)
        if not isinstance(doc, dict):
            raise WindtunnelError(f"Fault profile '{path}': expected a mapping with 'components', got "
                                  f"{type(doc).__name__}.", field="faults")
        return build(FaultProfile, {"id": path.stem, **doc}, f"Fault profile '{path}'")
    raise WindtunnelError(
        f"Unknown fault profile '{text}' (field 'faults'){did_you_mean(name, profile_names())}; give catalog:NAME "
        "with NAME one of "
        f"{choices_text(profile_names())}, or a fault-profile YAML file.", field="faults")


@lru_cache(maxsize=1)
def _server_sizes() -> dict[str, int]:
    doc = read_yaml(catalog_dir("faults", "_servers.yaml")) or {}
    return {k: int(v["devices_per_node"]) for k, v in (doc.get("servers") or {}).items()}


def devices_per_server(cluster_id: str, innermost_tier_size: int) -> int:
    """Devices per server (the repair and swap unit) of a catalog cluster."""
    return _server_sizes().get(cluster_id, innermost_tier_size)


# ---- job-level rates -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StopClass:
    """A fail-stop cause at job scale: events per second, nodes taken out per event, planned or not."""

    name: str
    component: str
    rate_per_s: float
    nodes_out: int
    planned: bool


@dataclass(frozen=True)
class SlowClass:
    """A fail-slow cause at job scale: events per second, step-time multiplier, duration (s)."""

    name: str
    rate_per_s: float
    slowdown: float
    duration_s: float
    evictable: bool = False   # a slow device, node or link the job can drop (not a job-wide slowdown)


@dataclass(frozen=True)
class JobRates:
    """The fault processes one job sees."""

    stop: tuple[StopClass, ...]
    slow: tuple[SlowClass, ...]

    @property
    def failure_rate_per_s(self) -> float:
        """Unplanned fail-stop events per second (all causes)."""
        return sum(c.rate_per_s for c in self.stop if not c.planned)

    @property
    def planned_rate_per_s(self) -> float:
        """Planned interruptions per second."""
        return sum(c.rate_per_s for c in self.stop if c.planned)

    @property
    def hardware_rate_per_s(self) -> float:
        """Events per second that take nodes out (nodes_out > 0)."""
        return sum(c.rate_per_s for c in self.stop if c.nodes_out > 0)

    def slow_degradation(self) -> float:
        """Long-run fraction of progress lost to fail-slow faults, E[1 - 1/s_eff] where s_eff is the slowest
        active slowdown; each class is an M/G/inf process, active with probability 1 - exp(-rate x duration)."""
        classes = sorted(self.slow, key=lambda c: -c.slowdown)
        total, load = 0.0, 0.0
        for i, c in enumerate(classes):
            load += c.rate_per_s * c.duration_s
            nxt = classes[i + 1].slowdown if i + 1 < len(classes) else 1.0
            total += (1.0 / nxt - 1.0 / c.slowdown) * -math.expm1(-load)
        return total


def job_rates(profile: FaultProfile, devices: int, devices_per_node: int) -> JobRates:
    """The job-scale fault classes of ``profile`` for a job of ``devices`` devices on nodes of ``devices_per_node``."""
    from windtunnel.specs.bounds import MAX_DEVICES, check_whole

    check_whole("devices", devices, 1, MAX_DEVICES)
    check_whole("devices-per-node", devices_per_node, 1, MAX_DEVICES)
    nps = profile.topology.nodes_per_switch
    nodes = math.ceil(devices / devices_per_node)
    stop, slow = [], []
    for name, comp in profile.components.items():
        units = units_in_job(comp.per, devices, devices_per_node, nps)
        rate = profile.rate_per_unit_hour(name) * units / 3600.0
        if comp.mode == "fail-slow":
            slow.append(SlowClass(name, rate, float(comp.slowdown or 1.0), float(comp.duration_s or 0.0),
                                  evictable=comp.per != "job"))
            continue
        out = {"none": 0, "device": 1, "node": 1, "switch": min(nps, nodes)}[comp.blast_radius]
        stop.append(StopClass(name, comp.component, rate, 0 if comp.planned else out, comp.planned))
    return JobRates(tuple(stop), tuple(slow))
