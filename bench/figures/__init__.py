"""One module per figure of issue 6; each exposes `async def measure(bench) -> list[Figure]`."""
