"""The event log's entries (`events` query, the live stream): one class per `type`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from workflows.contract.messages import (
    SIGNED_FIELDS,
    AnswerValue,
    ApprovalSource,
    FinishReason,
    ToolCall,
    without_none,
)
from workflows.contract.views import ForkedFrom


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
    reasons: dict[str, str | None] | None = None
    """A call under an approver rule: what each of `approvers` said with their vote."""
    signed_by: str | None = None
    """The signing service that signed the answer for the approver (not their own key)."""

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
    reason: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """What the approver said with their vote (left out when nothing)."""
    signed_by: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """The signing service that signed for the approver; left out for their own key."""


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


class SubAgentStartedEvent(BaseEvent):
    """A `delegate` call started a sub-agent: a child `AgentWorkflow` working on `task`."""

    type: Literal["sub_agent_started"] = "sub_agent_started"
    call_id: str
    workflow_id: str
    task: str


class SubAgentWaitingEvent(BaseEvent):
    """A sub-agent waits for a person: `waiting_call` is its call (or question) to answer, on
    the sub-agent's own run (`workflow_id`)."""

    type: Literal["sub_agent_waiting"] = "sub_agent_waiting"
    call_id: str
    workflow_id: str
    waiting_call: ToolCall


class SubAgentFinishedEvent(BaseEvent):
    """A sub-agent ended: how, and the tokens it used (its answer is the call's result)."""

    type: Literal["sub_agent_finished"] = "sub_agent_finished"
    call_id: str
    workflow_id: str
    finish_reason: FinishReason | None
    """None when Temporal ended it without a finish (failed, terminated)."""
    tokens: int = 0


class ForkedEvent(BaseEvent):
    """A fork's first event: the run started from another run's record (`options.forked_from`),
    up to the end of that run's round `forked_from.round`. Provenance as the starter wrote it."""

    type: Literal["forked"] = "forked"
    forked_from: ForkedFrom


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
    | ApprovalEscalatedEvent
    | SubAgentStartedEvent
    | SubAgentWaitingEvent
    | SubAgentFinishedEvent
    | ForkedEvent,
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
