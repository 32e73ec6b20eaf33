"""One-off: derive the optional ``release`` column (the software release a row was measured with).

Run once (2026-12-02) on the five training CSVs. The ranking in ACCURACY.md orders plans only within one
release (a plan search runs on one software version; across releases the measured order is also the
software's). The rule reads the row's source, fixed before the ranking was recomputed with it:

- a NeMo / Megatron-Bridge table: its container, '25.11 NeMo container' or 'NeMo 24.07' -> nemo-25.11,
  nemo-24.07;
- otherwise a container image the source names: 'container nvcr.io/nvidia/jax:25.01-maxtext-py3' or
  'image ghcr.io/nvidia/jax:pax-2024-03-04' -> jax:25.01-maxtext-py3, jax:pax-2024-03-04;
- otherwise the torchtitan commit the source names: 'torchtitan 9dec370' -> torchtitan-9dec370;
- otherwise blank (one publication of one software version: the rows of the file that share a blank are
  one release, as before this column).

A file none of whose rows gets a release is left as it is.

    python validation/derive_release_column.py validation/*training_runs*.csv
"""

from __future__ import annotations

import re
import sys

from csv_columns import main

PATTERNS = (
    (re.compile(r"(\d\d\.\d\d(?:\.\d\d)?) NeMo container"), "nemo-{}"),
    (re.compile(r"NeMo (\d\d\.\d\d)"), "nemo-{}"),
    (re.compile(r"(?:container nvcr\.io|image ghcr\.io)/nvidia/([^;)\s]+)"), "{}"),
    (re.compile(r"torchtitan ([0-9a-f]{7,})"), "torchtitan-{}"),
)


def release_of(source: str) -> str:
    """The release a source names, by the first pattern that matches; '' when none does."""
    for pattern, form in PATTERNS:
        if match := pattern.search(source):
            return form.format(match.group(1))
    return ""


def _add_releases(fields: list[str], rows: list[dict]) -> int:
    releases = [release_of(row.get("source", "")) for row in rows]
    if not any(releases):
        return 0
    if "release" not in fields:
        fields.append("release")
    changed = sum(1 for row, release in zip(rows, releases, strict=True) if row.get("release") != release)
    for row, release in zip(rows, releases, strict=True):
        row["release"] = release
    return changed


if __name__ == "__main__":
    raise SystemExit(main(sys.argv, _add_releases, "given a release"))
