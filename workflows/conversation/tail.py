"""The conversation in parts: the `conversation_tail` query answers the messages after a prefix
the asker already holds, once the workflow has confirmed that prefix by its digest, so a model
call fetches what is new rather than the whole conversation. Correctness never depends on the
asker's copy: a digest that does not match what the workflow holds gets the whole conversation.
Pure; no Temporal import (hashlib only)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from workflows.model import ChatMessage

EMPTY_DIGEST = ""
"""The digest of no messages."""


def extend(digest: str, messages: Iterable[ChatMessage]) -> tuple[str, int]:
    """The digest of a prefix (of digest `digest`) followed by `messages`, and their JSON bytes.
    A chain: each message's digest covers every message before it."""
    size = 0
    for message in messages:
        data = message.model_dump_json().encode()
        size += len(data)
        digest = hashlib.sha256(digest.encode() + b"\n" + data).hexdigest()
    return digest, size


class TailRequest(BaseModel):
    """The messages after the first `after`, whose digest the asker says is `digest`."""

    view: bool = False
    """The model's view (`model_view`) rather than the record (`messages`)."""
    after: int = 0
    digest: str = EMPTY_DIGEST


class ConversationTail(BaseModel):
    """`messages` are the conversation from index `start` on: `start` is the asker's `after`
    when its prefix is the workflow's, else 0 (the whole conversation). `digest` is the whole
    conversation's."""

    start: int
    messages: list[ChatMessage]
    digest: str


class PrefixDigests:
    """The digest of every prefix of the messages last seen, kept from one query to the next:
    a message is hashed once, and again only when it changed (a compaction, an edited call).
    Holds copies of the messages, compared by value, so an edit made in place is seen."""

    def __init__(self) -> None:
        self._seen: list[ChatMessage] = []
        self._digests = [EMPTY_DIGEST]

    def of(self, messages: Sequence[ChatMessage]) -> list[str]:
        """`result[i]` is the digest of `messages[:i]`."""
        same = 0
        for mine, theirs in zip(self._seen, messages, strict=False):
            if mine.__dict__ != theirs.__dict__:  # by value (C), not pydantic's __eq__
                break
            same += 1
        del self._seen[same:]
        del self._digests[same + 1 :]
        for message in messages[same:]:
            digest, _ = extend(self._digests[-1], [message])
            self._digests.append(digest)
            self._seen.append(message.model_copy(deep=True))
        return self._digests

    def tail(self, messages: Sequence[ChatMessage], after: int, digest: str) -> ConversationTail:
        digests = self.of(messages)
        confirmed = 0 < after <= len(messages) and digests[after] == digest
        start = after if confirmed else 0
        return ConversationTail(start=start, messages=list(messages[start:]), digest=digests[-1])


class ConversationTails:
    """The `conversation_tail` query's memory: one for the record, one for the model's view.
    Read-only towards the run: nothing the workflow decides reads it."""

    def __init__(self) -> None:
        self._record = PrefixDigests()
        self._view = PrefixDigests()

    def digest(self, messages: Sequence[ChatMessage], *, view: bool = False) -> str:
        """The digest of `messages`, the record or the view (what `LlmRequest.digest` carries)."""
        return (self._view if view else self._record).of(messages)[-1]

    def answer(self, request: TailRequest, messages: Sequence[ChatMessage]) -> ConversationTail:
        """`messages`: the view when the request is for it, else the record."""
        digests = self._view if request.view else self._record
        return digests.tail(messages, request.after, request.digest)
