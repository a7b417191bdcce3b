"""Pydantic models: definitions (Conductor JSON), runtime documents, and message envelopes."""
