"""Registers the approval-inbox search attributes (SPEC §9) when the namespace lacks them, so a
plain `temporal server start-dev` (or the time-skipping test server) works."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client

from workflows.names import AGENT_PENDING_APPROVALS, AGENT_STATUS

REQUIRED = {
    AGENT_STATUS.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    AGENT_PENDING_APPROVALS.name: IndexedValueType.INDEXED_VALUE_TYPE_INT,
}


async def ensure_search_attributes(client: Client) -> list[str]:
    """Add the missing attributes; returns the names it added."""
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    known = set(existing.custom_attributes) | set(existing.system_attributes)
    missing = {name: kind for name, kind in REQUIRED.items() if name not in known}
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
        )
    return sorted(missing)
