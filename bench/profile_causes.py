"""The worker's CPU by cause, from a `py-spy record --format raw --threads` profile and the
threads' CPU times (`/proc`): what `python -m bench.profile` prints.

A sample is charged to the first cause whose marker appears in its stack, in the order of
`CAUSES` (most specific first), so each sample counts once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

CAUSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "sandbox: a new sandbox per run (module imports)",
        ("_Instance.__init__ (temporalio/worker/workflow_sandbox", "_create_workflow_instance"),
    ),
    (
        "the conversation read for each model call (`conversation_tail` query, both sides)",
        ("_apply_query_workflow", "WorkflowHandle.query", "AgentActivities._conversation"),
    ),
    (
        "events and the live stream (workflow side)",
        ("workflows/run/event_log.py", "workflow_streams"),
    ),
    ("live text publisher (activity side)", ("activities/streaming.py",)),
    (
        "search attributes, memo, current details",
        ("workflows/run/visibility.py", "upsert_search_attributes", "upsert_memo"),
    ),
    (
        "payload conversion (SDK visitor, codec, converters)",
        (
            "temporalio/bridge/_visitor",
            "_command_aware_visitor",
            "decode_activation",
            "encode_completion",
            "temporalio/converter",
            "contrib/pydantic",
            "runtime/codec.py",
            "pydantic/",
        ),
    ),
    ("activities: heartbeats", ("_heartbeat_async", "activities/heartbeat.py", "heartbeat")),
    (
        "activities: the model call (HTTP)",
        ("activities/llm.py", "httpx/", "httpcore/", "floor_model_call"),
    ),
    ("activities: the tool", ("AgentActivities.execute_tool", "floor_list_dir")),
    ("activities: the rest (SDK task handling, telemetry)", ("_ActivityWorker", "activities/")),
    ("workflow code (workflows/, bench/bare_workflow.py)", ("workflows/", "bench/bare_workflow")),
    (
        "workflow activations (SDK, sandbox entry)",
        ("_WorkflowWorker", "_RunningWorkflow", "temporal_workflow_"),
    ),
)
OTHER = "the rest (polling, event loop)"


def cause_of(stack: str) -> str:
    for cause, markers in CAUSES:
        if any(marker in stack for marker in markers):
            return cause
    return OTHER


def samples(raw: str) -> Counter[str]:
    """Samples per cause of a raw profile (lines `frame;frame;… COUNT`)."""
    out: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out[cause_of(stack)] += int(count)
    return out


def by_cause(raw: str) -> list[tuple[str, float]]:
    """Each cause's share of the samples, largest first."""
    counted = samples(raw)
    total = sum(counted.values()) or 1
    return [(cause, n / total) for cause, n in counted.most_common()]


RUST = "SDK core (Rust threads: gRPC, protobuf, state machines)"


def thread_group(pid: int, tid: int, name: str) -> str:
    """Python threads are all named `python` by the kernel: the main one runs the event loop
    (activities, the SDK's Python side), the others the workflow activations and `to_thread`."""
    if tid == pid:
        return "main thread (event loop)"
    if name == "python":
        return "other Python threads (workflow activations)"
    return RUST


def by_thread(
    pid: int,
    before: Mapping[tuple[int, str], float],
    after: Mapping[tuple[int, str], float],
    rounds: int,
) -> dict[str, float]:
    """CPU ms per round of each group of threads (threads that ended meanwhile are missed)."""
    spent: dict[str, float] = {}
    for key, seconds in after.items():
        group = thread_group(pid, *key)
        spent[group] = spent.get(group, 0.0) + seconds - before.get(key, 0.0)
    return {group: 1000 * s / rounds for group, s in spent.items()}


def per_round(raw: str, threads: Mapping[str, float]) -> dict[str, float]:
    """CPU ms per round by cause: the Python threads' CPU split by the samples' shares, the Rust
    threads' CPU as it is."""
    python_ms = sum(ms for group, ms in threads.items() if group != RUST)
    out: dict[str, float] = {cause: share * python_ms for cause, share in by_cause(raw)}
    out[RUST] = threads.get(RUST, 0.0)
    return out
