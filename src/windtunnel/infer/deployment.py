"""Serving deployments: pools of instances (mixed, prefill or decode), each with its own parallel plan,
chip, batching limits and KV cache; parsed from a compact string or a YAML file; memory model.

String form (segments separated by ``;``)::

    mixed:tp=8,replicas=2
    prefill:ep=32,replicas=2;decode:ep=128,replicas=1;router=kv_aware

YAML form::

    router: least_tokens
    instances:
      - {role: prefill, ep: 32, replicas: 2, max_tokens: 16384}
      - {role: decode, ep: 128, replicas: 1, chip: h800}

Instance keys: ``tp`` (attention tensor parallel), ``dp`` (data-parallel attention groups; alias
``dp_attention``), ``ep`` (expert parallel), ``pp`` (pipeline stages), ``replicas``, ``max_batch``
(max running sequences) and ``max_tokens`` (token budget per iteration = prefill chunk size), both per
data-parallel attention group, ``batching`` (``chunked``: decodes plus prefill chunks filling the
budget, vLLM V1 / Sarathi-Serve; ``separate``: prefill-only or decode-only iterations, prefill first,
vLLM V0; ``whole``: decodes plus whole prompts that fit, TensorRT-LLM in-flight batching; ``chunked=false``
means ``separate``), ``admission`` (``greedy``: admit on the prompt's KV and preempt by
recompute when the cache overflows, as vLLM; ``reserve``: admit only when the whole output fits and
never preempt, as TensorRT-LLM's GUARANTEED_NO_EVICT), ``precision`` (weights/GEMMs: bf16, fp16, fp8, int8 = W8A8, w4a16/w8a16 = weight-only), ``kv`` (KV cache:
bf16, fp16, fp8), ``prefix_hit`` (prefix-cache hit rate, 0..1), ``chip`` (overrides ``--hardware``),
``mem_util``, ``tbo`` (two-batch overlap of communication with compute), ``overhead`` (host time per
iteration), ``moe_imbalance``, ``block_size``, ``prefix_cache`` (block-hash prefix cache; default on when the
traffic carries block hashes, :mod:`windtunnel.infer.prefix`), ``host_cache`` (GiB of host memory per device
for the cache's host tier). Router ``cache_aware``: the instance with the longest cached prefix.

Devices per instance = tp x dp x pp. The MoE layers of a stage are spread over its tp x dp devices:
``ep`` of them hold whole experts and the rest slice each expert (expert tensor parallelism). When
only ``ep`` is given, attention runs data-parallel over the EP group (tp=1, dp=ep), as DeepSeek and
SGLang deploy large-EP serving. Units: devices, tokens, bytes, seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from windtunnel.infer.memory import (
    WEIGHT_ONLY,
    activation_bytes,
    bytes_of,
    kv_bytes_per_token_layer,
    weight_bytes_per_device,
)
from windtunnel.infer.units import parse_bool, parse_float, parse_int, parse_seconds, split_top_level
from windtunnel.specs.errors import WindtunnelError, choices_text
from windtunnel.specs.hardware import Cluster, chip_names, cluster_names, load_hardware
from windtunnel.specs.model import ModelSpec
from windtunnel.specs.yamlio import catalog_dir, read_mapping_file, read_yaml

ROLES = ("mixed", "prefill", "decode")
ROUTERS = ("round_robin", "least_tokens", "kv_aware", "cache_aware")
PRECISIONS = ("bf16", "fp16", "fp8", "int8", "w4a16", "w8a16")  # int8 = W8A8; wNa16 = N-bit weights, 16-bit math
KV_PRECISIONS = ("bf16", "fp16", "fp8")
_ROUTER_ALIASES = {"rr": "round_robin", "roundrobin": "round_robin", "least_outstanding_tokens": "least_tokens",
                   "lot": "least_tokens", "least_tokens": "least_tokens", "kv": "kv_aware", "kvaware": "kv_aware",
                   "cache": "cache_aware", "prefix_aware": "cache_aware"}
_KEY_ALIASES = {"dp_attention": "dp", "dpa": "dp", "n": "replicas", "instances": "replicas",
                "max_num_seqs": "max_batch", "batch": "max_batch", "chunk": "max_tokens", "chunk_size": "max_tokens",
                "max_num_batched_tokens": "max_tokens", "chunked_prefill": "chunked", "kv_precision": "kv",
                "schedule": "batching",
                "hardware": "chip", "prefix_cache_hit": "prefix_hit", "gpu_memory_utilization": "mem_util",
                "two_batch_overlap": "tbo", "step_overhead": "overhead", "step_overhead_s": "overhead",
                "speculative": "mtp", "draft_tokens": "mtp", "acceptance": "accept"}
INSTANCE_KEYS = ("tp", "dp", "ep", "pp", "replicas", "max_batch", "max_tokens", "batching", "precision", "kv",
                 "prefix_hit", "chip", "mem_util", "tbo", "overhead", "moe_imbalance", "block_size", "admission",
                 "prefix_cache", "host_cache", "mtp", "accept")
BATCHING = ("chunked", "separate", "whole")
ADMISSIONS = ("greedy", "reserve")


@lru_cache(maxsize=1)
def serving_defaults() -> dict:
    """The catalog's serving defaults (catalog/deployments/serving.yaml) merged with fitted values."""
    doc = read_yaml(catalog_dir("deployments", "serving.yaml")) or {}
    defaults = dict(doc.get("defaults") or {})
    defaults["models"] = doc.get("models") or {}
    defaults["systems"] = doc.get("systems") or {}
    defaults["system_defaults"] = doc.get("system_defaults") or {}
    fitted_path = catalog_dir("deployments", "calibration.yaml")
    if fitted_path.exists():
        fitted = (read_yaml(fitted_path) or {}).get("fitted") or {}
        defaults["fitted"] = fitted
    return defaults


def fitted_value(chip_id: str, generation: str, key: str, default: float, fitted: dict | None = None) -> float:
    """A fitted serving parameter for a chip (or its generation), else ``default``. ``fitted`` replaces the
    catalog's fitted values (calibration.yaml) when given."""
    if fitted is None:
        fitted = serving_defaults().get("fitted") or {}
    for scope, name in (("chips", chip_id), ("generations", generation)):
        value = ((fitted.get(scope) or {}).get(name) or {}).get(key)
        if value is not None:
            return float(value)
    return default


def system_value(system: str, key: str, default: float, fitted: dict | None = None) -> float:
    """A parameter fitted for one serving system (e.g. its attention kernel), else ``default``."""
    if fitted is None:
        fitted = serving_defaults().get("fitted") or {}
    value = ((fitted.get("systems") or {}).get(system) or {}).get(key)
    return default if value is None else float(value)


@dataclass(frozen=True)
class InstanceSpec:
    """One pool of identical instances as the user wrote it (None = use the default)."""

    role: str = "mixed"
    tp: int | None = None
    dp: int | None = None
    ep: int | None = None
    pp: int = 1
    replicas: int = 1
    precision: str | None = None
    max_batch: int | None = None
    max_tokens: int | None = None
    batching: str | None = None
    kv: str | None = None
    prefix_hit: float = 0.0
    chip: str | None = None
    mem_util: float | None = None
    tbo: bool = False
    overhead: float | None = None
    moe_imbalance: float | None = None
    block_size: int | None = None
    admission: str = "greedy"
    prefix_cache: bool | None = None  # None: on when the traffic carries block hashes (windtunnel.infer.prefix)
    host_cache: float = 0.0  # GiB of host memory per device for the prefix cache's host tier
    mtp: int = 0  # draft tokens per decode step (multi-token prediction / speculative decoding)
    accept: float | None = None  # acceptance rate of each draft token (None: the catalog's prior)

    def text(self) -> str:
        """Compact string form (only the keys that were set)."""
        parts = []
        for key in INSTANCE_KEYS:
            value = getattr(self, key)
            default = getattr(InstanceSpec, key, None)
            if value is None or value == default:
                continue
            parts.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
        return f"{self.role}:" + ",".join(parts)


@dataclass(frozen=True)
class Deployment:
    """Pools of instances plus the router that spreads requests over each pool."""

    groups: tuple[InstanceSpec, ...]
    router: str = "least_tokens"

    @property
    def disaggregated(self) -> bool:
        return any(g.role != "mixed" for g in self.groups)

    def text(self) -> str:
        body = ";".join(g.text() for g in self.groups)
        return body + (f";router={self.router}" if self.router != serving_defaults().get("router", "least_tokens") else "")


def normalise_router(value: str) -> str:
    """A router name (or alias) -> its canonical name; an unknown one is a clear error."""
    key = str(value).strip().lower().replace("-", "_")
    router = _ROUTER_ALIASES.get(key, key)
    if router not in ROUTERS:
        raise WindtunnelError(f"Unknown router '{value}' (field 'router'); valid routers: {', '.join(ROUTERS)}.",
                              field="router")
    return router


def _instance_from_mapping(role: str, values: dict, where: str) -> InstanceSpec:
    role = str(role).strip().lower()
    if role not in ROLES:
        raise WindtunnelError(f"{where}: unknown role '{role}' (field 'role'); valid roles: {', '.join(ROLES)}.",
                              field="role")
    kwargs: dict = {"role": role}
    for raw_key, raw in values.items():
        key = _KEY_ALIASES.get(str(raw_key).strip().lower(), str(raw_key).strip().lower())
        if key == "role":
            continue
        if key not in INSTANCE_KEYS and key != "chunked":
            raise WindtunnelError(f"{where}: unknown key '{raw_key}' (field '{raw_key}'); valid keys: "
                                  f"{', '.join(INSTANCE_KEYS)}.", field=str(raw_key))
        if key in ("tp", "dp", "ep", "pp", "replicas", "max_batch", "max_tokens", "block_size", "mtp"):
            kwargs[key] = parse_int(raw, key, minimum=0) if key == "mtp" else parse_int(raw, key)
        elif key == "accept":
            kwargs[key] = parse_float(raw, key, low=0.0, high=0.999)
        elif key in ("tbo", "prefix_cache"):
            kwargs[key] = parse_bool(raw, key)
        elif key == "host_cache":
            kwargs[key] = parse_float(raw, key, low=0.0)
        elif key == "chunked":
            kwargs["batching"] = "chunked" if parse_bool(raw, key) else "separate"
        elif key == "batching":
            text = str(raw).strip().lower()
            if text not in BATCHING:
                raise WindtunnelError(f"{where}: field 'batching' is '{raw}'; valid: {', '.join(BATCHING)} (chunked: decodes "
                                      "plus prefill chunks filling the token budget, as vLLM V1 / Sarathi-Serve; separate: "
                                      "prefill-only or decode-only iterations, prefill first, as vLLM V0; whole: decodes "
                                      "plus whole prompts that fit the budget, as TensorRT-LLM in-flight batching).",
                                      field="batching")
            kwargs[key] = text
        elif key in ("precision", "kv"):
            text = str(raw).strip().lower()
            choices = PRECISIONS if key == "precision" else KV_PRECISIONS
            if text not in choices:
                raise WindtunnelError(f"{where}: field '{key}' is '{raw}'; valid: {', '.join(choices)}.", field=key)
            kwargs[key] = text
        elif key == "prefix_hit":
            kwargs[key] = parse_float(raw, key, low=0.0, high=0.99)
        elif key == "mem_util":
            kwargs[key] = parse_float(raw, key, low=0.0, high=1.0, low_open=True)
        elif key == "moe_imbalance":
            kwargs[key] = parse_float(raw, key, low=1.0, high=64.0)
        elif key == "overhead":
            # Host time per iteration: milliseconds in practice; a minute is far beyond any engine.
            kwargs[key] = parse_seconds(raw, key, high=60.0)
        elif key == "admission":
            text = str(raw).strip().lower()
            if text not in ADMISSIONS:
                raise WindtunnelError(f"{where}: field 'admission' is '{raw}'; valid: {', '.join(ADMISSIONS)} (greedy: "
                                      "admit on the prompt's KV and preempt on overflow, as vLLM; reserve: admit only when "
                                      "the whole output fits, as TensorRT-LLM's GUARANTEED_NO_EVICT).", field="admission")
            kwargs[key] = text
        elif key == "chip":
            name = str(raw).strip()
            if name not in chip_names() and name not in cluster_names():
                raise WindtunnelError(f"{where}: unknown chip '{name}' (field 'chip'); known chips: "
                                      f"{choices_text(chip_names())}; clusters: {choices_text(cluster_names())}.",
                                      field="chip")
            kwargs[key] = name
    return InstanceSpec(**kwargs)


def _check_roles(groups: list[InstanceSpec], where: str) -> None:
    if not groups:
        raise WindtunnelError(f"{where}: no instances; give at least one pool, e.g. 'mixed:tp=8,replicas=2' or "
                              "'prefill:ep=32;decode:ep=128'.", field="deployment")
    roles = {g.role for g in groups}
    if "mixed" in roles and len(roles) > 1:
        raise WindtunnelError(f"{where}: mixes 'mixed' pools with prefill/decode pools (field 'role'); a deployment is "
                              "either co-located (mixed only) or disaggregated (prefill and decode).", field="role")
    if roles & {"prefill", "decode"} and roles != {"prefill", "decode"}:
        missing = ({"prefill", "decode"} - roles).pop()
        raise WindtunnelError(f"{where}: a disaggregated deployment needs both prefill and decode pools; "
                              f"'{missing}' is missing (field 'role').", field="role")


def parse_deployment(spec: str | Path | dict | Deployment) -> Deployment:
    """A deployment from its string form, a YAML file, a mapping, or a Deployment (returned as is)."""
    if isinstance(spec, Deployment):
        return spec
    if isinstance(spec, dict):
        return _from_mapping(spec, "Deployment")
    text = str(spec).strip()
    found = read_mapping_file(text, what="Deployment", field="deployment", expected="with 'instances' (and 'router')")
    if found is not None:
        doc, path = found
        return _from_mapping(doc, f"Deployment file '{path}'")
    groups: list[InstanceSpec] = []
    router = str(serving_defaults().get("router", "least_tokens"))
    for segment in split_top_level(text, ";"):
        if segment.lower().startswith("router"):
            value = segment.split("=", 1)[1] if "=" in segment else segment.split(":", 1)[-1]
            router = normalise_router(value)
            continue
        if ":" in segment:
            role, body = segment.split(":", 1)
        elif segment.strip().lower() in ROLES:
            role, body = segment, ""
        else:
            raise WindtunnelError(
                f"Deployment segment '{segment}' (field 'deployment') is not ROLE:key=value,...; valid roles: "
                f"{', '.join(ROLES)}; e.g. 'mixed:tp=8,replicas=2' or 'prefill:ep=32,replicas=2;decode:ep=128'.",
                field="deployment")
        values = {}
        for item in split_top_level(body, ","):
            if "=" not in item:
                raise WindtunnelError(f"Deployment item '{item}' in '{segment}' is not key=value (field 'deployment'); "
                                      f"valid keys: {', '.join(INSTANCE_KEYS)}.", field="deployment")
            key, value = item.split("=", 1)
            values[key.strip()] = value.strip()
        groups.append(_instance_from_mapping(role, values, f"Deployment '{text}'"))
    _check_roles(groups, f"Deployment '{text}'")
    return Deployment(groups=tuple(groups), router=router)


def _from_mapping(doc: dict, where: str) -> Deployment:
    unknown = set(doc) - {"router", "instances"}
    if unknown:
        raise WindtunnelError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))}; valid: instances, router.",
                              field=sorted(map(str, unknown))[0])
    items = doc.get("instances")
    if not isinstance(items, list):
        raise WindtunnelError(f"{where}: field 'instances' must be a list of pools, each with a 'role'.",
                              field="instances")
    groups = []
    for item in items:
        if not isinstance(item, dict) or "role" not in item:
            raise WindtunnelError(f"{where}: every entry of 'instances' needs a 'role' ({', '.join(ROLES)}), got {item!r}.",
                                  field="role")
        groups.append(_instance_from_mapping(item["role"], item, where))
    _check_roles(groups, where)
    router = normalise_router(doc.get("router", serving_defaults().get("router", "least_tokens")))
    return Deployment(groups=tuple(groups), router=router)


# ---- resolution against a model and hardware: parallel layout, limits, memory ------------------------------


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class InstancePlan:
    """A pool resolved against a model and hardware: every default filled and every limit checked.

    Memory figures are per device (bytes); ``kv_capacity_tokens`` is the whole instance's KV capacity
    in tokens (all data-parallel attention groups together).
    """

    spec: InstanceSpec
    role: str
    tp: int
    dp: int
    ep: int
    pp: int
    replicas: int
    cluster: Cluster
    precision: str
    kv_precision: str
    max_batch: int
    max_tokens: int
    batching: str
    prefix_hit: float
    mem_util: float
    tbo: bool
    step_overhead_s: float | None
    moe_imbalance: float
    block_size: int
    admission: str
    weight_bytes: float
    activation_bytes: float
    kv_bytes_per_token: float
    kv_bytes_per_token_model: float
    kv_capacity_tokens: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def devices(self) -> int:
        """Devices of one instance."""
        return self.tp * self.dp * self.pp

    @property
    def total_devices(self) -> int:
        return self.devices * self.replicas

    @property
    def chip(self):
        return self.cluster.chip

    def label(self) -> str:
        parts = [f"tp={self.tp}"]
        if self.dp > 1:
            parts.append(f"dp={self.dp}")
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        if self.pp > 1:
            parts.append(f"pp={self.pp}")
        return f"{self.role}:" + ",".join(parts) + f",replicas={self.replicas}"


def resolve_instance(model: ModelSpec, hardware: str, spec: InstanceSpec, *, enforce_fit: bool = True) -> InstancePlan:
    """Fill defaults, check the plan against the model, and size the KV cache from the memory model.

    Raises WindtunnelError for a plan that does not divide the model (TP vs heads, EP vs experts) or whose
    weights do not fit (when ``enforce_fit``).
    """
    defaults = serving_defaults()
    notes: list[str] = []
    is_moe = model.moe is not None
    tp, dp, ep = spec.tp, spec.dp, spec.ep
    if ep is not None and ep > 1 and not is_moe:
        raise WindtunnelError(f"Field 'ep' is {ep} but model '{model.id}' is dense (no experts); expert parallelism "
                              "applies to MoE models only (valid: ep=1 or omit it).", field="ep")
    if tp is None and dp is None and ep is not None:
        tp, dp = 1, ep
        notes.append(f"{spec.role}: ep={ep} without tp/dp: data-parallel attention over the EP group (tp=1, dp={ep})")
    tp = tp or 1
    if dp is None:
        dp = ep // tp if ep is not None and ep > tp and ep % tp == 0 else 1
    stage = tp * dp
    if ep is None:
        ep = 1
    if model.heads % tp:
        raise WindtunnelError(
            f"Field 'tp' is {tp} but model '{model.id}' has {model.heads} attention heads, which TP must divide; "
            f"valid tp: {', '.join(map(str, _divisors(model.heads)))}.", field="tp")
    if is_moe:
        if stage % ep:
            raise WindtunnelError(
                f"Field 'ep' is {ep} but an instance stage has tp x dp = {stage} devices, which EP must divide; "
                f"valid ep: {', '.join(map(str, _divisors(stage)))}.", field="ep")
        if ep > model.moe.experts:
            raise WindtunnelError(
                f"Field 'ep' is {ep} but model '{model.id}' has only {model.moe.experts} experts; valid ep: 1.."
                f"{model.moe.experts} dividing tp x dp = {stage}.", field="ep")
        if model.moe.experts % ep:
            notes.append(f"{spec.role}: ep={ep} does not divide {model.moe.experts} experts: each rank holds "
                         f"{-(-model.moe.experts // ep)} (redundant copies fill the remainder, as EPLB places them)")
    if spec.pp > model.layers:
        raise WindtunnelError(f"Field 'pp' is {spec.pp} but model '{model.id}' has only {model.layers} layers; "
                              f"valid pp: 1..{model.layers}.", field="pp")
    devices = stage * spec.pp
    cluster = load_hardware(spec.chip or hardware, devices)
    chip = cluster.chip
    precision = spec.precision
    if precision is None:
        precision = str(((defaults.get("models") or {}).get(model.id) or {}).get("precision", "bf16"))
        if precision not in chip.peak_flops:
            notes.append(f"{spec.role}: {model.id} is published in {precision}, which {chip.id} lacks: served in bf16")
            precision = "bf16"
        elif precision != "bf16":
            notes.append(f"{spec.role}: weights and GEMMs in {precision} (the precision {model.id} is published in)")
    if precision not in chip.peak_flops and precision not in WEIGHT_ONLY:
        raise WindtunnelError(f"Field 'precision' is '{precision}' but chip '{chip.id}' has no {precision} peak; "
                              f"valid: {choices_text([*chip.peak_flops, *WEIGHT_ONLY])}.", field="precision")
    kv_precision = spec.kv or ("bf16" if precision in ("fp8", "int8") or precision in WEIGHT_ONLY else precision)
    if kv_precision == "fp8" and "fp8" not in chip.peak_flops:
        raise WindtunnelError(f"Field 'kv' is 'fp8' but chip '{chip.id}' has no fp8 support; valid: "
                              f"{choices_text(p for p in chip.peak_flops if p != 'fp8')}.", field="kv")
    large = chip.hbm_bytes >= float(defaults["large_memory_bytes"]) and chip.generation != "ampere"
    # Limits are per attention group (each data-parallel attention rank schedules its own batch, as in
    # SGLang's DP attention); the instance's limits are dp times larger.
    max_batch = (spec.max_batch or int(defaults["max_batch_large" if large else "max_batch_small"])) * dp
    max_tokens = (spec.max_tokens or int(defaults["max_tokens_large" if large else "max_tokens_small"])) * dp
    batching = spec.batching or ("chunked" if defaults.get("chunked_prefill", True) else "separate")
    mem_util = spec.mem_util or float(defaults["mem_util"])
    block = spec.block_size or int(defaults["block_size"])
    overhead = spec.overhead  # None: the fitted (or prior) value, resolved by the iteration model
    imbalance = spec.moe_imbalance or float(defaults.get("moe_imbalance", 1.0))
    weights = weight_bytes_per_device(model, tp, dp, ep, spec.pp, precision)
    activations = activation_bytes(model, tp, max_tokens // dp, max_batch // dp, etp=max(1, tp * dp // ep))
    kv_b = bytes_of(kv_precision)
    layers_stage = math.ceil(model.layers / spec.pp)
    per_token = kv_bytes_per_token_layer(model, tp, kv_b) * layers_stage
    free = chip.hbm_bytes * mem_util - weights - activations
    capacity = int(max(0.0, free) // per_token) * dp
    if enforce_fit and capacity < block * 2:
        raise WindtunnelError(
            f"Instance '{spec.text()}' does not fit on {chip.id}: weights {weights / 2**30:.1f} GiB + activations "
            f"{activations / 2**30:.1f} GiB per device leave {max(free, 0) / 2**30:.2f} GiB of "
            f"{chip.hbm_bytes * mem_util / 2**30:.1f} GiB usable for the KV cache (field 'tp'/'ep'/'pp': use more "
            "devices per instance, fp8 weights, or a smaller max_tokens).", field="tp")
    full_token = (kv_bytes_per_token_layer(model, 1, kv_b) if model.mla is None
                  else (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv_b) * model.layers
    return InstancePlan(spec=spec, role=spec.role, tp=tp, dp=dp, ep=ep, pp=spec.pp, replicas=spec.replicas,
                        cluster=cluster, precision=precision, kv_precision=kv_precision, max_batch=max_batch,
                        max_tokens=max_tokens, batching=batching, prefix_hit=spec.prefix_hit, mem_util=mem_util,
                        tbo=spec.tbo, step_overhead_s=overhead, moe_imbalance=imbalance, block_size=block,
                        admission=spec.admission,
                        weight_bytes=weights, activation_bytes=activations, kv_bytes_per_token=per_token,
                        kv_bytes_per_token_model=full_token, kv_capacity_tokens=capacity, notes=tuple(notes))


def resolve_deployment(model: ModelSpec, hardware: str, deployment: Deployment, *,
                       enforce_fit: bool = True) -> list[InstancePlan]:
    """Every pool of ``deployment`` resolved (same order)."""
    return [resolve_instance(model, hardware, g, enforce_fit=enforce_fit) for g in deployment.groups]


def with_overrides(spec: InstanceSpec, **changes) -> InstanceSpec:
    """A copy of ``spec`` with some fields changed (used by the search)."""
    return replace(spec, **changes)
