"""The collective check against OpenXLA's measured collective table (validation/collective_kernels.py)."""

from __future__ import annotations

import math

from conftest import report_as_committed, validation_script


def _script():
    return validation_script("collective_kernels")


def test_every_measurement_costs_a_finite_collective_on_a_catalog_cluster():
    script = _script()
    rows = script.read_rows()
    assert len(rows) > 2000
    assert {row["collective"] for row in rows} == {"all_gather", "reduce_scatter", "all_reduce", "all_to_all"}
    for row in rows[::25]:
        predicted, measured = script.predicted_s(row), script.measured_s(row)
        assert math.isfinite(predicted) and predicted > 0 and measured > 0


def test_bus_bandwidth_of_a_large_node_wide_all_gather_is_a_fraction_of_the_link():
    """NCCL's bus bandwidth convention: a 2 GiB all-gather over the 8 GPUs of an H100 node runs near the NVLink
    bandwidth per direction, the model's at its scale-up efficiency."""
    script = _script()
    row = max((r for r in script.read_rows() if r["chip"] == "h100-sxm" and r["collective"] == "all_gather"
               and r["group_size"] == "8"), key=lambda r: int(r["buffer_bytes"]))
    measured = script.bus_fraction(row, script.measured_s(row))
    model = script.bus_fraction(row, script.predicted_s(row))
    assert 0.6 < measured < 1.0
    assert 0.6 < model < 1.0


def test_report_is_the_scripts_own(tmp_path, monkeypatch):
    written, committed = report_as_committed(_script(), tmp_path, monkeypatch)
    assert written == committed
