"""The messages added since a run's previous model request, each named by where it came from
(`LlmRequest.tail`): the assistant message built from a `call_llm` result (`ReplyOf`), a tool
message that is exactly an `execute_tool` result (`ResultOf`), or the message itself (`Inline`).

A worker that returned those results and holds the conversation of the previous request
rebuilds the new one without asking the run (`resolve`), and uses it only when its digest is
the one the request carries: a wrong guess costs a query, never a wrong conversation.
Pure; no Temporal import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from workflows import bounds
from workflows.model import ChatMessage, Inline, ReplyOf, ResultOf, Tail, ToolCall

INLINE_BYTES = 2 * 1024
"""At most this much JSON of messages carried inline in one tail; past it no tail is sent (the
history holds each large message once, in the signal or update that brought it)."""


Part = ReplyOf | ResultOf | Inline
"""One message of a tail (the models are the activity contract's, in `workflows.model`)."""


def with_ids(calls: Sequence[ToolCall], ids: Sequence[str]) -> list[ToolCall]:
    """The calls renamed to `ids` (a call whose id stays is kept as it is)."""
    return [
        call if new == call.id else call.model_copy(update={"id": new})
        for call, new in zip(calls, ids, strict=True)
    ]


def reply_message(content: str, calls: Sequence[ToolCall]) -> ChatMessage:
    """The model's reply as the conversation keeps it (its calls already renamed)."""
    return ChatMessage.assistant(content, list(calls))


class Sources:
    """Where each message since the previous model request came from, kept by the conversation's
    owner as it appends. Any other change (an edit) forgets it: the next request then carries no
    tail. A request for the model's view carries one when the view was made the same way as the
    previous request's (`basis`): it then grew by exactly the messages the record gained."""

    def __init__(self) -> None:
        self._after: tuple[int, int, object] | None = None
        """(the record's length, the request's length, its basis) at the previous request."""
        self._parts: list[Part] = []
        self._inline = 0

    def added(self, part: Part) -> None:
        if self._after is None:
            return
        if isinstance(part, Inline):
            self._inline += bounds.json_bytes(part.message)
            if self._inline > INLINE_BYTES:
                self.forget()
                return
        self._parts.append(part)

    def begin(self, messages: Sequence[ChatMessage]) -> None:
        """The conversation a generation starts with, carried by its first request when it is
        small (up to `INLINE_BYTES`): a worker then needs no query for that request either."""
        self._after, self._parts, self._inline = (0, 0, None), [], 0
        for message in messages:
            self.added(Inline(message=message))

    def forget(self) -> None:
        """A message changed: no tail until the next request."""
        self._after, self._parts, self._inline = None, [], 0

    def sent(self, record: int, count: int | None = None, basis: object = None) -> Tail | None:
        """The tail of a request for the first `count` messages of the record (`record` long)
        or, with `count`, of its view made on `basis`; None when unknown. Starts the next."""
        count = record if count is None else count
        tail = None
        if self._after is not None:
            before, after, before_basis = self._after
            added = len(self._parts)
            if before + added == record and after + added == count and before_basis == basis:
                tail = Tail(after=after, parts=self._parts)
        self._after, self._parts, self._inline = (record, count, basis), [], 0
        return tail


def resolve(
    parts: Sequence[Part],
    before: Sequence[ChatMessage],
    replies: Mapping[int, ChatMessage],
    results: Mapping[str, str],
) -> list[ChatMessage] | None:
    """The messages `parts` name, after the conversation `before`: `replies` are the model's
    replies by round (as `call_llm` returned them), `results` the `execute_tool` results by call
    id. None when one is not at hand."""
    added: list[ChatMessage] = []
    for part in parts:
        if isinstance(part, Inline):
            added.append(part.message)
        elif isinstance(part, ReplyOf):
            reply = replies.get(part.reply_of)
            calls = (reply.tool_calls or []) if reply is not None else []
            if reply is None or len(calls) != len(part.ids):
                return None
            added.append(reply_message(reply.content, with_ids(calls, part.ids)))
        else:
            content = results.get(part.result_of)
            call = _call(part.result_of, [*before, *added])
            if content is None or call is None:
                return None
            added.append(ChatMessage.tool(call, content))
    return added


def _call(call_id: str, messages: Sequence[ChatMessage]) -> ToolCall | None:
    """The call of that id in the last assistant message with calls."""
    for message in reversed(messages):
        if message.role == "assistant" and message.tool_calls:
            return next((c for c in message.tool_calls if c.id == call_id), None)
    return None
