"""The optional `cluster` column of the training CSVs: a run on a catalog cluster other than its chip's default."""

from __future__ import annotations

from windtunnel.validation import training as validation


def _bloom_row() -> dict:
    return next(r for r in validation.read_rows("validation/more_training_runs.csv") if r["id"] == "Y22")


def test_a_named_cluster_is_used_and_its_network_matters():
    row = _bloom_row()
    assert row["cluster"] == "jean-zay-a100"
    job = validation.build_job(row)[0]
    assert job.cluster.id == "jean-zay-a100" and job.cluster.tiers[-1].bandwidth == 6.25e9
    default = validation.build_job(dict(row, cluster=""))[0]
    assert default.cluster.id != "jean-zay-a100"
    slow, fast = validation.validate_rows([row])[0], validation.validate_rows([dict(row, cluster="")])[0]
    assert slow.predicted > fast.predicted  # sec_per_iter: the 4 x 100 Gb/s node network is slower


def test_a_cluster_of_another_chip_is_a_clear_skip():
    result = validation.validate_rows([dict(_bloom_row(), cluster="dgx-h100")])[0]
    assert result.predicted is None and "'cluster'" in result.status and "a100-80g" in result.status
