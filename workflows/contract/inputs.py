"""What clients send: a person's answer, a question's answer, a cancel, asking again, a user
message, a budget grant, and the run's options. Strict where a typo could loosen something."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from workflows.contract.messages import (
    SIGNED_FIELDS,
    ApprovalTimeoutPolicy,
    without_none,
)
from workflows.contract.rules import MAX_GROUPS, ApprovalPolicy, GroupName
from workflows.contract.views import ForkedFrom, SubAgentOf

SIGNED_AT_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$"
"""`signed_at` as signers write it (`people.signatures.signed_at_text`): ISO-8601, UTC, with `Z`."""
SIGNATURE_PATTERN = r"^(?:[A-Za-z0-9+/]{86}==|[A-Za-z0-9+/]{43}=)$"
"""An Ed25519 signature in standard base64 (64 bytes; 32 bytes: the shared key's HMAC that runs
started before own keys carry in their history)."""
SIGNER_NAME = r"^[A-Za-z0-9._@+-]{1,64}$"
"""A signing service's name (the approvers file's `SERVICE @service KEY` line)."""


def signed_whole(approver: str | None, signed_at: str | None, signature: str | None) -> None:
    """A signed answer, grant or reopen names who signed and when, and a time comes only with
    a signature (raises ValueError for a model validator)."""
    if signature is not None and (signed_at is None or approver is None):
        raise ValueError("a signature needs signed_at and approver")
    if signed_at is not None and signature is None:
        raise ValueError("signed_at is only taken with a signature")


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
    parsed arguments, `workflows.contract.arguments.arguments_digest`): an answer for a call whose
    arguments changed since is refused."""
    groups: Annotated[list[GroupName], Field(max_length=MAX_GROUPS)] | None = None
    """Taken, never believed: a person's groups are the worker's approvers file's, found by the
    signature's check."""
    signed_at: Annotated[StrictStr, Field(pattern=SIGNED_AT_PATTERN)] | None = None
    """When the answer was signed (ISO-8601 UTC): with `signature` only."""
    signature: Annotated[StrictStr, Field(pattern=SIGNATURE_PATTERN)] | None = None
    """Ed25519 (base64), by the approver's own key (or by the signing service `signed_by`), of
    the approver, workflow id, first run id, call id, `arguments_sha256`, decision and
    `signed_at` (`workflows.people.signatures`): the worker verifies it with the keys of its
    approvers file, and an answer whose signature does not verify is refused."""
    signed_by: Annotated[StrictStr, Field(pattern=SIGNER_NAME)] | None = None
    """The signing service that signed for the approver (the web app), when it was not their
    own key: the approvers file must let the approver sign through it."""

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
                "signed_by",
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
    """Taken, never believed: the approvers file's groups are the person's."""
    signed_at: Annotated[StrictStr, Field(pattern=SIGNED_AT_PATTERN)] | None = None
    """When the answer was signed (ISO-8601 UTC): with `signature` only."""
    signature: Annotated[StrictStr, Field(pattern=SIGNATURE_PATTERN)] | None = None
    """Ed25519 (base64), as an approval's, with the decision `answer:<sha256 of the answer
    text>` (`workflows.people.signatures.answer_decision`): an answer whose signature does not
    verify is refused."""
    signed_by: Annotated[StrictStr, Field(pattern=SIGNER_NAME)] | None = None
    """The signing service that signed for the person, when it was not their own key."""

    @model_validator(mode="after")
    def _signed_whole(self) -> QuestionAnswer:
        signed_whole(self.approver, self.signed_at, self.signature)
        return self

    @model_serializer(mode="wrap")
    def _without_unused_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(
            handler(self), ("approver", "run_id", "groups", "signed_at", "signature", "signed_by")
        )


class CancelRequest(BaseModel):
    """The optional payload of the `cancel` signal."""

    model_config = ConfigDict(extra="forbid")

    reason: StrictStr | None = None
    immediate: StrictBool = False
    requested_by: StrictStr | None = None
    """Who asked (the signed-in web user, the starter's OS user), when known."""


class ReopenRequest(BaseModel):
    """The `reopen_approval` update: ask again for an expired call (a new deadline). Signed like
    an answer (decision `reopen`) when the sender has a key."""

    model_config = ConfigDict(extra="forbid")

    call_id: Annotated[StrictStr, Field(min_length=1)]
    approver: StrictStr | None = None
    """Who asks again (the signed-in web user, the starter's OS user)."""
    groups: Annotated[list[GroupName], Field(max_length=MAX_GROUPS)] | None = None
    """Taken, never believed: the approvers file's groups are the person's."""
    signed_at: Annotated[StrictStr, Field(pattern=SIGNED_AT_PATTERN)] | None = None
    signature: Annotated[StrictStr, Field(pattern=SIGNATURE_PATTERN)] | None = None
    """Ed25519 (base64), as an answer's, with the decision `reopen`: a request whose signature
    does not verify is refused."""
    signed_by: Annotated[StrictStr, Field(pattern=SIGNER_NAME)] | None = None
    """The signing service that signed for the person, when it was not their own key."""

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
    again, rejects or cancels), `cancel` (the run) or `reject` (the calls). null: `expire`,
    written into the options at the run's start."""
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
    without asking (see `workflows.gate.policy`). Invalid rules fail the run at start."""
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
    result (`workflows.people.ask_user`). None: the worker's `AGENT_ASK_USER`."""
    sub_agents: bool | None = Field(default=None, exclude_if=lambda value: value is None)
    """Offer the model the `delegate` tool: a task handed to a sub-agent, a child run under the
    same people, rules and budget, whose answer is the tool's result (`workflows.run.sub_agents`).
    None: the worker's `AGENT_SUB_AGENTS`."""
    parent: SubAgentOf | None = Field(default=None, exclude_if=lambda value: value is None)
    """Set by a parent run for the sub-agent it starts (taken only when Temporal says this run
    is that run's child); a client's is refused."""
    max_run_tokens: Annotated[int, Field(gt=0)] | None = None
    """The run's token budget: the prompt and completion tokens the provider reported, all
    model calls added up. At it the run pauses (`budget_exhausted`) until a person grants more
    (`grant_budget`) or stops it; the worker's `AGENT_MAX_RUN_TOKENS` is the most it may be."""
    forked_from: ForkedFrom | None = Field(default=None, exclude_if=lambda value: value is None)
    """Set by a fork (`starter fork`, `POST /api/runs/W/fork`): the run and round it comes from,
    shown in `status` and in the run's first event (`forked`). Left out of the JSON when unset."""


MAX_GRANT_TOKENS = 1_000_000_000_000
"""The most tokens one grant may add."""
TOKENS_RULE = "tokens must be a whole number from 1"


def tokens_problem(value: object) -> str | None:
    """Why `value` is no grant's token count, in the one sentence every door says, or None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return TOKENS_RULE
    if value > MAX_GRANT_TOKENS:
        return f"tokens must be at most {MAX_GRANT_TOKENS:,}"
    return None


class BudgetGrant(BaseModel):
    """The `grant_budget` update's payload: `{"tokens": N}` adds N tokens to the run's budget,
    `{"stop": true}` stops a run that waits at its budget (it finishes `budget`). Who grants
    (`approver`) is set by the web app or the starter, which sign it as answers are
    (`workflows.people.signatures.grant_request`)."""

    model_config = ConfigDict(extra="forbid")

    tokens: Annotated[StrictInt, Field(gt=0, le=MAX_GRANT_TOKENS)] | None = None
    stop: StrictBool = False
    approver: StrictStr | None = None
    groups: Annotated[list[GroupName], Field(max_length=MAX_GROUPS)] = Field(default_factory=list)
    """Taken, never believed: the approvers file's groups are the person's."""
    signed_at: Annotated[StrictStr, Field(pattern=SIGNED_AT_PATTERN)] | None = None
    signature: Annotated[StrictStr, Field(pattern=SIGNATURE_PATTERN)] | None = None
    """Ed25519 (base64), as an answer's, of the decision (`grant:N` or `stop`) for the budget
    as it stands (`budget:<limit>` in place of a call)."""
    signed_by: Annotated[StrictStr, Field(pattern=SIGNER_NAME)] | None = None
    """The signing service that signed for the person, when it was not their own key."""

    @model_validator(mode="after")
    def _tokens_or_stop(self) -> BudgetGrant:
        if self.stop and self.tokens is not None:
            raise ValueError('give either "tokens" or "stop", not both')
        if not self.stop and self.tokens is None:
            raise ValueError('give "tokens": N (more than 0) or "stop": true')
        signed_whole(self.approver, self.signed_at, self.signature)
        return self

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(handler(self), ("signed_by",))
