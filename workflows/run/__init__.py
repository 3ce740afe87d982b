"""The run: `AgentWorkflow` and its seams (the doors, a model call, a batch of tools, turns,
waits, generations and the hand-over, the event log, the live stream, what the UI sees)."""
