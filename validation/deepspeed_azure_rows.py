"""One-off: the DeepSpeed-on-Azure runs of the post's figures that were not yet rows (X189-X226).

Run once (2026-12-07). The rule of extra_training_runs_NOTES.md ("every run of the post with a stated or readable
throughput on A100 80GB ... becomes a row") had been applied to 15 of the post's 53 bars; this adds the other 38.

    python validation/deepspeed_azure_rows.py >> validation/extra_training_runs.csv

Source: microsoft/DeepSpeed ``docs/_posts/2022-07-26-deepspeed-azure.md`` at 38327e07f and its figures
``docs/assets/images/175b-trend.png`` (Figure 5: (a) sequence 512, (b) sequence 1024), ``530b-trend.png`` (Figure 6)
and ``1t-trend.png`` (Figure 7). The images are not copied into the project.

How the bars were read (BARS below holds the readings). Each bar is found by its legend colour in a pixel row just
above the x axis; its top is the last row of that colour up the bar's middle; its height is the axis line's centre
(the intensity-weighted centre of its anti-aliased rows) minus that top row.
- Figure 5 panels: the scale is the axis's own, 0 to the 250 gridline (panel a: y 306.9 to 104.5, 1.2352 TFLOP/s
  per px; panel b: y 306.3 to 103.55, 1.2330 per px). Checks: the text's 204.49 bar (a, 256 GPUs, micro-batch 32)
  reads 203.7; the six panel-b bars already rows (X69-X74) read within 1.4 of their notes' values.
- Figures 6 and 7 (x axis at y 786): the scale is the labelled bars', 170.42 and 171.37 TFLOP/s at 596 and 599 px
  (Figure 6, 0.28602 per px), and the text's 165.36 for 1T at micro-batch 8 on 1,024 GPUs at 578 px (Figure 7,
  0.28609 per px). Checks: the bars already rows (X63-X65, X67, X68) read within 0.3 of their notes' values.
- Uncertainty: +-1.5 TFLOP/s (Figure 5), +-0.5 (Figures 6, 7).

Each row copies the row of the same model, sequence and figure that is already in the file (X60, X72, X62, X75 for
1T), then sets the GPUs, the micro-batch, the global batch (GPUs x micro-batch: gradient accumulation 1 in the
recipes) and the throughput (metric hfu = TFLOP/s / 312), and rewrites the notes' reading clause.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

CSV = Path(__file__).parent / "extra_training_runs.csv"
FIRST_ID = 189
A100_PEAK_TFLOPS = 312.0

# figure, template row, GPUs, micro-batch, bar height (px), TFLOP/s per px
SCALES = {"5a": 1.2352, "5b": 1.2330, "6": 0.28602, "7": 0.28609}
FIGURES = {"5a": "Figure 5a (docs/assets/images/175b-trend.png, sequence 512)",
           "5b": "Figure 5b (docs/assets/images/175b-trend.png, sequence 1024)",
           "6": "Figure 6 (docs/assets/images/530b-trend.png)",
           "7": "Figure 7 (docs/assets/images/1t-trend.png)"}
TEMPLATES = {"5a": "X60", "5b": "X72", "6": "X62", "7": "X75"}
UNCERTAINTY = {"5a": 1.5, "5b": 1.5, "6": 0.5, "7": 0.5}
BARS: list[tuple[str, int, int, float]] = [
    ("5a", 128, 1, 43.9), ("5a", 128, 2, 76.9), ("5a", 128, 4, 104.9), ("5a", 128, 8, 137.9), ("5a", 128, 16, 149.9),
    ("5a", 256, 1, 35.9), ("5a", 256, 2, 65.9), ("5a", 256, 4, 95.9), ("5a", 256, 8, 131.9), ("5a", 256, 16, 145.9),
    ("5a", 512, 1, 30.9), ("5a", 512, 2, 57.9), ("5a", 512, 4, 88.9), ("5a", 512, 8, 125.9), ("5a", 512, 16, 144.9),
    ("5a", 512, 32, 161.9),
    ("5b", 128, 2, 103.3), ("5b", 128, 4, 137.3), ("5b", 128, 8, 146.3),
    ("5b", 256, 1, 65.3), ("5b", 256, 2, 94.3), ("5b", 256, 4, 131.3), ("5b", 256, 8, 143.3),
    ("5b", 512, 1, 57.3), ("5b", 512, 2, 87.3), ("5b", 512, 4, 124.3), ("5b", 512, 8, 142.3),
    ("5b", 1024, 2, 65.3), ("5b", 1024, 4, 108.3), ("5b", 1024, 8, 133.3),
    ("6", 512, 1, 225.0), ("6", 512, 2, 419.0), ("6", 512, 4, 559.0),
    ("7", 512, 1, 247.0), ("7", 512, 2, 399.0), ("7", 512, 4, 526.0), ("7", 512, 8, 527.0), ("7", 1024, 2, 405.0),
]


def tflops(figure: str, height_px: float) -> float:
    """TFLOP/s per GPU of a bar (one decimal, as the other rows' readings)."""
    return round(height_px * SCALES[figure], 1)


def build(existing: list[dict]) -> list[dict]:
    """The new rows, copied from their templates in ``existing``; none whose plan is already a row."""
    by_id = {row["id"]: row for row in existing}
    taken = {(row["model"], row["seq_len"], row["n_devices"], row["micro_batch"]) for row in existing}
    out = []
    for number, (figure, devices, micro_batch, height) in enumerate(BARS, start=FIRST_ID):
        template = by_id[TEMPLATES[figure]]
        key = (template["model"], template["seq_len"], str(devices), str(micro_batch))
        if key in taken:
            raise ValueError(f"bar {figure} {devices} GPUs micro-batch {micro_batch} is already a row")
        value = tflops(figure, height)
        reading = (f"{FIGURES[figure]}: {value} TFLOP/s per GPU (read off the unlabelled bar, {devices} GPUs, "
                   f"micro batch {micro_batch}: {height:g} px at {SCALES[figure]} TFLOP/s per px, "
                   f"+-{UNCERTAINTY[figure]:g}; method and checks in validation/deepspeed_azure_rows.py)")
        rest = template["notes"][template["notes"].index("; metric hfu"):]
        rest = re.sub(r"micro batch \d+ and sequence", f"micro batch {micro_batch} and sequence", rest)
        rest = re.sub(r"metric hfu = [\d.]+/312", f"metric hfu = {value}/312", rest)
        row = dict(template, id=f"X{number}", n_devices=str(devices), dp=str(devices),
                   micro_batch=str(micro_batch), global_batch=str(devices * micro_batch),
                   value=f"{value / A100_PEAK_TFLOPS:.4f}", notes=reading + rest)
        out.append(row)
    return out


def main(argv: list[str]) -> int:
    with CSV.open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields, existing = reader.fieldnames, list(reader)
    writer = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
    for row in build(existing):
        writer.writerow(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
