"""Developer script: regenerate the shipped serving calibration (src/windtunnel/catalog/deployments/calibration.yaml).

Run: `.venv/bin/python validation/fit_serving_calibration.py` (seconds). It fits the serving parameters on
the calibration rows of validation/inference_runs.csv (windtunnel.validation.inference.calibrate: DeepSeek
profile-data timings and TensorRT-LLM 0.5 static-batch rows, the split rule stated in INFERENCE_REPORT.md)
and rewrites the package's catalog/deployments/calibration.yaml. Users never run this: `windtunnel infer
calibrate CSV --out FILE` writes the fit to a file of their own and never touches the package.
"""

from __future__ import annotations

from pathlib import Path

from windtunnel.validation.inference import calibrate, read_rows

HERE = Path(__file__).parent


def main() -> None:
    report = calibrate(read_rows(HERE / "inference_runs.csv"), write=True)
    for scope, fit in report.items():
        values = ", ".join(f"{k} {v:.4g}" for k, v in fit["parameters"].items())
        print(f"{scope}: {values} (rows {', '.join(fit['rows'])}; rms log error {fit['rms_log_error']:.3f})")


if __name__ == "__main__":
    main()
