"""Hardware what-ifs: ``--what-if KEY=VALUE`` changes to a cluster's chip, links and host.

A value is a factor (``x1.5``: multiply the resource) or an absolute quantity with its unit
(``96GiB``, ``1.2TB/s``, ``5us``, ``72devices``); a bare number is an error, never a guessed unit.
Each key names the resource it changes and the unit family its absolute values take; how a key
changes a cluster is data (:data:`KEYS`: which fields of the chip and which tiers), so every key
goes through the same code. Units: FLOP/s, bytes, bytes/s per device per direction, seconds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import PRECISIONS, Cluster

# Unit families: suffix -> multiplier to the base unit (FLOP/s, bytes, bytes/s, seconds, devices).
_DECIMAL = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
UNITS: dict[str, dict[str, float]] = {
    "flops": {f"{p}FLOP/s": m for p, m in _DECIMAL.items()} | {f"{p}FLOPS": m for p, m in _DECIMAL.items()},
    "bytes": {f"{p}B": m for p, m in (_DECIMAL | _BINARY).items()},
    "bandwidth": ({f"{p}B/s": m for p, m in (_DECIMAL | _BINARY).items()}
                  | {f"{p}b/s": m / 8.0 for p, m in _DECIMAL.items()}),
    "seconds": {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0},
    "devices": {"devices": 1.0, "device": 1.0, "dev": 1.0},
}
UNIT_EXAMPLES = {"flops": "1200TFLOP/s", "bytes": "96GiB", "bandwidth": "1.2TB/s", "seconds": "5us",
                 "devices": "72devices"}


@dataclass(frozen=True)
class KeySpec:
    """What one what-if key changes: its unit family, the chip fields it scales, which tiers
    (``inner``: the scale-up tier, the innermost; ``outer``: every tier beyond it) and which of
    their fields, and a one-line description."""

    unit: str
    chip_fields: tuple[str, ...] = ()
    tiers: str = ""
    tier_field: str = ""
    description: str = ""
    integer: bool = False


KEYS: dict[str, KeySpec] = {
    "flops": KeySpec("flops", ("peak_flops",), description="dense tensor-core peak (every precision; an "
                     "absolute value is the bf16 peak, the others keep their ratio)"),
    "hbm_bandwidth": KeySpec("bandwidth", ("hbm_bandwidth",), description="HBM bandwidth per device"),
    "hbm_capacity": KeySpec("bytes", ("hbm_bytes",), description="HBM capacity per device"),
    "scale_up_bandwidth": KeySpec("bandwidth", ("scale_up.bandwidth",), "inner", "bandwidth",
                                  "scale-up tier bandwidth per device per direction (NVLink, HCCS, UB)"),
    "scale_out_bandwidth": KeySpec("bandwidth", ("scale_out.bandwidth",), "outer", "bandwidth",
                                   "scale-out tier(s) bandwidth per device per direction"),
    "scale_up_domain": KeySpec("devices", (), "inner", "size", "devices per scale-up domain", integer=True),
    "link_latency": KeySpec("seconds", ("scale_up.latency", "scale_out.latency"), "all", "latency",
                            "per-hop latency of every tier"),
    "host_overhead": KeySpec("seconds", (), description="host (CPU) time per framework op; per-expert GEMM "
                             "calls scale with it"),
}


@dataclass(frozen=True)
class Change:
    """One what-if: ``key`` multiplied by ``factor`` or set to ``value`` (base units)."""

    key: str
    factor: float | None = None
    value: float | None = None
    text: str = ""

    def scaled(self, current: float) -> float:
        """The new value of a resource whose current value is ``current``."""
        return current * self.factor if self.factor is not None else float(self.value)

    def ratio(self, current: float) -> float:
        """New over current (for fields that follow the key's reference value)."""
        return self.factor if self.factor is not None else float(self.value) / current


@dataclass(frozen=True)
class WhatIf:
    """A set of what-ifs applied together (at most one per key)."""

    changes: tuple[Change, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.changes)

    @property
    def label(self) -> str:
        return ",".join(change.text for change in self.changes)

    def get(self, key: str) -> Change | None:
        return next((change for change in self.changes if change.key == key), None)


# Links per device on a tier of ``size`` devices, by the tier's topology (specs.hardware.Tier.topology).
LINKS_PER_DEVICE = {"switched": lambda size: 1, "mesh": lambda size: max(1, size - 1)}

_FACTOR = re.compile(r"^\s*[x\*]\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*$")
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z/]+)\s*$")


def valid_keys_text() -> str:
    return ", ".join(f"{key} ({spec.description}; e.g. x1.5 or {UNIT_EXAMPLES[spec.unit]})"
                     for key, spec in KEYS.items())


def parse_change(item: str) -> Change:
    """``hbm_bandwidth=x1.5`` or ``hbm_capacity=96GiB`` -> a Change; bad input is one clear error."""
    if "=" not in item:
        raise WindtunnelError(f"What-if '{item}' is not of the form KEY=VALUE (field 'what-if'); valid keys: "
                              f"{', '.join(KEYS)}.", field="what-if")
    key, raw = (part.strip() for part in item.split("=", 1))
    key = key.lower().replace("-", "_")
    if key not in KEYS:
        raise WindtunnelError(f"Unknown what-if key '{key}' (field 'what-if'); valid keys: {valid_keys_text()}.",
                              field="what-if")
    spec = KEYS[key]
    units = UNITS[spec.unit]
    factor = _FACTOR.match(raw)
    if factor:
        number = float(factor.group(1))
        if not (math.isfinite(number) and number > 0):
            raise WindtunnelError(f"What-if '{key}' has factor '{raw}'; a factor must be positive (e.g. x1.5).",
                                  field=key)
        return Change(key, factor=number, text=f"{key}=x{number:g}")
    quantity = _QUANTITY.match(raw)
    if quantity is None or quantity.group(2) not in units:
        raise WindtunnelError(
            f"What-if '{key}' has value '{raw}', which is neither a factor nor a quantity with a unit (field "
            f"'{key}'); give xF (e.g. x1.5) or a value in {', '.join(units)} (e.g. {UNIT_EXAMPLES[spec.unit]}). "
            "A bare number is an error: the unit is never guessed.", field=key)
    value = float(quantity.group(1)) * units[quantity.group(2)]
    if not (math.isfinite(value) and value > 0) and not (key == "link_latency" and value == 0):
        raise WindtunnelError(f"What-if '{key}' has value '{raw}'; it must be positive.", field=key)
    if spec.integer and value != int(value):
        raise WindtunnelError(f"What-if '{key}' has value '{raw}'; it must be a whole number of devices.", field=key)
    return Change(key, value=value, text=f"{key}={raw.strip()}")


def parse_what_if(items: str | list[str] | tuple[str, ...] | WhatIf | None) -> WhatIf:
    """Parse repeated ``--what-if`` items (or one comma-separated string) into a WhatIf."""
    if items is None:
        return WhatIf()
    if isinstance(items, WhatIf):
        return items
    if isinstance(items, str):
        items = [part for part in items.split(",") if part.strip()]
    changes: list[Change] = []
    for item in items:
        change = parse_change(item)
        if any(other.key == change.key for other in changes):
            raise WindtunnelError(f"What-if key '{change.key}' is given twice (field 'what-if'); give each key once.",
                                  field="what-if")
        changes.append(change)
    return WhatIf(tuple(changes))


def _tier_indices(cluster: Cluster, which: str) -> list[int]:
    count = len(cluster.tiers)
    if which == "inner":
        return [0] if count > 1 else []
    if which == "outer":
        return list(range(1, count)) if count > 1 else [0]
    return list(range(count)) if which == "all" else []


def _scale_chip(cluster: Cluster, change: Change, fields: tuple[str, ...]) -> Cluster:
    chip = cluster.chip
    updates: dict = {}
    for name in fields:
        if name == "peak_flops":
            reference = next(chip.peak_flops[p] for p in PRECISIONS if p in chip.peak_flops)
            ratio = change.ratio(reference)
            updates["peak_flops"] = {p: v * ratio for p, v in chip.peak_flops.items()}
        elif "." in name:
            link_name, attribute = name.split(".")
            link = updates.get(link_name, getattr(chip, link_name))
            reference = getattr(getattr(chip, link_name), attribute)
            updates[link_name] = link.model_copy(update={attribute: change.scaled(reference)})
        else:
            updates[name] = change.scaled(getattr(chip, name))
    return cluster.model_copy(update={"chip": chip.model_copy(update=updates)})


def _scale_tiers(cluster: Cluster, change: Change, spec: KeySpec) -> Cluster:
    indices = _tier_indices(cluster, spec.tiers)
    if not indices:
        raise WindtunnelError(f"What-if '{change.key}' needs a cluster with a scale-up tier inside a scale-out tier; "
                              f"cluster '{cluster.id}' has {len(cluster.tiers)} tier(s).", field=change.key)
    tiers = list(cluster.tiers)
    for index in indices:
        tier = tiers[index]
        current = getattr(tier, spec.tier_field)
        if current is None:  # the outermost tier spans the cluster: its size is not a resource
            continue
        value = change.scaled(current)
        if spec.integer:
            value = max(1, int(round(value)))
            outer = tiers[index + 1].size if index + 1 < len(tiers) else None
            if outer is not None and value > outer:
                raise WindtunnelError(f"What-if '{change.key}' gives {value} devices per domain, more than the "
                                      f"{outer} of the tier around it ('{tiers[index + 1].name}').", field=change.key)
        update = {spec.tier_field: value}
        if spec.tier_field == "size":
            # A device's bandwidth on the tier is its links': a full mesh has one per peer, so a bigger domain
            # brings more of them (the per-link bandwidth stays); a switched tier keeps the device's bandwidth.
            links = LINKS_PER_DEVICE[getattr(tier, "topology", "switched")]
            update["bandwidth"] = tier.bandwidth * links(value) / max(1, links(int(current)))
        tiers[index] = tier.model_copy(update=update)
    return cluster.model_copy(update={"tiers": tiers})


def apply_to_cluster(cluster: Cluster, what_if: WhatIf) -> Cluster:
    """The cluster with every chip and tier change of ``what_if`` applied (host changes are not the
    cluster's: see :func:`host_scale`)."""
    for change in what_if.changes:
        spec = KEYS[change.key]
        if spec.chip_fields:
            cluster = _scale_chip(cluster, change, spec.chip_fields)
        if spec.tiers:
            cluster = _scale_tiers(cluster, change, spec)
    if what_if:
        # The changed hardware must still lie in the physical ranges a catalog or cluster file must.
        from windtunnel.specs.validation import build

        cluster = build(Cluster, cluster.model_dump(), f"The hardware after --what-if '{what_if.label}'")
    return cluster


def host_scale(what_if: WhatIf, current_op_s: float) -> float:
    """Factor on the host's per-op and per-call seconds (1.0 without a host_overhead change)."""
    change = what_if.get("host_overhead")
    if change is None:
        return 1.0
    if change.factor is None and current_op_s <= 0:
        raise WindtunnelError("What-if 'host_overhead' sets an absolute time, but this chip's profile models no host "
                              "time per op; use a factor (e.g. x2).", field="host_overhead")
    return change.ratio(current_op_s) if current_op_s > 0 else change.factor
