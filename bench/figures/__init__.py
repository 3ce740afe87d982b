"""One module per figure of the benchmark; each exposes
`async def measure(bench) -> list[Figure]`."""
