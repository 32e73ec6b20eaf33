"""Hardware: chips (peaks) and clusters (a chip on tiers of links), loaded from the YAML catalog.

Units: FLOP/s for compute peaks, bytes for capacities, bytes/s per device per direction for links,
seconds for latencies.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PositiveInt

from windtunnel.specs.errors import WindtunnelError, choices_text, did_you_mean
from windtunnel.specs.validation import build
from windtunnel.specs.yamlio import catalog_dir, exists, read_yaml

PRECISIONS = ("bf16", "fp16", "fp8")


def _within(low: float, high: float, rule: str, *, high_open: bool = False):
    """A validator: a finite number in [low, high] (``high_open``: below high); else ``rule`` is the message."""
    def check(value: float) -> float:
        value = float(value)
        if not (low <= value < high if high_open else low <= value <= high):  # NaN fails both
            raise ValueError(rule)
        return value
    return AfterValidator(check)


# Physical ranges of what a device can have (far beyond any chip or link built or announced): a value
# outside them is a typo or a unit slip, and would make a step take forever or no time at all.
Bandwidth = Annotated[float, _within(1e6, 1e16, "must be a finite bandwidth from 1e6 to 1e16 bytes/s "
                                     "(1 MB/s to 10 PB/s per device per direction)")]
Latency = Annotated[float, _within(0.0, 3600.0, "must be a finite latency from 0 s to below 3600 s (an hour)",
                                   high_open=True)]
FlopRate = Annotated[float, _within(1e9, 1e18, "must be a finite peak from 1e9 to 1e18 FLOP/s")]
Capacity = Annotated[float, _within(1e6, 1e16, "must be a finite capacity from 1e6 to 1e16 bytes (1 MB to 10 PB)")]
ExpRate = Annotated[float, _within(1e6, 1e18, "must be a finite rate from 1e6 to 1e18 exponentials/s")]
Power = Annotated[float, _within(1.0, 1e6, "must be a finite power from 1 to 1e6 W")]


class Link(BaseModel):
    """One link class as seen by one device: unidirectional bandwidth (bytes/s) and latency (s)."""

    model_config = ConfigDict(extra="forbid")
    bandwidth: Bandwidth
    latency: Latency
    link: str = ""


class Chip(BaseModel):
    """An accelerator: dense peak FLOP/s per precision, HBM capacity (bytes) and bandwidth (bytes/s),
    and the softmax exponentials per second its special-function units evaluate (``exp_per_s``;
    None where unpublished, and then attention is bounded by its FLOPs only)."""

    model_config = ConfigDict(extra="forbid")
    id: str = ""
    name: str
    vendor: str
    generation: str
    peak_flops: dict[str, FlopRate]
    hbm_bytes: Capacity
    hbm_bandwidth: Bandwidth
    scale_up: Link
    scale_out: Link
    exp_per_s: ExpRate | None = None
    # The device's link to host (CPU) memory, bytes/s per direction (PCIe or NVLink-C2C), and the
    # host memory per device (bytes): what activation offloading can use. None where not catalogued.
    host_link_bandwidth: Bandwidth | None = None
    host_memory_bytes: Capacity | None = None
    # The host memory bandwidth per device (bytes/s: the node's CPU memory channels over its devices):
    # what a CPU optimizer step (ZeRO-Offload's CPU Adam, memory-bound) runs at. None where not catalogued.
    host_memory_bandwidth: Bandwidth | None = None
    # Board power (TDP or the power limit), watts: what the job rehearsal's energy uses. None where unpublished.
    power_w: Power | None = None
    # Whether the tensor cores run block-scaled FP8 (OCP microscaling MXFP8: 1x32 blocks with shared scales),
    # which a plan's fp8_recipe=mx needs.
    block_scaled_fp8: bool = False
    default_cluster: str
    sources: dict[str, str]

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s for ``precision``; fp8 on a chip without it is an error, not a silent default."""
        if precision not in self.peak_flops:
            raise WindtunnelError(
                f"Chip '{self.id}' has no native {precision} peak; precisions it supports: "
                f"{choices_text(self.peak_flops)}.",
                field="precision",
            )
        return self.peak_flops[precision]


class Tier(BaseModel):
    """One level of the topology: ``size`` devices share this link class (None = the whole cluster).

    ``bandwidth`` is what one device can send (bytes/s per direction) over all its links of this tier.
    ``topology`` says how: ``switched`` (NVSwitch, a Clos of UB or IB switches) gives any group of the
    domain that whole bandwidth; ``mesh`` (a full mesh such as HCCS in an 8-NPU Atlas 800T A2 node) is
    one dedicated link to each of the domain's other ``size - 1`` devices, so a transfer among ``g``
    devices of the domain drives only ``g - 1`` of them and a point-to-point transfer one.
    """

    model_config = ConfigDict(extra="forbid")
    name: str
    size: PositiveInt | None = None
    bandwidth: Bandwidth
    latency: Latency
    link: str = ""
    topology: Literal["switched", "mesh"] = "switched"


class ClusterSpec(BaseModel):
    """A cluster template: a chip placed on tiers of links, innermost first."""

    model_config = ConfigDict(extra="forbid")
    id: str = ""
    name: str
    # A catalog chip id, or a chip defined inline (the fields of a catalog chip; scale_up/scale_out default to
    # the innermost and outermost tiers): a chip that does not exist yet.
    chip: str | dict
    tiers: list[Tier] = Field(min_length=1)
    sources: dict[str, str] = Field(default_factory=dict)


class Cluster(BaseModel):
    """A concrete cluster: a chip, its tiers and the job's device count."""

    model_config = ConfigDict(extra="forbid")
    id: str
    chip: Chip
    tiers: list[Tier]
    devices: PositiveInt

    def tier_index_for_span(self, span: int) -> int:
        """Innermost tier whose domain holds ``span`` consecutive devices, for a block that starts on a domain
        boundary (a block of 6 on 8-device nodes that starts at device 6 straddles two; parallel groups are
        placed exactly by :func:`windtunnel.cost.collectives.place_group`)."""
        for index, tier in enumerate(self.tiers):
            if tier.size is None or span <= tier.size:
                return index
        return len(self.tiers) - 1

    def job_domain_sizes(self) -> list[int]:
        """The job's devices in one domain of each tier, innermost first; the outermost tier holds all of them.

        A job is spread evenly over the fewest domains that hold it when its devices divide evenly over them
        (256 GPUs on 72-GPU NVLink racks: 4 racks of 64, as block schedulers allocate them; 12 on 8-GPU
        nodes: 6 + 6), else it fills domains in order (20 on 8-GPU nodes: 8 + 8 + 4). Ranks number the
        job's devices consecutively, domain by domain.
        """
        sizes = [self.devices]
        for tier in reversed(self.tiers[:-1]):
            outer = sizes[0]
            domains = -(-outer // (tier.size or outer))
            sizes.insert(0, outer // domains if outer % domains == 0 else tier.size)
        return sizes

    @property
    def node_size(self) -> int:
        """Devices in the innermost tier (a node or a scale-up domain)."""
        return self.tiers[0].size or self.devices


@lru_cache(maxsize=1)
def _catalog() -> tuple[dict[str, Chip], dict[str, ClusterSpec]]:
    chips_doc = read_yaml(catalog_dir("hardware", "chips.yaml")) or {}
    clusters_doc = read_yaml(catalog_dir("hardware", "clusters.yaml")) or {}
    chips = {
        key: build(Chip, {**value, "id": key}, f"Catalog chip '{key}'")
        for key, value in (chips_doc.get("chips") or {}).items()
    }
    clusters = {
        key: build(ClusterSpec, {**value, "id": key}, f"Catalog cluster '{key}'")
        for key, value in (clusters_doc.get("clusters") or {}).items()
    }
    return chips, clusters


def chip_names() -> list[str]:
    """Ids of the catalog's chips."""
    return sorted(_catalog()[0])


def cluster_names() -> list[str]:
    """Ids of the catalog's clusters."""
    return sorted(_catalog()[1])


def load_chip(name: str) -> Chip:
    """A catalog chip by id."""
    chips, _ = _catalog()
    if name not in chips:
        raise WindtunnelError(
            f"Unknown chip '{name}' (field 'hardware'); known chips: {choices_text(chips)}.", field="hardware"
        )
    return chips[name]


def _inline_chip(spec: ClusterSpec) -> Chip:
    """A chip written into a cluster file: a catalog chip's fields; links default to the cluster's tiers."""
    inner, outer = spec.tiers[0], spec.tiers[-1]
    doc = {"id": f"{spec.id}-chip", "default_cluster": spec.id, "sources": {},
           "scale_up": {"bandwidth": inner.bandwidth, "latency": inner.latency, "link": inner.link},
           "scale_out": {"bandwidth": outer.bandwidth, "latency": outer.latency, "link": outer.link}, **spec.chip}
    return build(Chip, doc, f"Cluster '{spec.id}' inline chip")


def _cluster_from_spec(spec: ClusterSpec, devices: int, chips: dict[str, Chip]) -> Cluster:
    if isinstance(spec.chip, dict):
        chips = {**chips, spec.id: _inline_chip(spec)}
        spec = spec.model_copy(update={"chip": spec.id})
    if spec.chip not in chips:
        raise WindtunnelError(
            f"Cluster '{spec.id}' names chip '{spec.chip}', which is not in the catalog; known chips: "
            f"{choices_text(chips)}.",
            field="chip",
        )
    tiers = list(spec.tiers)
    last = tiers[-1]
    if last.size is not None and devices > last.size:
        # The template's outermost tier is bounded (e.g. a single node); a bigger job would need a
        # fabric the template does not describe, so that is an error rather than a guess.
        raise WindtunnelError(
            f"Cluster '{spec.id}' holds at most {last.size} devices but the job asks for {devices} "
            f"(field 'devices'); use at most {last.size} or a cluster with a scale-out tier.",
            field="devices",
        )
    return Cluster(id=spec.id, chip=chips[spec.chip], tiers=tiers, devices=devices)


def load_hardware(name_or_path: str, devices: int) -> Cluster:
    """Resolve ``--hardware``: a chip id (its default cluster), a cluster id, or a cluster YAML file."""
    from windtunnel.specs.bounds import MAX_DEVICES, check_whole

    check_whole("devices", devices, 1, MAX_DEVICES, what=" (ten times the largest clusters built)")
    chips, clusters = _catalog()
    if name_or_path in chips:
        chip = chips[name_or_path]
        spec = clusters.get(chip.default_cluster)
        if spec is None:
            raise WindtunnelError(f"Chip '{chip.id}' names default cluster '{chip.default_cluster}', not in catalog.")
        return _cluster_from_spec(spec, devices, chips)
    if name_or_path in clusters:
        return _cluster_from_spec(clusters[name_or_path], devices, chips)
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and exists(path):
        doc = read_yaml(path)
        if isinstance(doc, dict) and "clusters" in doc:
            inner = doc["clusters"]
            if not isinstance(inner, dict) or len(inner) != 1 or not isinstance(next(iter(inner.values())), dict):
                raise WindtunnelError(
                    f"Cluster file '{path}': field 'clusters' must map one cluster id to its fields (name, chip, tiers), "
                    f"got {type(inner).__name__} with {len(inner) if isinstance(inner, (dict, list)) else 0} entries; "
                    "or write the cluster's fields at the top level.", field="clusters")
            doc = next(iter(inner.values()))
        if doc is not None and not isinstance(doc, dict):
            raise WindtunnelError(f"Cluster file '{path}' must be a mapping of the cluster's fields (name, chip, tiers), "
                                  f"got a {type(doc).__name__}.", field="hardware")
        spec = build(ClusterSpec, {"id": path.stem, **(doc or {})}, f"Cluster file '{path}'")
        return _cluster_from_spec(spec, devices, chips)
    raise WindtunnelError(
        f"Unknown hardware '{name_or_path}' (field 'hardware'){did_you_mean(name_or_path, [*chips, *clusters])}; "
        f"give a chip ({choices_text(chips)}), "
        f"a cluster ({choices_text(clusters)}) or a cluster YAML file.",
        field="hardware",
    )
