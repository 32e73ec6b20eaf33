"""Synthetic measured training rows for the profile tests: jobs simulated with a hidden, perturbed
profile stand in for a user's measurements (CSV schema of validation/training_runs.csv)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

CHIP = "h100-sxm"
# Rows chosen so that each perturbed parameter dominates at least one of them (GEMM-bound, long-sequence
# attention-bound, scale-out-bound, host-bound), at 8 to 128 devices.
SHAPES = [  # (devices, tp, pp, seq_len, global_batch, hidden, layers, heads)
    (8, 1, 1, 2048, 64, 2048, 16, 16),
    (8, 8, 1, 8192, 16, 4096, 16, 32),
    (16, 2, 2, 16384, 16, 2048, 16, 16),
    (8, 1, 1, 1024, 256, 1024, 8, 8),
    (64, 8, 1, 2048, 8, 4096, 16, 32),
    (128, 1, 1, 2048, 1024, 1024, 8, 8),
    (16, 16, 1, 4096, 8, 8192, 16, 64),
    (8, 1, 1, 32768, 8, 2048, 16, 16),
    (8, 8, 1, 2048, 8, 8192, 4, 64),
]
# The hidden profile: factors on the priors.
HIDDEN = {"gemm.bf16": 0.92, "attention.flash.fwd": 1.08, "comm.scale_out_efficiency": 0.85, "host.op_s": 1.3}
FIELDS = ["id", "model", "arch", "layers", "hidden", "ffn_hidden", "heads", "vocab", "position_embedding", "seq_len",
          "hardware", "n_devices",
          "precision", "tp", "pp", "micro_batch", "global_batch", "recompute", "metric", "value", "framework"]


def synthetic_rows(shapes=SHAPES) -> list[dict]:
    """Rows of the shapes, value 1 (placeholder)."""
    rows = []
    for i, (devices, tp, pp, seq, batch, hidden, layers, heads) in enumerate(shapes, start=1):
        rows.append({"id": f"S{i}", "model": "synthetic", "arch": "dense", "layers": str(layers), "hidden": str(hidden),
                     "ffn_hidden": str(4 * hidden), "heads": str(heads), "vocab": "32000", "position_embedding": "rope",
                     "seq_len": str(seq),
                     "hardware": CHIP, "n_devices": str(devices), "precision": "bf16", "tp": str(tp), "pp": str(pp),
                     "micro_batch": "1", "global_batch": str(batch), "recompute": "none",
                     "metric": "tokens_per_s_per_device", "value": "1", "framework": "megatron"})
    return rows


def measured_rows(hidden: dict[str, float] = HIDDEN, shapes=SHAPES) -> tuple[list[dict], dict[str, float]]:
    """Rows whose values are simulated with the priors times ``hidden``; also the true values."""
    from windtunnel.calibrate.fit import Fitter, select_members
    from windtunnel.profile import prior_value

    rows = synthetic_rows(shapes)
    members, chip, stack, _ = select_members(rows)
    fitter = Fitter(members, chip, stack)
    names = list(hidden)
    values = fitter.values_of(names, [math.log(hidden[n]) for n in names])
    for row, value in zip(rows, fitter.predict(values), strict=True):
        row["value"] = repr(value)
    return rows, {n: prior_value(chip, n) * k for n, k in hidden.items()}


def write_csv(rows: list[dict], path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return path
