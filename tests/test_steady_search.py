"""The plan search's fast paths compute what the slow ones did (issue 19): packed-key unique rows
equal numpy's ``unique(axis=0)``; the steady-state step refines plans as the exact play does."""

from __future__ import annotations

import numpy as np
import pytest

from windtunnel.train.screen import unique_rows


@pytest.mark.parametrize("seed", range(5))
def test_unique_rows_matches_numpy(seed):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, [9, 3, 257, 17, 2, 2], size=(5000, 6)).astype(np.int64)
    expected, inverse = np.unique(rows, axis=0, return_inverse=True)
    got, got_inverse = unique_rows(rows)
    assert np.array_equal(got, expected) and got.dtype == expected.dtype
    assert np.array_equal(got_inverse, inverse.reshape(-1))


def test_unique_rows_falls_back_where_keys_do_not_pack():
    """Negative values, spans beyond 62 bits and empty input take numpy's own path."""
    for rows in (np.array([[-1, 2], [3, -4], [-1, 2]]), np.array([[2**40, 2**40], [1, 2**40 - 1]], dtype=np.int64),
                 np.zeros((0, 3), dtype=np.int64), np.array([[True, False], [False, False], [True, False]])):
        expected, inverse = np.unique(rows, axis=0, return_inverse=True)
        got, got_inverse = unique_rows(rows)
        assert np.array_equal(got, expected) and np.array_equal(got_inverse, inverse.reshape(-1))


def test_refined_plans_match_the_exact_play():
    """Plans the search refines (steady-state steps) have the exact play's step time and breakdown."""
    from conftest import search_once
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.model import load_model
    from windtunnel.specs.plan import parse_plan
    from windtunnel.train.space import SearchSpace
    from windtunnel.train.step import TrainingJob, simulate

    model, cluster = load_model("llama3-8b"), load_hardware("h100-sxm", 16)
    space = SearchSpace(model, cluster, 4096, 256, choices={"tp": [1, 2], "pp": [2, 4], "mbs": [1], "cp": [1]})
    document = search_once(space, top=4, refine_count=4)
    assert document["plans"]
    for row in document["plans"]:
        exact = simulate(TrainingJob(model, cluster, parse_plan(row["plan"]), 4096, 256, exact=True))
        assert row["step_time_s"] == pytest.approx(exact.step_time_s, rel=1e-3)
        for key, value in exact.breakdown.items():
            assert row["breakdown"][key] == pytest.approx(value, rel=1e-3, abs=1e-12)
