"""One-off: rows of the Megatron-Bridge performance archive's releases after 26.02 (X80 onwards).

Run once (2026-12-02) on NVIDIA-NeMo/Megatron-Bridge ``docs/performance-summary-archive.md`` at
067f987d (2026-08-22; the page last changed in 4ab94dfad, 2026-08-11), which holds the tables of the
26.02.01, 26.04, 26.04.01, 26.06 and 26.06.01 NeMo containers besides the 25.09-26.02 tables this file
already has. The page is read from a path on the command line; it is not copied into the project.

    python validation/bridge_archive_rows.py PAGE.md >> validation/extra_training_runs.csv

The rule, fixed before any of these rows was predicted (the same as for the file's 26.02 rows):

- every pre-training row of those five releases whose model the file already has (Llama 3 70B,
  Llama 3.1 405B, DeepSeek-V3, GPT-OSS 120B, Qwen3-30B-A3B, Qwen3-235B-A22B) on a catalogued chip;
- left out: NVFP4 rows (the catalog has no FP4 training precision), Kimi K2 and Nemotron 3 Nano /
  Super (not in the catalog), the SFT and LoRA tables (fine-tuning, not pre-training);
- the plan is the table's (GPUs, precision, GBS, MBS, sequence, FSDP, TP, PP, CP, VP, EP); FP8 and
  MXFP8 are both the plan precision fp8, as in the 26.02 rows; VP or EP 'n/a' is 1; FSDP > 0 is
  Megatron-FSDP (zero_stage 3) over all data-parallel ranks;
- what the table does not show keeps the stack defaults, as the 26.02 rows do; the one exception is
  carried from them: the Llama 3 70B FP8 FSDP rows on GB300 / GB200 state the recipes' CPU offload
  of 20 / 40 layers (plan option offload_layers, derive_stack_columns.py), MXFP8 rows state fp8_recipe=mx
  (validation/derive_fp8_recipe.py), and a plan with more virtual
  stages than layers (Llama 3.1 405B, PP16 x VP8 = 128 for 126 layers) counts the embedding and the loss
  as a stage each (plan option layout=E|(t|)*126L), as the 26.02 row of that layout (X27) does;
- the model shape columns are copied from this file's rows of the same model; MoE rows are
  force-balanced and dropless (the page's footnote); ``release`` is the container (nemo-26.04.01), as
  validation/derive_release_column.py gives it.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

RELEASES = ("26.02.01", "26.04", "26.04.01", "26.06", "26.06.01")
CHIPS = {"DGX-GB300": "gb300", "DGX-GB200": "gb200", "DGX-B300": "b300", "DGX-B200": "b200",
         "DGX-H100": "h100-sxm"}
PRECISIONS = {"BF16": ("bf16", "BF16"), "FP8": ("fp8", "FP8-CS recipe (the table writes FP8)"),
              "MXFP8": ("fp8", "FP8-MX recipe (MXFP8)")}
OFFLOAD = {("LLAMA3_70B", "gb300"): 20, ("LLAMA3_70B", "gb200"): 40}
SHAPE = ("arch", "params_total_b", "params_active_b", "layers", "hidden", "ffn_hidden", "heads", "kv_heads",
         "head_dim", "vocab", "moe_experts", "moe_shared_experts", "moe_topk", "moe_ffn_hidden",
         "moe_dense_layers", "mla")
CSV = Path(__file__).with_name("extra_training_runs.csv")
COMMIT = "067f987d"


def table_rows(page: str) -> list[tuple[str, str, list[str]]]:
    """(release, model, cells) for every pre-training table row of the wanted releases."""
    rows, release, section, model = [], "", "", ""
    for line in page.splitlines():
        if m := re.match(r"## (\S+) NeMo Container", line):
            release = m.group(1)
        elif m := re.match(r"### (.*)", line):
            section = m.group(1)
        elif m := re.match(r"#### Model: (.*)", line):
            model = m.group(1).strip()
        elif line.startswith("| DGX") and release in RELEASES and section.startswith("Pre-Training"):
            rows.append((release, model, [cell.strip() for cell in line.strip().strip("|").split("|")]))
    return rows


def shapes(existing: list[dict]) -> dict[str, dict]:
    """Each model's shape columns, from the newest row of it already in the file."""
    return {row["model"]: {key: row[key] for key in SHAPE} for row in existing}


def as_int(cell: str, default: int = 1) -> int:
    return default if cell == "n/a" else int(cell)


def build(page: str, existing: list[dict]) -> list[dict]:
    known = shapes(existing)
    number = max(int(row["id"][1:]) for row in existing if row["id"].startswith("X"))
    out = []
    for release, model, cells in table_rows(page):
        if model not in known or cells[2] not in PRECISIONS or cells[0] not in CHIPS:
            continue
        if len(cells) == 13:  # 26.06.01 drops the FSDP column
            cells = cells[:6] + ["0"] + cells[6:]
        system, gpus, prec, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ep, tokens, tflops = cells
        chip = CHIPS[system]
        precision, recipe = PRECISIONS[prec]
        tflops = re.sub(r"\[.*\]", "", tflops)
        layers = int(known[model]["layers"])
        stages = int(pp) * as_int(vp)
        dp = int(gpus) // (int(tp) * int(pp) * int(cp))
        sharded = as_int(fsdp, 0) > 0
        number += 1
        notes = [f"{system}; {recipe}; model TFLOP/s/GPU {tflops} (same run)"]
        notes.append(f"FSDP={1 if sharded else 0}" + (f" (the table gives the sharding group size, {fsdp} = all "
                                                         "GPUs: Megatron-FSDP)" if sharded else ""))
        notes.append(f"GA={int(gbs) // (int(mbs) * dp)} derived (gbs/(mbs*dp))")
        if known[model]["arch"] == "moe":
            notes.append("MoE: forced-balanced routing, dropless (page footnote)")
        if "[^" in cells[-1]:
            notes.append("the page footnotes this run: 'Performance regression in GPT-OSS 120B pre-training is a "
                         "known issue (NVIDIA/cudnn-frontend#256)'")
        options = []
        if sharded and (model, chip) in OFFLOAD:
            options.append(f"offload_layers={OFFLOAD[(model, chip)]}")
        if stages == layers + 2:
            options.append(f"layout=E|(t|)*{layers}L")
            notes.append(f"PP{pp} x VP{vp} = {stages} virtual stages for {layers} layers: the embedding and the loss "
                         f"count as a stage each (Megatron's account_for_embedding/loss_in_pipeline_split), written "
                         f"as the layout E|(t|)*{layers}L, as in X27")
        if prec == "MXFP8":
            options.append("fp8_recipe=mx")  # validation/derive_fp8_recipe.py
        notes.append("arch copied from this file's rows of the same model; dp derived = n_devices/(tp*pp*cp); "
                     "added by validation/bridge_archive_rows.py; not in shared/reference")
        row = {"id": f"X{number}",
               "source": f"NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md at {COMMIT}, {release} NeMo "
                         "container (the page's per-model tables, pre-training)",
               "model": model, **known[model], "seq_len": seq, "hardware": chip, "n_devices": gpus,
               "devices_per_node": "" if chip.startswith("gb") else "8", "precision": precision, "tp": tp, "pp": pp,
               "dp": "", "cp": cp, "ep": str(as_int(ep)), "vpp": str(as_int(vp)), "micro_batch": mbs,
               "global_batch": gbs, "recompute": "", "sequence_parallel": "", "distributed_optimizer": "",
               "metric": "tokens_per_s_per_device", "value": tokens, "notes": "; ".join(notes),
               "plan_options": ",".join(options),
               "framework": "megatron-bridge", "zero_stage": "3" if sharded else "",
               "moe_imbalance": "1.0" if known[model]["arch"] == "moe" else "", "release": f"nemo-{release}"}
        out.append(row)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: bridge_archive_rows.py PERFORMANCE_ARCHIVE.md", file=sys.stderr)
        return 2
    with CSV.open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields, existing = reader.fieldnames, list(reader)
    writer = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
    for row in build(Path(argv[1]).read_text(), existing):
        writer.writerow(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
