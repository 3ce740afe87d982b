"""The gate: what decides a tool call before it runs (the rules, the approvals, quorum, the
repeat limit, reconstruction of the pending calls) and the record of every decision (`audit`)."""
