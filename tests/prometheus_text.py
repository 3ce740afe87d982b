"""Reading a Prometheus endpoint in tests: its samples, and sums over the labels given.

samples = await scrape("http://127.0.0.1:9464/metrics")
total(samples, "agent_llm_tokens_total", kind="prompt")    # summed over the other labels
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    out: list[Sample] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise AssertionError(f"not a Prometheus sample line: {line!r}")
        name, raw_labels, value = match.groups()
        labels = {
            k: v.encode().decode("unicode_escape") for k, v in _LABEL.findall(raw_labels or "")
        }
        out.append(Sample(name, labels, float(value)))
    return out


async def scrape(url: str) -> list[Sample]:
    async with httpx.AsyncClient() as http:
        response = await http.get(url, timeout=10)
    response.raise_for_status()
    return parse(response.text)


def total(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when there are none)."""
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def names(samples: list[Sample]) -> set[str]:
    return {s.name for s in samples}
