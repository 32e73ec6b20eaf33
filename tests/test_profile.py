"""Profiles: the fit recovers a hidden profile, loading checks the file, saving never touches the package."""

from __future__ import annotations

import pytest
import yaml

from profile_synth import CHIP, HIDDEN, measured_rows
from windtunnel.calibrate.fit import fit_profile
from windtunnel.profile import (
    PARAMETERS,
    FittedParameter,
    Profile,
    fitted_override,
    load_profile,
    package_dir,
    prior_value,
    save_profile,
)
from windtunnel.specs.errors import WindtunnelError


@pytest.fixture(scope="module", name="fitted")
def fitted_fixture():
    rows, truth = measured_rows()
    return fit_profile(rows, loo=False), truth


def test_round_trip_recovers_the_hidden_profile_and_keeps_priors_elsewhere(fitted):
    profile, truth = fitted
    by_name = {p.name: p for p in profile.parameters}
    # every perturbed parameter dominates some row, so the fit must identify it
    assert set(HIDDEN) <= {p.name for p in profile.parameters if p.identified}
    for p in profile.parameters:
        lo, hi = PARAMETERS[p.name].bounds
        assert lo <= p.value <= hi
        if p.identified:
            expected = truth.get(p.name, p.prior)
            if p.name == "attention.flash.bwd":  # tied to the forward at the prior's ratio
                expected = truth["attention.flash.fwd"] * p.prior / by_name["attention.flash.fwd"].prior
            assert p.value == pytest.approx(expected, rel=0.05), p.name
            assert p.stderr is not None and p.stderr > 0
        else:
            assert p.value == p.prior and "not identified" in p.source
    assert not by_name["memory.bandwidth_efficiency"].identified  # no row is memory-bound enough
    assert profile.fit["rms_log_error"] < 0.03 and profile.fit["rows_used"] == [f"S{i}" for i in range(1, 10)]


def test_fitted_override_places_identified_values_on_the_chip_only(fitted):
    profile, _ = fitted
    override = fitted_override(profile)
    chip_fit = override["chips"][CHIP]
    gemm = next(p for p in profile.parameters if p.name == "gemm.bf16")
    assert chip_fit["gemm"]["max_efficiency"]["bf16"] == gemm.value
    memory = chip_fit.get("memory", {})
    assert "bandwidth_efficiency" not in memory  # unidentified: not applied
    assert fitted_override(None) is None


def _write(tmp_path, doc) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return str(path)


def _doc(**update) -> dict:
    doc = {"windtunnel_profile": 1, "windtunnel_version": "0.1.0", "chip": CHIP,
           "parameters": [{"name": "gemm.bf16", "value": 0.7, "prior": 0.75, "bounds": [0.3, 0.85],
                           "identified": True}]}
    doc.update(update)
    return doc


@pytest.mark.parametrize(("update", "needle"), [
    ({"chip": "tpu-v9"}, "'chip' is 'tpu-v9'"),
    ({"windtunnel_profile": 7}, "'windtunnel_profile' is 7"),
    ({"parameters": [{"name": "gemm.int3", "value": 0.5, "prior": 0.5, "bounds": [0, 1], "identified": True}]},
     "'gemm.int3' is not a fittable parameter"),
    ({"parameters": [{"name": "gemm.bf16", "value": 1.4, "prior": 0.75, "bounds": [0.3, 0.85], "identified": True}]},
     "outside its physical bounds [0.3, 0.85]"),
    ({"stack": "caffe"}, "'stack' is 'caffe'"),
])
def test_load_errors_name_the_field_and_the_value(tmp_path, update, needle):
    with pytest.raises(WindtunnelError) as info:
        load_profile(_write(tmp_path, _doc(**update)))
    assert needle in str(info.value)


def test_bad_yaml_and_non_profiles_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("chip: [h100", encoding="utf-8")
    with pytest.raises(WindtunnelError, match="Malformed YAML"):
        load_profile(bad)
    with pytest.raises(WindtunnelError, match="not a windtunnel profile"):
        load_profile(_write(tmp_path, {"chip": CHIP}))


def test_save_refuses_the_package_and_merges_same_chip(tmp_path):
    one = Profile(chip=CHIP, parameters=[FittedParameter(name="gemm.bf16", value=0.7, prior=0.75, bounds=(0.3, 0.85),
                                                         identified=True)], inputs=[{"kind": "a"}])
    with pytest.raises(WindtunnelError, match="inside the installed windtunnel package"):
        save_profile(one, package_dir() / "catalog" / "mine.yaml")
    path = tmp_path / "p.yaml"
    save_profile(one, path)
    two = Profile(chip=CHIP, parameters=[
        FittedParameter(name="gemm.bf16", value=0.65, prior=0.75, bounds=(0.3, 0.85), identified=True),
        FittedParameter(name="comm.scale_out_efficiency", value=0.7, prior=0.85, bounds=(0.3, 0.98), identified=True)],
        inputs=[{"kind": "b"}])
    save_profile(two, path)
    merged = load_profile(path)
    assert {p.name: p.value for p in merged.parameters} == {"gemm.bf16": 0.65, "comm.scale_out_efficiency": 0.7}
    assert merged.inputs == [{"kind": "a"}, {"kind": "b"}]
    unidentified = Profile(chip=CHIP, parameters=[
        FittedParameter(name="comm.scale_out_efficiency", value=0.85, prior=0.85, bounds=(0.3, 0.98), identified=False),
        FittedParameter(name="host.op_s", value=1.35e-5, prior=1.35e-5, bounds=(1e-6, 1e-4), identified=False)])
    save_profile(unidentified, path)  # does not undo what an earlier input identified
    merged = {p.name: p for p in load_profile(path).parameters}
    assert merged["comm.scale_out_efficiency"].value == 0.7 and merged["comm.scale_out_efficiency"].identified
    assert not merged["host.op_s"].identified
    other = Profile(chip="a100-80g", parameters=[])
    with pytest.raises(WindtunnelError, match="of chip 'h100-sxm'"):
        save_profile(other, path)


def test_prior_value_reads_catalog_and_shipped_calibration():
    assert prior_value("h100-sxm", "comm.scale_out_efficiency") == 0.85  # efficiency.yaml default
    # the shipped calibration fits attention per chip; a named kernel without its own value falls back to it
    assert 0.2 < prior_value("ascend-910b", "attention.ascend-fa.fwd", "mindspeed") < 0.85
    with pytest.raises(WindtunnelError, match="not fittable"):
        prior_value("h100-sxm", "gemm.int3")


def test_small_rows_predict_the_big_ones_better_except_what_only_big_rows_exercise():
    """Fit on the <= 16-device rows of the hidden profile, score the 64- and 128-device rows."""
    from windtunnel.calibrate.report import compare_rows

    rows, _ = measured_rows()
    profile = fit_profile(rows, small=16, loo=False)
    assert all(int(r["n_devices"]) <= 16 for r in rows if r["id"] in profile.fit["rows_used"])
    comparison = compare_rows(rows, [("p", profile)])
    summary = comparison.summary()
    assert summary["held_out_ids"] == ["S5", "S6"]
    assert summary["median_abs_error_after"] < 0.7 * summary["median_abs_error_before"]
    by_id = {c.after.id: c for c in comparison.rows}
    # S6 (128 devices, GEMM- and host-bound) is fixed; S5 is bound by the scale-out tier, which no small row
    # exercises, so its scale-out efficiency keeps the prior and its error stays
    assert abs(by_id["S6"].after.error) < 0.25 * abs(by_id["S6"].before.error)
    assert abs(by_id["S5"].after.error) == pytest.approx(abs(by_id["S5"].before.error), abs=0.02)
    assert not next(p for p in profile.parameters if p.name == "comm.scale_out_efficiency").identified
