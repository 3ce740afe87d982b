"""The rules a run follows, chosen once per run from its patch markers.

A run recorded by an earlier release replays with that release's rules: each release's new
behaviour is behind one `workflow.patched` id, read once when the run starts (the first
activation) by `Rules.of_this_run()`. The rest of the code asks the `Rules` value, each field
named by what it changes, and never a patch or a release. A new run writes one marker: the
newest patch implies the older ones.

`PATCHES` says, per patch, what it changed, the release that added it, and the date after which
no run without it can still be open: past that date the patch is deprecated
(`workflow.deprecate_patch`), and one release later its part of `workflows.legacy` and its
recordings go (docs/design.md, "Old releases").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date

from temporalio import workflow

from workflows.bounds import Limits

HARDENED = "hardened-loop-1"
"""The second release's loop: reused call ids renamed, calls that cannot run never wait for a
person, replies and batches bounded, the conversation's size checked at start."""
APPROVAL_POLICY = "approval-policy-1"
"""The second release's approval rules: the worker's rules read at a run's start."""
TRUST_AND_TIME = "trust-and-time-1"
"""The third release: one gate for every call whatever its source (a run's input, seeded
answers, edits), answers bound to the call that was shown, positional shell safety and
normalised paths in rules, bounded bookkeeping, the repeat limit, the context window,
notifications."""
SOUND_SEAMS = "sound-seams-1"
"""The fourth release: authority only from the worker (hand-overs only from a real
continue-as-new, the worker's setup read at every generation, the hand-over bounded as a whole),
and nothing failing silently (a session survives a bad turn)."""
PEOPLE_IN_CHARGE = "people-in-charge-1"
"""The fifth release: who may approve (approver groups and quorum, signed answers), expiry that
is not a denial, questions to a person, budgets that ask, and a leaner loop."""
LOOP_COST = "loop-cost-1"
"""The sixth release: the model call names the conversation's new messages by the activities
that returned them (no query per model call), and an escalation widens only a run's own
approver rules."""
LOOP_COST_2 = "loop-cost-2"
"""The seventh release: a generation's first model call carries a small conversation (the
prompt) itself, so no model call of a short run reads the conversation by query."""
SESSIONS_OUTLIVE_OUTAGES = "sessions-outlive-outages-1"
"""A model server out of reach past the worker's wait ends a session's turn, not the session, and
a call answered with a person's remembered no is in the audit like the calls people answered."""


@dataclass(frozen=True)
class Patch:
    """One line of the patch table."""

    id: str
    changed: str
    release: str
    open_until: date
    """After this date no run without the patch can still be open (the release's date, plus
    the longest a run stays open, plus the namespace's retention: see docs/design.md)."""


PATCHES = (
    Patch(HARDENED, "the hardened loop: ids, sizes, only runnable calls wait", "0.2",
          date(2027, 1, 3)),
    Patch(APPROVAL_POLICY, "the worker's approval rules read at start", "0.2",
          date(2027, 1, 3)),
    Patch(TRUST_AND_TIME, "one gate, bound answers, shell safety by position, audit", "0.3",
          date(2027, 1, 3)),
    Patch(SOUND_SEAMS, "authority only from the worker, sessions survive a bad turn", "0.4",
          date(2027, 1, 4)),
    Patch(PEOPLE_IN_CHARGE, "approvers, quorum, expiry, questions, budgets, a leaner loop",
          "0.5", date(2027, 1, 4)),
    Patch(LOOP_COST, "the conversation by reference, escalation within the rules", "0.6",
          date(2027, 1, 5)),
    Patch(LOOP_COST_2, "a generation's first model call carries a small conversation", "0.7",
          date(2027, 1, 6)),
    Patch(SESSIONS_OUTLIVE_OUTAGES, "an outage ends a session's turn, remembered noes audited",
          "1.0", date(2027, 1, 8)),
)  # fmt: skip


@dataclass(frozen=True)
class Rules:
    """What a run does, each choice named by what it changes (every field True, and today's
    size limits, for runs of this release)."""

    limits: Limits = field(default_factory=Limits)
    """The size rules (`bounds.Limits`): the first release's have none of the bounds."""

    # ---- the run's start and setup
    read_worker_rules: bool = True
    """Runs before the worker's setup: the worker's rules are read once at start."""
    read_worker_setup: bool = True
    """The worker's tools, rules, window and notifications come from one `worker_setup`
    activity (else: `list_tools`, and the worker's rules by `read_worker_rules`)."""
    setup_every_generation: bool = True
    """The worker's setup is read again by every generation (else: only the first)."""
    setup_on_the_run_worker: bool = True
    """The worker's setup is read by the worker running the run, as a local activity (a marker
    in history; else an activity task: three events more and a workflow task of three)."""
    strict_continuation: bool = True
    """A hand-over given at a plain start is refused, as are duplicate call ids in the input."""
    real_handovers_only: bool = True
    """A run is a continuation only when the server says so (not a cron or retried run)."""
    refuse_cron: bool = True
    """A run on a cron schedule is refused."""
    end_before_refusing: bool = True
    """A refused start first ends as every run does (`error`, `finished`, the memo)."""
    gate_input_calls: bool = True
    """Calls the run's input brings pass the rules like the model's."""
    seed_through_gate: bool = True
    """Answers given at start enter through the door a person's do (source `seed`)."""
    check_rules_match_tools: bool = True
    """A run's rule that can never match a tool of the worker is refused."""

    # ---- encryption
    sealed_inputs_only: bool = True
    """A run started sealed takes only sealed signals and updates."""
    seal_binding: bool = True
    """A sealed payload is taken only by the run and handler it was sealed for."""

    # ---- answers and rules
    bind_answers_to_shown_call: bool = True
    """An answer naming another run, or other arguments than the call's, is refused."""
    refuse_edit_by_rule: bool = True
    """Edited arguments pass the rules again; a rule that denies them answers the call."""
    enforced_ask_for_person: bool = True
    """A call an enforced `ask` rule sends to a person takes no seeded answer."""
    path_rules: bool = True
    """Rules see a tool's path parameters normalised."""
    paths_from_tool_root: bool = True
    """An absolute path inside the tool's workspace is seen workspace-relative."""
    positional_shell_safety: bool = True
    """An `allow` glob keeps a shell character to its place (else: the substring rule)."""
    forget_asked_after_batch: bool = True
    """The calls a rule sent to a person are forgotten once their batch ran."""
    audit: bool = True
    """Every decision is recorded for the `audit` query and the memo."""
    audit_remembered_rejections: bool = True
    """A call answered with a person's no remembered for the turn (nobody asked again) is in the
    audit too, with who said no first."""
    verify_signed_answers: bool = True
    """A signed answer is taken only once the worker verified its signature (`verify_answer`, a
    local activity); the run waits for such checks in flight before it ends or continues."""
    questions: bool = True
    """The model may be offered `ask_user` (`options.ask_user`, the worker's AGENT_ASK_USER): a
    question that waits for a person's answer (`workflows.questions`). It also gates how a
    question meets the approval timeout (with `expire` it expires and is asked again as a call
    is, `workflows.expiry`): no run recorded by an earlier release holds a question."""
    approver_rules: bool = True
    """A rule's `approvers` decide who may answer a call and how many must (`workflows.quorum`);
    a run rule cannot lower an enforced one's count or widen its groups."""
    expire_on_timeout: bool = True
    """A run whose options name no `on_approval_timeout` lets its approval timeout expire the
    calls (they wait on until a person acts; else: the timeout cancels the run)."""
    escalate_approvals: bool = True
    """A call that waited `approval_escalate_after_seconds` is escalated to
    `approval_escalate_to` (the run's, else the worker's)."""
    escalate_within_rules: bool = True
    """An escalation widens only the run's own approver rules: a call under an enforced (the
    worker's) approver rule is answered only by that rule's groups, as the worker counts them."""

    # ---- repeats, limits and turns
    repeat_limit: bool = True
    """The same call again past `max_repeats` is answered, not run."""
    refuse_unrunnable_calls: bool = True
    """A call that must not run (the repeat limit, arguments cut off at the token limit) is
    answered with why."""
    per_turn_limits: bool = True
    """In a session, the round and repeat limits end the turn, not the run."""
    rejections_count_as_repeats: bool = True
    """A person's no is remembered for the turn and counts toward the repeat limit."""
    nudge_empty_reply: bool = True
    """An empty reply is asked again once, with a nudge."""
    llm_retried_until_given_up: bool = True
    """The model call is retried until the activity itself gives up."""
    outage_ends_turn: bool = True
    """In a session, a model server that stays out of reach past the worker's `LLM_MAX_WAIT`
    ends the turn with a warning, and the session waits for the next message (else: the run
    ends `error`)."""
    token_budget: bool = True
    """At its token budget (`options.max_run_tokens`, the worker's `AGENT_MAX_RUN_TOKENS`) the
    run calls the model no more and waits for a person to grant more or stop it."""

    # ---- what people are told
    length_warning_names_limit: bool = True
    """A reply cut at the token limit says which limit."""
    cancel_reason_in_message: bool = True
    """A cancel's reason is in the run's last message."""
    round_limit_warning: bool = True
    """A run that stops at `max_rounds` says so in a warning."""
    memo_names_error_and_run: bool = True
    """The finished run's memo says its error and names the run that wrote it."""
    prompt_in_memo: bool = True
    """The first generation puts the run's first user message, cut short, in the memo."""

    # ---- compaction and continue-as-new
    compaction_makes_room: bool = True
    """A compaction makes room down to `compact_to` from the older part only (else: each step
    stops under `compact_at`)."""
    summary_as_user: bool = True
    """A summary carried from an earlier generation reaches the model as a user message."""
    bounded_handover: bool = True
    """The hand-over at continue-as-new is measured whole and kept within its budget."""

    # ---- the model call
    conversation_by_reference: bool = True
    """`call_llm` is told the messages added since the run's previous model call, each by the
    activity result it came from where it did (`LlmRequest.tail`), and the conversation's digest:
    a worker holding the rest needs no query (else it always reads the conversation by query)."""
    first_request_inline: bool = True
    """A generation's first model request carries the conversation it starts with when that is
    small (`conversation_parts.INLINE_BYTES`), so the worker needs no query for it either (else
    the first request of each generation reads the conversation by query)."""

    # ---- the releases

    @classmethod
    def this_release(cls) -> Rules:
        return cls()

    @classmethod
    def loop_cost_2(cls) -> Rules:
        """Runs whose newest marker is `loop-cost-2`: an outage ends the run, and a remembered
        no is answered without an audit entry, as when they were recorded."""
        return replace(
            cls.this_release(), outage_ends_turn=False, audit_remembered_rejections=False
        )

    @classmethod
    def loop_cost(cls) -> Rules:
        """The sixth release (0.6)."""
        return replace(cls.loop_cost_2(), first_request_inline=False)

    @classmethod
    def people_in_charge(cls) -> Rules:
        """The fifth release (0.5)."""
        return replace(
            cls.loop_cost(),
            escalate_within_rules=False,
            conversation_by_reference=False,
        )

    @classmethod
    def sound_seams(cls) -> Rules:
        """The fourth release (0.4)."""
        return replace(
            cls.people_in_charge(),
            verify_signed_answers=False,
            questions=False,
            setup_on_the_run_worker=False,
            token_budget=False,
            approver_rules=False,
            expire_on_timeout=False,
            escalate_approvals=False,
        )

    @classmethod
    def trust_and_time(cls) -> Rules:
        """The third release (0.3)."""
        return replace(
            cls.sound_seams(),
            setup_every_generation=False,
            real_handovers_only=False,
            refuse_cron=False,
            end_before_refusing=False,
            seal_binding=False,
            enforced_ask_for_person=False,
            paths_from_tool_root=False,
            per_turn_limits=False,
            rejections_count_as_repeats=False,
            nudge_empty_reply=False,
            llm_retried_until_given_up=False,
            memo_names_error_and_run=False,
            prompt_in_memo=False,
            compaction_makes_room=False,
            summary_as_user=False,
            bounded_handover=False,
        )

    @classmethod
    def hardened_loop(cls, *, worker_rules: bool = True) -> Rules:
        """The second release (0.2); `worker_rules=False`: its runs from before the worker's
        rules."""
        return replace(
            cls.trust_and_time(),
            read_worker_rules=worker_rules,
            read_worker_setup=False,
            strict_continuation=False,
            gate_input_calls=False,
            seed_through_gate=False,
            check_rules_match_tools=False,
            sealed_inputs_only=False,
            bind_answers_to_shown_call=False,
            refuse_edit_by_rule=False,
            path_rules=False,
            positional_shell_safety=False,
            forget_asked_after_batch=False,
            audit=False,
            repeat_limit=False,
            refuse_unrunnable_calls=False,
            length_warning_names_limit=False,
            cancel_reason_in_message=False,
            round_limit_warning=False,
        )

    @classmethod
    def first_release(cls, *, worker_rules: bool = False) -> Rules:
        """The first release (0.1): no size bounds."""
        return replace(cls.hardened_loop(worker_rules=worker_rules), limits=Limits.first_release())

    @classmethod
    def of_this_run(cls) -> Rules:
        """Read the patch markers (call once, from the workflow's `__init__`): the same
        `workflow.patched` calls in the same order as every earlier release, so recorded
        histories replay."""
        if workflow.patched(SESSIONS_OUTLIVE_OUTAGES):
            return cls.this_release()
        if workflow.patched(LOOP_COST_2):
            return cls.loop_cost_2()
        if workflow.patched(LOOP_COST):
            return cls.loop_cost()
        if workflow.patched(PEOPLE_IN_CHARGE):
            return cls.people_in_charge()
        if workflow.patched(SOUND_SEAMS):
            return cls.sound_seams()
        if workflow.patched(TRUST_AND_TIME):
            return cls.trust_and_time()
        hardened = workflow.patched(HARDENED)
        worker_rules = workflow.patched(APPROVAL_POLICY)
        if hardened:
            return cls.hardened_loop(worker_rules=worker_rules)
        return cls.first_release(worker_rules=worker_rules)
