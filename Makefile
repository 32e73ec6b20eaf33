# Two commands: `make demo` and `make test`. Both create .venv with pip on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint validate bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,ray]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m windtunnel.demo

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks validation
	$(BIN)/pytest -q

TRAINING_CSVS := validation/training_runs.csv validation/training_runs_2.csv validation/extra_training_runs.csv validation/more_training_runs.csv validation/dgxc_training_runs.csv

validate: $(STAMP)
	$(BIN)/python validation/fit_shipped_calibration.py > /dev/null
	$(BIN)/windtunnel validate training validation/training_runs.csv --out validation/REPORT.md
	$(BIN)/windtunnel validate training validation/extra_training_runs.csv --out validation/EXTRA_REPORT.md
	$(BIN)/windtunnel validate training validation/more_training_runs.csv --out validation/MORE_REPORT.md
	$(BIN)/windtunnel validate training validation/dgxc_training_runs.csv --out validation/DGXC_REPORT.md
	$(BIN)/windtunnel validate training validation/memory_runs.csv --out validation/MEMORY.md
	$(BIN)/windtunnel validate all $(TRAINING_CSVS) --baseline validation/baselines/accuracy_2c062f5.json --out validation/ACCURACY.md --bands-out src/windtunnel/catalog/bands.yaml
	$(BIN)/python validation/collectives.py > /dev/null
	$(BIN)/python validation/attention_kernels.py
	$(BIN)/python validation/gemm_kernels.py
	$(BIN)/python validation/collective_kernels.py

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_step.py

clean:
	rm -rf $(VENV) build src/*.egg-info
