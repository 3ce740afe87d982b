"""What the run shows: its status, its decisions (the records and the audit), its budget, the
quorum of a call, and its result."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    StrictStr,
    model_serializer,
)

from workflows.contract.messages import (
    SIGNED_FIELDS,
    AnswerValue,
    ApprovalSource,
    ChatMessage,
    FinishReason,
    Phase,
    ToolCall,
    Usage,
    without_none,
)


class PendingQuestion(BaseModel):
    """A question waiting for a person, as `status` lists it in `pending_questions`."""

    call_id: str
    question: str
    options: list[str] | None = None
    multiple: bool = False
    arguments_sha256: str = ""
    """The digest of the `ask_user` call's arguments
    (`workflows.contract.arguments.arguments_digest`): what a signed answer is bound to, as an
    approval's is to its call's arguments."""


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
    reasons: dict[str, str | None] | None = None
    """A call under an approver rule: what each of `approvers` said with their vote."""
    signed_by: str | None = None
    """The signing service that signed the answer for the approver (not their own key)."""

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
    reasons: dict[str, str | None] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    """A call under an approver rule: what each of `approvers` said with their vote (left out of
    the JSON otherwise)."""
    action: AuditAction = Field(default="decided", exclude_if=lambda value: value == "decided")
    """What happened: a decision (`decided`, left out of the JSON), or the call `expired` (its
    approval timeout passed unanswered, source `timeout`), was asked again (`reopened`, by
    `approver`) or `escalated` (to the groups in `reason`). Only a decision approves or
    rejects: `approved` is false for the others."""
    remembered: bool = Field(default=False, exclude_if=lambda value: not value)
    """A rejection nobody gave again: the call is the same as one a person rejected earlier in
    the turn, answered with that no (`approver` is who said it first, `reason` theirs) without
    asking anyone. Left out of the JSON otherwise."""
    workflow_id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """A sub-agent's decision, kept in its parent's audit: the sub-agent's workflow id (left out
    for the run's own decisions)."""


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


class BudgetStatus(BaseModel):
    """A run's token budget: `used` of `limit` tokens (`granted` of them given by people)."""

    used: int
    limit: int
    granted: int = 0
    groups: list[str] = Field(default_factory=list, exclude_if=lambda value: not value)
    """Who may grant tokens or stop the run (the worker's AGENT_BUDGET_GROUPS, each with a signed
    grant); left out when anyone may."""


class SubAgentReport(BaseModel):
    """What a sub-agent tells its parent: at every pause (the `sub_agent_report` signal) where
    it stands, what waits for whom, the tokens it used and the tokens people granted it; at its
    end (in its result, `AgentRunResult.sub_agent_report`) the same with its decisions for the
    parent's audit."""

    call_id: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    workflow_id: Annotated[StrictStr, Field(min_length=1, max_length=1_000)]
    phase: Phase
    pending_approvals: list[ToolCall] = Field(default_factory=list, max_length=64)
    pending_questions: list[PendingQuestion] = Field(default_factory=list, max_length=64)
    usage: Usage = Field(default_factory=Usage)
    granted: Annotated[int, Field(ge=0)] = 0
    finish_reason: FinishReason | None = None
    audit: list[AuditEntry] = Field(default_factory=list, max_length=1_000)


class AgentRunResult(BaseModel):
    messages: list[ChatMessage]
    finish_reason: FinishReason
    rounds: int
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
    sub_agent_report: SubAgentReport | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    """A sub-agent's last word for its parent (its decisions, the tokens granted it); left out
    of the JSON for a run that is no sub-agent."""


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
    reasons: dict[str, str | None] = Field(
        default_factory=dict, exclude_if=lambda value: not any(value.values())
    )
    """What each of `approvers` said with their vote (left out while none gave a reason)."""
    own_key: bool = Field(default=False, exclude_if=lambda value: not value)
    """The rule takes only votes signed with the person's own key (none through a signing
    service such as the web app's); left out otherwise."""


class ForkedFrom(BaseModel):
    """Where a fork comes from: the run (its workflow id and the first run id of its chain) and
    the round of its record the fork starts after (`starter fork`). Provenance shown to people,
    never authority: whoever starts a run may write anything here."""

    model_config = ConfigDict(extra="forbid")

    workflow_id: Annotated[StrictStr, Field(min_length=1, max_length=1_000)]
    run_id: Annotated[StrictStr, Field(max_length=200)] = ""
    round: Annotated[StrictInt, Field(ge=0)] | None = None
    """The last round (model reply, 0-based across the run) the fork's conversation holds;
    None: the original had no reply yet."""


class SubAgentOf(BaseModel):
    """A sub-agent's parent: the run and the `delegate` call that started it, its depth (1 for a
    parent's own sub-agent) and its task. Taken only when Temporal says the run is a child of
    that run (`workflow.info().parent`), so a client cannot claim it."""

    workflow_id: str
    run_id: str
    """The first run id of the parent's chain."""
    call_id: str
    depth: Annotated[int, Field(ge=1, le=10)] = 1
    task: str = ""


class SubAgentStatus(BaseModel):
    """One of a run's sub-agents as the parent's `status` lists it (`sub_agents`), as the child
    last reported itself."""

    call_id: str
    workflow_id: str
    phase: Phase = "running"
    pending_approvals: list[ToolCall] = Field(default_factory=list)
    pending_questions: list[PendingQuestion] = Field(default_factory=list)
    task: str = ""
    tokens: int = 0
    """The prompt and completion tokens it used so far."""
    finish_reason: FinishReason | None = None


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
    sub_agents: list[SubAgentStatus] = Field(
        default_factory=list, exclude_if=lambda value: not value
    )
    """The sub-agents this run's `delegate` calls started and still wait for (phase
    `waiting_for_sub_agents`); left out of the JSON while there are none."""
    parent: SubAgentOf | None = Field(default=None, exclude_if=lambda value: value is None)
    """For a sub-agent: the run and the call that started it (left out otherwise)."""
    forked_from: ForkedFrom | None = Field(default=None, exclude_if=lambda value: value is None)
    """A fork's provenance (`options.forked_from`: the run and round it comes from), as whoever
    started it wrote it; left out of the JSON for a run that is no fork."""
