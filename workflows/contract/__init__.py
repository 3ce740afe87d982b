"""The contract: the wire types every client, the workflow and the activities share, and the
pure rules that come with them (arguments, tool results, signing, sealing). Imports nothing else
of `workflows/`."""
