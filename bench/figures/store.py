"""Figure 10, what the payload store costs: one 1 MB round trip (the value encoded into a
payload, stored, and read back and decoded, as every program does with a big payload) through
the project's data converter with each store kind, against the same value kept inline (no
store), interleaved in one run. The S3 store is a real S3-compatible server process
(`moto_server`, a dev extra) on 127.0.0.1; the file store is a folder of the bench's work
directory (a local disk: a shared file system adds its own latency). No Temporal in the loop:
the subject is what the store adds to each big payload."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.converter import DataConverter

from bench.harness import Bench, median
from bench.report import Figure
from runtime.connect import data_converter
from runtime.payload_store import ENV_S3_ENDPOINT, ENV_STORE, is_reference

PAYLOAD_BYTES = 1_000_000
TRIPS = {"quick": 10, "full": 30}
"""Round trips per variant."""
BUCKET = "bench-payloads"


async def round_trip(converter: DataConverter, stored: bool) -> float:
    """Seconds to encode a fresh 1 MB value and decode it again."""
    value = uuid.uuid4().hex * (PAYLOAD_BYTES // 32)  # a new value each time: nothing cached
    started = time.perf_counter()
    (payload,) = await converter.encode([value])
    (back,) = await converter.decode([payload], [str])
    elapsed = time.perf_counter() - started
    assert back == value and is_reference(payload) is stored
    return elapsed


async def measure(b: Bench) -> list[Figure]:
    count = TRIPS.get(b.profile.name, TRIPS["full"])
    folder = b.workdir / "payload-store"
    folder.mkdir(exist_ok=True)
    variants: dict[str, Callable[[], Awaitable[float]]] = {}
    inline = data_converter({})
    file_store = data_converter({ENV_STORE: folder.as_uri()})
    variants["inline"] = lambda: round_trip(inline, False)
    variants["file"] = lambda: round_trip(file_store, True)
    samples: dict[str, list[float]] = {}
    s3_note = ""
    try:
        from tests.e2e.s3_server import AWS_ENV, s3_server
    except ImportError as err:  # not a dev install
        s3_note = f"no S3 row: {err}"
        server_context: Any = None
    else:
        server_context = s3_server(b.workdir / "moto.log")
    if server_context is None:
        samples = await _sample(variants, count)
    else:
        with server_context as server:
            server.create_bucket(BUCKET)
            s3_store = data_converter(
                {ENV_STORE: f"s3://{BUCKET}/bench", ENV_S3_ENDPOINT: server.url, **AWS_ENV}
            )
            variants["s3"] = lambda: round_trip(s3_store, True)
            samples = await _sample(variants, count)
    b.details["store"] = {"payload_bytes": PAYLOAD_BYTES, "round_trip_seconds": samples}
    note = (
        f"{count} round trips of a fresh {PAYLOAD_BYTES:,}-byte value each, interleaved; encode +"
        " store + read + decode through runtime.connect.data_converter; report only"
    )
    figures = [
        Figure(
            key="store.round_trip.file",
            label="10. 1 MB round trip, file store",
            value=1000 * median(samples["file"]),
            unit="ms",
            floor=1000 * median(samples["inline"]),
            floor_label="inline",
            note=f"{note}; a folder on the local disk, each file fsynced",
        )
    ]
    if "s3" in samples:
        figures.append(
            Figure(
                key="store.round_trip.s3",
                label="10. 1 MB round trip, S3 store",
                value=1000 * median(samples["s3"]),
                unit="ms",
                floor=1000 * median(samples["inline"]),
                floor_label="inline",
                note=f"{note}; moto_server on 127.0.0.1 (PUT after HEAD, then GET)",
            )
        )
    elif s3_note:
        b.details["store"]["s3"] = s3_note
    return figures


async def _sample(
    variants: dict[str, Callable[[], Awaitable[float]]], count: int
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for trip in variants.values():  # warm-up: imports, connections, page cache
        await trip()
    names = list(variants)
    for i in range(count):
        for name in names if i % 2 == 0 else reversed(names):
            samples[name].append(await variants[name]())
    return samples
