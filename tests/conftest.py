"""Shared helpers: small model shapes, a CLI runner that uses the real entry point (subprocess)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from windtunnel.specs.model import ModelSpec

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


def validation_script(name: str) -> ModuleType:
    """Import a script of validation/ (``name`` without '.py') as a module, for its functions (with validation/
    on the import path while it loads, for the scripts that import another script beside them)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "validation" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(REPO / "validation"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "validation"))
    return module


def report_as_committed(script: ModuleType, tmp_path: Path, monkeypatch) -> tuple[str, str]:
    """(the text a validation script's ``main()`` writes now, the committed report it names as ``REPORT``)."""
    committed = script.REPORT
    monkeypatch.setattr(script, "REPORT", tmp_path / committed.name)
    script.main()
    return (tmp_path / committed.name).read_text(), committed.read_text()


def gpt_model(hidden: int = 1024, heads: int = 16, layers: int = 4, **extra) -> ModelSpec:
    """A GPT-style model as in Korthikanti et al. 2022: GeLU, 4h FFN, MHA, dropout 0.1."""
    return ModelSpec(id="gpt-test", layers=layers, hidden=hidden, ffn_hidden=4 * hidden, heads=heads,
                     activation="gelu", norm="layernorm", dropout=0.1, vocab=51200, **extra)


def small_dense() -> ModelSpec:
    """A small Llama-style model with a small vocabulary, so pipeline stages are nearly balanced."""
    return ModelSpec(id="small-dense", layers=16, hidden=2048, ffn_hidden=8192, heads=16, kv_heads=8, vocab=8192)


def run_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``python -m windtunnel.cli.app ARGS`` the way a user would (main() maps errors to exit code 2)."""
    return subprocess.run([sys.executable, "-m", "windtunnel.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=str(REPO))


@pytest.fixture(name="cli")
def cli_fixture():
    return run_cli


def assert_one_clear_error(proc, *needles: str) -> str:
    """Exit code 2, exactly one 'error:' line on stderr naming every needle, no traceback anywhere."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def search_once(space, **kwargs) -> dict:
    """One in-process plan search (a single local worker), the backend closed afterwards."""
    from windtunnel.search.backends import LocalBackend
    from windtunnel.train.search import search_training

    backend = LocalBackend(1)
    try:
        return search_training(space, backend, **kwargs)
    finally:
        backend.close()


def tiny_training_csv(tmp_path, ids) -> tuple[Path, dict]:
    """A CSV of a few rows of validation/training_runs.csv (its header kept), and those rows by id."""
    import csv
    import io

    text = (REPO / "validation" / "training_runs.csv").read_text(encoding="utf-8")
    reader = csv.DictReader(io.StringIO(text))
    rows = [r for r in reader if r["id"] in ids]
    assert sorted(r["id"] for r in rows) == sorted(ids)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=reader.fieldnames)
    writer.writeheader()
    writer.writerows(rows)
    path = tmp_path / "tiny.csv"
    path.write_text(out.getvalue(), encoding="utf-8")
    return path, {r["id"]: r for r in rows}

