"""Stable names of the public Temporal interface (docs/interface.md). Never change a deployed
one."""

from temporalio.common import SearchAttributeKey

WORKFLOW_TYPE = "AgentWorkflow"
NOTIFICATION_WORKFLOW_TYPE = "AgentNotification"
DEFAULT_TASK_QUEUE = "agent"

# Signals
SIGNAL_TOOL_APPROVAL = "tool_approval"
SIGNAL_CANCEL = "cancel"
SIGNAL_SEND_MESSAGE = "send_message"
SIGNAL_MODEL_UNREACHABLE = "model_unreachable"
"""Sent by `call_llm` when the model server cannot be reached: the run warns at once."""
SIGNAL_SUB_AGENT_REPORT = "sub_agent_report"
"""Internal: a sub-agent tells its parent where it stands (`SubAgentReport`), at every pause (its
end is in its result)."""
MODEL_UNREACHABLE_DETAIL = "model_unreachable"
"""The key of `call_llm`'s last error's details when the model server stayed out of reach past
LLM_MAX_WAIT (`{"model_unreachable": "http://host:port", "waited_seconds": N}`): a session's
turn ends then, not the session."""

# Updates
UPDATE_SUBMIT_APPROVAL = "submit_approval"
UPDATE_SET_APPROVAL_POLICY = "set_approval_policy"
UPDATE_REOPEN_APPROVAL = "reopen_approval"
"""Ask again about an expired call: it waits again with a new deadline."""
UPDATE_SUBMIT_ANSWER = "submit_answer"
"""A person's answer to a question the model asked with the `ask_user` tool."""
UPDATE_GRANT_BUDGET = "grant_budget"
"""More tokens for a run whose token budget ran out, or stop it."""

# Queries
QUERY_STATUS = "status"
QUERY_EVENTS = "events"
QUERY_MESSAGES = "messages"
QUERY_POLICY = "policy"
QUERY_MODEL_VIEW = "model_view"
QUERY_AUDIT = "audit"
QUERY_CONVERSATION_TAIL = "conversation_tail"
"""Internal (the `call_llm` activity's): the messages after a prefix the workflow confirms by its
digest, so a worker that holds the prefix fetches only what is new."""

# Activities
ACTIVITY_CALL_LLM = "call_llm"
ACTIVITY_EXECUTE_TOOL = "execute_tool"
ACTIVITY_WORKER_SETUP = "worker_setup"
ACTIVITY_SUMMARIZE = "summarize_conversation"
ACTIVITY_NOTIFY = "notify"
ACTIVITY_VERIFY_ANSWER = "verify_answer"
"""A local activity: checks a signed decision's Ed25519 signature with the keys of the worker's
approvers file and says whose groups the signer has (the verdict is recorded in the history, so
replay never needs the file)."""

ERROR_NEEDS_PERSON = "NeedsPerson"
"""The type of `execute_tool`'s failure for a call the worker's enforced `ask` rule sends to a
person where the run's view of the call did not (a symlink to a guarded path): the call goes
back to waiting for a person; nothing ran."""

# Search attributes: the cluster-wide approval inbox.
AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
AGENT_PENDING_APPROVALS = SearchAttributeKey.for_int("AgentPendingApprovals")

# Live stream (temporalio.contrib.workflow_streams) topics: the workflow publishes every event it
# emits on STREAM_EVENTS (the same models as the `events` query); `call_llm` publishes the
# model's text as it arrives on STREAM_DELTAS (`StreamDelta` batches).
STREAM_EVENTS = "events"
STREAM_DELTAS = "deltas"

# Payload metadata the project's codec adds, on decoding, to a payload that was not encrypted
# although the program holds keys: with encryption on, the workflow refuses such signals and
# updates (only key holders answer).
PLAINTEXT_METADATA = "agent-plaintext"
