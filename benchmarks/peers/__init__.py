"""Cairn's peers measured side by side with it (issue 16): `python -m benchmarks.peers`."""
