"""Roles and what they allow. A key carries one role; a route needs one permission.

The roles follow the issue's split of duties: an admin shapes the system (definitions, removing
history), an operator drives executions (start, signal, terminate) and reads, a worker only takes
and reports tasks, a reader only reads. Admin holds every permission, so a route that nobody
mapped to a permission is admin-only rather than open.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"
    OPERATOR = "operator"
    WORKER = "worker"
    READER = "reader"


class Permission(StrEnum):
    READ = "read"
    """Read definitions, executions and tasks."""
    DEFINE = "define"
    """Register, replace and delete task and workflow definitions."""
    START = "start"
    """Start executions (also the synchronous execute)."""
    SIGNAL = "signal"
    """Complete or fail a pending task by its reference name (WAIT, HUMAN, or by hand)."""
    TERMINATE = "terminate"
    """Terminate a running execution."""
    OPERATE = "operate"
    """Pause, resume, restart, rerun, retry an execution and skip its tasks (one or in bulk)."""
    REMOVE = "remove"
    """Delete a finished execution and its history."""
    WORK = "work"
    """Poll tasks and report their results (optionally for named task types only)."""
    DEAD_LETTERS = "deadletters"
    """Read dead letters (original messages, payloads included) and resend them: admin only."""
    ADMINISTER = "administer"
    """Anything not mapped to one of the above: admin only."""


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.ADMIN: frozenset(Permission),
    Role.OPERATOR: frozenset(
        {Permission.READ, Permission.START, Permission.SIGNAL, Permission.TERMINATE, Permission.OPERATE}
    ),
    Role.WORKER: frozenset({Permission.WORK}),
    Role.READER: frozenset({Permission.READ}),
}


def allows(role: Role, permission: Permission) -> bool:
    return permission in GRANTS[role]


def roles_allowed(permission: Permission) -> list[Role]:
    """The roles holding `permission`, for messages that say which key would do."""
    return [role for role in Role if allows(role, permission)]
