"""Sim2Train search space: enumerate plans, prune them, screen them analytically (vectorised), refine.

Candidates are rows of integer codes over the search dimensions, generated in chunks (so memory
stays bounded however big the space is). Pruning and the analytic screen are numpy expressions over
whole chunks; the only per-item Python work is costing each distinct layer *shard* (the
combination of TP, CP, EP, micro-batch, SP and TP-overlap that fixes a layer's operator DAG), which
plays the layer DAGs on the event engine once and is shared by every candidate using that shard.
The screen then assembles pipeline, data-parallel and optimizer time and the memory peak with
closed forms that mirror the step simulation; the best candidates are refined by the full event
simulation (:func:`refine`). Units: seconds, bytes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import Cluster
from windtunnel.specs.layout import BALANCED
from windtunnel.specs.model import ModelSpec
from windtunnel.specs.plan import Plan
from windtunnel.specs.stack import load_stack
from windtunnel.train.result import TrainingResult
from windtunnel.train.step import TrainingJob, _StepBuilder, simulate

RECOMPUTE_LEVELS = ("none", "selective", "full", "full:1", "full:2", "full:4")
SCHEDULES = ("1f1b", "interleaved", "dualpipe")
ORDERS = ("tp-cp-dp-pp", "tp-cp-pp-dp")
DIMENSIONS = ("tp", "pp", "vpp", "cp", "ep", "mbs", "recompute", "zero", "sp", "tp_overlap", "schedule", "order")
MODES = ("none", "selective", "full")


def _powers_of_two(limit: int) -> list[int]:
    out, value = [], 1
    while value <= limit:
        out.append(value)
        value *= 2
    return out


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


@dataclass
class SearchSpace:
    """The values each dimension may take. Defaults cover the usual deployment space."""

    model: ModelSpec
    cluster: Cluster
    seq_len: int
    global_batch: int
    precision: str = "bf16"
    moe_imbalance: float = 1.1
    choices: dict[str, list] = field(default_factory=dict)
    flash_attention: bool | None = None
    fused_loss: bool | None = None
    cuda_graphs: str = "none"
    grads: str = "fp32"
    moments: str = "fp32"
    dispatcher: str = "deepep"
    framework: str = "megatron"
    fp8_recipe: str = "tensor"  # every plan's FP8 scaling (Plan.fp8_recipe)
    # Kernel paths every plan runs, in --plan syntax (FIXED_FIELDS only), e.g. 'expert_gemm=fused_mlp,fp8_attention=true'.
    fixed: str = ""
    # A calibration profile's fitted dict (windtunnel.profile.fitted_override); None: the shipped calibration.
    fitted_override: dict | None = None

    def __post_init__(self) -> None:
        if self.fp8_recipe not in ("tensor", "mx") or (self.fp8_recipe == "mx" and self.precision != "fp8"):
            raise WindtunnelError(f"Field 'fp8_recipe' is '{self.fp8_recipe}' with precision '{self.precision}'; "
                                  "valid: tensor, or mx with precision fp8.", field="fp8_recipe")
        self.fixed_fields = fixed_fields(self.fixed, self.precision, self.fp8_recipe)
        model, cluster = self.model, self.cluster
        devices = cluster.devices
        node = cluster.tiers[0].size or devices
        defaults: dict[str, list] = {
            "tp": [t for t in _powers_of_two(min(node, 64)) if model.heads % t == 0],
            "pp": [p for p in _divisors(devices, min(model.layers, 128))],
            "vpp": [1, 2, 4, 8],
            "cp": [c for c in (1, 2, 4, 8) if self.seq_len % (2 * c) == 0 and (c == 1 or self.seq_len >= 8192)],
            "ep": [e for e in _divisors(model.moe.experts, devices) if e & (e - 1) == 0] if model.moe else [1],
            "mbs": [1, 2, 4, 8],
            "recompute": list(RECOMPUTE_LEVELS),
            "zero": [0, 1, 2, 3],
            "sp": [False, True],
            "tp_overlap": [False, True],
            "schedule": ["1f1b", "interleaved"] + (["dualpipe"] if model.moe else []),
            "order": list(ORDERS),
        }
        for key, values in self.choices.items():
            if key not in defaults:
                raise WindtunnelError(f"Unknown search dimension '{key}'; dimensions: {', '.join(DIMENSIONS)}.", field=key)
            if not values:
                raise WindtunnelError(f"Search dimension '{key}' has no values.", field=key)
            defaults[key] = list(values)
        for key in ("recompute",):
            bad = [v for v in defaults[key] if v.split(":")[0] not in ("none", "selective", "full")
                   or (":" in v and not (v.startswith("full:") and v.split(":")[1].isdigit()))]
            if bad:
                raise WindtunnelError(f"Search dimension 'recompute' has unknown value(s) {bad}; valid: none, "
                                      "selective, full, or full:K (full recomputation of the first K layers of each "
                                      "chunk).", field="recompute")
        for key, valid in (("schedule", SCHEDULES),):
            bad = [v for v in defaults[key] if v not in valid]
            if bad:
                raise WindtunnelError(f"Search dimension '{key}' has unknown value(s) {bad}; valid: {', '.join(valid)}.",
                                      field=key)
        for key in ("order",):
            for value in defaults[key]:
                Plan(order=value)  # raises a clear error on a bad permutation
        self.values = defaults

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(self.values[d]) for d in DIMENSIONS)

    @property
    def total(self) -> int:
        return int(np.prod(self.sizes, dtype=np.int64))

    def fingerprint(self) -> str:
        """A hash of everything that defines the search (for --resume)."""
        doc = {"model": self.model.model_dump(), "cluster": self.cluster.model_dump(), "seq": self.seq_len,
               "batch": self.global_batch, "precision": self.precision, "imbalance": self.moe_imbalance,
               "flash": self.flash_attention, "fused_loss": self.fused_loss, "cuda_graphs": self.cuda_graphs,
               "framework": self.framework,
               "grads": self.grads, "moments": self.moments, "dispatcher": self.dispatcher,
               **({"fp8_recipe": self.fp8_recipe} if self.fp8_recipe != "tensor" else {}),
               **({"fixed": self.fixed_fields} if self.fixed_fields else {}),
               "values": {k: [str(v) for v in vs] for k, vs in self.values.items()}}
        if self.fitted_override is not None:  # a profile's fit changes every result
            doc["fitted"] = self.fitted_override
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]

    # ---- candidates ----------------------------------------------------------------------------
    def chunk(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Candidates ``start..stop`` of the space as arrays of values (strings as codes)."""
        index = np.unravel_index(np.arange(start, stop, dtype=np.int64), self.sizes)
        out = {}
        for dim, idx in zip(DIMENSIONS, index, strict=True):
            values = self.values[dim]
            if dim in ("recompute", "schedule", "order"):
                out[dim] = idx.astype(np.int16)  # code into self.values[dim]
            else:
                out[dim] = np.asarray(values, dtype=np.int64)[idx]
        return out

    def plan_of(self, row: dict) -> Plan:
        """The Plan of one candidate row (a dict of scalars as produced by :meth:`chunk`)."""
        level = self.values["recompute"][int(row["recompute"])]
        mode, _, layers = level.partition(":")
        dp = self.cluster.devices // (int(row["tp"]) * int(row["pp"]) * int(row["cp"]))
        return Plan(tp=int(row["tp"]), pp=int(row["pp"]), dp=dp, vpp=int(row["vpp"]), cp=int(row["cp"]), ep=int(row["ep"]),
                    mbs=int(row["mbs"]), recompute=mode, recompute_layers=int(layers) if layers else -1,
                    zero=int(row["zero"]), sp=bool(row["sp"]), tp_overlap=bool(row["tp_overlap"]),
                    schedule=self.values["schedule"][int(row["schedule"])],
                    order=self.values["order"][int(row["order"])], precision=self.precision,
                    cuda_graphs=self.cuda_graphs, grads=self.grads, moments=self.moments,
                    dispatcher=self.dispatcher, fp8_recipe=self.fp8_recipe, **self.fixed_fields)


# Plan fields a search may hold fixed in every candidate (SearchSpace.fixed): kernel paths that change what a
# layer costs but not which layouts are valid, so the space's pruning rules still hold.
FIXED_FIELDS = ("expert_gemm", "fp8_attention", "fp8_dispatch", "act_fp8_store", "grad_accum_fusion", "embedding_lookup",
                "device_connections")


def fixed_fields(text: str, precision: str, fp8_recipe: str) -> dict:
    """The plan fields of ``text`` (--plan syntax) as a dict, checked: only FIXED_FIELDS, and valid with the
    searched precision and FP8 recipe (e.g. expert_gemm=fused_mlp needs MXFP8)."""
    if not text.strip():
        return {}
    from windtunnel.specs.plan import parse_plan
    from windtunnel.specs.plan_checks import check_precision

    plan = parse_plan(text)
    other = sorted(set(plan.model_fields_set) - set(FIXED_FIELDS))
    if other:
        raise WindtunnelError(f"Field 'fixed' ('{text}') sets {', '.join(other)}, which the search varies or takes from "
                              f"its own options; 'fixed' takes only {', '.join(FIXED_FIELDS)}.", field="fixed")
    fields = {name: getattr(plan, name) for name in FIXED_FIELDS if name in plan.model_fields_set}
    check_precision(plan.model_copy(update={"precision": precision, "fp8_recipe": fp8_recipe}))
    return fields


def fixed_text(plan: Plan) -> str:
    """The FIXED_FIELDS a plan sets or runs at a non-default value, in --plan syntax (the inverse of fixed_fields)."""
    return ",".join(f"{name}={str(getattr(plan, name)).lower()}" for name in FIXED_FIELDS
                    if name in plan.model_fields_set or getattr(plan, name) != Plan.model_fields[name].default)


# ---- pruning ---------------------------------------------------------------------------------------


def prune(space: SearchSpace, c: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, int]]:
    """Structural validity of a chunk: (keep mask, count of dropped candidates per reason).

    A candidate is dropped for the first rule it breaks; duplicates that only differ in a
    dimension that has no effect (SP with TP=1, overlap without SP, order with PP or DP = 1) are
    dropped as "equivalent to another candidate" so each distinct plan is screened once.
    """
    model, devices = space.model, space.cluster.devices
    node = space.cluster.tiers[0].size or devices  # rank orders differ only below the first tier's size
    n = len(c["tp"])
    keep = np.ones(n, dtype=bool)
    reasons: dict[str, int] = {}
    model_parallel = c["tp"] * c["pp"] * c["cp"]
    dp = np.where(devices % model_parallel == 0, devices // np.maximum(model_parallel, 1), 0)
    # Per-value facts looked up by index (fast on millions of candidates; the same tests per candidate).
    schedules = space.values["schedule"]
    interleaved = np.asarray([v == "interleaved" for v in schedules], dtype=bool)[c["schedule"]]
    dualpipe = np.asarray([v == "dualpipe" for v in schedules], dtype=bool)[c["schedule"]]
    one_f_one_b = np.asarray([v == "1f1b" for v in schedules], dtype=bool)[c["schedule"]]
    default_order = np.asarray([v == "tp-cp-dp-pp" for v in space.values["order"]], dtype=bool)[c["order"]]
    level_names = [str(v) for v in space.values["recompute"]]
    first_full = np.asarray([v.startswith("full:") for v in level_names], dtype=bool)[c["recompute"]]
    full_layers = np.asarray([int(v.split(":")[1]) if ":" in v else 0 for v in level_names], dtype=np.int64)[c["recompute"]]
    micro = np.where(dp > 0, space.global_batch // np.maximum(c["mbs"] * dp, 1), 0)
    rules = [
        ("devices not divisible by tp*pp*cp", devices % model_parallel != 0),
        ("tp does not divide attention heads", model.heads % c["tp"] != 0),
        ("tp does not divide the FFN width", (model.dense_layers > 0) & (model.ffn_hidden % c["tp"] != 0)),
        ("pp*vpp exceeds the layers", c["pp"] * c["vpp"] > model.layers),
        ("ep does not divide the experts", (c["ep"] > 1) & ((model.moe.experts if model.moe else 1) % c["ep"] != 0)),
        ("ep does not divide tp*cp*dp", (c["tp"] * dp * c["cp"]) % c["ep"] != 0),
        ("ep spans tensor-parallel ranks without sequence parallelism",
         (c["ep"] > dp * c["cp"]) & (c["tp"] > 1) & (c["sp"] == 0)),
        ("sequence not divisible for cp", (c["cp"] > 1) & (space.seq_len % (2 * c["cp"]) != 0)),
        ("global batch not divisible by mbs*dp", space.global_batch % np.maximum(c["mbs"] * dp, 1) != 0),
        ("schedule does not match vpp", (interleaved & (c["vpp"] == 1)) | (~interleaved & (c["vpp"] > 1))),
        ("interleaving needs pp > 1 and micro-batches divisible by pp",
         interleaved & ((c["pp"] == 1) | (micro % np.maximum(c["pp"], 1) != 0))),
        ("dualpipe needs an even pp and at least pp micro-batches",
         dualpipe & ((c["pp"] % 2 != 0) | (micro < c["pp"]))),
        ("equivalent to another candidate",
         ((c["sp"] == 1) & (c["tp"] == 1)) | ((c["tp_overlap"] == 1) & (c["sp"] == 0))
         | (~default_order & ((c["pp"] == 1) | (dp == 1) | (c["tp"] * c["cp"] >= node)))
         | ((c["pp"] == 1) & ~one_f_one_b)
         | (first_full & (full_layers >= np.ceil(model.layers / np.maximum(c["pp"] * c["vpp"], 1))))),
    ]
    for reason, broken in rules:
        dropped = keep & broken
        count = int(dropped.sum())
        if count:
            reasons[reason] = reasons.get(reason, 0) + count
        keep &= ~broken
    return keep, reasons


# ---- per-shard layer costs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardKey:
    tp: int
    cp: int
    ep: int
    mbs: int
    sp: bool
    tp_overlap: bool


@dataclass
class ShardCost:
    """Per-micro-batch costs of each layer kind for one shard (seconds, bytes, parameters)."""

    forward: dict[str, float]
    backward: dict[str, dict[str, float]]     # kind -> recompute mode -> seconds
    fused: dict[str, float]                   # kind -> DualPipe forward+backward seconds (no recompute)
    activations: dict[str, dict[str, float]]  # kind -> mode -> bytes per micro-batch
    params: dict[str, tuple[float, float]]    # kind -> (dense, expert) parameters on one device
    p2p_bytes: float


def shard_job(space: SearchSpace, key: ShardKey) -> TrainingJob:
    """A small valid job whose layers are sharded like ``key`` (TP, CP, EP groups placed as in the space)."""
    dp = max(1, key.ep // key.cp) if key.ep % key.cp == 0 else key.ep
    devices = key.tp * key.cp * dp
    cluster = space.cluster.model_copy(update={"devices": devices})
    plan = Plan(tp=key.tp, cp=key.cp, ep=key.ep, mbs=key.mbs, sp=key.sp, tp_overlap=key.tp_overlap,
                precision=space.precision, zero=1, cuda_graphs=space.cuda_graphs, dispatcher=space.dispatcher,
                fp8_recipe=space.fp8_recipe, **space.fixed_fields)
    return TrainingJob(model=space.model, cluster=cluster, plan=plan, seq_len=space.seq_len,
                       global_batch=key.mbs * dp, moe_imbalance=space.moe_imbalance,
                       flash_attention=space.flash_attention, fused_loss=space.fused_loss, framework=space.framework,
                       fitted_override=space.fitted_override)


def cost_shard(space: SearchSpace, key: ShardKey) -> ShardCost:
    """Play one shard's layer DAGs on the event engine (the expensive, shared part of the screen)."""
    from windtunnel.train.memory import layer_saved_bytes

    builder = _StepBuilder(shard_job(space, key))
    kinds = [k for k in ("dense", "moe", "embedding", "head") if k in builder.forward_graphs]
    forward, backward, fused, activations, params = {}, {}, {}, {}, {}
    for kind in kinds:
        forward[kind] = builder.played(kind, "fwd").time
        backward[kind] = {mode: builder.played(kind, f"bwd-{mode}").time for mode in MODES}
        activations[kind] = {mode: layer_saved_bytes(builder, kind, mode) for mode in MODES}
        params[kind] = builder.layer_params(kind)
        if kind in ("dense", "moe") and space.model.moe:
            fused[kind] = builder.fused([kind], [kind], ["none"]).time
    p2p_bytes = 2.0 * key.mbs * space.seq_len // key.cp * space.model.hidden
    if key.sp and key.tp > 1:
        p2p_bytes /= key.tp
    return ShardCost(forward, backward, fused, activations, params, p2p_bytes)


def refine(space: SearchSpace, plan: Plan) -> TrainingResult:
    """The full event simulation of one candidate, and of the variants the screen does not price, keeping the
    fastest feasible: a pipelined plan without a layout is also played with ``layout=balanced`` (the split that
    evens the busiest rank's time, specs.layout.balanced_split: an uneven model, with the embedding and loss on
    the end stages, dense and MoE layers or MTP modules, often waits on one heavy stage), and a fully sharded plan
    (ZeRO-3) without ``dp_shard`` also with its states sharded inside each inner network domain and replicated
    across them (hybrid sharding, :func:`shard_groups`), which keeps the per-layer gathers on the fast links."""
    def run(candidate: Plan) -> TrainingResult:
        return simulate(TrainingJob(model=space.model, cluster=space.cluster, plan=candidate, seq_len=space.seq_len,
                                    global_batch=space.global_batch, moe_imbalance=space.moe_imbalance,
                                    flash_attention=space.flash_attention, fused_loss=space.fused_loss,
                                    framework=space.framework, fitted_override=space.fitted_override))

    layouts = [{}] + ([{"layout": BALANCED}] if plan.pp > 1 and not plan.layout else [])
    shards = [{}] + [{"dp_shard": d} for d in shard_groups(space.cluster, plan, load_stack(space.framework))]
    best = None
    for update in ({**a, **b} for a in layouts for b in shards):
        try:
            result = run(plan.model_copy(update=update) if update else plan)
        except WindtunnelError:  # e.g. no balanced split exists (too few modules for the stages)
            if not update:
                raise
            continue
        if best is None or (result.feasible and (not best.feasible or result.step_time_s < best.step_time_s)):
            best = result
    return best


def shard_groups(cluster: Cluster, plan: Plan, stack=None) -> list[int]:
    """Hybrid-sharding group sizes (dp ranks) worth trying for a ZeRO-3 plan without ``dp_shard``, on a stack that
    can shard hybridly (``sharding.hybrid``): for each inner network tier, the data-parallel ranks of one of the
    job's domains there (its devices over tp x cp), when they divide dp and leave more than one group."""
    if plan.zero < 3 or plan.dp_shard or plan.dp <= 1 or (stack is not None and not stack.sharding.hybrid):
        return []
    inner = plan.tp * plan.cp
    sizes = []
    for devices in cluster.job_domain_sizes()[:-1]:
        d = devices // inner
        if devices % inner == 0 and 1 < d < plan.dp and plan.dp % d == 0 and d not in sizes:
            sizes.append(d)
    return sizes


def tokens_per_step(space: SearchSpace) -> int:
    return space.global_batch * space.seq_len


def mfu_of(space: SearchSpace, step: np.ndarray) -> np.ndarray:
    """Model FLOPs utilisation for step times (same convention as the step simulation)."""
    from windtunnel.train.flops import model_flops_per_token

    flops = model_flops_per_token(space.model, space.seq_len, mtp=space.model.mtp_layers) * tokens_per_step(space)
    peak = space.cluster.chip.peak(space.precision)
    return flops / np.maximum(step, 1e-12) / space.cluster.devices / peak


