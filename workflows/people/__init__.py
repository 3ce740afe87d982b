"""The people: waiting for a person (questions, expiry and escalation, budgets), telling them
(`notifications`), and checking that a signed decision is theirs (`signatures`)."""
