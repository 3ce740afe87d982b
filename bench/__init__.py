"""The agent benchmark: `python -m bench` (full) and `python -m bench --quick` (CI).

Every figure is a ratio against a floor measured in the same run, with the measured and the floor
runs interleaved, because absolute times on a shared 2-core machine drift. Importing this package
has no side effects: the workflow sandbox re-imports `bench.bare_workflow`.
"""
