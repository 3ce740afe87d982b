"""Figures, the table and the JSON file.

A figure is a value, the floor it is compared with (measured in the same run) and a target. The
table never hides a miss: it says by how much.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

TargetKind = Literal["ratio_max", "ratio_min", "value_max", "value_min", "none"]


@dataclass(frozen=True)
class Figure:
    key: str
    """Stable JSON name, e.g. `overhead.per_round`; the CI test checks these."""
    label: str
    value: float
    unit: str
    floor: float | None = None
    floor_label: str = ""
    target_kind: TargetKind = "none"
    target: float | None = None
    note: str = ""
    spread: tuple[float, float] | None = None
    """The lowest and highest ratio of the interleaved pairs the value is the mean of (the
    run-to-run noise the ratio is to be read with)."""

    @property
    def ratio(self) -> float | None:
        if self.floor is None or self.floor == 0:
            return None
        return self.value / self.floor

    @property
    def met(self) -> bool | None:
        measured = self.ratio if self.target_kind.startswith("ratio") else self.value
        if self.target is None or measured is None:
            return None
        if self.target_kind.endswith("_max"):
            return measured <= self.target
        return measured >= self.target

    @property
    def target_text(self) -> str:
        if self.target is None:
            return "— (report only)"
        op = "≤" if self.target_kind.endswith("_max") else "≥"
        what = "ratio" if self.target_kind.startswith("ratio") else "value"
        unit = "×" if what == "ratio" else f" {self.unit}"
        return f"{what} {op} {_num(self.target)}{unit}"

    @property
    def verdict(self) -> str:
        met = self.met
        if met is None:
            return "n/a"
        if met:
            return "yes"
        assert self.target is not None
        measured = self.ratio if self.target_kind.startswith("ratio") else self.value
        assert measured is not None
        miss = abs(measured - self.target)
        pct = 100 * miss / self.target if self.target else 0.0
        return f"NO (by {_num(miss)}, {pct:.0f}%)"

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ratio=self.ratio, met=self.met, target_text=self.target_text)
        return out


def _num(x: float | None) -> str:
    if x is None:
        return "—"
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def _ratio_text(f: Figure) -> str:
    if f.ratio is None:
        return "—"
    if f.spread is None:
        return f"{_num(f.ratio)}×"
    low, high = f.spread
    return f"{_num(f.ratio)}× ({_num(low)}–{_num(high)})"


def pair_spread(values: list[float], floors: list[float]) -> tuple[float, float] | None:
    """The range of value ÷ floor over interleaved pairs (None without two pairs)."""
    ratios = [v / f for v, f in zip(values, floors, strict=True) if f]
    return (min(ratios), max(ratios)) if len(ratios) >= 2 else None


def table(figures: list[Figure]) -> str:
    header = ("figure", "value", "floor", "ratio", "target", "met?")
    rows = [header]
    for f in figures:
        rows.append(
            (
                f.label,
                f"{_num(f.value)} {f.unit}",
                f"{_num(f.floor)} ({f.floor_label})" if f.floor is not None else "—",
                _ratio_text(f),
                f.target_text,
                f.verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    notes = [f"  [{f.key}] {f.note}" for f in figures if f.note]
    return "\n".join(lines + (["", "notes:", *notes] if notes else []))


def machine_info() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "temporalio": metadata.version("temporalio"),
        "pydantic": metadata.version("pydantic"),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
