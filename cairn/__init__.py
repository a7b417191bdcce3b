"""Cairn's public face: the worker SDK and the client. Services live in `services`."""

from cairn.client import CairnClient
from cairn.worker import InProgress, TerminalError, WorkerRunner, heartbeat, registered_workers, worker

__all__ = [
    "CairnClient",
    "InProgress",
    "TerminalError",
    "WorkerRunner",
    "heartbeat",
    "registered_workers",
    "worker",
]
