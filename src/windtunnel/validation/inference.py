"""Score serving predictions on published measurements (``validate inference``, ``infer calibrate``).

Each CSV row (schema of shared/reference/inference_runs.csv) is one measured configuration and one
metric. A row becomes a prediction in one of three ways:

* single-iteration rows (``prefill_tokens_per_s_per_device``, ``decode_tokens_per_s_per_device``) with a
  batch per device: one iteration of the stated shape from the iteration-time model;
* static-batch rows (a batch, no concurrency, no rate): the batch arrives at once and is served to
  the end by the simulator (whole-prompt prefill, then decode);
* closed-loop rows (``concurrency``): the simulator with that many clients, each sending its next
  request when the previous one finishes; metrics are taken in the steady window between the
  ``concurrency``-th completion and the ``concurrency``-th-from-last (means, as the sources report).

Split rule (stated in the report): a row *calibrates* when it measures an iteration shape without
queueing or a scheduler's dynamics in the way - DeepSeek's profile-data timings and TensorRT-LLM's
static-batch benchmark; every row measured on a live serving system under load (SGLang's deployment
runs, NVIDIA NIM's concurrency sweeps) *validates*. Parameters are fitted on calibration rows only.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from windtunnel.infer.deployment import InstanceSpec, resolve_instance, serving_defaults
from windtunnel.infer.iteration import IterationModel
from windtunnel.infer.kernels import MMHA_PRIOR_PAIRS_PER_SM_CLOCK, decode_attention_kernel
from windtunnel.infer.sim import Simulator
from windtunnel.infer.systems import ServingSystem, lookup_system, system_name
from windtunnel.infer.traffic import Workload
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import chip_names, load_chip
from windtunnel.specs.model import ModelSpec, load_model
from windtunnel.specs.yamlio import catalog_dir, write_atomic
from windtunnel.validation.rows import RowResult, read_csv_rows
from windtunnel.validation.rows import summarize as summarize  # part of this module's interface

METRICS = ("prefill_tokens_per_s_per_device", "decode_tokens_per_s_per_device", "output_tokens_per_s_per_device",
           "ttft_s", "tpot_s", "itl_s", "e2e_latency_s")
REQUIRED = ("id", "model", "hardware", "metric", "value")
CALIBRATION_SOURCES = ("DeepSeek profile-data", "TensorRT-LLM release/0.5.0")
PREFILL_TOKENS_PER_DEVICE = 16384
GENERATION_KEYS = ("memory_bandwidth", "gemm_fp8", "step_overhead_s")
# Priors: HBM bandwidth share and fp8 GEMM efficiency as the cost core has them (efficiency.yaml prior 0.75;
# Hopper fp8 GEMM 0.5143 fitted on the training calibration rows), no host time per iteration (the catalog's
# serving prior, catalog/deployments/serving.yaml).
# The masked MHA kernel's pairs of (query head, cached token) per SM and clock: the prior is the previous fit's
# TensorRT-LLM 0.5 KV-read share (0.11279 of 3.35 TB/s over 512 bytes per token and 16 query heads per H100 at TP4)
# re-expressed per SM and clock (132 SMs x 1.83 GHz); its upper bound is the FP32 issue limit (2 x 128 FMAs per pair
# at head dim 128 over 128 lanes per SM: 0.5 pairs per clock).
PRIORS = {"memory_bandwidth": 0.75, "gemm_fp8": 0.5143, "step_overhead_s": 0.0, "attention_bandwidth": 0.75,
          "mmha_pairs_per_sm_clock": MMHA_PRIOR_PAIRS_PER_SM_CLOCK}
# Physical bounds: streaming kernels reach at most ~95% of HBM peak; fp8 GEMMs 30-85% of the dense fp8 peak.
FIT_BOUNDS = {"memory_bandwidth": (0.5, 0.95), "gemm_fp8": (0.3, 0.85), "step_overhead_s": (0.0, 0.02),
              "attention_bandwidth": (0.1, 0.95), "mmha_pairs_per_sm_clock": (0.005, 0.5)}
PRIOR_WEIGHT = 0.05


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """Read the CSV, or every ``inference_runs*.csv`` of a folder (sorted; each row keeps its file name in
    ``_file``); a missing file or column, or a folder without such CSVs, is one clear error."""
    schema = "shared/reference/inference_runs.csv (id, model, hardware, role, tp, ep, metric, value, ...)"
    path = Path(path)
    files = sorted(path.glob("inference_runs*.csv")) if path.is_dir() else [path]
    if not files:
        raise WindtunnelError(f"Folder '{path}' holds no inference_runs*.csv; give a CSV in the schema of {schema}.")
    rows = []
    for file in files:
        for row in read_csv_rows(file, REQUIRED, schema):
            row["_file"] = file.name
            rows.append(row)
    return rows


def _num(row: dict, key: str) -> float | None:
    value = (row.get(key) or "").strip()
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _int(row: dict, key: str) -> int | None:
    value = _num(row, key)
    return None if value is None else int(round(value))


def row_role(row: dict) -> str:
    """The split rule: DeepSeek profile-data timings and TensorRT-LLM static-batch rows calibrate
    (iteration shapes without queueing); everything measured on a live serving system validates."""
    source = row.get("source", "")
    return "calibration" if any(s in source for s in CALIBRATION_SOURCES) else "validation"


def serving_system(row: dict) -> str:
    """The serving system's name without the parenthesised details ('TensorRT-LLM 0.5', 'NVIDIA NIM 1.8.0')."""
    return system_name(row.get("serving_system")) or "unknown"


def unknown_systems(rows: list[dict]) -> list[str]:
    """Serving systems of ``rows`` that no catalog entry describes (they get the catalog's system_defaults)."""
    return sorted({serving_system(r) for r in rows if not row_system(r).known})


def row_group(row: dict) -> str:
    hardware = (row.get("hardware") or "").strip()
    generation = load_chip(hardware).generation if hardware in chip_names() else hardware
    return f"{generation}/{(row.get('precision') or 'bf16').strip() or 'bf16'}"


def _row_model(row: dict, notes: list[str]) -> ModelSpec:
    layers, hidden, heads = _int(row, "layers"), _int(row, "hidden"), _int(row, "heads")
    if not (layers and hidden and heads):
        raise WindtunnelError("model shape not stated (layers/hidden/heads missing)")
    data: dict = {"id": f"row-{row['id']}", "name": row.get("model", ""), "layers": layers, "hidden": hidden,
                  "ffn_hidden": _int(row, "ffn_hidden") or 4 * hidden, "heads": heads,
                  "kv_heads": _int(row, "kv_heads") or heads, "vocab": _int(row, "vocab") or 32000}
    if _int(row, "head_dim"):
        data["head_dim"] = _int(row, "head_dim")
    if not _int(row, "vocab"):
        notes.append("vocab blank: 32,000")
    if (row.get("arch") or "").strip() == "moe":
        data["moe"] = {"experts": _int(row, "moe_experts"), "shared_experts": _int(row, "moe_shared_experts") or 0,
                       "topk": _int(row, "moe_topk"), "ffn_hidden": _int(row, "moe_ffn_hidden"),
                       "shared_ffn_hidden": _int(row, "moe_ffn_hidden") if _int(row, "moe_shared_experts") else None,
                       "dense_layers": _int(row, "moe_dense_layers") or 0}
    if (row.get("mla") or "").strip().lower() == "true":
        reference = load_model("deepseek-v3").mla.model_dump()
        if _int(row, "kv_lora_rank"):
            reference["kv_lora_rank"] = _int(row, "kv_lora_rank")
        data["mla"] = reference
        data["head_dim"] = reference["qk_nope_head_dim"]
        notes.append("MLA q_lora_rank and head dims from the catalog's deepseek-v3 (kv_lora_rank from the row)")
    return ModelSpec.model_validate(data)


def row_system(row: dict) -> ServingSystem:
    """The row's serving system from the catalog (windtunnel.infer.systems: looked up by the name without the
    parenthesised details; the details are its stated options)."""
    return lookup_system(row.get("serving_system"))


def _tbo(row: dict, notes: list[str]) -> bool:
    """Two-batch overlap: the row's serving system's setting (its default, or a stated option that sets it)."""
    system = row_system(row)
    tbo = bool(system.get("two_batch_overlap", False))
    if tbo:
        notes.append(f"two-batch overlap: communication overlapped with compute ({system.name}: "
                     f"{system.origin.get('two_batch_overlap')}, catalog serving.yaml)")
    return tbo


def _moe_imbalance(row: dict, model: ModelSpec, notes: list[str]) -> float | None:
    """Tokens on the busiest expert rank / the balanced share, as the row's serving system and its stated options
    set it (catalog serving.yaml; None: the catalog's default, balanced routing)."""
    system = row_system(row)
    value = system.get("moe_imbalance")
    if value is None or model.moe is None:
        return None
    if float(value) != 1.0:
        notes.append(f"MoE routing imbalance {float(value):g} on the busiest expert rank ({system.name}: "
                     f"{system.origin.get('moe_imbalance')}, catalog serving.yaml)")
    return float(value)


def _kv_precision(row: dict, precision: str, notes: list[str]) -> str:
    """The row's kv_precision when stated, else its serving system's KV precision at the row's weight precision
    and architecture (catalog serving.yaml ``systems``; an unknown system gets ``system_defaults``)."""
    kv = (row.get("kv_precision") or "").strip()
    if kv:
        return kv
    kv, note = row_system(row).kv_precision(precision, _arch(row))
    notes.append(note or f"kv_precision blank: {kv}")
    return kv


def build_instance(row: dict, model: ModelSpec, notes: list[str], *, batching: str | None = None,
                   admission: str = "greedy", max_batch: int | None = None, max_tokens: int | None = None):
    """The row's instance resolved against its model (raises WindtunnelError when it cannot be)."""
    devices = _int(row, "devices_per_instance")
    tp = _int(row, "tp")
    if not devices or not tp:
        raise WindtunnelError("parallel plan not stated (devices_per_instance/tp blank)")
    dp = _int(row, "dp_attention") or max(1, devices // (tp * (_int(row, "pp") or 1)))
    ep = _int(row, "ep") or 1
    precision = (row.get("precision") or "").strip() or "bf16"
    if not (row.get("precision") or "").strip():
        notes.append("precision blank: bf16")
    role = (row.get("role") or "mixed").strip()
    spec = InstanceSpec(role=role, tp=tp, dp=dp, ep=ep if model.moe is not None else None, pp=_int(row, "pp") or 1,
                        precision=precision, kv=_kv_precision(row, precision, notes), tbo=_tbo(row, notes),
                        batching=batching, admission=admission, max_batch=max_batch, max_tokens=max_tokens,
                        moe_imbalance=_moe_imbalance(row, model, notes))
    plan = resolve_instance(model, row["hardware"].strip(), spec)
    if model.mla is None:
        per_kv = (model.heads // tp) // max(1, model.kv_heads // tp)
        kernel = decode_attention_kernel(serving_system(row), model.head_dim, per_kv)
        if kernel.kind == "mmha":
            notes.append(f"decode attention on the {kernel.why} ({row_system(row).name}, catalog serving.yaml)")
    return plan


def _single_iteration(row: dict, model: ModelSpec, notes: list[str], fitted: dict | None) -> float:
    metric = row["metric"]
    input_len = _int(row, "input_len") or 0
    batch_per_device = _num(row, "batch_size_per_device")
    plan = build_instance(row, model, notes)
    cost = IterationModel(model, plan, fitted=fitted, system=serving_system(row))
    dp = plan.dp
    devices = plan.devices
    if metric == "prefill_tokens_per_s_per_device":
        if batch_per_device:
            per_group_tokens = int(batch_per_device * input_len)
        else:
            per_group_tokens = PREFILL_TOKENS_PER_DEVICE
            notes.append(f"batch blank: {PREFILL_TOKENS_PER_DEVICE:,} prompt tokens per device (the source's stated "
                         "prefill batch for its 4K case)")
        sequences = max(1, per_group_tokens // max(1, input_len))
        tokens = per_group_tokens * dp
        attention = sequences * cost.prefill_attention(input_len, 0)
        seconds = cost.time(tokens, sequences * dp, 0.0, attention, 0, per_group_tokens)
        return tokens / seconds / devices
    batch = int(round((batch_per_device or 1) * dp))
    kv_len = _int(row, "kv_len") or input_len
    seconds = cost.time(batch, batch, float(batch) * kv_len, 0.0, batch)
    return batch / seconds / devices


def _served(row: dict, model: ModelSpec, notes: list[str], fitted: dict | None) -> float:
    metric = row["metric"]
    input_len = _int(row, "input_len")
    output_len = _int(row, "output_len")
    if not input_len or not output_len:
        raise WindtunnelError("input_len/output_len not stated")
    concurrency = _int(row, "concurrency")
    if concurrency:
        # The serving system's in-flight scheduler (catalog serving.yaml systems.<name>.scheduler).
        scheduler = row_system(row).scheduler()
        if scheduler.get("note"):
            notes.append(str(scheduler["note"]))
        max_tokens = scheduler.get("max_tokens")
        plan = build_instance(row, model, notes, batching=scheduler.get("batching"),
                              admission=scheduler.get("admission") or "greedy",
                              max_tokens=int(max_tokens) if max_tokens else None)
        requests = max(12 * concurrency, 200)
        workload = Workload(np.zeros(requests), np.full(requests, input_len, dtype=np.int64),
                            np.full(requests, output_len, dtype=np.int64), np.zeros(requests, dtype=np.int64),
                            ["default"], "closed loop", concurrency=concurrency)
        notes.append(f"closed loop of {concurrency} clients, {requests} requests; steady window between the "
                     f"{concurrency}th completion and the {concurrency}th from last")
    else:
        batch = int(round(_num(row, "batch_size_per_device") or 1))
        notes.append(f"static batch: {batch} requests arrive together, prefilled together, decoded to the end")
        plan = build_instance(row, model, notes, batching="separate", admission="reserve", max_batch=batch,
                              max_tokens=batch * input_len)
        workload = Workload(np.zeros(batch), np.full(batch, input_len, dtype=np.int64),
                            np.full(batch, output_len, dtype=np.int64), np.zeros(batch, dtype=np.int64), ["default"],
                            "static batch")
        concurrency = None
    sim = Simulator(model, [plan], workload, "round_robin", fitted=fitted, system=serving_system(row))
    out = sim.run()
    if out.rejected.any():
        raise WindtunnelError("requests do not fit in the KV cache of the modelled instance")
    arrival, first, finish = out.arrival, out.first, out.finish
    devices = plan.devices
    if concurrency:
        order = np.sort(finish)
        t_start, t_end = order[concurrency - 1], order[-concurrency]
        inside = (arrival >= t_start) & (finish <= t_end)
        done_in = (finish > t_start) & (finish <= t_end)
        window = t_end - t_start
    else:
        inside = done_in = np.ones(arrival.size, dtype=bool)
        window = float(finish.max() - arrival.min())
    if metric == "output_tokens_per_s_per_device":
        return float(out.output[done_in].sum()) / window / devices
    if metric == "ttft_s":
        return float(np.mean(first[inside] - arrival[inside]))
    if metric in ("tpot_s", "itl_s"):
        return float(np.mean((finish[inside] - first[inside]) / (out.output[inside] - 1)))
    if metric == "e2e_latency_s":
        return float(np.mean(finish[inside] - arrival[inside]))
    raise WindtunnelError(f"metric '{metric}' is not predicted for served rows")


def predict_row(row: dict, *, fitted: dict | None = None) -> tuple[float | None, list[str], str, str | None]:
    """(prediction, assumptions, kind, skip reason) of one row."""
    notes: list[str] = []
    if (row.get("hardware") or "").strip() not in chip_names():
        return None, notes, "", f"hardware '{row.get('hardware')}' is not in the catalog"
    metric = row.get("metric", "")
    if metric not in METRICS:
        return None, notes, "", f"metric '{metric}' is not one windtunnel predicts"
    try:
        model = _row_model(row, notes)
        if metric in ("prefill_tokens_per_s_per_device", "decode_tokens_per_s_per_device"):
            kind = "single iteration"
            value = _single_iteration(row, model, notes, fitted)
        else:
            kind = "closed loop" if _int(row, "concurrency") else "static batch"
            value = _served(row, model, notes, fitted)
    except (WindtunnelError, ValueError) as exc:
        return None, notes, "", str(exc)
    return value, notes, kind, None


def _arch(row: dict) -> str:
    return "moe" if (row.get("arch") or "").strip() == "moe" else "dense"


def _model_name(row: dict) -> str:
    return (row.get("model") or "").strip()


def validate_rows(rows: list[dict], *, fitted: dict | None = None, progress=None) -> list[RowResult]:
    """Predict every row; ``progress(phase, done, total)`` hears of each row."""
    results = []
    for number, row in enumerate(rows):
        if progress is not None:
            progress("predict rows", number, len(rows))
        measured = _num(row, "value")
        value, notes, kind, skip = predict_row(row, fitted=fitted)
        role = row_role(row)
        group = row_group(row) if (row.get("hardware") or "").strip() in chip_names() else row.get("hardware", "")
        if skip:
            results.append(RowResult(row["id"], row.get("metric", ""), measured, None, None, role, f"skipped: {skip}",
                                     notes, row.get("source", ""), group, arch=_arch(row), model=_model_name(row)))
            continue
        error = (value - measured) / measured if measured else None
        results.append(RowResult(row["id"], row["metric"], measured, value, error, role, "predicted", notes,
                                 row.get("source", ""), group, kind=kind, arch=_arch(row), model=_model_name(row)))
    if progress is not None:
        progress("predict rows", len(rows), len(rows))
    return results


# ---- calibration ----------------------------------------------------------------------------------------


def _parameters(rows: list[dict]) -> list[tuple[str, str, str, float, tuple[float, float]]]:
    """The free parameters the calibration rows can inform: (scope, key, name, prior, bounds)."""
    params = []
    for generation in sorted({load_chip(r["hardware"].strip()).generation for r in rows}):
        for name in GENERATION_KEYS:
            params.append(("generations", generation, name, PRIORS[name], FIT_BOUNDS[name]))
    mmha_generations: set[str] = set()
    for system in sorted({serving_system(r) for r in rows}):
        # A system on the masked MHA kernel (catalog serving.yaml decode_attention) informs that kernel class's
        # throughput on its rows' hardware generations, not a KV-read share of its own.
        if (lookup_system(system).get("decode_attention") or {}).get("kernel") == "mmha":
            mmha_generations |= {load_chip(r["hardware"].strip()).generation for r in rows if serving_system(r) == system}
            continue
        params.append(("systems", system, "attention_bandwidth", PRIORS["attention_bandwidth"],
                       FIT_BOUNDS["attention_bandwidth"]))
    for generation in sorted(mmha_generations):
        params.append(("generations", generation, "mmha_pairs_per_sm_clock", PRIORS["mmha_pairs_per_sm_clock"],
                       FIT_BOUNDS["mmha_pairs_per_sm_clock"]))
    return params


def _fitted_from(params: list, values) -> dict:
    fitted: dict = {"generations": {}, "systems": {}}
    for (scope, key, name, _, (low, high)), value in zip(params, values, strict=True):
        fitted[scope].setdefault(key, {})[name] = round(float(min(max(value, low), high)), 5)
    return fitted


def calibrate(rows: list[dict], *, write: bool = True, out: str | Path | None = None) -> dict:
    """Fit the serving parameters on the calibration rows only, by least squares on the log error within
    physical bounds and with a weak pull towards the priors: per hardware generation the share of HBM
    bandwidth weight streaming reaches (``memory_bandwidth``), the fp8 GEMM efficiency (``gemm_fp8``) and
    the host time per iteration (``step_overhead_s``); per serving system the bandwidth share its
    decode-attention kernel reaches on KV reads (``attention_bandwidth``; systems without calibration rows
    use ``memory_bandwidth``), except that systems on TensorRT-LLM's masked MHA kernel inform that kernel's
    (query head, cached token) pairs per SM and clock on their rows' generation (``mmha_pairs_per_sm_clock``). ``write`` rewrites the package's catalog/deployments/calibration.yaml (the
    developer script validation/fit_serving_calibration.py); ``out`` writes the fit to that file instead."""
    from scipy.optimize import minimize

    calibration = [r for r in rows if row_role(r) == "calibration" and (r.get("hardware") or "") in chip_names()]
    usable = [r for r in calibration if predict_row(r, fitted={})[3] is None]
    if not usable:
        raise WindtunnelError("No usable calibration rows (DeepSeek profile-data or TensorRT-LLM static-batch rows).")
    params = _parameters(usable)
    start = np.array([p[3] for p in params])

    def loss(x) -> float:
        trial = _fitted_from(params, x)
        total = 0.0
        for row in usable:
            total += math.log(predict_row(row, fitted=trial)[0] / float(row["value"])) ** 2
        for (_, _, name, prior, (low, high)), value in zip(params, x, strict=True):
            clipped = min(max(value, low), high)
            scale = 1e-3 if name == "step_overhead_s" else prior
            total += PRIOR_WEIGHT * ((clipped - prior) / scale) ** 2 + 100.0 * (value - clipped) ** 2
        return total

    # Nelder-Mead in units of each parameter's scale (its prior; the host time in milliseconds), from the priors,
    # with a simplex of 5%-of-scale steps, restarted once from its best point: unscaled (a 0.25 ms first step
    # in the host time beside 5% steps in the shares) the simplex could collapse at a point worse than its start.
    scales = np.array([1e-3 if name == "step_overhead_s" else prior for _, _, name, prior, _ in params])
    z = start / scales
    for _ in range(2):
        simplex = np.vstack([z, z + 0.05 * np.eye(len(z))])
        result = minimize(lambda v: loss(v * scales), z, method="Nelder-Mead",
                          options={"xatol": 1e-4, "fatol": 1e-7, "maxiter": 600 * len(params), "adaptive": True,
                                   "initial_simplex": simplex})
        z = result.x
    fitted = _fitted_from(params, z * scales)
    final = fitted
    errors = {r["id"]: round(predict_row(r, fitted=final)[0] / float(r["value"]) - 1.0, 4) for r in usable}
    report = {"parameters": {f"{scope}.{key}.{name}": fitted[scope][key][name] for scope, key, name, _, _ in params},
              "rows": [r["id"] for r in usable], "row_errors": errors,
              "rms_log_error": round(math.sqrt(sum(math.log(1 + e) ** 2 for e in errors.values()) / len(errors)), 4)}
    if write or out is not None:
        header = ("# Fitted serving parameters, written by `.venv/bin/python validation/fit_serving_calibration.py`.\n"
                  "# Fitted on calibration rows only (DeepSeek profile-data timings, TensorRT-LLM 0.5 static-batch\n"
                  "# benchmark). generations.<gen>: memory_bandwidth (share of HBM bandwidth weight streaming reaches in\n"
                  "# serving iterations), gemm_fp8 (fp8 GEMM efficiency), step_overhead_s (host time per iteration, s);\n"
                  "# systems.<serving system>: attention_bandwidth (share of HBM bandwidth its decode-attention kernel\n"
                  "# reaches on KV reads; used only for that system's rows); generations.<gen>.mmha_pairs_per_sm_clock:\n"
                  "# (query head, cached token) pairs per SM and clock of TensorRT-LLM's masked MHA decode kernel.\n")
        target = Path(out) if out is not None else catalog_dir("deployments", "calibration.yaml")
        write_atomic(target, header + yaml.safe_dump({"fitted": fitted, "fit_report": {"hopper+systems": report}},
                                                     sort_keys=True))
        if out is None:
            serving_defaults.cache_clear()
    return {"fit": report}


# ---- report -------------------------------------------------------------------------------------------------


def report_markdown(results: list[RowResult], summary: dict, csv_path: str) -> str:
    """The accuracy report as Markdown (windtunnel.validation.inference_report)."""
    from windtunnel.validation.inference_report import report_markdown as build

    return build(results, summary, csv_path)
