"""What the workflow and its activities exchange: tool specs, the model request and reply (and
the parts of the conversation a request names), a tool request, the worker's setup, a summary,
a notification."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from workflows.contract.messages import (
    ApprovalSource,
    ChatMessage,
    FinishReason,
    Usage,
    without_none,
)
from workflows.contract.rules import WorkerPolicy


class Vote(BaseModel):
    """One person's signed answer to a call under an approver rule, as the run took it (after
    the worker verified its signature); the worker verifies it again before the call runs."""

    approver: str
    groups: list[str] = Field(default_factory=list)
    """The approver's groups as the worker's approvers file has them (found by the check)."""
    approved: bool
    at: datetime
    signed_at: str
    signature: str
    signed_by: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """The signing service that signed for the approver; left out for their own key."""
    reason: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """What the approver said with their vote (left out when nothing)."""


class ToolSpec(BaseModel):
    """What the worker's registry says about one tool (in its setup, `worker_setup`)."""

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
    first `after` messages), each by where it came from (`workflows.conversation.parts`)."""

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
    what the request is for (the record, or the model's view); left out when unset."""
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
    sub_agents: bool = Field(default=False, exclude_if=lambda value: not value)
    """The worker's AGENT_SUB_AGENTS: runs that do not set `options.sub_agents` offer the model
    the `delegate` tool (left out when off)."""
    max_depth: int = Field(default=2, exclude_if=lambda value: value == 2)
    """The worker's AGENT_MAX_DEPTH: a sub-agent may delegate again only while its depth is
    below it (left out at the default, 2)."""
    approver_groups: dict[str, int] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    """Each group of the worker's approvers file and how many people are in it: a run's
    approver rule that no one could meet is refused (None: the worker said nothing of it)."""


class WhoMay(BaseModel):
    """Who may answer what a notification is about: `count` distinct people of `groups`."""

    groups: list[str]
    count: int = 1


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
    parent_workflow_id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """For a sub-agent's call: the run whose `delegate` call started it (left out otherwise)."""
    parent_call_id: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """For a sub-agent's call: that `delegate` call's id (left out otherwise)."""
    who_may: WhoMay | None = Field(default=None, exclude_if=lambda value: value is None)
    """Who may answer: a call's approver rule (its groups and count), or the groups that may
    grant tokens at the budget (AGENT_BUDGET_GROUPS); left out when anyone may."""


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
    usage_reported: bool = Field(default=True, exclude_if=lambda value: value)
    """False when the provider reported no token usage for the reply (`usage` is then zero):
    a run with a token budget counts an estimate instead (left out when True)."""


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
    escalated_to: list[str] | None = Field(default=None, exclude_if=lambda value: value is None)
    """The groups the worker's own escalation (AGENT_ESCALATE_TO) sent the call to: the worker
    counts those of them it names itself with its enforced rule (left out otherwise)."""

    @model_serializer(mode="wrap")
    def _without_votes(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(handler(self), ("votes",))
