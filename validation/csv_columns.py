"""Shared by the one-off column derivations (derive_release_column.py, derive_fp8_recipe.py): read a CSV's
rows, let a function change them, write them back with the file's own line endings and column order."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path


def rewrite(path: Path, change: Callable[[list[str], list[dict]], int]) -> int:
    """Apply ``change(fields, rows)`` (it may append to ``fields`` and edit ``rows`` in place; it returns how
    many rows it changed) and write the file back unless nothing changed. Returns that count."""
    ending = "\r\n" if path.read_bytes().split(b"\n", 1)[0].endswith(b"\r") else "\n"
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields, rows = list(reader.fieldnames or []), list(reader)
    changed = change(fields, rows)
    if changed:
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields, lineterminator=ending)
            writer.writeheader()
            writer.writerows(rows)
    return changed


def main(argv: list[str], change: Callable[[list[str], list[dict]], int], what: str) -> int:
    """Rewrite every CSV named in ``argv[1:]`` with ``change``, printing how many of its rows ``what``."""
    for name in argv[1:]:
        print(f"{name}: {rewrite(Path(name), change)} rows {what}")
    return 0
