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
from functools import lru_cache

import numpy as np

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import Cluster
from windtunnel.specs.model import ModelSpec
from windtunnel.specs.plan import Plan
from windtunnel.train.memory import FRAGMENTATION, FRAMEWORK_RESERVE_BYTES, WEIGHT_BYTES, StateBytes
from windtunnel.train.placement import place_plan
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
    # A calibration profile's fitted dict (windtunnel.profile.fitted_override); None: the shipped calibration.
    fitted_override: dict | None = None

    def __post_init__(self) -> None:
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
                    dispatcher=self.dispatcher)


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
    schedule = np.asarray(space.values["schedule"], dtype=object)[c["schedule"]]
    levels = np.asarray(space.values["recompute"], dtype=object)[c["recompute"]]
    order = np.asarray(space.values["order"], dtype=object)[c["order"]]
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
        ("schedule does not match vpp", ((schedule == "interleaved") & (c["vpp"] == 1))
         | ((schedule != "interleaved") & (c["vpp"] > 1))),
        ("interleaving needs pp > 1 and micro-batches divisible by pp",
         (schedule == "interleaved") & ((c["pp"] == 1) | (micro % np.maximum(c["pp"], 1) != 0))),
        ("dualpipe needs an even pp and at least pp micro-batches",
         (schedule == "dualpipe") & ((c["pp"] % 2 != 0) | (micro < c["pp"]))),
        ("equivalent to another candidate",
         ((c["sp"] == 1) & (c["tp"] == 1)) | ((c["tp_overlap"] == 1) & (c["sp"] == 0))
         | ((order != "tp-cp-dp-pp") & ((c["pp"] == 1) | (dp == 1) | (c["tp"] * c["cp"] >= node)))
         | ((c["pp"] == 1) & (schedule != "1f1b"))
         | (np.char.startswith(levels.astype(str), "full:")
            & (np.vectorize(lambda s: int(s.split(":")[1]) if ":" in s else 0, otypes=[np.int64])(levels)
               >= np.ceil(model.layers / np.maximum(c["pp"] * c["vpp"], 1))))),
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
                precision=space.precision, zero=1, cuda_graphs=space.cuda_graphs, dispatcher=space.dispatcher)
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


# ---- vectorised screen ---------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _stage_layout(layers: int, dense_layers: int, pp: int, vpp: int, dualpipe: bool, mtp: int = 0) -> np.ndarray:
    """Per pipeline rank: [dense layers, moe layers, has embedding, has head, max chunk layers, MTP modules]
    summed over the rank's chunks, with the step simulation's split (extras to the middle chunks). An MTP
    module on the last chunk counts as one more layer of the last layer's kind plus, in the last column,
    one more output layer and loss (whose weights are the main head's)."""
    from windtunnel.train.layout import even_split

    kinds = ["dense"] * dense_layers + ["moe"] * (layers - dense_layers)
    chunks = pp if dualpipe else pp * vpp
    split = even_split(kinds, chunks)
    split[-1] = split[-1] + [kinds[-1]] * mtp
    out = np.zeros((pp, 6))
    for v, chunk in enumerate(split):
        ranks = [v, pp - 1 - v] if dualpipe else [v % pp]
        for rank in ranks:
            out[rank, 0] += chunk.count("dense")
            out[rank, 1] += chunk.count("moe")
            out[rank, 2] += 1 if v == 0 else 0
            out[rank, 3] += 1 if v == chunks - 1 else 0
            out[rank, 4] = max(out[rank, 4], len(chunk))
            out[rank, 5] += mtp if v == chunks - 1 else 0
    return out


KINDS = ("dense", "moe", "embedding", "head")


def _in_flight(schedule: str, pp: int, vpp: int, rank: int, micro: np.ndarray) -> np.ndarray:
    """Vectorised :func:`windtunnel.train.schedule.in_flight_micro_batches` over micro-batch counts."""
    if schedule == "dualpipe":
        return np.minimum(micro, pp + 1).astype(float)
    if schedule == "interleaved" and vpp > 1:
        warmup = np.minimum(micro * vpp, (pp - rank - 1) * 2 + (vpp - 1) * pp)
        return np.minimum(micro * vpp, warmup + 1).astype(float)
    return np.minimum(micro, pp - rank).astype(float)


class Screen:
    """The analytic estimate of step time and peak memory, vectorised over chunks of candidates.

    Layer costs come from the shard table (played once per shard); communication over the
    data-parallel groups and pipeline links uses each algorithm's affine form (time = a + b * bytes),
    computed once per group placement. Everything per candidate is numpy array arithmetic.
    """

    def __init__(self, space: SearchSpace) -> None:
        from windtunnel.cost.efficiency import efficiency_for

        self.space = space
        from windtunnel.specs.stack import load_stack

        self.eff = efficiency_for(space.cluster.chip, space.fitted_override,
                                  family=load_stack(space.framework).calibration_family)
        self.ids: dict[ShardKey, int] = {}
        self.table: dict[str, list[float]] = {}
        self._groups: dict[tuple, tuple] = {}

    # -- shard table -----------------------------------------------------------------------------
    def shard_keys(self, c: dict[str, np.ndarray]) -> tuple[list[ShardKey], np.ndarray]:
        """Distinct shard keys of a chunk and, per candidate, the index into that list."""
        rows = np.stack([c["tp"], c["cp"], c["ep"], c["mbs"], c["sp"], c["tp_overlap"]], axis=1)
        unique, inverse = np.unique(rows, axis=0, return_inverse=True)
        keys = [ShardKey(int(a), int(b), int(e), int(m), bool(s), bool(o)) for a, b, e, m, s, o in unique]
        return keys, inverse.reshape(-1)

    def missing(self, keys: list[ShardKey]) -> list[ShardKey]:
        return [k for k in keys if k not in self.ids]

    def add_shards(self, costs: dict[ShardKey, ShardCost]) -> None:
        """Append costed shards to the table (in a deterministic order)."""
        for key in sorted(costs, key=lambda k: (k.tp, k.cp, k.ep, k.mbs, k.sp, k.tp_overlap)):
            if key in self.ids:
                continue
            cost = costs[key]
            self.ids[key] = len(self.ids)
            row: dict[str, float] = {"p2p_bytes": cost.p2p_bytes}
            for kind in KINDS:
                source = kind if kind in cost.forward else "dense"
                row[f"f.{kind}"] = cost.forward[source]
                row[f"pd.{kind}"], row[f"pe.{kind}"] = cost.params[source]
                for mode in MODES:
                    row[f"b.{kind}.{mode}"] = cost.backward[source][mode]
                    row[f"a.{kind}.{mode}"] = cost.activations[source][mode]
            moe = "moe" if "moe" in cost.fused else "dense"
            row["fused_ratio"] = (cost.fused[moe] / max(cost.forward[moe] + cost.backward[moe]["none"], 1e-12)
                                  if cost.fused else 1.0)
            for name, value in row.items():
                self.table.setdefault(name, []).append(value)

    def column(self, name: str, shard_ids: np.ndarray) -> np.ndarray:
        return np.asarray(self.table[name])[shard_ids]

    # -- communication ---------------------------------------------------------------------------
    def _pieces(self, tp: int, cp: int, dp: int, pp: int, ep: int, order: str) -> tuple:
        key = (tp, cp, dp, pp, ep, order)
        if key not in self._groups:
            from windtunnel.cost.collectives import affine_pieces, tier_bandwidth

            cluster = self.space.cluster
            placement = place_plan(Plan(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, order=order), cluster)
            pieces = {}
            for kind in ("all_reduce", "reduce_scatter", "all_gather"):
                pieces[("dp", kind)] = affine_pieces(kind, placement.dp, cluster, self.eff)
                pieces[("edp", kind)] = affine_pieces(kind, placement.expert_dp, cluster, self.eff)
            tier = placement.pp_tier
            p2p_a = cluster.tiers[tier].latency
            base = tier_bandwidth(cluster, tier, self.eff, parties=2)
            # p2p_time(M) = M / (base * M / (M + half)) + latency = (M + half) / base + latency
            pieces["p2p"] = [(p2p_a + self.eff.half_message_bytes / base, 1.0 / base)] if pp > 1 else [(0.0, 0.0)]
            self._groups[key] = pieces
        return self._groups[key]

    def _comm(self, which: tuple, message: np.ndarray, configs: np.ndarray, inverse: np.ndarray, orders) -> np.ndarray:
        """Vectorised time of a collective for every candidate: min over affine pieces of its group."""
        out = np.zeros(len(message))
        for index, (tp, cp, dp, pp, ep, order_code) in enumerate(configs):
            mask = inverse == index
            pieces = self._pieces(int(tp), int(cp), int(dp), int(pp), int(ep), orders[int(order_code)])[which]
            times = np.stack([a + b * message[mask] for a, b in pieces])
            out[mask] = np.where(message[mask] > 0, times.min(axis=0), 0.0)
        return out

    # -- the estimate ----------------------------------------------------------------------------
    def evaluate(self, c: dict[str, np.ndarray], shard_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(estimated step seconds, estimated peak bytes per device) for every candidate of a pruned chunk."""
        space, model = self.space, self.space.model
        states = StateBytes.of(space.grads, space.moments)
        n = len(c["tp"])
        devices = space.cluster.devices
        tp, pp, vpp, cp, ep, mbs, zero = (c[d].astype(np.int64) for d in ("tp", "pp", "vpp", "cp", "ep", "mbs", "zero"))
        dp = devices // (tp * pp * cp)
        micro = space.global_batch // (mbs * dp)
        schedule = np.asarray(space.values["schedule"], dtype=object)[c["schedule"]]
        level = np.asarray(space.values["recompute"], dtype=object)[c["recompute"]]
        mode = np.array([str(v).split(":")[0] for v in level], dtype=object)
        k = np.array([int(str(v).split(":")[1]) if ":" in str(v) else -1 for v in level])
        dualpipe = schedule == "dualpipe"
        chunks_per_rank = np.where(dualpipe, 2, vpp)
        col = {name: self.column(name, shard_ids) for name in self.table}

        def by_mode(prefix: str, kind: str) -> np.ndarray:
            out = np.zeros(n)
            for m in MODES:
                out = np.where(mode == m, col[f"{prefix}.{kind}.{m}"], out)
            return out

        b_mode = {kind: by_mode("b", kind) for kind in KINDS}
        a_mode = {kind: by_mode("a", kind) for kind in KINDS}
        expert_dp = np.maximum(1, tp * cp * dp // ep)
        f_stage = np.zeros(n)
        b_stage = np.zeros(n)
        memory = np.zeros(n)
        heavy_dense = np.zeros(n)
        heavy_expert = np.zeros(n)
        heavy_layers = np.ones(n)
        moe_kind = "moe" if model.moe else "dense"
        layout_keys = np.stack([pp, vpp, dualpipe.astype(np.int64)], axis=1)
        groups, group_of = np.unique(layout_keys, axis=0, return_inverse=True)
        for g, (g_pp, g_vpp, g_dual) in enumerate(groups):
            idx = np.nonzero(group_of.reshape(-1) == g)[0]
            layout = _stage_layout(model.layers, model.dense_layers, int(g_pp), int(g_vpp), bool(g_dual),
                                   model.mtp_layers)
            name = "dualpipe" if g_dual else ("interleaved" if g_vpp > 1 else "1f1b")
            for rank in range(int(g_pp)):
                n_dense, n_moe, emb, params_head, per_chunk, n_mtp = layout[rank]
                head = params_head + n_mtp  # MTP modules run the output layer and loss again
                sub = {key: value[idx] for key, value in col.items()}
                cpr = chunks_per_rank[idx]
                kk = k[idx]
                full = np.where((mode[idx] == "full") & (kk >= 0), np.minimum(kk, per_chunk) * cpr, -1)

                def part(kind: str, count: float, table: dict, prefix: str, full=full, idx=idx, sub=sub) -> np.ndarray:
                    whole = count * table[kind][idx]
                    if count == 0:
                        return whole
                    n_full = np.minimum(np.where(full >= 0, full, 0), count)
                    mixed = n_full * sub[f"{prefix}.{kind}.full"] + (count - n_full) * sub[f"{prefix}.{kind}.none"]
                    return np.where(full >= 0, mixed, whole)

                fwd = (n_dense * sub["f.dense"] + n_moe * sub[f"f.{moe_kind}"] + emb * sub["f.embedding"]
                       + head * sub["f.head"])
                bwd = (part("dense", n_dense, b_mode, "b") + part(moe_kind, n_moe, b_mode, "b")
                       + emb * sub["b.embedding.none"] + head * sub["b.head.none"])
                act = (part("dense", n_dense, a_mode, "a") + part(moe_kind, n_moe, a_mode, "a")
                       + emb * sub["a.embedding.none"] + head * sub["a.head.none"]) / cpr
                dense_p = (n_dense * sub["pd.dense"] + n_moe * sub[f"pd.{moe_kind}"] + emb * sub["pd.embedding"]
                           + params_head * sub["pd.head"])
                expert_p = n_moe * sub[f"pe.{moe_kind}"]
                in_flight = _in_flight(name, int(g_pp), int(g_vpp), rank, micro[idx])
                z = zero[idx]
                shard_dp = (dp * cp)[idx]
                edp = expert_dp[idx]
                weights, grads, opt = states.sharded(dense_p, shard_dp, expert_p, edp, z)
                buffers = FRAMEWORK_RESERVE_BYTES + np.where(z < 3, states.bucket_bytes(), 0.0)
                if model.moe:
                    routed = 2.0 * (col["p2p_bytes"][idx] / 2.0) * model.moe.topk * space.moe_imbalance
                    buffers = buffers + np.where(ep[idx] > 1, routed, 0.0)
                if zero.max() >= 3:
                    layer_p = (sub["pd.moe" if model.moe else "pd.dense"] + sub["pe.moe" if model.moe else "pe.dense"])
                    buffers = buffers + np.where(z >= 3, 2 * layer_p * WEIGHT_BYTES, 0.0)
                mem = weights + grads + opt + act * in_flight * FRAGMENTATION + buffers
                memory[idx] = np.maximum(memory[idx], mem)
                f_stage[idx] = np.maximum(f_stage[idx], fwd)
                b_stage[idx] = np.maximum(b_stage[idx], bwd)
                heavier = (dense_p + expert_p) > (heavy_dense[idx] + heavy_expert[idx])
                heavy_dense[idx] = np.where(heavier, dense_p, heavy_dense[idx])
                heavy_expert[idx] = np.where(heavier, expert_p, heavy_expert[idx])
                heavy_layers[idx] = np.where(heavier, max(1.0, n_dense + n_moe), heavy_layers[idx])

        # Communication: every candidate's groups, grouped by placement.
        order_codes = c["order"].astype(np.int64)
        configs, inverse = np.unique(np.stack([tp, cp, dp, pp, ep, order_codes], axis=1), axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        orders = space.values["order"]

        def comm(which: tuple, message: np.ndarray) -> np.ndarray:
            return self._comm(which, message, configs, inverse, orders)

        p2p = comm(("p2p"), col["p2p_bytes"])
        sync_kind_ar = zero == 0
        g = states.grads
        sync = np.where(sync_kind_ar, comm(("dp", "all_reduce"), heavy_dense * g) + comm(("edp", "all_reduce"), heavy_expert * g),
                        comm(("dp", "reduce_scatter"), heavy_dense * g)
                        + comm(("edp", "reduce_scatter"), heavy_expert * g))
        w = WEIGHT_BYTES
        gather = np.where((zero == 1) | (zero == 2),
                          comm(("dp", "all_gather"), heavy_dense * w) + comm(("edp", "all_gather"), heavy_expert * w),
                          0.0)
        cycle = f_stage + b_stage
        steady = np.where(dualpipe, cycle * np.minimum(col["fused_ratio"], 1.0), cycle)
        pipe = np.where(
            dualpipe, np.maximum(micro - pp // 2, 0) * steady + (pp // 2) * cycle + 2 * (pp - 1) * p2p,
            np.where(schedule == "interleaved", micro * cycle + (pp - 1) * cycle / vpp + 2 * (pp * vpp - 1) * p2p,
                     (micro + pp - 1) * cycle + 2 * (pp - 1) * p2p))
        layer_f = f_stage / heavy_layers
        layer_b = b_stage / heavy_layers
        ag_layer = comm(("dp", "all_gather"), heavy_dense * w / heavy_layers) + comm(
            ("edp", "all_gather"), heavy_expert * w / heavy_layers)
        rs_layer = comm(("dp", "reduce_scatter"), heavy_dense * w / heavy_layers) + comm(
            ("edp", "reduce_scatter"), heavy_expert * w / heavy_layers)
        zero3 = micro * heavy_layers * (np.maximum(0.0, ag_layer - layer_f) + np.maximum(0.0, 2 * ag_layer - layer_b))
        zero2 = micro * heavy_layers * np.maximum(0.0, rs_layer - layer_b)
        exposed = np.where(zero >= 3, zero3,
                           np.where(zero == 2, zero2 + np.maximum(0.0, gather - f_stage),
                                    np.maximum(0.0, sync - b_stage * (1 - 1 / heavy_layers))
                                    + np.maximum(0.0, gather - f_stage)))
        owned = heavy_dense / np.where(zero >= 1, dp * cp, 1) + heavy_expert / np.where(zero >= 1, expert_dp, 1)
        chip = space.cluster.chip
        optimizer = owned * states.optimizer_traffic(self.eff.optimizer_bytes_per_param) / (
            chip.hbm_bandwidth * self.eff.memory_bandwidth)
        return pipe + exposed + optimizer, memory


# ---- refinement --------------------------------------------------------------------------------------


def refine(space: SearchSpace, plan: Plan) -> TrainingResult:
    """The full event simulation of one candidate."""
    job = TrainingJob(model=space.model, cluster=space.cluster, plan=plan, seq_len=space.seq_len,
                      global_batch=space.global_batch, moe_imbalance=space.moe_imbalance,
                      flash_attention=space.flash_attention, fused_loss=space.fused_loss, framework=space.framework,
                      fitted_override=space.fitted_override)
    return simulate(job)


def tokens_per_step(space: SearchSpace) -> int:
    return space.global_batch * space.seq_len


def mfu_of(space: SearchSpace, step: np.ndarray) -> np.ndarray:
    """Model FLOPs utilisation for step times (same convention as the step simulation)."""
    from windtunnel.train.flops import model_flops_per_token

    flops = model_flops_per_token(space.model, space.seq_len, mtp=space.model.mtp_layers) * tokens_per_step(space)
    peak = space.cluster.chip.peak(space.precision)
    return flops / np.maximum(step, 1e-12) / space.cluster.devices / peak


