"""One-line, actionable errors for the command line, and the exit codes they map to."""

from __future__ import annotations

from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from runtime.codec import find_decryption_error
from runtime.connect import task_queue
from runtime.shown_commands import temporal_command, worker_command
from starter.request_trouble import NoWorker

EXIT_OK = 0
EXIT_ERROR = 1
"""A command failed: no server, unknown workflow, finished run, rejected update, …"""
EXIT_USAGE = 2
"""Bad command line (argparse's own code)."""
EXIT_RUN_NOT_OK = 3
"""`run`/`watch` followed a run that finished `error` or `cancelled`."""


class CliError(Exception):
    """An error the user can act on; printed as `error: <message>` on stderr."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def cannot_reach(address: str, namespace: str, err: BaseException) -> CliError:
    detail = str(err).replace("\n", " ")
    if "ConnectionRefused" in detail or "Connection refused" in detail:
        detail = "connection refused"
    elif len(detail) > 200:
        detail = detail[:197] + "..."
    return CliError(
        f"cannot reach Temporal at {address} (namespace {namespace}): {detail}."
        f" Start a server (`{temporal_command()} server start-dev`) or set TEMPORAL_ADDRESS /"
        " a profile."
    )


def no_worker(seconds: float) -> CliError:
    return CliError(
        f"no worker answered within {seconds:.0f}s on task queue"
        f" '{task_queue()}': is `{worker_command()}` running?"
    )


def not_found(workflow_id: str, namespace: str) -> CliError:
    return CliError(f"no workflow with id '{workflow_id}' in namespace '{namespace}'")


def refusal(err: WorkflowUpdateFailedError) -> str:
    """Why the workflow refused an update, in its own words."""
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)


def translate(err: BaseException, *, workflow_id: str | None, namespace: str) -> CliError:
    """Turn an SDK exception into a one-line CliError."""
    if isinstance(err, CliError):
        return err
    if isinstance(err, NoWorker):
        return no_worker(err.seconds)
    undecryptable = find_decryption_error(err)
    if undecryptable is not None:  # one line naming the key id this program lacks
        return CliError(str(undecryptable))
    if isinstance(err, WorkflowUpdateFailedError):
        return CliError(f"the workflow rejected the answer: {refusal(err)}")
    if isinstance(err, WorkflowAlreadyStartedError):
        return CliError(f"a run with id '{err.workflow_id}' already exists; choose another --id")
    if isinstance(err, RPCError):
        if err.status == RPCStatusCode.NOT_FOUND and workflow_id is not None:
            if "already completed" in err.message or "already finished" in err.message:
                return CliError(f"run '{workflow_id}' has already finished")
            return not_found(workflow_id, namespace)
        if err.status == RPCStatusCode.UNAVAILABLE:
            return CliError(f"Temporal is unavailable: {err.message}")
        return CliError(f"Temporal error ({err.status.name}): {err.message}")
    return CliError(f"{type(err).__name__}: {err}")
