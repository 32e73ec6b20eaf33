"""One accuracy report over every training reference CSV (`windtunnel validate all`, validation/ACCURACY.md).

Every row of every CSV is predicted once (windtunnel.validation.training). On the validation rows the report
gives the overall median / max |error|; the same per slice (stack x chip generation/precision x
dense/MoE) and per coarser slice (stack, generation/precision, dense vs MoE, long context); the rows
whose published plan the model puts over memory; the ranking quality (within one model shape on one
chip, the share of pairs of runs the predictions order as the measurements do); the bands of
report/bands.py; and, against a previous `--json` document, the rows whose |error| grew.
"""

from __future__ import annotations

import dataclasses
import hashlib
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.yamlio import read_json
from windtunnel.validation.bands import THROUGHPUT_METRICS, name_of, step_time_ratio
from windtunnel.validation.rows import RowResult, apct, num, pct, summarize

DEFAULT_CSVS = ("validation/training_runs.csv", "validation/training_runs_2.csv", "validation/extra_training_runs.csv")
LONG_CONTEXT = 16384  # tokens: a sequence this long or longer is "long context"
REGRESSION = 0.01  # a row regresses when its |error| grows by more than one percentage point
# The accuracy each slice should reach (issue 12's done-when line): a slice of at least SLICE_MIN_ROWS
# validation rows with a median |error| above SLICE_TARGET is listed as over the target.
SLICE_TARGET = 0.12
SLICE_MIN_ROWS = 5


@dataclass
class FileResults:
    """One CSV's predicted rows, and each row's tokens per step (global_batch x seq_len) by id."""

    path: str
    results: list[RowResult]
    tokens_per_step: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The CSV's file name, which labels its rows ('training_runs.csv:12')."""
        return name_of(self.path)


def _tokens(row: dict) -> float | None:
    try:
        batch, seq = float(row.get("global_batch") or 0), float(row.get("seq_len") or 0)
    except ValueError:
        return None
    return batch * seq if batch > 0 and seq > 0 else None


def job_key(row: dict) -> str:
    """A digest of the job a row describes as the model sees it (model, cluster, plan, stack, batch and
    sequence; not the calibration), "" when the row builds no job. Equal keys: repeat measurements."""
    from windtunnel.validation import training as validation

    try:
        job, _, skip = validation.build_job(row, fitted_override={})
    except WindtunnelError:
        return ""
    if job is None or skip:
        return ""
    # The model spec a row builds is named after the row; its shape is what the job is.
    text = repr(dataclasses.replace(job, model=job.model.model_copy(update={"id": "", "name": ""}),
                                    fitted_override=None, extra_assumptions=()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def predict_files(paths: Iterable[str | Path], progress=None) -> list[FileResults]:
    """Predict every row of each training CSV once; two CSVs with the same file name are an error.
    ``progress(phase, done, total)`` hears of each row (one phase per file)."""
    from windtunnel.validation import training as validation

    out: list[FileResults] = []
    for path in paths:
        if any(f.name == name_of(path) for f in out):
            raise WindtunnelError(f"Two CSVs named '{name_of(path)}' were given; rows are labelled by file name, so "
                                  f"each CSV must have its own name.")
        rows = validation.read_rows(path)
        tokens = {row["id"]: t for row in rows if (t := _tokens(row)) is not None}
        phase = None if progress is None else (lambda _, d, t, name=name_of(path): progress(f"predict {name}", d, t))
        results = validation.validate_rows(rows, progress=phase)
        keys = {row["id"]: job_key(row) for row in rows}
        for r in results:
            r.job_key = keys.get(r.id, "")
        out.append(FileResults(str(path), results, tokens))
    return out


# ---- slices -----------------------------------------------------------------------------------------


def _context(r: RowResult) -> list[str]:
    if not r.seq_len:
        return []
    return [f"long context (seq_len >= {LONG_CONTEXT})" if r.seq_len >= LONG_CONTEXT else f"seq_len < {LONG_CONTEXT}"]


SLICE_LEVELS: dict[str, Callable[[RowResult], list[str]]] = {
    "stack x chip generation/precision x dense/MoE": lambda r: [f"{r.framework or '?'} x {r.group} x {r.arch}"],
    "stack": lambda r: [r.framework or "?"],
    "chip generation/precision": lambda r: [r.group],
    "dense vs MoE": lambda r: [r.arch],
    "context length": _context,
}


def slice_stats(results: Iterable[RowResult], keys: Callable[[RowResult], list[str]]) -> list[dict]:
    """Per slice, sorted by name: median and max |error| (fractions) and row count of its validation rows,
    and which way it errs: the median step-time ratio measured / predicted (above 1: the model predicts
    the slice too fast; None when no row has a step-time or throughput metric)."""
    slices: dict[str, list[RowResult]] = {}
    for r in results:
        if r.role == "validation" and r.error is not None:
            for key in keys(r):
                slices.setdefault(key, []).append(r)
    out = []
    for name, members in sorted(slices.items()):
        errors = [abs(r.error) for r in members]
        ratios = [x for x in (step_time_ratio(r) for r in members) if x is not None]
        out.append({"slice": name, "median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
                    "rows": len(errors), "median_step_time_ratio": statistics.median(ratios) if ratios else None})
    return out


def over_target(stats: Iterable[dict]) -> list[dict]:
    """The slices of at least SLICE_MIN_ROWS validation rows whose median |error| is above SLICE_TARGET."""
    return [s for s in stats if s["rows"] >= SLICE_MIN_ROWS and s["median_abs_error"] > SLICE_TARGET]


def _direction(ratio: float | None) -> str:
    """How a slice errs, from its median measured / predicted step-time ratio (within 1% of 1: no direction)."""
    if ratio is None:
        return ""
    if abs(ratio - 1.0) < 0.01:
        return f"{ratio:.3f}"
    return f"{ratio:.3f} ({'too fast' if ratio > 1 else 'too slow'})"


def over_memory(files: list[FileResults]) -> list[str]:
    """Validation rows whose published plan the model puts over memory, as 'csv:id'."""
    return [f"{f.name}:{r.id}" for f in files for r in f.results if r.role == "validation" and r.fits is False]


# ---- ranking ----------------------------------------------------------------------------------------


def throughput_values(r: RowResult, tokens_per_step: float | None) -> tuple[str, float, float] | None:
    """(metric, measured, predicted) per-device throughput of a row, higher = faster; None when the row
    has none. Throughput metrics are used as they are; a step time becomes tokens/s per device with the
    row's tokens per step (global_batch x seq_len) and devices."""
    if r.measured is None or r.predicted is None or r.measured <= 0 or r.predicted <= 0:
        return None
    if r.metric in THROUGHPUT_METRICS:
        return r.metric, r.measured, r.predicted
    if r.metric == "sec_per_iter" and tokens_per_step and r.devices:
        return ("tokens_per_s_per_device from sec_per_iter", tokens_per_step / r.measured / r.devices,
                tokens_per_step / r.predicted / r.devices)
    return None


def _spread(a: float, b: float) -> float:
    """Relative difference of two measurements of one quantity: |a - b| / the smaller."""
    return abs(a - b) / min(a, b)


def rank_pairs(entries: Iterable[tuple[RowResult, float | None]], spread: float | None = None) -> dict[str, Any]:
    """Ranking quality of validation rows given as (row, tokens per step or None).

    Rows are grouped by model shape (RowResult.model), chip, generation/precision and metric. Within a group,
    two rows of the same job (equal ``job_key``: one plan measured twice, e.g. by two software releases) are
    a *repeat*: there is no plan order to get right, and their relative difference is the measurements' own
    spread. Every other pair with distinct measured throughput counts if both rows were measured with the
    same software release (``RowResult.release``; blank is one release): a plan search orders plans on the
    software it runs, and across releases the measured order is also the software's, which the model does
    not see. A pair is concordant when the predictions order it the same way (a tie in the prediction is
    not): share = concordant / pairs (None without pairs). ``beyond_spread`` repeats the count on the pairs
    whose measured throughputs differ by more than the measurement spread (the median spread of the repeats, or ``spread`` when given): a
    smaller difference is within what re-measuring one plan moves, so reality gives it no order either.
    """
    groups: dict[tuple[str, str, str, str], list[tuple[str, float, float, str, str]]] = {}
    for r, tokens in entries:
        values = throughput_values(r, tokens) if r.role == "validation" else None
        if values is not None:
            metric, measured, predicted = values
            groups.setdefault((r.model, r.chip, r.group, metric), []).append(
                (r.id, measured, predicted, r.job_key or f"row:{r.id}", r.release))
    repeats = [_spread(a[1], b[1]) for members in groups.values()
               for i, a in enumerate(members) for b in members[i + 1:] if a[3] == b[3]]
    floor = spread if spread is not None else (statistics.median(repeats) if repeats else 0.0)
    total = concordant = tied = far = far_good = 0
    table = []
    for (model, chip, group, metric), members in sorted(groups.items()):
        pairs = good = ties = wide = wide_good = 0
        for i, (_, m_i, p_i, k_i, release_i) in enumerate(members):
            for _, m_j, p_j, k_j, release_j in members[i + 1:]:
                if m_i == m_j or k_i == k_j or release_i != release_j:
                    continue
                right = (m_i - m_j) * (p_i - p_j) > 0
                pairs, good, ties = pairs + 1, good + right, ties + (p_i == p_j)
                if _spread(m_i, m_j) > floor:
                    wide, wide_good = wide + 1, wide_good + right
        if pairs:
            table.append({"model": model, "chip": chip, "group": group, "metric": metric, "rows": len(members),
                          "pairs": pairs, "concordant": good, "pairs_beyond_spread": wide,
                          "concordant_beyond_spread": wide_good, "ids": [m[0] for m in members]})
        total, concordant, tied = total + pairs, concordant + good, tied + ties
        far, far_good = far + wide, far_good + wide_good
    return {"pairs": total, "concordant": concordant, "tied_predictions": tied,
            "share": concordant / total if total else None,
            "repeats": {"pairs": len(repeats), "median_spread": statistics.median(repeats) if repeats else None,
                        "max_spread": max(repeats) if repeats else None},
            "beyond_spread": {"spread": floor, "pairs": far, "concordant": far_good,
                              "share": far_good / far if far else None},
            "groups": table}


def ranking(results: Iterable[RowResult], tokens_per_step: Mapping[str, float] | None = None,
            spread: float | None = None) -> dict[str, Any]:
    """rank_pairs over one CSV's rows (``tokens_per_step`` by row id, for step-time rows)."""
    tokens = tokens_per_step or {}
    return rank_pairs(((r, tokens.get(r.id)) for r in results), spread)


# ---- regressions --------------------------------------------------------------------------------------


def regressions(rows: list[dict], baseline_path: str | Path) -> dict[str, Any]:
    """Rows of this run whose |error| grew by more than REGRESSION against a previous `validate all --json`
    document (rows matched by file name and id), and the rows it predicted that this run does not."""
    doc = read_json(baseline_path)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise WindtunnelError(f"Baseline '{baseline_path}' is not a `windtunnel validate all --json` document (it has "
                              f"no 'rows' list); write one with `windtunnel validate all --json > old.json`.")
    before = {(str(r.get("file")), str(r.get("id"))): r.get("error") for r in doc["rows"] if isinstance(r, dict)}
    worse, lost = [], []
    for row in rows:
        old = before.get((row["file"], row["id"]))
        if old is None:
            continue
        if row["error"] is None:
            lost.append(f"{row['file']}:{row['id']}")
        elif abs(row["error"]) - abs(old) > REGRESSION:
            worse.append({"row": f"{row['file']}:{row['id']}", "before": old, "after": row["error"]})
    return {"baseline": str(baseline_path), "threshold": REGRESSION, "worse": worse, "no_longer_predicted": lost}


# ---- the document and its Markdown ----------------------------------------------------------------------


def build_document(files: list[FileResults], *, baseline: str | Path | None = None,
                   bands: dict | None = None) -> dict[str, Any]:
    """The `validate all --json` document: rows (with their file), per-file and overall summaries, slices,
    the slice target and the finest slices over it, plans over memory, ranking, bands (when given) and
    regressions (when a baseline is given)."""
    every = [r for f in files for r in f.results]
    rows = [{**r.as_dict(), "file": f.name} for f in files for r in f.results]
    memory = over_memory(files)
    overall = rank_pairs((r, f.tokens_per_step.get(r.id)) for f in files for r in f.results)
    spread = overall["beyond_spread"]["spread"]  # one measurement spread for every file: the pooled repeats'
    doc: dict[str, Any] = {
        "files": [{"path": f.path, "name": f.name, "summary": summarize(f.results),
                   "ranking": ranking(f.results, f.tokens_per_step, spread)} for f in files],
        "summary": summarize(every),
        "slices": {level: slice_stats(every, keys) for level, keys in SLICE_LEVELS.items()},
        "target": {"median_abs_error": SLICE_TARGET, "min_rows": SLICE_MIN_ROWS},
        "over_memory": {"count": len(memory), "rows": memory},
        "ranking": overall,
        "rows": rows,
    }
    finest = next(iter(SLICE_LEVELS))
    doc["target"]["over"] = [s["slice"] for s in over_target(doc["slices"][finest])]
    if bands is not None:
        doc["bands"] = bands
    if baseline is not None:
        doc["regressions"] = regressions(rows, baseline)
    return doc


def _share(rank: dict) -> str:
    return "n/a (no pairs)" if rank["share"] is None else f"{rank['share']:.1%} of {rank['pairs']} pairs"


def _share_beyond(rank: dict) -> str:
    wide = rank["beyond_spread"]
    return _share(wide) + f" differing by more than {wide['spread']:.1%}"


def _table(header: list[str], body: Iterable[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(b) + " |" for b in body)]


def _span(span: list | None) -> str:
    return "" if not span else f"{span[0]}-{span[1]}"


def _bands_lines(bands: dict) -> list[str]:
    lines = ["", "## Error bands (catalog/bands.yaml)", "",
             "Step-time ratio measured / predicted, 10th-90th percentile of the slice's validation rows widened to",
             f"contain 1; slices with fewer than {bands['min_rows']} validation rows take a coarser band. Ranges: what "
             "the slice's measured rows cover.", ""]
    body = []
    for key, entry in [*bands["slices"].items(), *bands["groups"].items(), ("all", bands["all"])]:
        band = entry["band"]
        body.append([key.replace("|", " x "), str(entry["validation_rows"]), f"{band['ratio'][0]:.3f}-{band['ratio'][1]:.3f}",
                     band["from"].replace("|", " x ") + ("" if band["from"] == key else " (fallback)"),
                     _span(entry["seq_len"]), _span(entry["devices"]), ", ".join(entry["chips"])])
    return lines + _table(["slice", "validation rows", "band", "band from", "seq_len", "devices", "chips"], body)


def report_markdown(doc: dict, command: str) -> str:
    """validation/ACCURACY.md: headline, per file, slices, plans over memory, ranking, bands, regressions."""
    summary, rank = doc["summary"], doc["ranking"]
    lines = [
        "# Training accuracy over every reference file",
        "",
        f"Generated by `{command}`. Each row is predicted once; the split rule of `windtunnel validate training`",
        "(a dense model on <= 8 devices calibrates, every other row validates) holds, and the figures below",
        "are on validation rows unless named otherwise. |error| = |predicted - measured| / measured.",
        "",
        "## Overall",
        "",
        f"- validation rows: {summary['n_validation']}; median |error| **{apct(summary['median_abs_error'])}**, "
        f"max |error| **{apct(summary['max_abs_error'])}**",
        f"- calibration rows: {summary['n_calibration']}; median |error| {apct(summary['calibration_median_abs_error'])}",
        f"- rows predicted: {summary['n_predicted']}; skipped: {summary['n_skipped']}",
        f"- ranking: the predictions order **{_share_beyond(rank)}** as the measurements do, and "
        f"{_share(rank)} of distinct jobs over all (section Ranking quality)",
        f"- published plans over memory in the model: {doc['over_memory']['count']} validation rows",
        f"- slices (stack x chip generation/precision x dense/MoE) of at least {doc['target']['min_rows']} validation "
        f"rows with a median |error| above {doc['target']['median_abs_error']:.0%}: "
        + (", ".join(doc["target"]["over"]) or "none"),
        "",
        "## Per file",
        "",
    ]
    lines += _table(["file", "validation rows", "median abs error", "max abs error", "calibration median",
                     "ranking beyond spread", "ranking, all pairs"],
                    [[f["path"], str(f["summary"]["n_validation"]), apct(f["summary"]["median_abs_error"]),
                      apct(f["summary"]["max_abs_error"]), apct(f["summary"]["calibration_median_abs_error"]),
                      _share(f["ranking"]["beyond_spread"]), _share(f["ranking"])] for f in doc["files"]])
    for level, stats in doc["slices"].items():
        lines += ["", f"## By {level}", ""]
        lines += _table(["slice", "median abs error", "max abs error", "rows", "median measured / predicted step time"],
                        [[s["slice"], apct(s["median_abs_error"]), apct(s["max_abs_error"]), str(s["rows"]),
                          _direction(s["median_step_time_ratio"])] for s in stats])
    lines += ["", "## Published plans over memory", ""]
    lines.append(f"{doc['over_memory']['count']} validation rows: " + (", ".join(doc["over_memory"]["rows"]) or "none")
                 + ". Their step times are still predicted and scored.")
    rep = rank["repeats"]
    lines += ["", "## Ranking quality", "",
              "Within one model shape on one chip (and precision), every pair of validation rows of two distinct",
              "jobs (model, cluster, plan, stack, batch, sequence) with the same metric and distinct measured",
              "values, both measured with the same software release (the CSVs' `release` column; blank is one",
              "release): a plan search orders plans on the software it runs, and across releases the measured",
              "order is also the software's, which the model does not see. Concordant when the predictions order",
              "the pair as the measurements do (a tie in the prediction is not). Step-time rows compare as tokens/s",
              "per device. Two rows of one job, in any releases, are a repeat measurement (another release of the",
              "same recipe), not a plan order; their relative",
              "difference is the measurements' own spread: "
              + (f"{rep['pairs']} repeat pairs, median {rep['median_spread']:.1%}, max {rep['max_spread']:.1%}. "
                 if rep["pairs"] else "no repeat pairs. ")
              + "A pair of distinct jobs whose measured throughputs differ by less than that median is within what",
              "re-measuring one plan moves, so it is counted in the all-pairs figure only.",
              f"Overall (pairs may span files): {_share_beyond(rank)}; all pairs of distinct jobs {_share(rank)}, "
              f"{rank['tied_predictions']} tied predictions.", ""]
    lines += _table(["model", "chip", "group", "metric", "rows", "pairs", "concordant", "pairs beyond spread",
                     "concordant beyond spread"],
                    [[g["model"], g["chip"], g["group"], g["metric"], str(g["rows"]), str(g["pairs"]),
                      str(g["concordant"]), str(g["pairs_beyond_spread"]), str(g["concordant_beyond_spread"])]
                     for g in rank["groups"]])
    if "bands" in doc:
        lines += _bands_lines(doc["bands"])
    if "regressions" in doc:
        reg = doc["regressions"]
        lines += ["", f"## Rows worse than {reg['baseline']} (|error| up by more than 1 percentage point)", ""]
        lines += [f"- {w['row']}: {pct(w['before'])} -> {pct(w['after'])}" for w in reg["worse"]] or ["None."]
        if reg["no_longer_predicted"]:
            lines.append("- no longer predicted: " + ", ".join(reg["no_longer_predicted"]))
    lines += ["", "## Rows", ""]
    lines += _table(["row", "stack", "group", "arch", "metric", "measured", "predicted", "error", "role", "fits"],
                    [[f"{r['file']}:{r['id']}", r.get("framework", ""), r["group"], r.get("arch", ""), r["metric"],
                      num(r["measured"]), num(r["predicted"]), pct(r["error"]), r["role"],
                      "" if r.get("fits") is None else ("yes" if r["fits"] else "**no**")] for r in doc["rows"]])
    return "\n".join(lines) + "\n"


def print_summary(doc: dict, console: Any) -> None:
    """The terminal summary of `validate all`: per file, overall, ranking, plans over memory, regressions."""
    for f in doc["files"]:
        s = f["summary"]
        console.print(f"{f['path']}: {s['n_validation']} validation rows, median |error| "
                      f"{apct(s['median_abs_error']) or 'n/a'}, max {apct(s['max_abs_error']) or 'n/a'}; "
                      f"ranking {_share_beyond(f['ranking'])} (all pairs {_share(f['ranking'])})")
    s = doc["summary"]
    console.print(f"all files: {s['n_validation']} validation rows, median |error| {apct(s['median_abs_error']) or 'n/a'}, "
                  f"max {apct(s['max_abs_error']) or 'n/a'}; ranking {_share_beyond(doc['ranking'])} "
                  f"(all pairs {_share(doc['ranking'])}); "
                  f"plans over memory: {doc['over_memory']['count']}")
    console.print(f"slices over the {doc['target']['median_abs_error']:.0%} target (>= {doc['target']['min_rows']} rows): "
                  + (", ".join(doc["target"]["over"]) or "none"))
    if "regressions" in doc:
        reg = doc["regressions"]
        console.print(f"rows worse than {reg['baseline']} by more than 1 point: {len(reg['worse'])}")
        for w in reg["worse"]:
            console.print(f"  {w['row']}: {pct(w['before'])} -> {pct(w['after'])}")
        if reg["no_longer_predicted"]:
            console.print("  no longer predicted: " + ", ".join(reg["no_longer_predicted"]))
