"""The domain model: what travels between clients, the workflow and the activities.

Everything here is plain pydantic v2 and goes over the wire as JSON through the pydantic data
converter, so the field names are a public contract: do not rename them.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.exceptions import ApplicationError

from workflows.rules import MAX_GROUPS, ApprovalPolicy, GroupName, PolicyRule, WorkerPolicy
from workflows.signing import SIGNED_AT_PATTERN

SIGNATURE_PATTERN = r"^[A-Za-z0-9+/]{43}=$"
"""An HMAC-SHA256 in standard base64."""

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "max_rounds", "cancelled", "error", "budget"]
Phase = Literal[
    "running",
    "awaiting_approval",
    "approval_expired",
    "awaiting_answer",
    "waiting_for_message",
    "finished",
    "budget_exhausted",
]
PERSON_PHASES: tuple[Phase, ...] = ("awaiting_approval", "approval_expired", "awaiting_answer")
"""The phases in which a run waits for a person (the inbox lists it)."""
ApprovalTimeoutPolicy = Literal["cancel", "reject", "expire"]
ApprovalSource = Literal["person", "policy", "timeout", "seed"]
AnswerValue = (
    Annotated[str, Field(max_length=4_000)]
    | Annotated[list[Annotated[str, Field(max_length=4_000)]], Field(max_length=50)]
)
"""A person's answer to a question: one text, or (for a `multiple` question) a list of options."""


SIGNED_FIELDS = ("groups", "signed_at", "signature", "approvers")
"""What a signed answer (and a call's approvers) add to a record and an `approval` event: left
out when unset, so an unsigned answer reads as before."""


def without_none(data: Any, keys: tuple[str, ...]) -> Any:
    """A dumped model without these keys where they are None."""
    if isinstance(data, dict):
        for key in keys:
            if data.get(key) is None:
                data.pop(key, None)
    return data


def signed_whole(approver: str | None, signed_at: str | None, signature: str | None) -> None:
    """A signed answer, grant or reopen names who signed and when, and a time comes only with
    a signature (raises ValueError for a model validator)."""
    if signature is not None and (signed_at is None or approver is None):
        raise ValueError("a signature needs signed_at and approver")
    if signed_at is not None and signature is None:
        raise ValueError("signed_at is only taken with a signature")


class ToolCall(BaseModel):
    """One tool call as the model asked for it.

    `arguments` is a JSON string (as LLMs send it) or an already-parsed JSON value.
    """

    id: str
    name: str
    arguments: Any = "{}"
    from_text: bool = Field(default=False, exclude_if=lambda value: not value)
    """True when the model wrote the call as text in its reply and the worker read it as a call
    (`LLM_TEXT_TOOL_CALLS`); left out of the JSON when false."""


class ChatMessage(BaseModel):
    """One message of the conversation, in the OpenAI chat shape."""

    role: Role
    content: str = ""
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        # OpenAI sends `"content": null` on assistant messages that only call tools.
        return "" if value is None else value

    @classmethod
    def system(cls, content: str) -> ChatMessage:
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> ChatMessage:
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str, tool_calls: list[ToolCall] | None = None) -> ChatMessage:
        return cls(role="assistant", content=content, tool_calls=tool_calls or None)

    @classmethod
    def tool(cls, call: ToolCall, content: str) -> ChatMessage:
        return cls(role="tool", content=content, name=call.name, tool_call_id=call.id)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def edited_arguments(value: object) -> dict[str, Any]:
    """A person's edited arguments (a JSON object, or a JSON string of one) as an object;
    ValueError with a one-line reason when they are neither."""
    if isinstance(value, str):
        try:
            value = json.loads(value, parse_constant=_no_constant)
        except ValueError as err:
            raise ValueError(f"not valid JSON ({str(err).splitlines()[0]})") from None
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object, got {type(value).__name__}")
    return value


class ToolApprovalResponse(BaseModel):
    """A human's answer for one pending call. Strict: only JSON `true` approves."""

    model_config = ConfigDict(extra="forbid")

    call_id: Annotated[StrictStr, Field(min_length=1)]
    approved: StrictBool
    reason: StrictStr | None = None
    approver: StrictStr | None = None
    remember: StrictBool = False
    """Also put a rule at the front of the run's rules: always allow (or deny) this tool."""
    arguments: dict[str, Any] | None = None
    """With `approved: true` only: run the call with these arguments instead of the model's
    (given as a JSON object or a JSON string of one)."""
    run_id: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None
    """The first run id of the run chain the person saw (`status.run_id`): an answer for a
    call of another run under the same workflow id is refused."""
    arguments_sha256: Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    """The hex SHA-256 of the call's arguments as they were shown (the compact JSON text of the
    parsed arguments, `workflows.arguments.arguments_digest`): an answer for a call whose
    arguments changed since is refused."""
    groups: Annotated[list[GroupName], Field(max_length=MAX_GROUPS)] | None = None
    """The approver's groups (the users file's): what an approver rule asks of who answers."""
    signed_at: Annotated[StrictStr, Field(pattern=SIGNED_AT_PATTERN)] | None = None
    """When the answer was signed (ISO-8601 UTC): with `signature` only."""
    signature: Annotated[StrictStr, Field(pattern=SIGNATURE_PATTERN)] | None = None
    """HMAC-SHA256 (base64) under `AGENT_APPROVER_KEY` of the approver, groups, workflow id, run
    id, call id, `arguments_sha256`, decision and `signed_at` (`workflows.signing`): an answer
    whose signature does not verify is refused."""

    @model_validator(mode="after")
    def _signed_whole(self) -> ToolApprovalResponse:
        signed_whole(self.approver, self.signed_at, self.signature)
        return self

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments_are_an_object(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        if info.data.get("approved") is not True:
            raise ValueError("only taken with approved: true")
        return edited_arguments(value)

    @model_serializer(mode="wrap")
    def _without_unused_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        # An answer that uses neither `remember` nor `arguments` is sent as before, so a worker
        # that does not know these fields yet still takes it.
        data = handler(self)
        if isinstance(data, dict):
            if data.get("remember") is False:
                del data["remember"]
            for optional in (
                "arguments",
                "run_id",
                "arguments_sha256",
                "groups",
                "signed_at",
                "signature",
            ):
                if data.get(optional) is None:
                    data.pop(optional, None)
        return data


class QuestionAnswer(BaseModel):
    """A person's answer to a question the model asked with `ask_user` (the `submit_answer`
    update): free text, one of the question's options, or a list of them when it takes several."""

    model_config = ConfigDict(extra="forbid")

    call_id: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    answer: StrictStr | list[StrictStr]
    approver: Annotated[StrictStr, Field(max_length=200)] | None = None
    """Who answered (the signed-in web user, the starter's OS user)."""
    run_id: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None
    """The first run id of the run chain the person saw: an answer for another run's question
    is refused."""
    groups: Annotated[list[GroupName], Field(max_length=MAX_GROUPS)] | None = None
    """Who answered's groups (the users file's), signed with the answer."""
    signed_at: Annotated[StrictStr, Field(pattern=SIGNED_AT_PATTERN)] | None = None
    """When the answer was signed (ISO-8601 UTC): with `signature` only."""
    signature: Annotated[StrictStr, Field(pattern=SIGNATURE_PATTERN)] | None = None
    """HMAC-SHA256 (base64) under `AGENT_APPROVER_KEY`, as an approval's, with the decision
    `answer:<sha256 of the answer text>` (`workflows.questions.answer_decision`): an answer whose
    signature does not verify is refused."""

    @model_validator(mode="after")
    def _signed_whole(self) -> QuestionAnswer:
        signed_whole(self.approver, self.signed_at, self.signature)
        return self

    @model_serializer(mode="wrap")
    def _without_unused_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(
            handler(self), ("approver", "run_id", "groups", "signed_at", "signature")
        )


class PendingQuestion(BaseModel):
    """A question waiting for a person, as `status` lists it in `pending_questions`."""

    call_id: str
    question: str
    options: list[str] | None = None
    multiple: bool = False
    arguments_sha256: str = ""
    """The digest of the `ask_user` call's arguments (`workflows.arguments.arguments_digest`):
    what a signed answer is bound to, as an approval's is to its call's arguments."""


class QuestionRecord(BaseModel):
    """A question's answer as the workflow recorded it."""

    call_id: str
    answer: AnswerValue | None = None
    """None: no answer came (`error` says why)."""
    approver: str | None = None
    groups: list[str] | None = Field(default=None, exclude_if=lambda value: value is None)
    """Who answered's groups, as their (signed) answer said."""
    at: datetime
    source: ApprovalSource = "person"
    error: str | None = None


class CancelRequest(BaseModel):
    """The optional payload of the `cancel` signal."""

    model_config = ConfigDict(extra="forbid")

    reason: StrictStr | None = None
    immediate: StrictBool = False
    requested_by: StrictStr | None = None
    """Who asked (the signed-in web user, the starter's OS user), when known."""


class ReopenRequest(BaseModel):
    """The `reopen_approval` update: ask again for an expired call (a new deadline). Signed like
    an answer (decision `reopen`) when the sender holds AGENT_APPROVER_KEY."""

    model_config = ConfigDict(extra="forbid")

    call_id: Annotated[StrictStr, Field(min_length=1)]
    approver: StrictStr | None = None
    """Who asks again (the signed-in web user, the starter's OS user)."""
    groups: Annotated[list[GroupName], Field(max_length=MAX_GROUPS)] | None = None
    """The approver's groups (the users file's)."""
    signed_at: Annotated[StrictStr, Field(pattern=SIGNED_AT_PATTERN)] | None = None
    signature: Annotated[StrictStr, Field(pattern=SIGNATURE_PATTERN)] | None = None
    """HMAC-SHA256 (base64) under AGENT_APPROVER_KEY, as an answer's, with the decision
    `reopen`: a request whose signature does not verify is refused."""

    @model_validator(mode="after")
    def _signed_whole(self) -> ReopenRequest:
        signed_whole(self.approver, self.signed_at, self.signature)
        return self

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(handler(self), ("approver", *SIGNED_FIELDS))


class UserMessageInput(BaseModel):
    """The short form of `send_message`: `{"content": "..."}` is a user message."""

    model_config = ConfigDict(extra="forbid")

    content: StrictStr


class AgentRunOptions(BaseModel):
    """Per-run options. Every field is optional; unknown fields are reported as a warning."""

    model_config = ConfigDict(extra="allow")

    max_rounds: Annotated[int, Field(ge=0)] = 10
    tools: list[str] | None = None
    approval_required: list[str] | None = None
    approval_timeout_seconds: Annotated[float, Field(gt=0)] | None = None
    on_approval_timeout: ApprovalTimeoutPolicy | None = None
    """What the approval timeout does: `expire` (the calls wait on, expired, until a person asks
    again, rejects or cancels), `cancel` (the run) or `reject` (the calls). null: `expire` for
    runs of this release (`versions.Rules.expire_on_timeout`), `cancel` for earlier ones."""
    approval_escalate_after_seconds: Annotated[float, Field(gt=0)] | None = None
    """After a call has waited this long, `approval_escalate_to` may answer it too (null: the
    worker's AGENT_ESCALATE_AFTER_SECONDS, or never)."""
    approval_escalate_to: list[Annotated[StrictStr, Field(min_length=1, max_length=100)]] | None = (
        Field(default=None, max_length=20)
    )
    """The groups a call is escalated to (null: the worker's AGENT_ESCALATE_TO)."""
    tool_approval_responses: list[ToolApprovalResponse] = Field(default_factory=list)
    keep_alive: bool = False
    model: str | None = None
    temperature: float | None = None
    max_tokens: Annotated[int, Field(gt=0)] | None = None
    """The most tokens the model may generate per reply (sent as `max_tokens`); null = the
    worker's `LLM_MAX_TOKENS`, or no limit."""
    # Also optional:
    idle_timeout_seconds: Annotated[float, Field(gt=0)] | None = None
    """With `keep_alive`, end the session after this long without a message (null = never)."""
    max_history_events: Annotated[int, Field(ge=100)] | None = None
    """Continue as new once the history has this many events, even before Temporal suggests it."""
    approval_policy: ApprovalPolicy | None = None
    """The run's rules, `{"rules": [...]}`: which calls run, are refused or wait for a person
    without asking (see `workflows.policy`). Invalid rules fail the run at start."""
    max_repeats: Annotated[int, Field(ge=1, le=1_000)] = 3
    """The same call with the same arguments runs at most this many times in a run; the next
    one is answered "you already have that result" without running or asking anyone."""
    context_tokens: Annotated[int, Field(ge=256)] | None = None
    """Lower the model's context window for this run (tokens); null: the worker's."""
    compact_at: Annotated[float, Field(gt=0, le=1)] = 0.8
    """Compact the model's view when the estimated request passes this share of the window."""
    compact_to: Annotated[float, Field(gt=0, lt=1)] = 0.5
    """A compaction brings the view down to this share of the window (at most `compact_at`), as
    far as the last `keep_rounds` rounds allow, so the next one comes many rounds later."""
    keep_rounds: Annotated[int, Field(ge=0, le=1_000)] = 3
    """Compaction never drops or summarises the last this many rounds."""
    ask_user: bool | None = Field(default=None, exclude_if=lambda value: value is None)
    """Offer the model the `ask_user` tool: a question to a person, whose answer is the tool's
    result (`workflows.questions`). None: the worker's `AGENT_ASK_USER`."""
    max_run_tokens: Annotated[int, Field(gt=0)] | None = None
    """The run's token budget: the prompt and completion tokens the provider reported, all
    model calls added up. At it the run pauses (`budget_exhausted`) until a person grants more
    (`grant_budget`) or stops it; the worker's `AGENT_MAX_RUN_TOKENS` is the most it may be."""


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total(self) -> int:
        """Every token the provider counted: what a run's token budget spends."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class ApprovalRecord(BaseModel):
    """An answer as the workflow recorded it: the response plus the workflow time it arrived."""

    call_id: str
    approved: bool
    reason: str | None = None
    approver: str | None = None
    at: datetime
    source: ApprovalSource = "person"
    """Who decided: a `person`, the `policy` (a rule), the approval `timeout`, or `seed` (an
    answer given in the run's input, `tool_approval_responses`)."""
    rule: int | None = None
    """With `source: policy`: the deciding rule's index in the `policy` query's list."""
    groups: list[str] | None = None
    """The approver's groups, as the answer named them."""
    signed_at: str | None = None
    """A signed answer's time (its signature verified before it was taken)."""
    signature: str | None = None
    """A signed answer's signature (`ToolApprovalResponse.signature`), verified when taken."""
    approvers: list[str] | None = None
    """A call under an approver rule: every person whose answer decided it, in order (then
    `approver` names them all, comma-separated, for readers that know only it)."""

    @model_serializer(mode="wrap")
    def _without_unsigned(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(handler(self), SIGNED_FIELDS)


AuditAction = Literal["decided", "expired", "reopened", "escalated"]


class AuditEntry(BaseModel):
    """One decision about one call, as the audit lists it: who or which rule, when, and the
    arguments that ran (or would have run, for a rejection), bounded."""

    call_id: str
    tool: str
    arguments: Any = None
    approved: bool
    source: ApprovalSource
    rule: int | None = None
    approver: str | None = None
    reason: str | None = None
    at: datetime
    edited: bool = False
    """The arguments are a person's edit of the model's."""
    answer: Any = Field(default=None, exclude_if=lambda value: value is None)
    """For a question (`ask_user`): the person's answer (left out of the JSON otherwise)."""
    approvers: list[str] | None = Field(default=None, exclude_if=lambda value: value is None)
    """A call under an approver rule: every person whose answer decided it (left out of the JSON
    otherwise)."""
    action: AuditAction = Field(default="decided", exclude_if=lambda value: value == "decided")
    """What happened: a decision (`decided`, left out of the JSON), or the call `expired` (its
    approval timeout passed unanswered, source `timeout`), was asked again (`reopened`, by
    `approver`) or `escalated` (to the groups in `reason`). Only a decision approves or
    rejects: `approved` is false for the others."""
    remembered: bool = Field(default=False, exclude_if=lambda value: not value)
    """A rejection nobody gave again: the call is the same as one a person rejected earlier in
    the turn, answered with that no (`approver` is who said it first, `reason` theirs) without
    asking anyone. Left out of the JSON otherwise."""


class AuditCounts(BaseModel):
    """How a run's calls were decided, over its whole chain."""

    approved_by_person: int = 0
    rejected_by_person: int = 0
    by_rule: int = 0
    by_timeout: int = 0
    seeded: int = 0
    questions_answered: int = Field(default=0, exclude_if=lambda value: value == 0)
    """Questions (`ask_user`) a person answered (left out of the JSON while 0)."""
    votes: int = Field(default=0, exclude_if=lambda value: value == 0)
    """The votes people gave on calls under an approver rule, each signed answer counted (left
    out of the JSON while 0)."""
    tokens_granted: int = Field(default=0, exclude_if=lambda value: value == 0)
    """Tokens people granted to the run's budget (`grant_budget`; left out of the JSON while 0)."""
    expired: int = Field(default=0, exclude_if=lambda value: value == 0)
    """Calls whose approval timeout passed unanswered (`on_approval_timeout: expire`); left out
    of the JSON while 0, as are the next two."""
    reopened: int = Field(default=0, exclude_if=lambda value: value == 0)
    """Expired calls a person asked again (`reopen_approval`)."""
    escalated: int = Field(default=0, exclude_if=lambda value: value == 0)
    """Calls escalated to more groups (`approval_escalate_after_seconds`)."""
    remembered: int = Field(default=0, exclude_if=lambda value: value == 0)
    """Calls answered with a person's remembered no (left out of the JSON while 0; not counted in
    `rejected_by_person`, which counts the noes people gave)."""


class AuditView(BaseModel):
    """The `audit` query's answer: every decision of the run in order (the oldest dropped past
    the audit's budget, counted in `dropped`), the counts, and the tokens spent."""

    decisions: list[AuditEntry]
    counts: AuditCounts
    dropped: int = 0
    usage: Usage = Field(default_factory=Usage)


# ---- Events (what clients follow as progress) ----


class BaseEvent(BaseModel):
    seq: int = -1
    """The event's number in the run: 0, 1, 2, … with no gaps, across generations. Set by the
    event log when the event is emitted."""
    round: int = -1
    """The round the event belongs to (set by the event log)."""


class TextDeltaEvent(BaseEvent):
    type: Literal["text_delta"] = "text_delta"
    delta: str


class ToolCallEvent(BaseEvent):
    type: Literal["tool_call"] = "tool_call"
    call_id: str
    name: str
    arguments: Any
    requires_approval: bool
    from_text: bool | None = None
    """True when the model wrote this call as text in its reply (a fenced `json` block,
    `<tool_call>…</tool_call>`, a bare JSON object) and the worker read it as a call."""


class AwaitingApprovalEvent(BaseEvent):
    type: Literal["awaiting_approval"] = "awaiting_approval"
    pending: list[ToolCall]


class ApprovalEvent(BaseEvent):
    type: Literal["approval"] = "approval"
    call_id: str
    approved: bool
    reason: str | None = None
    approver: str | None = None
    at: datetime
    source: ApprovalSource = "person"
    """Who decided: a `person`, the `policy` (a rule), the approval `timeout`, or `seed` (an
    answer given in the run's input, `tool_approval_responses`)."""
    rule: int | None = None
    """With `source: policy`: the deciding rule's index in the `policy` query's list."""
    arguments: Any = None
    """When the person edited the call: the arguments that ran."""
    original_arguments: Any = None
    """When the person edited the call: the arguments the model gave."""
    groups: list[str] | None = None
    """The approver's groups, as the answer named them."""
    signed_at: str | None = None
    """A signed answer's time (its signature verified before it was taken)."""
    signature: str | None = None
    """A signed answer's signature, verified when taken."""
    approvers: list[str] | None = None
    """A call under an approver rule: every person whose answer decided it."""

    @model_serializer(mode="wrap")
    def _without_unsigned(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(handler(self), SIGNED_FIELDS)


class QuestionEvent(BaseEvent):
    """The model asked a person a question (`ask_user`); the run waits for the answer."""

    type: Literal["question"] = "question"
    call_id: str
    question: str
    options: list[str] | None = None
    multiple: bool = False


class AnswerEvent(BaseEvent):
    """A question was answered (by a person, or with an error by the timeout); the answer is the
    `ask_user` call's result."""

    type: Literal["answer"] = "answer"
    call_id: str
    answer: AnswerValue | None = None
    approver: str | None = None
    groups: list[str] | None = Field(default=None, exclude_if=lambda value: value is None)
    at: datetime
    source: ApprovalSource = "person"
    error: str | None = None


class ApprovalVoteEvent(BaseEvent):
    """One person's signed answer to a call under an approver rule: `votes` of `needed`
    approvals so far (a rejection decides the call at once)."""

    type: Literal["approval_vote"] = "approval_vote"
    call_id: str
    approver: str
    groups: list[str] = Field(default_factory=list)
    approved: bool
    votes: int
    needed: int


class ToolResultEvent(BaseEvent):
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str


class WarningEvent(BaseEvent):
    type: Literal["warning"] = "warning"
    message: str


class ErrorEvent(BaseEvent):
    type: Literal["error"] = "error"
    message: str


class FinishedEvent(BaseEvent):
    type: Literal["finished"] = "finished"
    finish_reason: FinishReason


class CompactionEvent(BaseEvent):
    """The model's view of the conversation was made smaller to fit its context window (the
    record, `messages`, keeps every message)."""

    type: Literal["compaction"] = "compaction"
    before_tokens: int
    """The estimated request before compaction."""
    after_tokens: int
    """The estimated request after it."""
    dropped_results: int
    """Old tool results the view now shows as a one-line placeholder."""
    summarised_messages: int
    """Old messages the view now shows as one summary (`summarize_conversation`)."""
    cut_results: int = 0
    """Recent tool results too big for the window, cut in the view to what fits."""


class BudgetExhaustedEvent(BaseEvent):
    """The run's tokens reached its budget: it calls the model no more until a person grants
    more tokens or stops it."""

    type: Literal["budget_exhausted"] = "budget_exhausted"
    used: int
    limit: int


class BudgetGrantedEvent(BaseEvent):
    """A person granted the run more tokens (`grant_budget {"tokens": N}`)."""

    type: Literal["budget_granted"] = "budget_granted"
    tokens: int
    limit: int
    """The budget after the grant."""
    approver: str | None = None


class BudgetStoppedEvent(BaseEvent):
    """A person stopped the run at its budget (`grant_budget {"stop": true}`): it finishes
    with reason `budget`."""

    type: Literal["budget_stopped"] = "budget_stopped"
    used: int
    limit: int
    approver: str | None = None


class ApprovalExpiredEvent(BaseEvent):
    """The approval timeout passed with these calls unanswered: they are `expired`, not
    rejected (the model is not told); they wait until a person asks again, rejects or
    cancels."""

    type: Literal["approval_expired"] = "approval_expired"
    call_ids: list[str]
    calls: list[ToolCall]
    at: datetime


class ApprovalReopenedEvent(BaseEvent):
    """A person asked again for an expired call (`reopen_approval`): it waits with a new
    deadline."""

    type: Literal["approval_reopened"] = "approval_reopened"
    call_id: str
    approver: str | None = None
    deadline: datetime | None = None
    at: datetime


class ApprovalEscalatedEvent(BaseEvent):
    """These calls waited `approval_escalate_after_seconds`: people of `groups` may answer them
    too, except the calls in `rule_groups`."""

    type: Literal["approval_escalated"] = "approval_escalated"
    call_ids: list[str]
    groups: list[str]
    at: datetime
    rule_groups: dict[str, list[str]] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    """Calls the worker's enforced approver rule decides → that rule's groups, the only ones
    that may answer them (the escalation does not widen it; left out when there are none)."""


AgentEvent = Annotated[
    TextDeltaEvent
    | ToolCallEvent
    | AwaitingApprovalEvent
    | ApprovalEvent
    | ApprovalVoteEvent
    | ToolResultEvent
    | WarningEvent
    | ErrorEvent
    | FinishedEvent
    | CompactionEvent
    | QuestionEvent
    | AnswerEvent
    | BudgetExhaustedEvent
    | BudgetGrantedEvent
    | BudgetStoppedEvent
    | ApprovalExpiredEvent
    | ApprovalReopenedEvent
    | ApprovalEscalatedEvent,
    Field(discriminator="type"),
]


class StreamDelta(BaseModel):
    """One batch of model text on the live stream's `deltas` topic (see `workflows.names`).

    Published by `call_llm` while the model generates; the live view only. The durable record is
    the assistant message (and its `text_delta` event), written once the call has succeeded.
    """

    round: int
    call: str
    """Which model call this text belongs to (`<run id>/<activity id>`): rounds restart at 0
    in a session, so `round` alone does not identify a call."""
    attempt: int = 1
    """The activity attempt. A higher attempt for the same `call` restarts its text from
    scratch: the earlier attempt was cut off and its partial text is void."""
    index: int = 0
    """The batch's position within (call, attempt), from 0."""
    text: str


# ---- Results and queries ----


class BudgetStatus(BaseModel):
    """A run's token budget: `used` of `limit` tokens (`granted` of them given by people)."""

    used: int
    limit: int
    granted: int = 0


MAX_GRANT_TOKENS = 1_000_000_000_000
"""The most tokens one grant may add."""


class BudgetGrant(BaseModel):
    """The `grant_budget` update's payload: `{"tokens": N}` adds N tokens to the run's budget,
    `{"stop": true}` stops a run that waits at its budget (it finishes `budget`). Who grants
    (`approver`, the `groups` they belong to) is set by the web app or the starter, which sign
    it when they hold `AGENT_APPROVER_KEY` (as answers are: `workflows.budget.verify_request`)."""

    model_config = ConfigDict(extra="forbid")

    tokens: Annotated[StrictInt, Field(gt=0, le=MAX_GRANT_TOKENS)] | None = None
    stop: StrictBool = False
    approver: StrictStr | None = None
    groups: Annotated[list[GroupName], Field(max_length=MAX_GROUPS)] = Field(default_factory=list)
    signed_at: Annotated[StrictStr, Field(pattern=SIGNED_AT_PATTERN)] | None = None
    signature: Annotated[StrictStr, Field(pattern=SIGNATURE_PATTERN)] | None = None
    """HMAC-SHA256 (base64) under `AGENT_APPROVER_KEY`, as an answer's, of the decision
    (`grant:N` or `stop`) for the budget as it stands (`budget:<limit>` in place of a call)."""

    @model_validator(mode="after")
    def _tokens_or_stop(self) -> BudgetGrant:
        if self.stop and self.tokens is not None:
            raise ValueError('give either "tokens" or "stop", not both')
        if not self.stop and self.tokens is None:
            raise ValueError('give "tokens": N (more than 0) or "stop": true')
        signed_whole(self.approver, self.signed_at, self.signature)
        return self


class BudgetState(BaseModel):
    """A run's token budget as it carries it across continue-as-new (only runs that have one)."""

    granted: int = 0
    """Tokens people granted on top of the run's limit."""
    stopped_by: str | None = None
    """Set when a person stopped the run at its budget (`""`: no name given)."""
    announced: bool = False
    """The current exhaustion was announced (`budget_exhausted` event)."""


class AgentRunResult(BaseModel):
    messages: list[ChatMessage]
    finish_reason: FinishReason
    rounds: int
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)


class Vote(BaseModel):
    """One person's signed answer to a call under an approver rule, as the run took it (after
    the worker verified its signature); the worker verifies it again before the call runs."""

    approver: str
    groups: list[str] = Field(default_factory=list)
    approved: bool
    at: datetime
    signed_at: str
    signature: str


class Quorum(BaseModel):
    """A waiting call under an approver rule, as `status` shows it: who may answer, how many
    approvals it needs, and who approved so far."""

    call_id: str
    tool: str
    groups: list[str]
    """Who may answer: the rule's groups (and any the call was escalated to, under a run's own
    rule)."""
    needed: int
    approvers: list[str] = Field(default_factory=list)
    """The people who approved it so far, in order."""


class AgentStatus(BaseModel):
    """The `status` query's answer."""

    phase: Phase
    round: int
    pending_approvals: list[ToolCall]
    finish_reason: FinishReason | None = None
    cancel_requested: bool = False
    awaiting_since: datetime | None = None
    """Workflow time at which the current approval wait began (for inboxes)."""
    decided: list[ApprovalRecord] = Field(default_factory=list)
    """The answers already recorded for the pending calls (by a person, a rule or the timeout),
    so an inbox can show which rule decided what while the rest wait."""
    run_id: str | None = None
    """The first run id of this run's chain (it stays the same across continue-as-new): what a
    person's answer carries as `run_id`."""
    pending_questions: list[PendingQuestion] = Field(default_factory=list)
    """The model's questions (`ask_user`) waiting for a person's answer (`submit_answer`)."""
    budget: BudgetStatus | None = None
    """The run's token budget, when it has one (`options.max_run_tokens`,
    `AGENT_MAX_RUN_TOKENS`)."""
    quorums: list[Quorum] = Field(default_factory=list)
    """The waiting calls under an approver rule: who may answer and the approvals so far."""
    expired: list[str] = Field(default_factory=list)
    """The pending calls whose approval timeout passed unanswered (`reopen_approval` asks
    again)."""
    escalations: dict[str, list[str]] = Field(default_factory=dict)
    """Call id → the groups it was escalated to (they may answer it too, unless the worker's
    enforced approver rule decides it: `quorums` says who may)."""
    approval_deadline: datetime | None = None
    """When the approval timeout of the calls waiting now passes (workflow time), if it does."""


# ---- Activity contracts ----


class ToolSpec(BaseModel):
    """What the worker's registry says about one tool; the workflow gets these from `list_tools`."""

    name: str
    description: str
    parameters: dict[str, Any]
    requires_approval: bool = False
    safe_to_retry: bool = True
    timeout_seconds: float | None = None
    """How long one execution may take (the activity's start-to-close timeout); None: the
    workflow's default (5 minutes)."""
    path_parameters: list[str] = Field(default_factory=list)
    """Parameters that name a path in the workspace: rules match them as the normalised
    workspace-relative path the tool opens."""
    path_root: str | None = None
    """The workspace folder (absolute) the path parameters are in: rules see an absolute path
    inside it as workspace-relative. None: an absolute path stays absolute."""


class ReplyOf(BaseModel):
    """A message of `LlmRequest.tail`: the assistant message the run built from the `call_llm`
    result of round `reply_of`, its calls renamed to `ids` (`Conversation.reply`)."""

    reply_of: int
    ids: list[str]


class ResultOf(BaseModel):
    """A message of `LlmRequest.tail`: the tool message whose content is exactly the
    `execute_tool` result of call `result_of`."""

    result_of: str


class Inline(BaseModel):
    """A message of `LlmRequest.tail` carried whole (a person's, a rejection, an error...)."""

    message: ChatMessage


class Tail(BaseModel):
    """The messages a request adds to the conversation of the run's previous request (its
    first `after` messages), each by where it came from (`workflows.conversation_parts`)."""

    after: int
    parts: list[ReplyOf | ResultOf | Inline]


class LlmRequest(BaseModel):
    """Input of `call_llm`.

    It names the conversation instead of carrying it: the activity reads the first
    `message_count` messages of run `run_id` through the `conversation_tail` query, unless the
    worker holds the conversation of the run's previous request and made the results `tail`
    names (then `digest` confirms what it rebuilt). History then grows with each round's new
    content, not with the whole conversation every round.
    """

    workflow_id: str
    run_id: str
    message_count: int
    round: int
    tools: list[str]
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    """The run's `options.max_tokens`; None: the worker's `LLM_MAX_TOKENS` (or none)."""
    view: bool = False
    """Read the model's view (the `model_view` query, `message_count` messages long) instead
    of the record: the run compacts its conversation to fit the model's context window."""
    offered: list[ToolSpec] = Field(default_factory=list, exclude_if=lambda value: not value)
    """Tools the workflow itself offers besides the worker's (`ask_user`): never run by
    `execute_tool`; left out of the JSON when empty."""
    digest: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """The digest (`conversation_tail.extend`'s chain) of the first `message_count` messages of
    what the request is for (the record, or the model's view); None in runs of earlier releases
    (left out when unset)."""
    tail: Tail | None = Field(default=None, exclude_if=lambda value: value is None)
    """What was added since the run's previous request, when known (left out when unset)."""


class SummaryRequest(BaseModel):
    """Input of `summarize_conversation`: summarise messages `first`..`last` (exclusive) of the
    run's record (read with the `messages` query), leaving out `skip`, continuing from
    `previous_summary`."""

    workflow_id: str
    run_id: str
    first: int
    last: int
    skip: list[int] = Field(default_factory=list)
    previous_summary: str | None = None
    model: str | None = None
    max_tokens: int = 1_024
    context_tokens: int | None = None
    """The run's window: the request for the summary must fit it too (None: not bounded)."""


class SummaryResponse(BaseModel):
    text: str
    usage: Usage = Field(default_factory=Usage)


class WorkerSetup(BaseModel):
    """Output of `worker_setup`, read once per run: what the worker tells the workflow about
    itself (its tools and rules, the model's window, the conversation's budget, whether people
    are notified)."""

    tools: list[ToolSpec]
    policy: WorkerPolicy = Field(default_factory=WorkerPolicy)
    context_tokens: int = 128_000
    """The model's context window (LLM_CONTEXT_TOKENS, else the server's own figure)."""
    max_tokens: int | None = None
    """The worker's LLM_MAX_TOKENS: the reply reserve when a run sets none."""
    conversation_bytes: int = 1_400_000
    """The conversation's budget: 1.4 MB, or AGENT_MAX_CONVERSATION_MB with a payload store."""
    payload_store: bool = False
    """Whether the worker has an external payload store (AGENT_PAYLOAD_STORE)."""
    notify: bool = False
    """Whether the worker notifies people (AGENT_NOTIFY_URL): the workflow runs `notify`."""
    ask_user: bool = False
    """The worker's AGENT_ASK_USER: runs that do not set `options.ask_user` offer the model the
    `ask_user` tool."""
    max_run_tokens: int | None = Field(default=None, exclude_if=lambda value: value is None)
    """The worker's cap on a run's token budget (AGENT_MAX_RUN_TOKENS); left out when unset."""
    budget_groups: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    """Who may grant tokens (AGENT_BUDGET_GROUPS); empty: anyone who may answer."""
    escalate_after_seconds: float | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    """The worker's AGENT_ESCALATE_AFTER_SECONDS: a run's default (left out when unset)."""
    escalate_to: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    """The worker's AGENT_ESCALATE_TO: a run's default (left out when empty)."""


class NotifyRequest(BaseModel):
    """Input of `notify`: tell people about a call waiting for them, or about the end of a run
    that waited for a person. The worker adds the inbox link (AGENT_INBOX_URL) and leaves the
    arguments out when encryption is on (unless AGENT_NOTIFY_ARGUMENTS=true)."""

    event: Literal[
        "approval_waiting",
        "approval_reminder",
        "approval_expired",
        "approval_escalated",
        "question_waiting",
        "run_finished",
        "budget_exhausted",
    ]
    workflow_id: str
    run_id: str
    """The first run id of the run's chain (what an answer carries as `run_id`)."""
    call_id: str | None = None
    tool: str | None = None
    arguments: Any = None
    waiting_since: datetime | None = None
    finish_reason: FinishReason | None = None
    error: str | None = None
    used: int | None = Field(default=None, exclude_if=lambda value: value is None)
    """`budget_exhausted`: the tokens the run used (left out otherwise)."""
    limit: int | None = Field(default=None, exclude_if=lambda value: value is None)
    """`budget_exhausted`: the run's token budget (left out otherwise)."""
    groups: list[str] | None = Field(default=None, exclude_if=lambda value: value is None)
    """`approval_escalated`: the groups the call was escalated to, who may answer it now unless
    `rule_groups` is there (left out otherwise)."""
    rule_groups: list[str] | None = Field(default=None, exclude_if=lambda value: value is None)
    """`approval_escalated` of a call the worker's enforced approver rule decides: that rule's
    groups, the only ones that may answer it (left out otherwise)."""


class ContextState(BaseModel):
    """The model's context window as a run tracks it, and how its view of the conversation is
    compacted (the record, `messages`, is never changed by it)."""

    window: int | None = None
    """The budget in tokens (the worker's window, lowered by `options.context_tokens` or by a
    provider that said the request was too long); None: the run does not compact."""
    reserve: int = 1_024
    """Tokens kept for the reply (`max_tokens`, else 1,024)."""
    prompt_tokens: int | None = None
    """What the provider counted for the last request (None after the view changed)."""
    prompt_messages: int = 0
    """The record's length at that request."""
    dropped_until: int = 0
    """Tool results before this record index are a one-line placeholder in the view."""
    summary: str | None = None
    summary_until: int = 0
    """Messages after the first user message and before this index are `summary` in the view."""
    markers: list[int] = Field(default_factory=list)
    """Record indices of the compaction markers (in the record, never sent to the model)."""
    cut: dict[int, int] = Field(default_factory=dict)
    """Record index of a tool result → the characters the view keeps of it."""
    summary_as_user: bool = False
    """The summary reaches the model as a user message saying it is a summary (it is written
    from tool output: data, never the system's word); False: as a system message (runs of
    earlier releases)."""
    too_long: int = 0
    """Replies in a row that said the request was too long for the model."""


class LlmResponse(BaseModel):
    """Output of `call_llm`: the assistant message (text and tool calls) and its token usage."""

    message: ChatMessage
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None
    """The provider's `finish_reason` (`stop`, `tool_calls`, `length`, …) when it gave one;
    `length` means the reply was cut off at the token limit."""
    calls_from_text: bool = False
    """The reply's tool calls were written as text in its content (and read by the worker,
    `LLM_TEXT_TOOL_CALLS=parse`); the message's content then no longer holds them."""
    warnings: list[str] = Field(default_factory=list)
    """What the worker noticed about the reply (text that looks like a call but is not one, and
    the likely cause); the workflow emits each as a `warning` event."""
    max_tokens: int | None = None
    """The `max_tokens` the request carried (the run's, else the worker's), if any."""


class ToolRequest(BaseModel):
    """Input of `execute_tool`. `workflow_id` + `run_key` + `call_id` is the idempotency key."""

    workflow_id: str
    call_id: str
    name: str
    arguments: Any
    run_key: str | None = None
    """The run id of the first run of the workflow's continue-as-new chain. With the workflow
    id and the call id (unique within a run) it keys the at-most-once record, so a later run
    that reuses the workflow id never meets an earlier run's record."""
    answered_by: ApprovalSource | None = None
    """Who approved the call (`person`, `policy`, `seed`); None: the call ran without an
    answer. A call the worker's enforced rules send to a person runs only when a `person` did."""
    votes: list[Vote] | None = None
    """A call under an approver rule: the signed votes that approved it (the worker verifies
    each and counts the distinct eligible people against its own enforced rule)."""

    @model_serializer(mode="wrap")
    def _without_votes(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(handler(self), ("votes",))


class CarriedState(BaseModel):
    """The first release's continue-as-new hand-over (besides the messages). New generations get
    an `AgentState`; this is still read so that runs continued by the first release go on
    (`legacy.from_carried`, until the date of `hardened-loop-1` in `versions.PATCHES`)."""

    round: int
    generation: int
    next_seq: int
    events: list[AgentEvent]
    answers: dict[str, ApprovalRecord] = Field(default_factory=dict)
    awaiting_announced: bool = False
    awaiting_since: datetime | None = None
    approval_deadline: datetime | None = None
    between_turns: bool = False
    """A session (`keep_alive`) waiting for its next message."""
    idle_deadline: datetime | None = None
    cancel: CancelRequest | None = None
    held_messages: list[ChatMessage] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    tool_specs: list[ToolSpec] | None = None
    seed_responses_applied: bool = False
    seed_mode: bool = False
    stream: WorkflowStreamState | None = None
    """The live stream's retained items and publisher dedup state (a bounded tail)."""


class ApprovalWait(BaseModel):
    """An announced approval wait: its `awaiting_approval` event was emitted at `since`."""

    since: datetime
    deadline: datetime | None = None
    """When the approval timeout fires (workflow time), or None: wait forever."""
    reminded: bool = False
    """People were reminded of it (at half the timeout)."""


class SessionWait(BaseModel):
    """A session (`keep_alive`) between turns, waiting for its next message."""

    idle_deadline: datetime | None = None
    """When the session ends without a message (workflow time), or None: never."""


class AgentState(BaseModel):
    """Everything a run remembers, in one object: the workflow holds it and hands it to the
    next generation as it is at continue-as-new (a new field is added here and nowhere else)."""

    messages: list[ChatMessage]
    options: AgentRunOptions
    round: int = 0
    generation: int = 0
    events: list[AgentEvent] = Field(default_factory=list)
    """The retained tail of the event log (at least the last 1,000 events)."""
    next_seq: int = 0
    answers: dict[str, ApprovalRecord] = Field(default_factory=dict)
    """Answers recorded for the pending calls, by call id (cleared when the batch runs)."""
    approval_wait: ApprovalWait | None = None
    session_wait: SessionWait | None = None
    cancel: CancelRequest | None = None
    held_messages: list[ChatMessage] = Field(default_factory=list)
    """User messages that arrived while calls were pending: appended after their tool messages."""
    usage: Usage = Field(default_factory=Usage)
    tool_specs: list[ToolSpec] | None = None
    """The worker's tools, read once per run (None until `list_tools` answered)."""
    seed_mode: bool = False
    """Answers given at start (`tool_approval_responses`) apply at the first iteration: a call
    that needs approval and has none is then denied instead of waited for."""
    stream: WorkflowStreamState | None = None
    """The live stream's retained tail and publisher dedup state (set at continue-as-new)."""
    run_rules: list[PolicyRule] = Field(default_factory=list)
    """The run's approval rules: `options.approval_policy`, remembered answers at the front, or
    what `set_approval_policy` set."""
    worker_policy: WorkerPolicy | None = None
    """The worker's enforced and default rules, read once per run (None: not read)."""
    asked: list[str] = Field(default_factory=list)
    """Pending calls a rule says a person must answer although their tool needs no approval."""
    call_runs: dict[str, int] = Field(default_factory=dict)
    """How often each distinct call (tool and arguments, hashed) ran in this run: the repeat
    limit (`options.max_repeats`). Bounded (`workflows.repeats`). Runs of this release count per
    turn (a session's next message starts again from zero), rejections included."""
    turn_rejections: dict[str, str | None] = Field(default_factory=dict)
    """The calls (hashed as in `call_runs`) a person rejected in this turn, with the reason
    given: the same call again is answered with that rejection without asking anyone. Bounded
    (`workflows.repeats`)."""
    turn_rejected_by: dict[str, str | None] = Field(
        default_factory=dict, exclude_if=lambda value: not value
    )
    """Who rejected each of `turn_rejections` (the same keys), for the audit of the calls
    answered with it. Left out of the JSON while empty."""
    context: ContextState = Field(default_factory=ContextState)
    """The model's window and the compaction of its view (`workflows.context`)."""
    setup: WorkerSetup | None = None
    """What `worker_setup` said (runs of this release; None before it answered)."""
    waited_for_person: bool = False
    """A call of this run waited for a person (its end is notified, with AGENT_NOTIFY_URL)."""
    audit: list[AuditEntry] = Field(default_factory=list)
    """Every decision of the run, in order, across continue-as-new (bounded: `workflows.audit`)."""
    audit_counts: AuditCounts = Field(default_factory=AuditCounts)
    audit_dropped: int = 0
    audit_bytes: int = 0
    questions: dict[str, QuestionRecord] = Field(default_factory=dict)
    """The answers to the pending `ask_user` calls, by call id (cleared when the batch runs)."""
    asked_questions: list[str] = Field(default_factory=list)
    """The pending `ask_user` calls whose `question` event was emitted."""
    budget: BudgetState | None = Field(default=None, exclude_if=lambda value: value is None)
    """The token budget's grants and stop (runs with a budget only; left out otherwise)."""
    votes: dict[str, list[Vote]] = Field(default_factory=dict, exclude_if=lambda value: not value)
    """Pending calls under an approver rule: the signed votes taken so far (cleared with the
    answers when the batch ran; left out of the JSON while none)."""
    expired: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    """Pending calls whose approval timeout passed unanswered (`on_approval_timeout: expire`);
    cleared when their batch ran. Bounded by the calls of one reply. Left out when empty, as
    are `escalations`."""
    escalations: dict[str, list[str]] = Field(
        default_factory=dict, exclude_if=lambda value: not value
    )
    """Pending calls escalated (`approval_escalate_after_seconds`) → the groups that may answer
    them too (unless the worker's enforced approver rule decides the call: only its groups may);
    cleared when their batch ran. Bounded by the calls of one reply."""
    cut_off: dict[str, int | None] = Field(default_factory=dict)
    """Pending calls of a reply cut off at the token limit (`finish_reason: length`), with the
    `max_tokens` the request carried: a call whose arguments were cut is told so."""


def describe_validation(err: ValidationError, *, where: str = "input", echo: bool = False) -> str:
    """What was wrong, in one line a person can act on: at most five problems, each with where it
    is; with `echo`, a short preview of the value that was wrong (never for a workflow input,
    which may be huge or private)."""
    parts = []
    for item in err.errors()[:5]:
        place = ".".join(str(p) for p in item["loc"]) or where
        message = item["msg"]
        if "recursion limit" in message:
            message = f"nested too deeply ({message})"
        if echo:
            shown = repr(item.get("input"))
            message += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
        parts.append(f"{place}: {message}")
    more = len(err.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


class AgentRunInput(BaseModel):
    """The workflow's single argument. A bare string is taken as one user prompt."""

    messages: list[ChatMessage]
    options: AgentRunOptions = Field(default_factory=AgentRunOptions)
    state: AgentState | None = None
    """Set only by the workflow itself when it continues as new (then `messages` is empty and
    the conversation is in the state)."""
    continued: CarriedState | None = None
    """The hand-over of runs continued by the first release, still read so they go on."""
    _arrived_in_plaintext: bool = PrivateAttr(default=False)
    _sealed_for: dict[str, bytes] = PrivateAttr(default_factory=dict)
    """The seal record (`workflows.seal`) the codec found inside the sealed input, as metadata:
    set by the payload converter, never part of the JSON."""

    @property
    def arrived_in_plaintext(self) -> bool:
        """Whether a worker holding keys found this input unencrypted (set by the payload
        converter from the codec's mark; never part of the JSON). It is read from the start
        event, so a replay decides as the run did, whatever keys the replaying worker holds."""
        return self._arrived_in_plaintext

    @model_validator(mode="before")
    @classmethod
    def _prompt_is_a_user_message(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"messages": [{"role": "user", "content": value}]}
        return value

    @model_validator(mode="wrap")
    @classmethod
    def _invalid_input_fails_the_run(
        cls, value: Any, handler: ModelWrapValidatorHandler[Any]
    ) -> Any:
        # Raised while the SDK decodes the workflow's argument, an ApplicationError fails the run
        # with this message; a ValidationError would fail the workflow task again and again.
        try:
            return handler(value)
        except ValidationError as err:
            raise ApplicationError(
                f"Invalid AgentRunInput: {describe_validation(err)}",
                type="InvalidAgentRunInput",
                non_retryable=True,
            ) from None

    @classmethod
    def from_prompt(cls, prompt: str, options: AgentRunOptions | None = None) -> AgentRunInput:
        return cls(messages=[ChatMessage.user(prompt)], options=options or AgentRunOptions())
