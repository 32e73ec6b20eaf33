"""Developer script: regenerate the shipped calibration (src/windtunnel/catalog/calibration.yaml).

Run: `.venv/bin/python validation/fit_shipped_calibration.py` (seconds). It fits GEMM and attention
efficiencies on the calibration rows of the committed training CSVs (windtunnel.calibrate.shipped.calibrate)
and rewrites the package's catalog/calibration.yaml; re-running it on unchanged code and data leaves
the file byte-identical (check with `git diff`). Users never run this: `windtunnel calibrate training
... --out PROFILE` writes a profile of their own cluster and never touches the package.
"""

from __future__ import annotations

from pathlib import Path

from windtunnel.calibrate.shipped import calibrate
from windtunnel.validation.training import read_rows

HERE = Path(__file__).parent
# The files whose calibration rows (the split rule's) are fitted. dgxc_training_runs.csv holds the only
# single-node JAX runs (G36, G37), the xla family's calibration rows. The extra/more files are not read, so
# their single-node rows are scored as validation rows (validation/training.py shipped_fit_ids).
CSVS = ("training_runs.csv", "training_runs_2.csv", "dgxc_training_runs.csv")


def main() -> None:
    rows = [row for name in CSVS for row in read_rows(HERE / name)]
    report = calibrate(rows, write=True, sources=tuple(f"validation/{name}" for name in CSVS))
    for label, fit in report.items():
        values = ", ".join(f"{k} {v:.3f}" for k, v in fit["parameters"].items())
        print(f"{label}: {values} (rows {', '.join(fit['rows'])}; rms log error {fit['rms_log_error']:.3f})")


if __name__ == "__main__":
    main()
