"""Which rows count as calibration: the split rule picks candidates (dense, one node), but with the shipped
calibration only the rows it was really fitted on are calibration rows; the others are scored as validation."""

from __future__ import annotations

from windtunnel.validation import training


def _rows(path: str, ids: set[str]) -> list[dict]:
    return [r for r in training.read_rows(path) if r["id"] in ids]


def test_unfitted_single_node_rows_are_validation_under_the_shipped_calibration():
    fitted = training.shipped_fit_ids()
    assert {"21", "22", "M27", "M29"} <= fitted and "X7" not in fitted
    rows = _rows("validation/training_runs.csv", {"21"}) + _rows("validation/extra_training_runs.csv", {"X7"})
    assert [training.row_role(r, rows) for r in rows] == ["calibration", "calibration"]  # the rule alone
    roles = {r.id: r.role for r in training.validate_rows(rows)}
    assert roles == {"21": "calibration", "X7": "validation"}
    # A profile's before/after comparison keeps the rule's split (its own fit read those rows).
    assert {r.id: r.role for r in training.validate_rows(rows, shipped_roles=False)} == {"21": "calibration",
                                                                                       "X7": "calibration"}
