"""Registers the approval-inbox search attributes when the namespace lacks them, so a
plain `temporal server start-dev` (or the time-skipping test server) works."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from workflows.names import AGENT_PENDING_APPROVALS, AGENT_STATUS

REQUIRED = {
    AGENT_STATUS.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    AGENT_PENDING_APPROVALS.name: IndexedValueType.INDEXED_VALUE_TYPE_INT,
}


async def _known(client: Client) -> set[str] | None:
    try:
        existing = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.UNIMPLEMENTED:  # the time-skipping test server
            return None
        raise
    return set(existing.custom_attributes) | set(existing.system_attributes)


async def ensure_search_attributes(client: Client) -> list[str]:
    """Add the missing attributes; returns the names it added (all of them when the server
    cannot list what it has)."""
    known = await _known(client)
    missing = {name: kind for name, kind in REQUIRED.items() if known is None or name not in known}
    if not missing:
        return []
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
        )
    except RPCError as err:
        if err.status != RPCStatusCode.ALREADY_EXISTS:
            raise
    return sorted(missing)
