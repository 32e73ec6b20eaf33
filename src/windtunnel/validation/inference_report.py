"""The serving accuracy report (``validate inference CSV|FOLDER --out validation/INFERENCE_REPORT.md``).

Headline errors overall, per CSV, for MoE and dense rows, per model, metric and source; the rows far off with
the analyst's notes (catalog/deployments/inference_notes.yaml: explanations, never inputs); every row and its
assumptions; and what the serving iteration model shares with the training cost core (issue 16 item 1).
"""

from __future__ import annotations

import csv
from pathlib import Path

from windtunnel.infer.deployment import serving_defaults
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.yamlio import catalog_dir, read_yaml
from windtunnel.validation.rows import (
    RowResult,
    error_cell,
    far_off_lines,
    num,
    pct,
    rows_lines,
    slice_lines,
    summary_lines,
)

HEADER = """**Split rule (by source, fixed before looking at errors).** A row is *calibration* when it measures an
iteration shape without queueing or a serving scheduler in the way and comes from the sources the rule names:
DeepSeek's profile-data timings (I04, I05) and TensorRT-LLM 0.5's static-batch benchmark (I27-I30). Every other
row validates: SGLang's PD-disaggregated large-EP deployment on 96 H100, NVIDIA NIM's concurrency sweep, and the
TensorRT-LLM 0.9 tables of `inference_runs_2.csv` (added after the rule was fixed; they are static-batch rows
too, but calibrating on them would leave nothing to validate Mixtral, A100 or H200 against).

**Fitted on calibration rows only** (`validation/fit_serving_calibration.py`; least squares on the log error,
physical bounds, a weak pull towards the priors): per hardware generation, the share of HBM bandwidth weight
streaming reaches in serving iterations (`memory_bandwidth`, prior 0.75), the fp8 GEMM efficiency (`gemm_fp8`,
prior 0.5143 from the training calibration) and the host time per iteration (`step_overhead_s`, prior 0); per
serving system that has calibration rows, the bandwidth share its decode-attention kernel reaches on KV reads
(`attention_bandwidth`, used only for that system's rows; other systems use `memory_bandwidth`), except for
systems on TensorRT-LLM's masked MHA decode kernel (TensorRT-LLM 0.5): their rows fit that kernel class's
(query head, cached token) pairs per SM and clock on their generation (`mmha_pairs_per_sm_clock`, prior 0.0489,
the earlier per-system KV share of 0.113 re-expressed), which every system that runs the kernel uses. One
bandwidth cannot fit both I28 and I30: TensorRT-LLM 0.5's kernel is bound by its per-query-head work on CUDA
cores, not by its KV reads. Everything else - attention efficiency, collectives, the memory model, the
schedulers, the kernel classes below - is physics plus stated, sourced priors."""

PHYSICS = """**Kernel physics added for MoE (issue 16 item 2), none fitted to rows.**

- *GEMM tiles per token count.* Serving engines profile their GEMM plugins per token count; a decode GEMM of a
  few rows runs a 16-64-row tile, not the training kernels' 128-row tile (`infer/kernels.py`,
  `autotuned_gemm`). Before, a Mixtral expert with 8 tokens was charged 16x its FLOPs, which made A100 Mixtral
  decode 2x too slow.
- *Split-K.* When a GEMM's output tiles leave the last wave of compute units partly empty, the autotuner may
  split the reduction over 2, 4 or 7 thread blocks per tile and sum the fp32 partials (TensorRT-LLM's CUTLASS
  heuristics enumerate split-K factors up to 7; cuBLAS and Stream-K, arXiv 2301.03598, do the same):
  `infer/kernels.py`, `split_k_gemm`. Before, a decode GEMM of 24 output tiles (Mixtral's QKV projection at
  128 tokens) was charged one 128x128x4096 tile's time on one SM, 4x its weight read, and the 8-wide router
  GEMM as much.
- *Expert kernels per serving system* (`catalog/deployments/serving.yaml`, `systems`). TensorRT-LLM 0.9 is
  the first release with a Mixtral FP8 path (NVIDIA/TensorRT-LLM issue #1229; FP8 for Mixtral listed as new
  in the 0.10 release notes): its MoE plugin runs the experts through the CUTLASS 2.x grouped GEMM written for
  Ampere (mma.sync; the Hopper TMA/warp-specialised MoE GEMM came later), fp8-stored weights widened to 16
  bits (an assumption: the kernel 0.9 ran is not documented). Such kernels issue at about Ampere's per-SM,
  per-clock tensor rate on Hopper, half of wgmma's: FlashAttention-2, an mma.sync kernel, reaches 50-73% of
  the A100's peak (Dao 2023) but 31-37% of the H100's (FlashAttention-3 paper, Fig. 5). Rate share 0.5 (was
  0.67, a TMA-pipeline figure); before that, Hopper Mixtral experts ran at the fp8 wgmma rate: up to 2.5x too
  fast at large batch, 2.3x too fast in TTFT at 2,048 tokens.
- *Compute units held by overlapped dispatch.* With two-batch overlap, DeepEP's normal (throughput) kernels,
  which DeepSeek and SGLang run for prefill, hold the cost core's `overlap_comm_units` of the chip (20 of 132
  SMs, DeepSeek-V3 report Sec. 3.2.2; the same figure training's overlapped chunks use) while they run, so the
  layer's compute proceeds on the rest meanwhile: time = max(comm, compute + (1 - 112/132) comm). Its
  low-latency kernels (decode) overlap through a receive hook that holds no SMs (DeepEP README). With this,
  DeepSeek's prefill profile (I04) no longer pulls the fitted fp8 GEMM efficiency down to 0.54: it fits 0.60,
  inside the 60-70% of the fp8 peak published Hopper FP8 GEMMs reach (efficiency.yaml), and dense prefill on
  Hopper (TTFT, NIM) moves within ~5-12%.
- *Expert activation memory* is split over expert-TP ranks (A31 fits on 2 A100 as measured).
- *KV precision of TensorRT-LLM 0.9 Mixtral rows*: the source's checkpoint configs set `kv_cache_quant_algo`
  FP8 for Llama-2 only, so Mixtral's KV stays 16-bit.
- *Expert-parallel routing imbalance under EPLB* (`serving.yaml` SGLang option `eplb`). EPLB places redundant
  experts from load statistics, but real routing stays imbalanced: TensorRT-LLM's tech blog 4 (Table 1,
  DeepSeek-R1, EP32, offline EPLB with 288 slots, a machine-translation dataset) measures the busiest rank at
  1.109x the mean routed tokens (2.56x without EPLB). The busiest rank runs its expert GEMMs on that many tokens
  and receives that many in the dispatch (and sends them back in the combine), so the all-to-all lasts as long
  as its traffic. SGLang's "simulated perfect EPLB" stays balanced, as do DeepSeek's profile rows (balanced
  routing simulated). Not taken from the I08a/I08b pair: it closes about a third of their gap.
- *Decode attention kernel per serving system* (`serving.yaml` `decode_attention`, `infer/kernels.py`).
  TensorRT-LLM decodes on XQA (tensor cores; `blogs/XQA-kernel.md`) only for shapes its precompiled kernels
  cover - in 0.9, 8 query heads per KV head at head dim 128/256 (`decoderXQARunner.h`, `xqa_kernel_cubin.h`),
  enabled in the 0.9 performance runs for Llama2-70b and Falcon only (`TRTLLM_ENABLE_XQA=1`) - and on masked
  MHA otherwise (0.5 always: XQA shipped with 0.8). Masked MHA runs one thread block per query head on CUDA
  cores: each (query head, cached token) pair costs SM clocks that faster HBM does not shorten, so its time is
  the slower of that and its KV reads. Its rate is fitted on the 0.5 calibration rows only (Hopper: 0.048
  pairs per SM and clock). So Mixtral (4 query heads per KV head) and Llama-2-7B (MHA) decode on masked MHA in
  the 0.9 rows, Llama-2-70B on XQA. Check against a measurement not used anywhere: NVIDIA's XQA blog gives
  Llama-70B on one H200 (FP8, 128/2048, v0.8a) 1,227 tok/s/GPU without XQA and 2,941 with; at the batch where
  the model gives 2,941 with XQA it gives ~1,230 on masked MHA (2.35x; measured 2.4x). This explains why the
  0.9 H200 rows of Mixtral and Llama-2-7B gained less over H100 than H200's 1.43x HBM bandwidth while
  Llama-2-70B's gained 1.44x (A10 +45% -> 0%, A12 +23% -> -10%, A22 +17% -> -1%, A01 +11% -> +2%); on H100
  the 7B kernel is still bound by its KV reads. Generations without calibration rows for the kernel (A100)
  keep the KV-read bound only.
- *The fit itself*: the calibration's Nelder-Mead search runs on parameters scaled to their priors (the host
  time in milliseconds) and restarts once from its best point; unscaled, a physics change could leave it at a
  worse point than its start (rms log error 0.149 against 0.050).

What remains off on Mixtral: H100 at batch 32 with 2048/2048 (A24, -27%) is too slow-predicted while batch 128
(A22) is within 1%, i.e. the small-batch expert kernel scales with tokens more steeply than a weight-streaming
kernel (not modelled: no source for the legacy kernel's small-M behaviour); masked MHA adds to A24's
attention. On Llama-2-7B the fitted masked-MHA rate is ~15% below what the H200 rows imply at long contexts
(A02 -12%, A04 -20%): 0.5's kernel (the fit) and 0.9's are one class, not one build. A32 and A46 (A100) are
faster than their own HBM bound at 16-bit weights (A32 implies 2.3 TB/s of weight reads on a 2.04 TB/s part;
A30, same source and shape class, is within 11%), so the model cannot and should not reach them."""

CORE = """## The serving iteration model and the shared cost core (issue 16 item 1)

Shared with training today: every GEMM of a serving iteration is `windtunnel.cost.compute.gemm_time` (tile
and wave quantisation, k-loop efficiency, the chip's efficiency profile; serving picks the fastest tile per
token count), every TP all-reduce, EP all-to-all, DP all-gather and pipeline hand-off is
`windtunnel.cost.collectives` on the instance's placed topology tiers, and the efficiency profiles
(`cost/efficiency.py`, calibrated GEMM efficiencies) are the training ones. Not shared yet: the serving model
builds its per-layer operator list itself (`infer/iteration.py`) instead of reading the forward operators of
`graph/transformer.py`; the two agree on shapes but MoE permutation, router and norm kernels are written
twice. Moving it onto the graph would need a forward-only, token-count-parameterised view of the layer ops
(an accessor in `graph/`, owned by the training lead) memoised per token count to keep the replay at
>= 10,000 requests per wall-second (now ~35,000, `benchmarks/bench_infer.py`); it was not needed for the
MoE fixes above and is left for that accessor."""


def _files(csv_path: str) -> dict[str, str]:
    """Row id -> the CSV it came from (a folder's inference_runs*.csv, or the one file)."""
    path = Path(csv_path)
    files = sorted(path.glob("inference_runs*.csv")) if path.is_dir() else [path]
    out: dict[str, str] = {}
    for file in files:
        if file.exists():
            with open(file, newline="") as handle:
                for row in csv.DictReader(handle):
                    out[row.get("id", "")] = file.name
    return out


def _notes() -> dict[str, str]:
    path = catalog_dir("deployments", "inference_notes.yaml")
    doc = (read_yaml(path) or {}) if path.exists() else {}
    return {str(k): str(v) for k, v in (doc.get("notes") or {}).items()}


def _systems_line(csv_path: str) -> str:
    """Which catalog entries describe the rows' serving systems, and which systems none does."""
    from windtunnel.infer.systems import lookup_system
    from windtunnel.validation.inference import read_rows, serving_system

    try:
        rows = read_rows(csv_path)
    except WindtunnelError:
        return ""
    known: dict[str, tuple[str, ...]] = {}
    unknown: set[str] = set()
    for row in rows:
        system = lookup_system(row.get("serving_system"))
        if system.known:
            known[serving_system(row)] = system.entries
        else:
            unknown.add(serving_system(row))
    described = "; ".join(f"{name} ({', '.join(entries)})" for name, entries in sorted(known.items()))
    return ("**Serving systems.** What a row's serving system does where the row does not say (KV precision, "
            "scheduler, two-batch overlap, expert kernels) is catalog data, `deployments/serving.yaml` `systems`, "
            "looked up by the system's name without parenthesised details (`infer/systems.py`; a stated column "
            f"such as `kv_precision` wins). Described: {described or 'none'}. Not in the catalog (its "
            f"`system_defaults` apply): {', '.join(sorted(unknown)) or 'none'}.")


def report_markdown(results: list[RowResult], summary: dict, csv_path: str) -> str:
    """The report's Markdown (see the module docstring)."""
    files = _files(csv_path)
    names = ", ".join(f"`{n}`" for n in sorted(set(files.values()))) or f"`{csv_path}`"
    lines = ["# Inference validation report", "",
             f"Generated by `windtunnel validate inference {csv_path} --out ...`. Rows come from {names} "
             "(project copies of `shared/reference/`; every row's source and transcription notes are in the file, "
             "`inference_runs_2_NOTES.md` beside the second). Dynamic rescheduling and autoscaling: "
             "`validation/DYNAMIC.md`.", "", HEADER]
    for scope in ("generations", "systems"):
        for key, values in sorted(((serving_defaults().get("fitted") or {}).get(scope) or {}).items()):
            lines.append(f"Fitted for {key}: " + ", ".join(f"`{k}` = {v:g}" for k, v in sorted(values.items())) + ".")
    lines += ["", "**How rows are predicted.** Single-iteration rows (prefill or decode tokens/s per device with a "
              "batch per device) are one iteration of the stated shape from the iteration-time model. Static-batch rows "
              "run the simulator with the whole batch arriving at once. Closed-loop rows (`concurrency`) run the "
              "simulator with that many clients and read means over the steady window.", "", _systems_line(csv_path), "",
              PHYSICS, "",
              "## Summary", "", *summary_lines(summary)]
    lines += slice_lines("Validation error by CSV, architecture and model", results,
                         lambda r: [f"file: {files.get(r.id, '?')}", f"arch: {r.arch}", f"model: {r.model}"])
    lines += slice_lines("Validation error by metric and by source", results,
                         lambda r: [r.metric, f"source: {r.source.split(',')[0].split('(')[0].strip()[:60]}"])
    lines += far_off_lines(results, _notes(), lambda r: f"{r.role}, {r.metric}, {pct(r.error)}")
    lines += ["", CORE]
    lines += rows_lines(results, [
        ("id", lambda r: r.id), ("model", lambda r: r.model), ("group", lambda r: r.group),
        ("metric", lambda r: r.metric), ("kind", lambda r: r.kind), ("measured", lambda r: num(r.measured)),
        ("predicted", lambda r: num(r.predicted)), ("error", error_cell), ("role", lambda r: r.role),
        ("status", lambda r: r.status),
    ])
    return "\n".join(lines) + "\n"
