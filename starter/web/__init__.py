"""The approval inbox on the web (`python -m starter web`)."""
