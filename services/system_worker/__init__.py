"""Cairn's built-in system-task worker (`cairn run system-worker`): the system tasks that do I/O
(HTTP, EVENT) run here, consumed from their `tasks.<type>` topics like any worker's. It owns
nothing; see handler.py for the delivery rules and http_task.py / event_task.py for the
semantics (and how they differ from Conductor's)."""

TASK_TYPES = ("HTTP", "EVENT")
"""The task types the system worker runs; their topics are created at start like the fixed ones."""
