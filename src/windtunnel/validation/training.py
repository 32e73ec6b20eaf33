"""Score training predictions on published measurements (the `validate training` and `calibrate training` verbs).

Each CSV row (schema of shared/reference/training_runs.csv) becomes a job: blank fields are filled
with stated defaults, and every filled value is listed in the row's assumptions. Rows are split
into calibration and validation by one rule (:func:`row_role`); efficiencies are fitted on the
calibration rows only, and the accuracy that counts is on the validation rows.
"""

from __future__ import annotations

import re
from pathlib import Path

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import chip_names, load_chip, load_hardware
from windtunnel.specs.model import ModelSpec, load_model
from windtunnel.specs.plan import Plan, parse_plan
from windtunnel.specs.stack import DEFAULT_STACK, load_stack, stack_names, with_stack_defaults
from windtunnel.train.flops import model_flops_per_token
from windtunnel.train.step import TrainingJob, simulate
from windtunnel.validation.rows import RowResult, read_csv_rows
from windtunnel.validation.rows import summarize as summarize  # part of this module's interface

# peak_memory_gib: a published peak device memory (GiB, 2**30 bytes) of the run, scored against the
# modelled peak_memory_bytes (validation/memory_runs.csv).
METRICS = ("sec_per_iter", "tokens_per_s_per_device", "model_tflops_per_device", "mfu", "hfu", "peak_memory_gib")
REQUIRED = ("id", "model", "hardware", "n_devices", "metric", "value")
SINGLE_NODE = 8
# What a row's CSV columns cannot state about its model family (public facts about the model, not fitted
# values). Rule: a family applies when the row's model name, lower-cased with everything but letters and digits
# removed, starts with its key ("GPT OSS 120B" -> "gptoss120b"). "vocab" fills a blank vocab column; "qk_norm"
# sets the per-head QK-Norm; "like" copies the named catalog model's attention window and expert biases/clamp;
# "mla_q_lora_rank" replaces the default (DeepSeek-V3) query LoRA rank of an MLA row; "tied_embeddings" shares
# the input embedding with the output layer.
MODEL_FAMILIES: dict[str, dict] = {
    "nemotron": {"vocab": 256000, "source": "Nemotron family tokenizer: 256,000-token SentencePiece vocabulary per "
                 "the Nemotron-4 15B and 340B technical reports (arXiv 2402.16819, 2406.11704); assumed for the "
                 "Nemotron-3 configs too"},
    "qwen3": {"qk_norm": True, "source": "Qwen3: per-head QK-Norm of queries and keys (Qwen3 technical report)"},
    "gptoss": {"like": "gpt-oss-120b"},
    # Checked before adding rows Y49 / Y50 (MindSpeed-LLM 1ea39226 scripts, see their notes).
    "deepseekv2lite": {"mla_q_lora_rank": None,
                       "source": "DeepSeek-V2-Lite: queries projected directly, no q compression (HF config q_lora_rank "
                                 "null; MindSpeed-LLM 1ea39226 pretrain_deepseek2_lite_16b_ptd_8p.sh passes no --q-lora-rank)"},
    # After "gptoss" (GPT-OSS keeps its catalog traits): GPT-2/GPT-3-style blocks, as every GPT row here
    # (Megatron-LM / Megatron-DeepSpeed GPT, PaxML GPT) is.
    "gpt": {"linear_bias": True,
            "source": "GPT-3 (Brown et al. 2020, arXiv 2005.14165: the GPT-2 architecture) and Megatron-LM's GPT "
                      "(megatron/model/transformer.py ParallelAttention/ParallelMLP: bias on query_key_value, dense, "
                      "dense_h_to_4h and dense_4h_to_h; add_bias_linear default True): every projection has a bias"},
    "minicpm": {"tied_embeddings": True,
                "source": "MiniCPM: input embedding shared with the output layer (MindSpeed-LLM 1ea39226 "
                          "pretrain_minicpm_8x2b.sh has no --untie-embeddings-and-output-weights; HF config "
                          "tie_word_embeddings true)"},
}


def model_family(name: str) -> dict:
    """The MODEL_FAMILIES entry of a model name (rule above); {} when none applies."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return next((traits for prefix, traits in MODEL_FAMILIES.items() if key.startswith(prefix)), {})


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """Read the CSV; a missing file or column is one clear error."""
    return read_csv_rows(path, REQUIRED, "shared/reference/training_runs.csv (id, model, hardware, n_devices, metric, value, ...)")


def _int(row: dict, key: str) -> int | None:
    value = (row.get(key) or "").strip()
    return int(float(value)) if value else None


def _float(row: dict, key: str) -> float | None:
    value = (row.get(key) or "").strip()
    return float(value) if value else None


def _bool(row: dict, key: str) -> bool | None:
    value = (row.get(key) or "").strip().lower()
    return None if not value else value in ("true", "1", "yes")


def row_group(row: dict) -> str:
    """Calibration group: hardware generation and precision (16-bit or fp8)."""
    hardware = row.get("hardware", "")
    generation = load_chip(hardware).generation if hardware in chip_names() else hardware
    precision = (row.get("precision") or "bf16").strip() or "bf16"
    return f"{generation}/{'fp8' if precision == 'fp8' else '16bit'}"


def row_role(row: dict, rows: list[dict] | None = None) -> str:
    """The split rule: a row calibrates if it is a dense model on a single node (<= 8 devices), which
    measures a chip's GEMM and attention efficiency without the network or MoE routing in the way.
    Memory rows (peak_memory_gib) are never fitted. Every other row is validation; a (generation, precision) group with no such row keeps the
    catalog's priors."""
    single_node = 0 < (_int(row, "n_devices") or 0) <= SINGLE_NODE
    # Memory figures are never fitted (calibration fits throughput efficiencies only), so they all validate.
    fitted = row.get("metric") != "peak_memory_gib"
    return "calibration" if single_node and fitted and row.get("arch", "dense") != "moe" else "validation"


def shipped_fit_ids() -> frozenset[str]:
    """Ids of the rows the shipped calibration was fitted on (catalog/calibration.yaml, fit_report). A row
    that the split rule would calibrate but that sits in a file the shipped fit does not read was never
    fitted, so with the shipped calibration it is scored as a validation row."""
    from windtunnel.specs.yamlio import catalog_dir, read_yaml

    report = (read_yaml(catalog_dir("calibration.yaml")) or {}).get("fit_report") or {}
    return frozenset(str(row) for fit in report.values() for row in (fit or {}).get("rows") or [])


def _row_model(row: dict, notes: list[str], dropout: float = 0.1) -> ModelSpec:
    hidden, ffn = _int(row, "hidden"), _int(row, "ffn_hidden")
    heads = _int(row, "heads")
    layers = _int(row, "layers")
    if not (hidden and heads and layers):
        raise WindtunnelError("model shape not stated (layers/hidden/heads missing)")
    gated = ffn is not None and ffn != 4 * hidden
    data: dict = {
        "id": f"row-{row['id']}", "name": row["model"], "layers": layers, "hidden": hidden,
        "ffn_hidden": ffn or 4 * hidden, "heads": heads, "kv_heads": _int(row, "kv_heads") or heads,
        "head_dim": _int(row, "head_dim") or hidden // heads,
        "activation": "swiglu" if gated else "gelu", "norm": "rmsnorm" if gated else "layernorm",
        # GPT-2/3-style blocks (plain 4h GeLU FFN, LayerNorm: GPT-3, Megatron GPT, MPT's benchmark models)
        # take learned absolute positions, gated ones (Llama-style) rotary embeddings.
        "position_embedding": "rope" if gated else "learned",
    }
    notes.append(f"FFN {'gated (SwiGLU)' if gated else 'plain 4h (GeLU)'} inferred from ffn_hidden; positions "
                 f"{'rotary' if gated else 'learned absolute'}")
    # Optional columns state the block outright where the FFN width would mislead (a SwiGLU of width 4h).
    for column, valid in (("activation", ("swiglu", "gelu")), ("norm", ("rmsnorm", "layernorm")),
                          ("position_embedding", ("rope", "learned", "alibi"))):
        value = (row.get(column) or "").strip()
        if value:
            if value not in valid:
                raise WindtunnelError(f"Column '{column}' of row {row.get('id')} is '{value}'; valid values: "
                                      f"{', '.join(valid)} (or leave it blank to infer it from ffn_hidden).")
            data[column] = value
            notes.append(f"{column} {value} (column)")
    family = model_family(row["model"])
    if _int(row, "vocab"):
        data["vocab"] = _int(row, "vocab")
    elif "vocab" in family:
        data["vocab"] = family["vocab"]
        notes.append(f"vocab blank: {data['vocab']:,} ({family['source']})")
    else:
        data["vocab"] = 51200
        notes.append("vocab blank: 51,200 (GPT-2 vocabulary padded, Megatron default)")
    if not gated and dropout:
        data["dropout"] = dropout
        notes.append(f"GPT-style model: dropout {dropout:g} (the stack's default)")
    if row.get("arch") == "moe":
        experts = _int(row, "moe_experts")
        data["moe"] = {"experts": experts, "shared_experts": _int(row, "moe_shared_experts") or 0,
                       "topk": _int(row, "moe_topk"), "ffn_hidden": _int(row, "moe_ffn_hidden"),
                       "shared_ffn_hidden": _int(row, "moe_ffn_hidden") if _int(row, "moe_shared_experts") else None,
                       "dense_layers": _int(row, "moe_dense_layers") or 0}
    if _bool(row, "mla"):
        reference = load_model("deepseek-v3")
        data["mla"] = reference.mla.model_dump()
        notes.append("MLA ranks and head dims taken from the catalog's deepseek-v3 (not in the CSV)")
        if "mla_q_lora_rank" in family:
            data["mla"]["q_lora_rank"] = family["mla_q_lora_rank"]
            notes.append(family["source"])
    if family.get("tied_embeddings"):
        data["tied_embeddings"] = True
        notes.append(family["source"])
    if family.get("qk_norm"):
        data["qk_norm"] = True
        notes.append(family["source"])
    if family.get("linear_bias"):
        data["linear_bias"] = True
        notes.append("GPT block: a bias on every projection")
    if "like" in family:
        like = load_model(family["like"])
        if like.attention_window:
            data["attention_window"], data["windowed_layer_fraction"] = like.attention_window, like.windowed_layer_fraction
            notes.append(f"{like.name}: {like.attention_window}-token sliding window on {like.windowed_layer_fraction:.0%} "
                         f"of the layers (catalog {like.id})")
        if like.rope_scaling != "none":
            data["rope_scaling"] = like.rope_scaling
            notes.append(f"{like.name}: rotary embedding scaled at run time ({like.rope_scaling}; catalog {like.id})")
        if "moe" in data and like.moe is not None and like.moe.expert_bias:
            data["moe"]["expert_bias"] = like.moe.expert_bias
            data["moe"]["activation_clamp"] = like.moe.activation_clamp
            notes.append(f"{like.name}: expert biases and GLU clamp {like.moe.activation_clamp:g} (catalog {like.id})")
    return ModelSpec.model_validate(data)


def build_job(row: dict, *, fitted_override: dict | None = None) -> tuple[TrainingJob | None, list[str], str | None]:
    """Turn a row into a job; returns (job, assumptions, skip reason)."""
    notes: list[str] = []
    hardware = (row.get("hardware") or "").strip()
    if hardware not in chip_names():
        return None, notes, f"hardware '{hardware}' is not in the catalog"
    if row.get("metric") not in METRICS:
        return None, notes, f"metric '{row.get('metric')}' is not one windtunnel predicts"
    devices = _int(row, "n_devices")
    tp, pp = _int(row, "tp"), _int(row, "pp")
    if tp is None or pp is None:
        return None, notes, "parallel plan not stated (tp/pp blank)"
    if not _int(row, "global_batch"):
        return None, notes, "global batch not stated"
    framework = (row.get("framework") or "").strip()
    if not framework:
        framework = DEFAULT_STACK
        notes.append(f"framework blank: {DEFAULT_STACK} (the default stack)")
    if framework not in stack_names():
        return None, notes, (f"framework '{framework}' is not a stack in the catalog (catalog/stacks); its behaviour "
                             "cannot be modelled")
    stack = load_stack(framework)
    notes.append(f"stack {stack.id}: {stack.name}")
    try:
        model = _row_model(row, notes, stack.dropout)
    except (WindtunnelError, ValueError) as exc:
        return None, notes, f"model shape: {exc}"
    seq_len = _int(row, "seq_len")
    if not seq_len:
        seq_len = 2048
        notes.append("seq_len blank: 2,048 (same paper's other tables)")
    precision = (row.get("precision") or "").strip().lower()
    if not precision:
        precision = "bf16"
        notes.append("precision blank: bf16 (16-bit mixed precision; fp16 has the same peak)")
    if precision not in ("bf16", "fp16", "fp8"):
        return None, notes, f"precision '{precision}' is not modelled (bf16, fp16 and fp8 are)"
    cp = _int(row, "cp") or 1
    ep = _int(row, "ep") or 1
    vpp = _int(row, "vpp") or 1
    if not _int(row, "vpp"):
        notes.append("vpp blank: 1 (no interleaving)")
    mbs = _int(row, "micro_batch")
    if not mbs:
        mbs = 1
        notes.append("micro_batch blank: 1")
    sp = _bool(row, "sequence_parallel")
    if sp is None:
        sp = stack.comm.sequence_parallel and tp > 1
        notes.append(f"sequence_parallel blank: {'on' if sp else 'off'} (the stack's default with TP)")
    zero = _int(row, "zero_stage")
    if zero is None:
        dist_opt = _bool(row, "distributed_optimizer")
        zero = stack.zero if dist_opt is None else (max(1, stack.zero) if dist_opt else 0)
        notes.append(f"zero_stage blank: ZeRO-{zero} (" + ("the stack's default" if dist_opt is None else
                                                          f"distributed_optimizer {str(dist_opt).lower()}") + ")")
    overlap = stack.comm.tp_overlap and tp > 1 and sp
    notes.append(f"TP communication overlap {'on' if overlap else 'off'} (the stack's default)")
    grads = stack.comm.grad_reduce
    notes.append(f"main gradients and their reduction in {grads} (the stack's default)")
    imbalance = _float(row, "moe_imbalance")
    if imbalance is None:
        imbalance = 1.1
    if row.get("arch") == "moe":
        notes.append(f"MoE imbalance {imbalance:.2f}" + (" (stated)" if _float(row, "moe_imbalance") else " (default)"))
    # Optional column: the catalog cluster the run used, where its network is not the chip's default cluster's.
    named = (row.get("cluster") or "").strip()
    try:
        cluster = load_hardware(named or hardware, devices)
    except WindtunnelError as exc:
        return None, notes, str(exc)
    if named and cluster.chip.id != hardware:
        return None, notes, (f"column 'cluster' is '{named}', whose chip is {cluster.chip.id}, but the row's hardware is "
                             f"'{hardware}'; name a cluster of that chip or leave the column blank")
    notes.append(f"cluster {cluster.id} ({'column' if named else 'chip default'})")
    recompute = (row.get("recompute") or "").strip()

    # Optional columns: further plan fields the source states (e.g. CUDA graphs, EP overlap, Adam moment
    # precision, recompute modules), and those the run's recipe states where the source publishes only the
    # layout (traced from the recipe's code, e.g. validation/bridge_recipes.csv); both in --plan syntax, the
    # recipe's over the source's.
    stated: dict = {}
    for column, said in (("plan_options", "stated by the source"), ("recipe_options", "stated by the recipe")):
        options_text = (row.get(column) or "").strip()
        try:
            options = parse_plan(options_text) if options_text else None
        except WindtunnelError as exc:
            return None, notes, f"{column}: {exc}"
        if options:
            stated.update({name: getattr(options, name) for name in options.model_fields_set})
            notes.append(f"{said}: {options_text}")
    dispatcher = with_stack_defaults(Plan(), stack).dispatcher
    if ep > 1 and "dispatcher" not in stated:
        notes.append(f"dispatcher: {dispatcher} (the stack's default; the source names none)")

    def make(mode: str, layers: int = -1) -> TrainingJob:
        plan = Plan(tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, mbs=mbs, recompute=mode, recompute_layers=layers, sp=sp,
                    zero=zero, tp_overlap=overlap, precision=precision, grads=grads, dispatcher=dispatcher)
        plan = plan.model_copy(update=stated)
        return TrainingJob(model=model, cluster=cluster, plan=plan, seq_len=seq_len,
                           global_batch=_int(row, "global_batch"), framework=stack, moe_imbalance=imbalance,
                           fitted_override=fitted_override)

    if recompute:
        return make(recompute), notes, None
    if stated.get("offload_layers") and _fits(make("none")):
        notes.append(f"recompute blank: none (activations of {stated['offload_layers']} layers offloaded, as stated)")
        return make("none"), notes, None
    job, choice = _least_recompute(make, model.layers, pp * vpp)
    notes.append(f"recompute blank: {choice}")
    return job, notes, None


def _fits(job: TrainingJob) -> bool:
    try:
        return simulate(job).feasible
    except WindtunnelError:
        return False


def _least_recompute(make, layers: int, chunks: int) -> tuple[TrainingJob, str]:
    """The least recomputation that fits in memory, as practitioners pick it: none, then selective, then
    full recomputation of the fewest layers per chunk (Megatron's --recompute-num-layers)."""
    for mode in ("none", "selective"):
        job = make(mode)
        if _fits(job):
            return job, f"'{mode}' (the least recomputation that fits in memory)"
    per_chunk = -(-layers // chunks)
    if not _fits(make("full", per_chunk)):
        return make("full"), "'full' (nothing fits; the lightest setting is reported)"
    low, high = 1, per_chunk  # memory falls as more layers recompute: find the fewest that fit
    while low < high:
        middle = (low + high) // 2
        if _fits(make("full", middle)):
            high = middle
        else:
            low = middle + 1
    return make("full", low), f"'full' for {low} of {per_chunk} layers per chunk (the least that fits in memory)"


def predict_metric(row: dict, job: TrainingJob) -> tuple[float, bool]:
    """Predicted value of the row's metric in the source's own FLOP convention; also feasibility."""
    value, result = _predict(row, job)
    return value, result.feasible


def _predict(row: dict, job: TrainingJob):
    result = simulate(job)
    value, _ = _metric_value(row, job, result)
    return value, result


def _metric_value(row: dict, job: TrainingJob, result) -> tuple[float, bool]:
    """The row's metric computed from a simulated result, in the source's FLOP convention."""
    metric = row["metric"]
    step = result.step_time_s
    devices = job.cluster.devices
    tokens = job.global_batch * job.seq_len
    peak = job.cluster.chip.peak(job.plan.precision)
    # Published FLOP rates (Megatron-LM, NeMo) count attention without causal savings.
    flops = model_flops_per_token(job.model, job.seq_len, causal=False) * tokens
    if metric == "sec_per_iter":
        return step, result.feasible
    if metric == "peak_memory_gib":
        return result.peak_memory_bytes / 2**30, result.feasible
    if metric == "tokens_per_s_per_device":
        return tokens / step / devices, result.feasible
    if metric == "model_tflops_per_device":
        return flops / step / devices / 1e12, result.feasible
    if metric == "mfu":
        return flops / step / devices / peak, result.feasible
    if metric == "hfu":
        # Narayanan et al. eq. (3): full recomputation adds one more forward of the transformer layers.
        extra = 0.0
        if job.plan.recompute == "full":
            head = 2.0 * job.model.vocab * job.model.hidden
            extra = (flops / 3.0) - head * tokens
        return (flops + extra) / step / devices / peak, result.feasible
    raise WindtunnelError(f"unknown metric {metric}")


def _row_facts(row: dict) -> dict:
    """What the accuracy reports group rows by: stack, chip, model shape, sequence length, devices, release."""
    shape = "x".join(row.get(key) or "" for key in ("layers", "hidden", "ffn_hidden", "heads", "moe_experts"))
    return {"framework": (row.get("framework") or DEFAULT_STACK).strip(), "chip": row.get("hardware", ""),
            "model": f"{row.get('model', '')} [{shape}]", "seq_len": _int(row, "seq_len"),
            "devices": _int(row, "n_devices"), "release": (row.get("release") or "").strip()}


def validate_rows(rows: list[dict], *, fitted_override: dict | None = None, only: set[str] | None = None,
                  progress=None, shipped_roles: bool = True) -> list[RowResult]:
    """Predict every row (or the ``only`` ids); ``progress(phase, done, total)`` hears of each row. With the
    shipped calibration and ``shipped_roles``, only the rows that calibration was fitted on count as calibration
    rows; otherwise (a user's profile, or its before/after comparison) the split rule alone decides."""
    out = []
    fitted_ids = shipped_fit_ids() if fitted_override is None and shipped_roles else None
    for number, row in enumerate(rows):
        if progress is not None:
            progress("predict rows", number, len(rows))
        if only is not None and row["id"] not in only:
            continue
        role = row_role(row, rows) if row.get("hardware") in chip_names() else "validation"
        if role == "calibration" and fitted_ids is not None and row["id"] not in fitted_ids:
            role = "validation"  # the rule would calibrate it, but the shipped fit never read it
        measured = float(row["value"]) if row.get("value") else None
        try:
            job, notes, skip = build_job(row, fitted_override=fitted_override)
        except WindtunnelError as exc:
            job, notes, skip = None, [], str(exc)
        group = row_group(row) if row.get("hardware") in chip_names() else row.get("hardware", "")
        facts = _row_facts(row)
        if skip:
            out.append(RowResult(row["id"], row["metric"], measured, None, None, role, f"skipped: {skip}", notes,
                                 row.get("source", ""), group, row.get("arch") or "dense", **facts))
            continue
        try:
            predicted, result = _predict(row, job)
            feasible = result.feasible
        except WindtunnelError as exc:
            out.append(RowResult(row["id"], row["metric"], measured, None, None, role, f"skipped: {exc}", notes,
                                 row.get("source", ""), group, row.get("arch") or "dense", **facts))
            continue
        error = (predicted - measured) / measured if measured else None
        status = "predicted" if feasible else "predicted (plan over memory in the model)"
        facts["fits"] = feasible
        out.append(RowResult(row["id"], row["metric"], measured, predicted, error, role, status,
                             [f"plan {result.plan}", *notes], row.get("source", ""), group, row.get("arch") or "dense",
                             **facts))
    if progress is not None:
        progress("predict rows", len(rows), len(rows))
    return out


def report_markdown(results: list[RowResult], summary: dict, csv_path: str) -> str:
    """The accuracy table as Markdown (validation/REPORT.md)."""
    from windtunnel.validation.rows import (
        error_cell,
        far_off_lines,
        num,
        pct,
        rows_lines,
        slice_lines,
        summary_lines,
    )

    lines = [
        "# Training validation report",
        "",
        f"Generated by `windtunnel validate training {csv_path}`. Rows and their sources come from `{csv_path}`"
        + (" (a copy of `shared/reference/training_runs.csv`)." if Path(csv_path).name == "training_runs.csv" else "."),
        "",
        "**Split rule.** A row is *calibration* when it is a dense model on a single node (<= 8 devices), which",
        "measures a chip's GEMM and attention efficiency without the network or MoE routing in the way. All other",
        "rows are *validation*. A (hardware generation, precision) group with no such row keeps the catalog's",
        "prior efficiencies.",
        "Fitted (`windtunnel calibrate training`, calibration rows only, within physical bounds): the GEMM",
        "efficiency per precision and the fused-attention efficiency, per hardware generation and per chip that",
        "has calibration rows (catalog/calibration.yaml). A chip calibrated in one precision only runs its other",
        "precisions at the same ratio to its generation's best-calibrated chip (power-limited sustained clocks:",
        "Blackwell's calibration rows are FP8, so GB200's and B200's BF16 GEMMs follow their FP8 ratio to GB300).",
        "Everything else is physics plus stated priors (catalog/efficiency.yaml).",
        "",
        "## Summary",
        "",
        *summary_lines(summary),
    ]
    lines += slice_lines("Validation error by slice", results, lambda r: [f"{r.arch} models", r.group])
    lines += far_off_lines(results, _analyst_notes(csv_path), lambda r: f"{r.role}, {pct(r.error)}")
    lines += rows_lines(results, [
        ("id", lambda r: r.id), ("group", lambda r: r.group), ("metric", lambda r: r.metric),
        ("measured", lambda r: num(r.measured)), ("predicted", lambda r: num(r.predicted)), ("error", error_cell),
        ("role", lambda r: r.role), ("status", lambda r: r.status),
    ])
    return "\n".join(lines) + "\n"


def _analyst_notes(csv_path: str) -> dict[str, str]:
    """Notes on poorly predicted rows from notes.yaml beside the CSV (explanations, not inputs)."""
    from windtunnel.specs.yamlio import read_yaml

    path = Path(csv_path).with_name("notes.yaml")
    if not path.exists():
        return {}
    doc = read_yaml(path) or {}
    return {str(k): str(v) for k, v in (doc.get("notes") or {}).items()}
