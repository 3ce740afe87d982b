"""Everything a run remembers, in one object (`AgentState`), and the workflow's single argument
(`AgentRunInput`), which carries that state from one generation to the next."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import (
    BaseModel,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.exceptions import ApplicationError

from workflows.contract.activities import ToolSpec, Vote, WorkerSetup
from workflows.contract.events import AgentEvent
from workflows.contract.inputs import AgentRunOptions, CancelRequest
from workflows.contract.messages import ChatMessage, Usage, describe_validation
from workflows.contract.rules import PolicyRule, WorkerPolicy
from workflows.contract.views import (
    ApprovalRecord,
    AuditCounts,
    AuditEntry,
    QuestionRecord,
    SubAgentStatus,
)


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
    from tool output: data, never the system's word). Always True once a summary exists; kept
    in the state's JSON, which a run hands to its next generation as it is."""
    too_long: int = 0
    """Replies in a row that said the request was too long for the model."""


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


class BudgetState(BaseModel):
    """A run's token budget as it carries it across continue-as-new (only runs that have one)."""

    granted: int = 0
    """Tokens people granted on top of the run's limit."""
    stopped_by: str | None = None
    """Set when a person stopped the run at its budget (`""`: no name given)."""
    announced: bool = False
    """The current exhaustion was announced (`budget_exhausted` event)."""
    estimated: int = Field(default=0, exclude_if=lambda value: not value)
    """Tokens counted by estimate, for replies whose provider reported no usage."""
    estimate_told: bool = Field(default=False, exclude_if=lambda value: not value)
    """People were told (once) that the budget counts an estimate."""


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
    limit (`options.max_repeats`). Bounded (`workflows.gate.repeats`). Runs count per turn (a
    session's next message starts again from zero), rejections included."""
    turn_rejections: dict[str, str | None] = Field(default_factory=dict)
    """The calls (hashed as in `call_runs`) a person rejected in this turn, with the reason
    given: the same call again is answered with that rejection without asking anyone. Bounded
    (`workflows.gate.repeats`)."""
    turn_rejected_by: dict[str, str | None] = Field(
        default_factory=dict, exclude_if=lambda value: not value
    )
    """Who rejected each of `turn_rejections` (the same keys), for the audit of the calls
    answered with it. Left out of the JSON while empty."""
    context: ContextState = Field(default_factory=ContextState)
    """The model's window and the compaction of its view (`workflows.conversation.window`)."""
    setup: WorkerSetup | None = None
    """What `worker_setup` said (None before it answered)."""
    waited_for_person: bool = False
    """A call of this run waited for a person (its end is notified, with AGENT_NOTIFY_URL)."""
    audit: list[AuditEntry] = Field(default_factory=list)
    """Every decision of the run, in order, across continue-as-new (bounded:
    `workflows.gate.audit`)."""
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
    sub_agents: dict[str, SubAgentStatus] = Field(
        default_factory=dict, exclude_if=lambda value: not value
    )
    """The sub-agents the pending `delegate` calls started, by call id, as each last reported
    itself (cleared when their batch ran; left out of the JSON while none)."""
    sub_agent_tokens: int = Field(default=0, exclude_if=lambda value: not value)
    """Tokens the run's finished sub-agents used: the tree's budget counts them."""
    sub_agent_grants: dict[str, int] = Field(
        default_factory=dict, exclude_if=lambda value: not value
    )
    """Tokens people granted each running sub-agent at its own budget, by call id: they count
    for the tree (added to the run's grants when the sub-agent ends)."""
    held_results: dict[str, str] = Field(default_factory=dict, exclude_if=lambda value: not value)
    """The results of a batch whose call the worker sent back to wait for a person, by call id:
    appended with it, in call order, once it ran (left out of the JSON while none)."""
    cut_off: dict[str, int | None] = Field(default_factory=dict)
    """Pending calls of a reply cut off at the token limit (`finish_reason: length`), with the
    `max_tokens` the request carried: a call whose arguments were cut is told so."""


class AgentRunInput(BaseModel):
    """The workflow's single argument. A bare string is taken as one user prompt."""

    messages: list[ChatMessage]
    options: AgentRunOptions = Field(default_factory=AgentRunOptions)
    state: AgentState | None = None
    """Set only by the workflow itself when it continues as new (then `messages` is empty and
    the conversation is in the state)."""
    continued: Any = Field(default=None, exclude=True)
    """A hand-over of before 1.0: taken only to refuse a start that claims one."""
    _arrived_in_plaintext: bool = PrivateAttr(default=False)
    _sealed_for: dict[str, bytes] = PrivateAttr(default_factory=dict)
    """The seal record (`workflows.contract.seal`) the codec found inside the sealed input, as
    metadata: set by the payload converter, never part of the JSON."""

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
