"""The analytic screen of the plan search: step time and peak memory of every candidate of a pruned chunk,
vectorised with numpy (train.space enumerates and prunes the candidates, train.search runs the search).

Layer costs come from the shard table (each distinct layer shard played once on the event engine);
pipeline, data-parallel and optimizer time and the memory peak are closed forms that mirror the step
simulation. Units: seconds, bytes.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from windtunnel.specs.plan import Plan
from windtunnel.train.memory import FRAGMENTATION, FRAMEWORK_RESERVE_BYTES, WEIGHT_BYTES, StateBytes
from windtunnel.train.placement import place_plan
from windtunnel.train.space import MODES, SearchSpace, ShardCost, ShardKey


@lru_cache(maxsize=4096)
def _stage_layout(layers: int, dense_layers: int, pp: int, vpp: int, dualpipe: bool, mtp: int = 0) -> np.ndarray:
    """Per pipeline rank: [dense layers, moe layers, has embedding, has head, max chunk layers, MTP modules]
    summed over the rank's chunks, with the step simulation's split (extras to the middle chunks). An MTP
    module on the last chunk counts as one more layer of the last layer's kind plus, in the last column,
    one more output layer and loss (whose weights are the main head's)."""
    from windtunnel.specs.layout import even_split

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



def unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, axis=0, return_inverse=True)`` (rows in lexicographic order, flat inverse), for
    non-negative integer rows through one packed int64 key per row: the same result, much faster."""
    rows = np.asarray(rows)
    spans = rows.max(axis=0).astype(np.int64) + 1 if rows.size else None
    if (spans is None or rows.ndim != 2 or rows.dtype.kind not in "biu" or rows.min() < 0
            or float(np.prod(spans.astype(float))) >= 2.0 ** 62):
        unique, inverse = np.unique(rows, axis=0, return_inverse=True)
        return unique, inverse.reshape(-1)
    key = np.zeros(len(rows), dtype=np.int64)
    for column, span in zip(rows.T, spans, strict=True):
        key = key * span + column.astype(np.int64)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return rows[first], inverse.reshape(-1)

class Screen:
    """The analytic estimate of step time and peak memory, vectorised over chunks of candidates.

    Layer costs come from the shard table (played once per shard); communication over the
    data-parallel groups and pipeline links uses each algorithm's affine form (time = a + b * bytes),
    computed once per group placement. Everything per candidate is numpy array arithmetic.
    """

    def __init__(self, space: SearchSpace) -> None:
        from windtunnel.cost.efficiency import stack_efficiency

        self.space = space
        from windtunnel.specs.stack import load_stack

        self.eff = stack_efficiency(space.cluster.chip, load_stack(space.framework), space.fitted_override,
                                    space.fp8_recipe)
        self.ids: dict[ShardKey, int] = {}
        self.table: dict[str, list[float]] = {}
        self._groups: dict[tuple, tuple] = {}

    # -- shard table -----------------------------------------------------------------------------
    def shard_keys(self, c: dict[str, np.ndarray]) -> tuple[list[ShardKey], np.ndarray]:
        """Distinct shard keys of a chunk and, per candidate, the index into that list."""
        rows = np.stack([c["tp"], c["cp"], c["ep"], c["mbs"], c["sp"], c["tp_overlap"]], axis=1)
        unique, inverse = unique_rows(rows)
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
        groups, group_of = unique_rows(layout_keys)
        for g, (g_pp, g_vpp, g_dual) in enumerate(groups):
            idx = np.nonzero(group_of.reshape(-1) == g)[0]
            layout = _stage_layout(model.layers, model.dense_layers, int(g_pp), int(g_vpp), bool(g_dual),
                                   model.mtp_layers)
            name = "dualpipe" if g_dual else ("interleaved" if g_vpp > 1 else "1f1b")
            # One row per pipeline stage (DualPipe's rank r runs stages r and pp-1-r).
            stages = _stage_layout(model.layers, model.dense_layers, int(g_pp), 1, False, model.mtp_layers) if g_dual else None
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
                held = act * _in_flight(name, int(g_pp), int(g_vpp), rank, micro[idx])
                if g_dual:
                    # DualPipe: each of the rank's two stages holds its own micro-batch count
                    # (train.memory.dualpipe_in_flight), pp+1 in all.
                    held = np.zeros(len(idx))
                    for chunk, stage in ((0, rank), (1, int(g_pp) - 1 - rank)):
                        s_dense, s_moe, s_emb, s_head, s_len, s_mtp = stages[stage]
                        s_full = np.where((mode[idx] == "full") & (kk >= 0), np.minimum(kk, s_len), -1)
                        stage_act = (part("dense", s_dense, a_mode, "a", full=s_full)
                                     + part(moe_kind, s_moe, a_mode, "a", full=s_full)
                                     + s_emb * sub["a.embedding.none"] + (s_head + s_mtp) * sub["a.head.none"])
                        carried = (micro[idx] + 1) // 2 if chunk == 0 else micro[idx] // 2
                        held = held + stage_act * np.minimum(carried, int(g_pp) - rank if chunk == 0 else rank + 1)
                dense_p = (n_dense * sub["pd.dense"] + n_moe * sub[f"pd.{moe_kind}"] + emb * sub["pd.embedding"]
                           + params_head * sub["pd.head"])
                expert_p = n_moe * sub[f"pe.{moe_kind}"]
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
                mem = weights + grads + opt + held * FRAGMENTATION + buffers
                memory[idx] = np.maximum(memory[idx], mem)
                f_stage[idx] = np.maximum(f_stage[idx], fwd)
                b_stage[idx] = np.maximum(b_stage[idx], bwd)
                heavier = (dense_p + expert_p) > (heavy_dense[idx] + heavy_expert[idx])
                heavy_dense[idx] = np.where(heavier, dense_p, heavy_dense[idx])
                heavy_expert[idx] = np.where(heavier, expert_p, heavy_expert[idx])
                heavy_layers[idx] = np.where(heavier, max(1.0, n_dense + n_moe), heavy_layers[idx])

        # Communication: every candidate's groups, grouped by placement.
        order_codes = c["order"].astype(np.int64)
        configs, inverse = unique_rows(np.stack([tp, cp, dp, pp, ep, order_codes], axis=1))
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
