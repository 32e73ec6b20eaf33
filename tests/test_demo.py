"""The `make demo` tour's pieces: plan tables within 80 columns that say which plans do not fit, and an accuracy
section that works outside a checkout (from the packaged error bands)."""

from __future__ import annotations

import io

from rich.console import Console

from windtunnel.demo import _accuracy, _plan_table


def _console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=80, color_system=None), buffer


def test_plan_table_fits_80_columns_and_names_unfit_plans():
    console, buffer = _console()
    results = _plan_table(console, "title", "llama3-405b", "h100-sxm", 16384, 8192, 2048,
                          ["tp=8,pp=16,vpp=4,mbs=1,recompute=selective,sp=true,zero=1,tp_overlap=true",
                           "tp=8,pp=16,vpp=4,mbs=1,recompute=full,sp=true,zero=1,tp_overlap=true"])
    text = buffer.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "every plan: tp=8,pp=16" in text  # shared keys once, under the table
    unfit = [str(i + 1) for i, r in enumerate(results) if not r.feasible]
    assert unfit == ["1"]  # selective recompute of 405B at this plan does not fit in 80 GB (memory model)
    assert "does not fit in device memory: plan 1" in text


def test_accuracy_outside_a_checkout_reads_the_packaged_bands(tmp_path, monkeypatch):
    from windtunnel.train.uncertainty import load_bands

    monkeypatch.chdir(tmp_path)
    console, buffer = _console()
    _accuracy(console)
    text = " ".join(buffer.getvalue().split())  # unwrap the 80-column lines
    rows = load_bands()["all"]["validation_rows"]
    assert f"{rows} validation rows" in text and "packaged catalog/bands.yaml" in text
