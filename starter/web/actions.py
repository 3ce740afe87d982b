"""What the web server asks of Temporal on a person's behalf: start a run, answer a call (through
the `submit_approval` update, so a refusal comes back with the workflow's reason), ask again for
an expired call (`reopen_approval`), cancel, send a message. Each returns the HTTP status and the
JSON body to answer with."""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from pydantic import ValidationError
from temporalio.client import Client, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from runtime.codec import find_decryption_error
from runtime.signing_key import SigningKey
from starter import handle as agent_handle
from starter.handle import AgentHandle, AnswerNotDelivered
from starter.request_trouble import NoWorker
from starter.signed_answer import as_sent, reopen_as_sent
from starter.signed_question import question_as_sent
from workflows.model import (
    AgentRunInput,
    AgentRunOptions,
    CancelRequest,
    ChatMessage,
    QuestionAnswer,
    ToolApprovalResponse,
    UserMessageInput,
    describe_validation,
)

WORKER_WAIT_SECONDS = 30.0

Answer = tuple[int, dict[str, Any]]


class SignedAction(Protocol):
    """What a person sends with the web app's signature: an answer, a question's answer, a
    grant, a reopen (each bound to its run and signed for `approver` through the signing
    service, when the approvers file lets them sign through it)."""

    async def __call__(
        self,
        client: Client,
        workflow_id: str,
        body: Any,
        approver: str,
        *,
        key: SigningKey | None = None,
    ) -> Answer: ...


def _rpc_answer(err: RPCError, workflow_id: str) -> Answer:
    if err.status == RPCStatusCode.NOT_FOUND:
        if "already completed" in err.message or "already finished" in err.message:
            return 409, {"error": f"run '{workflow_id}' has already finished"}
        return 404, {"error": f"no run with id '{workflow_id}'"}
    return 502, {"error": f"Temporal refused: {err.message}"}


def _failure(err: Exception, workflow_id: str) -> Answer:
    undecryptable = find_decryption_error(err)
    if undecryptable is not None:
        return 502, {"error": str(undecryptable)}
    if isinstance(err, WorkflowUpdateFailedError):
        cause = err.cause
        reason = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
        return 409, {"error": reason}
    if isinstance(err, RPCError):
        return _rpc_answer(err, workflow_id)
    if isinstance(err, TimeoutError | NoWorker):
        return 504, {"error": f"no worker answered within {WORKER_WAIT_SECONDS:.0f}s"}
    if isinstance(err, AnswerNotDelivered):
        if err.busy:
            return 503, {"error": "the run kept refusing the answer: too many requests in flight"}
        return 504, {"error": f"no worker answered within {err.seconds:.0f}s"}
    raise err


def query_failure(err: Exception, workflow_id: str) -> Answer:
    """A query the run could not answer: as `_failure`, and a query the run's worker does not
    know (another program under the workflow type's name) is a 409 saying so."""
    if isinstance(err, WorkflowQueryFailedError):
        return 409, {"error": f"run '{workflow_id}' cannot answer this query: {err}"}
    return _failure(err, workflow_id)


START_FIELDS = {"prompt", "system", "options"}
NOT_FROM_THE_WEB = ("messages", "state", "continued", "tool_approval_responses")
"""What a start from the web never carries: a conversation other than the prompt, a state or
hand-over only the workflow itself writes, or answers given before anyone saw the calls."""
OPTION_FIELDS = set(AgentRunOptions.model_fields) - {"tool_approval_responses", "parent"}
"""The options a start from the web takes (`parent` is set only by a run for the sub-agent its
`delegate` call starts)."""


def start_input(body: Any) -> AgentRunInput | str:
    """The run a start request asks for, or why it cannot start: `{"prompt": "…", "system"?:
    "…", "options"?: {…}}`, where options are the run options that carry no answers."""
    if not isinstance(body, dict):
        return 'the body must be a JSON object: {"prompt": "…", "system"?: "…", "options"?: {…}}'
    options = body.get("options")
    for name in NOT_FROM_THE_WEB:
        inside = isinstance(options, dict) and name in options
        if name in body or inside:
            where = f"'options.{name}'" if inside else f"'{name}'"
            return (
                f"{where} cannot be given here: a run started from the web begins with its"
                " prompt (and system prompt), and every call in it is decided by the rules or a"
                " person"
            )
    unknown = sorted(set(body) - START_FIELDS)
    if unknown:
        return f"unknown field '{unknown[0]}' (a start takes prompt, system and options)"
    prompt, system = body.get("prompt"), body.get("system")
    if not isinstance(prompt, str) or not prompt.strip():
        return "'prompt' must be a non-empty string"
    if system is not None and not isinstance(system, str):
        return "'system' must be a string"
    if options is not None and not isinstance(options, dict):
        return "'options' must be a JSON object"
    unknown = sorted(set(options or {}) - OPTION_FIELDS)
    if unknown:
        return f"unknown option '{unknown[0]}'"
    try:
        run_options = AgentRunOptions.model_validate(options or {})
    except ValidationError as err:
        return f"invalid options: {describe_validation(err)}"
    messages = [ChatMessage.system(system)] if system and system.strip() else []
    return AgentRunInput(messages=[*messages, ChatMessage.user(prompt)], options=run_options)


async def start_run(client: Client, queue: str, body: Any) -> Answer:
    run_input = start_input(body)
    if isinstance(run_input, str):
        return 400, {"error": run_input}
    workflow_id = f"agent-{uuid.uuid4().hex[:12]}"
    try:
        handle = await agent_handle.start_run(
            client, run_input, workflow_id=workflow_id, task_queue=queue
        )
    except RPCError as err:
        return _rpc_answer(err, workflow_id)
    return 201, {"workflow_id": workflow_id, "run_id": handle.run_id}


SET_BY_SERVER = ("approver", "groups", "signed_at", "signature", "signed_by")
"""What an answer from the web never names itself: who answers (the signed-in user), their
groups (the worker's approvers file has them) and the signature (the server's signing service's,
AGENT_WEB_SIGNING_KEY)."""


def names_the_server(body: dict[str, Any]) -> Answer | None:
    """A 400 for a body that names a field only the server sets (`SET_BY_SERVER`), else None."""
    for name in SET_BY_SERVER:
        if name in body:
            return 400, {"error": f"'{name}' is set by the server: it is the signed-in user's"}
    return None


async def answer(
    client: Client,
    workflow_id: str,
    body: Any,
    approver: str,
    *,
    key: SigningKey | None = None,
) -> Answer:
    """Answer one call as `approver`, signed with `key` (the signing service's) when the server
    holds one that may sign for them; the body may not name the approver, groups or signature
    itself."""
    if not isinstance(body, dict):
        return 400, {"error": "the body must be a JSON object (a ToolApprovalResponse)"}
    if (named := names_the_server(body)) is not None:
        return named
    handle = AgentHandle(client, workflow_id, worker_wait=WORKER_WAIT_SECONDS)
    given: dict[str, Any] = {**body, "approver": approver}
    payload: dict[str, Any] | ToolApprovalResponse = given
    try:
        if key is not None:
            try:
                response = ToolApprovalResponse.model_validate(body)
            except ValidationError as err:
                return 400, {"error": f"invalid answer: {describe_validation(err)}"}
            payload = await as_sent(handle, response, key=key, approver=approver)
        remaining = await handle.answer(payload, patience=WORKER_WAIT_SECONDS)
    except Exception as err:
        return _failure(err, workflow_id)
    return 200, {"pending": [c.model_dump(mode="json") for c in remaining]}


async def submit_answer(
    client: Client,
    workflow_id: str,
    body: Any,
    approver: str,
    *,
    key: SigningKey | None = None,
) -> Answer:
    """Answer a question the model asked (`submit_answer`) as `approver`, signed with `key`
    when the server holds one that may sign for them: `{"call_id": "…", "answer": "…" or
    ["…"], "run_id"?: "…"}`; the body may not name who answers, their groups or a signature
    itself."""
    if not isinstance(body, dict):
        return 400, {"error": 'the body must be a JSON object: {"call_id": "…", "answer": "…"}'}
    if (named := names_the_server(body)) is not None:
        return named
    try:
        answer = QuestionAnswer.model_validate({**body, "approver": approver})
    except ValidationError as err:
        return 400, {"error": f"invalid answer: {describe_validation(err)}"}
    handle = AgentHandle(client, workflow_id, worker_wait=WORKER_WAIT_SECONDS)
    try:
        sent = await question_as_sent(handle, answer, key=key, approver=approver)
        waiting = await handle.submit_answer(sent, patience=WORKER_WAIT_SECONDS)
    except Exception as err:
        return _failure(err, workflow_id)
    return 200, {"questions": [q.model_dump(mode="json") for q in waiting]}


async def reopen(
    client: Client,
    workflow_id: str,
    body: Any,
    approver: str,
    *,
    key: SigningKey | None = None,
) -> Answer:
    """Ask again for an expired call as `approver` (`reopen_approval`, signed with `key` when
    the server holds one that may sign for them): `{"call_id": "…"}`; the body may not name who
    asks. A call that has not expired is refused with the reason (409)."""
    if not isinstance(body, dict):
        return 400, {"error": 'the body must be a JSON object: {"call_id": "…"}'}
    if (named := names_the_server(body)) is not None:
        return named
    unknown = sorted(set(body) - {"call_id"})
    if unknown:
        return 400, {"error": f"unknown field '{unknown[0]}' (a reopen takes call_id)"}
    call_id = body.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        return 400, {"error": "'call_id' must be a non-empty string"}
    handle = AgentHandle(client, workflow_id, worker_wait=WORKER_WAIT_SECONDS)
    try:
        request = await reopen_as_sent(handle, call_id, key=key, approver=approver)
        status = await handle.reopen(request)
    except Exception as err:
        return _failure(err, workflow_id)
    deadline = status.approval_deadline
    return 200, {
        "call_id": call_id,
        "deadline": deadline.isoformat() if deadline else None,
        "expired": list(status.expired),
    }


async def cancel(client: Client, workflow_id: str, body: Any, requested_by: str) -> Answer:
    """Cancel as `requested_by` (the signed-in user); the body may not name who asks."""
    body = {} if body is None else body
    if not isinstance(body, dict):
        return 400, {"error": 'the body must be a JSON object: {"reason"?: "…", "immediate"?: …}'}
    if "requested_by" in body:
        return 400, {"error": "'requested_by' is set by the server: it is the signed-in user"}
    try:
        request = CancelRequest.model_validate({**body, "requested_by": requested_by})
    except ValidationError as err:
        return 400, {"error": f"invalid cancel: {describe_validation(err)}"}
    try:
        await AgentHandle(client, workflow_id).cancel(request)
    except Exception as err:
        return _failure(err, workflow_id)
    return 200, {"workflow_id": workflow_id, "cancel": request.model_dump()}


async def send_message(client: Client, workflow_id: str, body: Any) -> Answer:
    try:
        message: ChatMessage | str
        if isinstance(body, dict) and "role" in body:
            message = ChatMessage.model_validate(body)
            if message.role != "user":
                return 400, {"error": "only a user message can be sent"}
        else:
            message = UserMessageInput.model_validate(body).content
    except ValidationError as err:
        return 400, {"error": f"invalid message: {describe_validation(err)}"}
    try:
        payload = await AgentHandle(client, workflow_id).say(message)
    except Exception as err:
        return _failure(err, workflow_id)
    return 200, {"workflow_id": workflow_id, "sent": payload}
