"""A typed view of a command's JSON document: a dataclass whose field names are the JSON keys of the matching
CLI verb (``--json``), with ``to_json_dict()`` (that document back) and ``to_frame()`` (its table as pandas).

Subclasses declare the keys as fields (units in their names, as in the JSON: ``_s`` seconds, ``_bytes``
bytes, ``_per_s`` per second) and name the list of rows ``to_frame`` turns into a DataFrame (``TABLE``). Keys
a document carries only sometimes are ``None`` when absent and left out of ``to_json_dict``; keys the class
does not know (a newer document) land in ``extra`` and go back out unchanged."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar


@dataclasses.dataclass
class JsonResult:
    TABLE: ClassVar[str] = ""
    OPTIONAL: ClassVar[tuple[str, ...]] = ()  # keys left out of the JSON when None

    @classmethod
    def json_keys(cls) -> list[str]:
        """The JSON keys this result holds (its field names, ``extra`` aside)."""
        return [f.name for f in dataclasses.fields(cls) if f.name != "extra"]

    @classmethod
    def from_json_dict(cls, document: dict[str, Any]):
        """The typed result of a JSON document (unknown keys kept in ``extra``)."""
        known = set(cls.json_keys())
        missing = [f.name for f in dataclasses.fields(cls) if f.name != "extra" and f.name not in document
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ValueError(f"{cls.__name__}: the document lacks key(s) {', '.join(missing)}")
        return cls(**{k: v for k, v in document.items() if k in known},
                   extra={k: v for k, v in document.items() if k not in known})

    def to_json_dict(self) -> dict[str, Any]:
        """The document as the CLI prints it with ``--json``."""
        out = {name: getattr(self, name) for name in self.json_keys()
               if not (name in self.OPTIONAL and getattr(self, name) is None)}
        out.update(getattr(self, "extra", None) or {})
        return out

    def to_frame(self, table: str | None = None):
        """The rows of ``table`` (default: the result's main table) as a pandas DataFrame, one column per key;
        nested mappings become ``key.sub`` columns (pandas.json_normalize)."""
        import pandas as pd

        rows = getattr(self, table or self.TABLE)
        return pd.json_normalize(rows) if rows else pd.DataFrame()
