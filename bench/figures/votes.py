"""Figure 13, what a signed vote costs: the workflow's side of one person's signed approval to a
call under an approver rule (two of ops), end to end through the `submit_approval` update (the
update's round trip: the `verify_answer` local activity checking the Ed25519 signature against
the approvers file, then the vote recorded), against an unsigned answer to a call under no
approver rule (the same update, no check). Interleaved pairs, on one worker with the real
`AnswerVerifier` over an approvers file of 3 people and in-process fakes for the model and the
tool; the answers are signed before the clock starts (the signing is the client's).

And the check itself, in this process: `ApproversFile.verify` (what `verify_answer` runs: the
canonical bytes of the decision, the person's keys, the Ed25519 verification), against the raw
`Ed25519PublicKey.verify` of one 64-byte signature over the same bytes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import WorkflowHandle

from bench.harness import Bench, median, new_id, new_queue, poll, worker
from bench.report import Figure, pair_spread
from bench.stubs import RUN_COMMAND, FakeAgent
from runtime.approvers import AnswerVerifier, load_approvers, openssh_public
from runtime.signing_key import SigningKey, signed_answer
from workflows import names
from workflows.contract.arguments import arguments_digest
from workflows.contract.rules import ApprovalPolicy, Approvers, PolicyRule
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    AgentStatus,
    ChatMessage,
    ToolApprovalResponse,
    ToolCall,
    WorkerSetup,
)
from workflows.people.signatures import VerifyRequest, canonical_bytes

PEOPLE = ("ann", "ben", "carol")
PAIRS = {"quick": 3, "full": 40}
"""Interleaved pairs (a signed vote, an unsigned answer) per profile."""
VERIFIES = {"quick": 300, "full": 3_000}
"""Verifications per sample of the check in this process."""
SAMPLES = {"quick": 3, "full": 7}
TWO_OF_OPS = AgentRunOptions(
    approval_policy=ApprovalPolicy(
        rules=[
            PolicyRule(
                tool=RUN_COMMAND.name,
                decision="ask",
                approvers=Approvers(groups=("ops",), count=2),
            )
        ]
    )
)


class Voters(FakeAgent):
    """The bench's fake model and tool, on a worker whose approvers file has 3 people of ops."""

    def setup(self) -> WorkerSetup:
        return super().setup().model_copy(update={"approver_groups": {"ops": len(PEOPLE)}})


def people(folder: Path) -> dict[str, SigningKey]:
    """3 people of ops, each with an Ed25519 key of their own, and the approvers file."""
    folder.mkdir(parents=True, exist_ok=True)
    private = {who: Ed25519PrivateKey.generate() for who in PEOPLE}
    lines = [
        f"{who} ops {openssh_public(k.public_key()).decode()} {who}" for who, k in private.items()
    ]
    (folder / "approvers").write_text("\n".join(lines) + "\n")
    approvers = load_approvers(folder / "approvers")
    return {
        who: SigningKey(k, folder / f"{who}.key", approvers, person=who)
        for who, k in private.items()
    }


async def waiting(
    b: Bench, queue: str, options: AgentRunOptions
) -> tuple[WorkflowHandle[Any, Any], ToolCall, str]:
    """A run whose first call waits for a person: its handle, the call and its first run id."""
    handle = await b.client.start_workflow(
        names.WORKFLOW_TYPE,
        AgentRunInput(messages=[ChatMessage.user("run it")], options=options),
        id=new_id("bench-votes"),
        task_queue=queue,
    )
    found: list[AgentStatus] = []

    async def paused() -> bool:
        status: AgentStatus = await handle.query(names.QUERY_STATUS, result_type=AgentStatus)
        found[:] = [status]
        return status.phase == "awaiting_approval"

    await poll(paused)
    status = found[0]
    assert status.run_id is not None
    return handle, status.pending_approvals[0], status.run_id


async def signed_vote(b: Bench, queue: str, keys: dict[str, SigningKey]) -> tuple[float, float]:
    """Seconds, and this process's CPU seconds (the worker's, and the client's few), of one
    signed, eligible vote that does not decide the call (ann's, 1 of 2)."""
    handle, call, run_id = await waiting(b, queue, TWO_OF_OPS)
    votes = [
        signed_answer(
            keys[who],
            ToolApprovalResponse(call_id=call.id, approved=True),
            approver=who,
            workflow_id=handle.id,
            run_id=run_id,
            arguments_sha256=arguments_digest(call.arguments),
        )
        for who in ("ann", "ben")
    ]
    update = names.UPDATE_SUBMIT_APPROVAL
    started, cpu = time.perf_counter(), time.process_time()
    await handle.execute_update(update, votes[0], result_type=list[ToolCall])
    took = time.perf_counter() - started, time.process_time() - cpu
    await handle.execute_update(update, votes[1], result_type=list[ToolCall])
    await handle.result()
    return took


async def unsigned_answer(b: Bench, queue: str) -> tuple[float, float]:
    """Seconds, and CPU seconds, of one unsigned answer to a call under no approver rule."""
    handle, call, _run_id = await waiting(b, queue, AgentRunOptions())
    answer = ToolApprovalResponse(call_id=call.id, approved=True, approver="ann")
    started, cpu = time.perf_counter(), time.process_time()
    await handle.execute_update(names.UPDATE_SUBMIT_APPROVAL, answer, result_type=list[ToolCall])
    took = time.perf_counter() - started, time.process_time() - cpu
    await handle.result()
    return took


def verify_microseconds(keys: dict[str, SigningKey], count: int) -> tuple[float, float]:
    """Microseconds per check: `ApproversFile.verify` of one signed decision, and the raw
    Ed25519 verification of its signature."""
    key = keys["ann"]
    vote = signed_answer(
        key,
        ToolApprovalResponse(call_id="call_0", approved=True),
        approver="ann",
        workflow_id="W",
        run_id="R",
        arguments_sha256="0" * 64,
    )
    assert vote.signed_at is not None and vote.signature is not None
    request = VerifyRequest(
        approver="ann",
        workflow_id="W",
        run_id="R",
        call_id="call_0",
        arguments_sha256="0" * 64,
        decision="approve",
        signed_at=vote.signed_at,
        signature=vote.signature,
    )
    approvers = key.approvers
    started = time.perf_counter()
    for _ in range(count):
        verdict = approvers.verify(request)
    checked = time.perf_counter() - started
    assert verdict.valid, verdict
    data = canonical_bytes(request.fields())
    signature = key.private.sign(data)
    public = key.private.public_key()
    started = time.perf_counter()
    for _ in range(count):
        public.verify(signature, data)
    raw = time.perf_counter() - started
    return 1e6 * checked / count, 1e6 * raw / count


async def measure(b: Bench) -> list[Figure]:
    pairs = PAIRS.get(b.profile.name, PAIRS["full"])
    keys = people(b.workdir / "votes")
    fake = Voters(tool=RUN_COMMAND, stop_after_first=True)
    verifier = AnswerVerifier(load_approvers(b.workdir / "votes" / "approvers"))
    queue = new_queue("votes")
    signed: list[tuple[float, float]] = []
    unsigned: list[tuple[float, float]] = []
    async with worker(b.client, queue, [*fake.activities(), verifier.verify_answer]):
        await signed_vote(b, queue, keys)  # warm-up
        await unsigned_answer(b, queue)
        for i in range(pairs):
            if i % 2 == 0:
                signed.append(await signed_vote(b, queue, keys))
                unsigned.append(await unsigned_answer(b, queue))
            else:
                unsigned.append(await unsigned_answer(b, queue))
                signed.append(await signed_vote(b, queue, keys))
    count = VERIFIES.get(b.profile.name, VERIFIES["full"])
    samples = SAMPLES.get(b.profile.name, SAMPLES["full"])
    verify_microseconds(keys, max(1, count // 10))  # warm-up
    checks: list[float] = []
    raws: list[float] = []
    for _ in range(samples):
        check, raw = verify_microseconds(keys, count)
        checks.append(check)
        raws.append(raw)
    latency = [s for s, _cpu in signed], [s for s, _cpu in unsigned]
    cpu = [c for _s, c in signed], [c for _s, c in unsigned]
    b.details["votes"] = {
        "signed_vote_seconds": latency[0],
        "unsigned_answer_seconds": latency[1],
        "signed_vote_cpu_seconds": cpu[0],
        "unsigned_answer_cpu_seconds": cpu[1],
        "verify_us": checks,
        "ed25519_verify_us": raws,
        "verifies_per_sample": count,
    }
    per_vote = 1000 * (median(latency[0]) - median(latency[1]))
    cpu_per_vote = 1000 * (median(cpu[0]) - median(cpu[1]))
    return [
        Figure(
            key="votes.signed_vote",
            label="13. a signed vote through submit_approval",
            value=1000 * median(latency[0]),
            unit="ms",
            floor=1000 * median(latency[1]),
            floor_label="unsigned answer",
            spread=pair_spread(*latency),
            note=(
                f"{per_vote:+.2f} ms per vote (medians) for verify_answer (a local activity:"
                " Ed25519 over the approvers file) and the vote's record; the update's round"
                f" trip; {pairs} interleaved pairs, each its own run; fake model/tool"
                " in-process; report only"
            ),
        ),
        Figure(
            key="votes.cpu_per_vote",
            label="13. worker CPU of a signed vote",
            value=1000 * median(cpu[0]),
            unit="ms",
            floor=1000 * median(cpu[1]),
            floor_label="unsigned answer",
            spread=pair_spread(*cpu),
            note=(
                f"{cpu_per_vote:+.2f} ms of CPU per vote (medians): this process's CPU time"
                " over the same round trips (the worker is in it: its activations, the local"
                " activity; and the client's update); report only"
            ),
        ),
        Figure(
            key="votes.verify",
            label="13. the signature's check, per vote",
            value=median(checks),
            unit="µs",
            floor=median(raws),
            floor_label="raw Ed25519",
            note=(
                f"ApproversFile.verify (canonical bytes, the person's keys, Ed25519) against"
                f" Ed25519PublicKey.verify alone; median of {samples} × {count}; report only"
            ),
        ),
    ]
