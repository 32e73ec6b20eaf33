"""One-off: derive the stack columns of the rows collected before the stack was an input.

Run once (2026-12-01) on validation/training_runs.csv and validation/extra_training_runs.csv; the
validator reads only columns, never source or notes text. The rule, fixed before looking at errors:

- framework, from the row's source: Narayanan et al. SC21 and Korthikanti et al. 2022 ->
  megatron-lm-2021; the Megatron-LM baseline rows of MegaScale (NSDI 2024) -> megatron-lm-2023;
  NVIDIA/Megatron-LM README and NVIDIA's Megatron-Core MoE report (arXiv 2603.07685) -> megatron-lm;
  NVIDIA/NeMo performance tables -> nemo; NVIDIA-NeMo/Megatron-Bridge tables -> megatron-bridge;
  OPT (metaseq: Megatron TP inside FSDP, 2022) -> megatron-lm-2021; PaLM -> jax; MegaScale's own
  system rows -> megascale (not a catalog stack: parallel transformer block, sliding-window attention, LAMB).
- zero_stage: 3 where the source says FSDP=1 (parameters, gradients and optimizer sharded).
- moe_imbalance: 1.0 where the source forces balanced routing ("balanced" in its table); else blank
  (the validator's default 1.1).
- plan_options: offload_layers=N for Megatron-Bridge's Llama-3 70B FP8-CS recipes on GB300 (20) and
  GB200 (40), which set cpu_offloading_num_layers (scripts/performance/configs/llama3 workload base
  configs LLAMA3_70B_GB300/GB200_FP8_CS_BASE_CONFIG).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

COLUMNS = ("framework", "zero_stage", "moe_imbalance", "plan_options")
OFFLOAD = {("LLAMA3_70B", "gb300"): 20, ("LLAMA3_70B", "gb200"): 40}


def framework_of(row: dict) -> str:
    source, model = row["source"], row["model"]
    if "MegaScale)" in model or model.startswith("175B MegaScale"):
        return "megascale"  # MegaScale's own system: no catalog stack (the validator skips it)
    if "Narayanan" in source or "Korthikanti" in source or "OPT" in source:
        return "megatron-lm-2021"
    if "MegaScale" in source:
        return "megatron-lm-2023"
    if "Megatron-Bridge" in source:
        return "megatron-bridge"
    if "NVIDIA/NeMo" in source:
        return "nemo"
    if "PaLM" in source:
        return "jax"
    if "Megatron-LM" in source or "2603.07685" in source or "Megatron" in model:
        return "megatron-lm"
    raise SystemExit(f"row {row['id']}: no rule for source {source!r}")


def derive(path: Path) -> None:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    fields += [c for c in COLUMNS if c not in fields]
    for row in rows:
        notes = row.get("notes", "").lower().replace(" ", "")
        row["framework"] = row.get("framework") or framework_of(row)
        if not row.get("zero_stage") and "fsdp=1" in notes:
            row["zero_stage"] = "3"
        if not row.get("moe_imbalance") and "balanced" in notes:
            row["moe_imbalance"] = "1.0"
        layers = OFFLOAD.get((row["model"].split(" ")[0], row["hardware"]))
        options = row.get("plan_options") or ""
        if layers and "Megatron-Bridge" in row["source"] and "FP8-CS" in row["notes"] and "offload" not in options:
            row["plan_options"] = ",".join(filter(None, [options, f"offload_layers={layers}"]))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: row.get(k, "") for k in fields} for row in rows)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        derive(Path(name))
