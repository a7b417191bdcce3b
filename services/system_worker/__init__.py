"""Cairn's built-in system-task worker (`cairn run system-worker`): the system tasks that do I/O
(HTTP, EVENT, the LLM and MCP tasks) run here, consumed from their `tasks.<type>` topics like any
worker's. It owns nothing; see handler.py for the delivery rules and http_task.py, event_task.py,
llm_task.py and mcp_task.py for the semantics (and how they differ from Conductor's)."""

TASK_TYPES = (
    "HTTP",
    "EVENT",
    "LLM_CHAT_COMPLETE",
    "LLM_TEXT_COMPLETE",
    "LIST_MCP_TOOLS",
    "CALL_MCP_TOOL",
)
"""The task types the system worker runs; their topics are created at start like the fixed ones."""
