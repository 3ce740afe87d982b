"""The activities: `worker_setup` (what a run reads of the worker once), `call_llm`,
`summarize_conversation`, `execute_tool` and `notify`.

Everything they depend on is injected (the Temporal client, the settings, the tool registry,
the httpx client), so the worker wires them once and tests build them with real parts. Without a
client (`None`), each activity uses the client of the worker that runs it.

    activities = AgentActivities(client, Settings.from_env(), build_default_registry(workspace))
    Worker(client, task_queue=..., workflows=[AgentWorkflow], activities=activities.all())
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
from temporalio import activity
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError

from activities import model_retries
from activities.context_window import DEFAULT_CONTEXT_TOKENS
from activities.conversation_cache import NOTHING, ConversationCache, Held, joined
from activities.enforcement import enforced_refusal, opened_check
from activities.heartbeat import heartbeating
from activities.llm import OpenAIChatClient, ServerDropped, ServerUnreachable
from activities.markers import IdempotencyMarkers
from activities.notify import Notifier
from activities.policy_file import PolicyActivities
from activities.quorum_check import shortfall
from activities.scripted import scripted_reply, scripted_summary
from activities.streaming import DeltaPublisher
from activities.telemetry import ModelCall, model_call, tool_call
from activities.tools import ToolError, ToolRegistry
from activities.tools.base import Refused
from runtime.approvers import ApproversFile
from runtime.settings import Settings
from workflows import names
from workflows.bounds import TOOL_CONTENT_CHARS
from workflows.contract.arguments import parse_arguments
from workflows.contract.rules import WorkerPolicy
from workflows.contract.tool_results import (
    TRUNCATION_MARKER,
    envelope_error,
    framework_error_message,
    invalid_arguments_message,
    tool_not_found_message,
    tool_output_message,
)
from workflows.conversation.parts import resolve
from workflows.conversation.tail import ConversationTail, TailRequest, extend
from workflows.conversation.window import SUMMARY_CHARS_PER_TOKEN
from workflows.model import (
    ChatMessage,
    LlmRequest,
    LlmResponse,
    SummaryRequest,
    SummaryResponse,
    ToolRequest,
    WorkerSetup,
)
from workflows.shown import shorten

TOOL_CONTENT_LIMIT = TOOL_CONTENT_CHARS


class AgentActivities:
    def __init__(
        self,
        client: Client | None,
        settings: Settings,
        registry: ToolRegistry,
        http: httpx.AsyncClient | None = None,
        policy: WorkerPolicy | None = None,
        approvers: ApproversFile | None = None,
    ) -> None:
        self._client = client
        self._approvers = approvers
        """The worker's AGENT_APPROVERS_FILE: the votes of a call under an enforced approver
        rule are verified and counted with it."""
        self._settings = settings
        self._registry = registry
        self._policy = PolicyActivities(policy or WorkerPolicy())
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient()
        self._notifier = Notifier(self._http, settings)
        self._conversations = ConversationCache()
        """What this process last sent to the model, by run (fetch only what is new)."""
        self._markers = IdempotencyMarkers.for_worker(
            settings.resolved_state_dir / "tool-calls", settings.state_retention_days
        )
        self._llm = (
            OpenAIChatClient(
                self._http,
                settings.llm_base_url,
                settings.llm_api_key,
                settings.llm_model,
                stream=settings.llm_stream,
                timeout=httpx.Timeout(settings.llm_timeout_seconds, connect=15.0),
                max_tokens=settings.llm_max_tokens,
                text_tool_calls=settings.llm_text_tool_calls,
                parallel_tool_calls=settings.llm_parallel_tool_calls,
                context_tokens=settings.llm_context_tokens,
                summary_model=settings.llm_summary_model,
            )
            if settings.llm_base_url
            else None
        )

    def _temporal(self) -> Client:
        """The client given, else the worker's that runs this activity (`AgentPlugin` builds
        these before the worker, whose client it is not told)."""
        return self._client if self._client is not None else activity.client()

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.worker_setup,
            self.call_llm,
            self.summarize_conversation,
            self.execute_tool,
            self._notifier.notify,
        ]

    async def aclose(self) -> None:
        """Close the httpx client if this object created it."""
        if self._owns_http:
            await self._http.aclose()

    # ---------------------------------------------------------- worker_setup

    @activity.defn(name=names.ACTIVITY_WORKER_SETUP)
    async def worker_setup(self) -> WorkerSetup:
        """What a run reads of this worker once: its tools and rules, the model's window, the
        conversation's budget, whether people are notified, the escalation defaults, and how many
        people each group of the approvers file has."""
        try:
            window = await self.context_window()
        except ApplicationError as err:  # the server is down: the run learns its window later
            activity.logger.warning("model window unknown (%s); assuming 128,000", err.message)
            window = DEFAULT_CONTEXT_TOKENS
        return WorkerSetup(
            tools=self._registry.specs(),
            policy=self._policy.rules,
            context_tokens=window,
            max_tokens=self._settings.llm_max_tokens,
            conversation_bytes=self._settings.conversation_bytes,
            payload_store=self._settings.payload_store is not None,
            notify=self._notifier.enabled,
            ask_user=self._settings.ask_user,
            sub_agents=self._settings.sub_agents,
            max_depth=self._settings.max_depth,
            max_run_tokens=self._settings.max_run_tokens,
            budget_groups=list(self._settings.budget_groups),
            escalate_after_seconds=self._settings.escalate_after_seconds,
            escalate_to=list(self._settings.escalate_to),
            approver_groups=None if self._approvers is None else self._approvers.group_sizes(),
        )

    # -------------------------------------------------------------- call_llm

    @activity.defn(name=names.ACTIVITY_CALL_LLM)
    async def call_llm(self, request: LlmRequest) -> LlmResponse:
        """One model call, timed and counted, in its `chat {model}` span (`telemetry`)."""
        scripted = self._llm is None
        model = "scripted" if scripted else request.model or self._settings.llm_model
        provider = "scripted" if scripted else "openai"
        content = self._settings.trace_content
        info = activity.info()
        wait = self._settings.llm_max_wait
        if (gave_up := model_retries.given_up_before(info, wait)) is not None:
            raise gave_up
        with model_call(model=model, provider=provider, round=request.round, content=content) as m:
            try:
                response = m.reply(await self._complete(request, m))
                run = (request.workflow_id, request.run_id)
                self._conversations.reply(run, request.round, response.message)
                return response
            except ServerUnreachable as err:
                raise await model_retries.unreachable(
                    err, info, wait, self._temporal(), request.workflow_id
                ) from None
            except ServerDropped as err:
                raise await model_retries.dropped(
                    err, info, self._temporal(), request.workflow_id
                ) from None
            except ApplicationError as err:
                raise model_retries.after_failure(err, info) from None

    async def _complete(self, request: LlmRequest, observed: ModelCall) -> LlmResponse:
        async with heartbeating(), self._live_text(request) as live:
            messages = with_system_prompt(
                await self._conversation(request), self._settings.system_prompt
            )
            specs = [s for s in self._registry.specs() if s.name in request.tools]
            mine = {s.name for s in specs}
            specs += [s for s in request.offered if s.name not in mine]  # the workflow's own
            observed.sending(messages, len(specs))
            if self._llm is None:
                # Instant: its text reaches live followers with the round's `text_delta` event.
                reply = scripted_reply(messages, [s.name for s in specs])
                limit = request.max_tokens
                if limit is None:
                    limit = self._settings.llm_max_tokens
                return reply.model_copy(update={"max_tokens": limit})
            activity.logger.info(
                "calling the model: %d messages, %d tools", len(messages), len(specs)
            )
            return await self._llm.complete(
                messages,
                specs,
                model=request.model,
                temperature=request.temperature,
                max_tokens=request.max_tokens,  # the run's limit; else the worker's
                on_text=live.add,
                attempt=activity.info().attempt,
            )

    async def context_window(self) -> int:
        """The model's window in tokens (for the workflow's budget): LLM_CONTEXT_TOKENS, else
        what the server says (llama.cpp's `/props`, asked once per worker), else 128,000; for
        the `scripted` model, the setting or 128,000."""
        if self._llm is None:
            return self._settings.llm_context_tokens or DEFAULT_CONTEXT_TOKENS
        return await self._llm.context_window()

    async def summary_text(
        self,
        messages: list[ChatMessage],
        model: str | None = None,
        max_tokens: int | None = None,
        window: int | None = None,
    ) -> str:
        """A summary of `messages` for compaction: the model asked with no tools
        (LLM_SUMMARY_MODEL, else `model`, the run's), or the `scripted` model's own."""
        if self._llm is None:
            return scripted_summary(messages)
        attempt = activity.info().attempt if activity.in_activity() else 1
        return await self._llm.summarize(
            messages, model=model, max_tokens=max_tokens, window=window, attempt=attempt
        )

    @activity.defn(name=names.ACTIVITY_SUMMARIZE)
    async def summarize_conversation(self, request: SummaryRequest) -> SummaryResponse:
        """A summary of messages `first`..`last` of the run (read with the `messages` query),
        continuing from the previous summary, for the model's compacted view."""
        async with heartbeating():
            client = self._temporal()
            handle = client.get_workflow_handle(request.workflow_id, run_id=request.run_id)
            record: list[ChatMessage] = await handle.query(
                names.QUERY_MESSAGES, result_type=list[ChatMessage]
            )
            skip = set(request.skip)
            part = [
                m
                for i, m in enumerate(record[request.first : request.last], request.first)
                if i not in skip and m.role != "system"
            ]
            if request.previous_summary:
                earlier = f"(Summary of what came before: {request.previous_summary})"
                part = [ChatMessage.user(earlier), *part]
            text = await self.summary_text(
                part, request.model, max_tokens=request.max_tokens, window=request.context_tokens
            )
        return SummaryResponse(text=text[: request.max_tokens * SUMMARY_CHARS_PER_TOKEN])

    def _live_text(self, request: LlmRequest) -> DeltaPublisher:
        """The live view of this call's text: batches on the run's stream (`deltas` topic)."""
        info = activity.info()
        return DeltaPublisher(
            self._temporal(),
            request.workflow_id,
            round=request.round,
            call=f"{info.workflow_run_id or request.run_id}/{info.activity_id}",
            attempt=info.attempt,
            interval=self._settings.stream_flush_seconds,
            max_chars=self._settings.stream_flush_chars,
            enabled=self._settings.stream_deltas,
        )

    async def _conversation(self, request: LlmRequest) -> list[ChatMessage]:
        """The first `message_count` messages of the run (the request names the conversation
        instead of carrying it): rebuilt here when the request's tail names only results this
        process returned (`_rebuilt`), else what is new since this worker's last call for the
        run, read with the `conversation_tail` query."""
        messages = self._rebuilt(request)
        if messages is None:
            messages = await self._fetch(request)
        if len(messages) < request.message_count:
            raise ApplicationError(
                f"the run has {len(messages)} messages, fewer than the {request.message_count}"
                " this request is for",
                type="ConversationMismatch",
            )
        return messages[: request.message_count]

    def _rebuilt(self, request: LlmRequest) -> list[ChatMessage] | None:
        """The conversation without a query: the one this process holds for the run, followed
        by what the request's tail names (this process's results since, `resolve`), used only
        when its digest is the request's. None when it cannot be (then the query reads it)."""
        cache = self._conversations
        results = cache.take((request.workflow_id, request.run_id))
        if request.digest is None:
            return None
        key = (request.workflow_id, request.run_id, request.view)
        held = cache.get(key)
        if len(held.messages) == request.message_count and held.digest == request.digest:
            cache.unqueried += 1  # the same request again (an attempt after a failure)
            return held.messages
        tail = request.tail
        if tail is None or tail.after != len(held.messages):
            return None
        added = resolve(tail.parts, held.messages, results.replies, results.tools)
        if added is None:
            return None
        digest, size = extend(held.digest, added)
        if digest != request.digest:
            return None
        whole = Held([*held.messages, *added], digest, held.size + size)
        cache.put(key, whole)
        cache.unqueried += 1
        return whole.messages

    async def _fetch(self, request: LlmRequest) -> list[ChatMessage]:
        """The run's whole conversation (its model view or its record): the prefix this worker
        holds, if the run confirms it by its digest, and what came after it."""
        handle = self._temporal().get_workflow_handle(request.workflow_id, run_id=request.run_id)
        key = (request.workflow_id, request.run_id or "", request.view)
        held = self._conversations.get(key)
        for asked in (held, NOTHING):
            ask = TailRequest(view=request.view, after=len(asked.messages), digest=asked.digest)
            try:
                tail = await handle.query(
                    names.QUERY_CONVERSATION_TAIL, ask, result_type=ConversationTail
                )
            except WorkflowQueryFailedError:
                break  # a run whose workflow code predates the query: the whole conversation
            whole = joined(asked, tail)
            if whole is not None:
                self._conversations.put(key, whole)
                if tail.start:
                    self._conversations.reused += 1
                else:
                    self._conversations.whole += 1
                return whole.messages
        self._conversations.drop(key)
        self._conversations.whole += 1
        query = names.QUERY_MODEL_VIEW if request.view else names.QUERY_MESSAGES
        messages: list[ChatMessage] = await handle.query(query, result_type=list[ChatMessage])
        return messages

    # ---------------------------------------------------------- execute_tool

    @activity.defn(name=names.ACTIVITY_EXECUTE_TOOL)
    async def execute_tool(self, request: ToolRequest) -> str:
        known = self._registry.get(request.name) is not None
        with tool_call(
            name=request.name,
            known=known,
            call_id=request.call_id,
            arguments=request.arguments,
            content=self._settings.trace_content,
        ) as observed:
            content = observed.result(await self.run_tool(request))
        result = shorten(content, TOOL_CONTENT_LIMIT, TRUNCATION_MARKER, within=True)
        if activity.in_activity():  # kept for the run's next model call (`LlmRequest.tail`)
            info = activity.info()
            run = (info.workflow_id or request.workflow_id, info.workflow_run_id or "")
            self._conversations.result(run, request.call_id, result)
        return result

    async def run_tool(self, request: ToolRequest) -> str:
        tool = self._registry.get(request.name)
        if tool is None:
            return tool_not_found_message(request.name)
        parsed = parse_arguments(request.arguments)
        if not parsed.ok:
            return invalid_arguments_message(parsed.error)
        arguments = {} if parsed.value is None else parsed.value
        if not isinstance(arguments, dict):
            return invalid_arguments_message(
                f"expected a JSON object, got {type(arguments).__name__}"
            )
        # The worker's own enforced rules have the last word, whatever the run's state says.
        enforced = self._policy.rules.enforced
        short = shortfall(enforced, request, arguments, self._approvers, self._settings.escalate_to)
        refusal = await enforced_refusal(enforced, tool, arguments, request.answered_by, short)
        if refusal is not None:
            return refusal
        if not tool.safe_to_retry:
            earlier = await asyncio.to_thread(
                self._markers.claim,
                request.workflow_id,
                request.call_id,
                tool.name,
                request.run_key,
            )
            if earlier is not None:
                return earlier
        async with heartbeating():
            try:
                if tool.run_checked is not None and enforced:
                    check = opened_check(enforced, tool, arguments, request.answered_by, short)
                    data = await tool.run_checked(arguments, check)
                else:
                    data = await tool.run(arguments)
                content = tool_output_message({"ok": True, "data": data})
            except Refused as err:  # what it opened is held back by an enforced rule
                content = str(err)
            except ToolError as err:
                content = envelope_error(str(err))
            except Exception as err:  # a tool's bug becomes a result the model sees
                content = framework_error_message(str(err) or type(err).__name__)
        content = shorten(content, TOOL_CONTENT_LIMIT, TRUNCATION_MARKER, within=True)
        if not tool.safe_to_retry:
            await asyncio.to_thread(
                self._markers.record,
                request.workflow_id,
                request.call_id,
                tool.name,
                content,
                request.run_key,
            )
        return content


def with_system_prompt(messages: list[ChatMessage], prompt: str | None) -> list[ChatMessage]:
    """The conversation as the model gets it: the worker's system prompt (AGENT_SYSTEM_PROMPT)
    first when the run brought no system message of its own."""
    if not prompt or any(m.role == "system" for m in messages):
        return messages
    return [ChatMessage.system(prompt), *messages]
