"""Sim2Availability inputs and closed forms: durations, fault profiles, policies, Young/Daly, MTTF, and the
`windtunnel avail` command line (clear errors, the JSON contracts, determinism).

Published targets are read from validation/reliability.csv, never typed in."""

from __future__ import annotations

import csv
import json
import re

import pytest

from conftest import REPO
from test_cli import assert_one_clear_error
from windtunnel.avail.faults import job_rates, load_faults, profile_names
from windtunnel.avail.formulas import daly_interval_s, mttf_s, young_interval_s
from windtunnel.avail.policy import parse_policy
from windtunnel.avail.scenario import make_scenario
from windtunnel.avail.units import parse_duration
from windtunnel.specs.errors import WindtunnelError


def reliability_rows() -> dict[str, dict]:
    with (REPO / "validation" / "reliability.csv").open(newline="", encoding="utf-8") as fh:
        return {row["id"]: row for row in csv.DictReader(fh)}


def daly_points() -> list[tuple[float, float]]:
    """(M in minutes, published optimum in minutes) from row A16's notes."""
    notes = reliability_rows()["A16"]["notes"]
    out = []
    for value, unit, opt in re.findall(r"M=([0-9.]+) (h|min) -> ([0-9.]+) min", notes):
        out.append((float(value) * (60.0 if unit == "h" else 1.0), float(opt)))
    assert len(out) == 3, notes
    return out


def llama_unexpected() -> int:
    return int(reliability_rows()["A01"]["value"].split("/")[2])


# ---- durations ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,seconds", [("30min", 1800.0), ("60s", 60.0), ("12s", 12.0), ("54d", 54 * 86400.0),
                                          ("24h", 86400.0), ("1.5h", 5400.0), ("0", 0.0), (45, 45.0)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["30 parsecs", "abc", "-5min", "", "1e400s", "90"])
def test_bad_duration_names_field_and_forms(text):
    with pytest.raises(WindtunnelError) as err:
        parse_duration(text, "checkpoint-every")
    assert "checkpoint-every" in str(err.value) and "min" in str(err.value)


# ---- closed forms ---------------------------------------------------------------------------------------


def test_daly_published_checks_by_closed_form():
    """Daly's three checks (restart 10 min, dump 5 min) from his higher-order formula, within 1%."""
    for m_min, published in daly_points():
        assert daly_interval_s(300.0, m_min * 60.0) / 60.0 == pytest.approx(published, rel=0.01)


def test_young_is_first_order_daly():
    """Young's sqrt(2 d M) and Daly's estimate converge when d << M; Daly's is the smaller (minus d)."""
    young, daly = young_interval_s(1.0, 1e6), daly_interval_s(1.0, 1e6)
    assert daly < young and daly == pytest.approx(young, rel=0.01)
    assert daly_interval_s(100.0, 40.0) == 40.0  # d >= 2M: checkpoint every M


def test_mttf_reproduces_meta_projections():
    """MTTF = 1 / (nodes x r_f) with RSC-1's r_f reproduces Meta's 16,384-GPU projection within 10%."""
    rows = reliability_rows()
    r_f = float(re.search(r"RSC-1 ([0-9.]+)", rows["A05"]["value"]).group(1))
    projected_h = float(re.search(r"16,384: ([0-9.]+) h", rows["A06"]["value"]).group(1))
    assert mttf_s(r_f, 16384, 8) / 3600.0 == pytest.approx(projected_h, rel=0.10)
    assert mttf_s(r_f, 16, 8) == pytest.approx(mttf_s(r_f, 8, 8) / 2)


# ---- fault profiles ---------------------------------------------------------------------------------------


def test_catalog_profiles_load_with_sources():
    assert {"llama3-54day", "meta-rsc1", "meta-rsc2"} <= set(profile_names())
    for name in profile_names():
        prof = load_faults(f"catalog:{name}")
        assert prof.components
        for comp in prof.components.values():
            assert len(comp.source) > 10 and re.search(r"A0[1-7]|A1[56]|command line|reliability", comp.source)


def test_llama_rates_reproduce_the_cause_table():
    """The derived rates, applied to the observed job, give back 419 unexpected interruptions in 54 days."""
    rates = job_rates(load_faults("catalog:llama3-54day"), 16384, 8)
    assert rates.failure_rate_per_s * 54 * 86400 == pytest.approx(llama_unexpected(), rel=1e-9)


def test_negative_rate_is_a_clear_error(tmp_path):
    path = tmp_path / "neg.yaml"
    path.write_text("components:\n  gpu: {component: accelerator, per: device, rate_per_hour: -1, source: 'test source'}\n")
    with pytest.raises(WindtunnelError) as err:
        load_faults(str(path))
    assert "rate_per_hour" in str(err.value) and "-1" in str(err.value)


def test_fail_slow_needs_slowdown(tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text("components:\n  gpu: {component: accelerator, mode: fail-slow, per: device, rate_per_hour: 1e-5, "
                    "source: 'test source'}\n")
    with pytest.raises(WindtunnelError, match="slowdown"):
        load_faults(str(path))


def test_unknown_profile_lists_known():
    with pytest.raises(WindtunnelError) as err:
        load_faults("catalog:nope")
    assert "llama3-54day" in str(err.value) and "faults" in str(err.value)


# ---- policies -----------------------------------------------------------------------------------------------


def test_policy_string_parses():
    p = parse_policy("hot-spare,spares=32,detect=10s,restart=30s,repair=12h")
    assert (p.kind, p.spares, p.detect_s, p.restart_s, p.repair_s) == ("hot-spare", 32, 10.0, 30.0, 43200.0)


def test_unknown_policy_lists_valid():
    with pytest.raises(WindtunnelError) as err:
        parse_policy("reboot-and-pray")
    assert "reboot-and-pray" in str(err.value) and "hot-spare" in str(err.value) and "policy" in str(err.value)


def test_unknown_policy_key():
    with pytest.raises(WindtunnelError, match="spares"):
        parse_policy("hot-spare,sparez=3")


def test_spares_larger_than_cluster():
    with pytest.raises(WindtunnelError) as err:
        make_scenario(64, "catalog:meta-rsc1", "hot-spare,spares=9", step_time_s=10, horizon_s=86400,
                      devices_per_node=8)
    assert "spares" in str(err.value) and "9" in str(err.value) and "8 nodes" in str(err.value)


def test_async_write_longer_than_interval():
    with pytest.raises(WindtunnelError, match="checkpoint-every"):
        make_scenario(64, "catalog:meta-rsc1", "restart-from-checkpoint,checkpoint-every=60s,checkpoint-cost=10min,"
                      "async=true", step_time_s=10, horizon_s=86400, devices_per_node=8)


# ---- command line ---------------------------------------------------------------------------------------------

SIM_OPTS = {"devices": "2048", "hardware": "h100-sxm", "faults": "catalog:llama3-54day",
            "policy": "restart-from-checkpoint", "checkpoint-every": "30min", "checkpoint-cost": "60s",
            "step-time": "12s", "horizon": "7d", "replications": "50", "seed": "1"}


def sim_args(**over: str) -> list[str]:
    opts = {**SIM_OPTS, **{k.replace("_", "-"): v for k, v in over.items()}}
    return ["avail", "simulate", *[x for k, v in opts.items() for x in (f"--{k}", v)], "--json"]


def test_simulate_json_contract_and_determinism(cli):
    first = cli(*sim_args())
    assert first.returncode == 0, first.stderr
    data = json.loads(first.stdout)
    for key in ("availability", "ettr", "interruptions_per_day", "lost_seconds_by_cause", "ci95"):
        assert key in data
    for key in ("availability", "ettr", "interruptions_per_day", "lost_seconds_by_cause"):
        assert key in data["ci95"]
    assert set(data["lost_seconds_by_cause"]) == {"detection", "restart", "recompute", "checkpoint", "degraded",
                                                  "waiting_for_repair"}
    assert 0.0 < data["ettr"] < data["availability"] <= 1.0
    second = cli(*sim_args())
    assert second.stdout == first.stdout  # byte-identical with the same seed
    other = cli(*sim_args(seed="2"))
    assert other.returncode == 0 and other.stdout != first.stdout


def test_calculators_json(cli):
    proc = cli("avail", "checkpoint-interval", "--mtbf", "24h", "--checkpoint-cost", "5min", "--restart", "10min",
               "--json")
    data = json.loads(proc.stdout)
    assert data["young_s"] == pytest.approx(7200.0) and data["daly_s"] < data["young_s"]
    proc = cli("avail", "mttf", "--failures-per-1000-node-days", "6.5", "--devices-per-node", "8", "--devices", "16384",
               "--json")
    assert json.loads(proc.stdout)["mttf_s"] == pytest.approx(mttf_s(6.5, 16384, 8))


def test_cli_bad_input_clear_errors(cli, tmp_path):
    assert_one_clear_error(cli(*sim_args(policy="hot-spare,spares=5000")), "spares", "5000")
    assert_one_clear_error(cli(*sim_args(policy="reboot-and-pray")), "reboot-and-pray", "hot-spare")
    bad = tmp_path / "broken.yaml"
    bad.write_text("components:\n  gpu: {component: accelerator, per: device\n")
    assert_one_clear_error(cli(*sim_args(faults=str(bad))), "broken.yaml", "line")
    neg = tmp_path / "neg.yaml"
    neg.write_text("components:\n  gpu: {component: accelerator, per: device, rate_per_hour: -2, source: 'test source'}\n")
    assert_one_clear_error(cli(*sim_args(faults=str(neg))), "rate_per_hour", "-2")
    assert_one_clear_error(cli("avail", "optimize", "--devices", "64", "--knob", "luck"), "luck", "spares")
    assert_one_clear_error(cli(*sim_args(horizon="3 fortnights")), "horizon", "3 fortnights")
