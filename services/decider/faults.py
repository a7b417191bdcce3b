"""The decider's test hooks (CAIRN_FAULT_*): real process faults at the worst moment — between
reading a workflow and committing a decision on it — for the tests that show nothing is lost
(tests/e2e). Each hook names a marker: it fires only for workflows whose id holds it, and only
for decisions on messages from one topic. None is ever set in production."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping, Set
from dataclasses import dataclass

from shared.topics import Topics

log = logging.getLogger(__name__)


@dataclass
class DeciderFaults:
    topics: Topics
    freeze_marker: str | None = None
    """CAIRN_FAULT_FREEZE_MARKER: SIGSTOP before the first commit on a signal (a GC pause, a VM
    migration); SIGCONT resumes the process, whose commit must then lose to newer state."""
    kill_on_command: str | None = None
    """CAIRN_FAULT_KILL_BEFORE_COMMAND_COMMIT: SIGKILL before committing a lifecycle command."""
    kill_on_result: str | None = None
    """CAIRN_FAULT_KILL_BEFORE_RESULT_COMMIT: SIGKILL before committing a task result (a worker's,
    or a code workflow runtime's answer to a turn: its history and actions are not committed)."""

    def before_commit(self, topics_by_workflow: Mapping[str, Set[str]]) -> None:
        """Called with the topics of the messages each workflow about to be committed was decided on."""
        for workflow_id, topics in topics_by_workflow.items():
            if self._fires(self.freeze_marker, workflow_id, topics, self.topics.workflow_signal):
                self.freeze_marker = None
                log.warning("test hook: freezing before the commit of %s", workflow_id)
                os.kill(os.getpid(), signal.SIGSTOP)
                return
            for marker, topic, what in (
                (self.kill_on_command, self.topics.workflow_command, "a command"),
                (self.kill_on_result, self.topics.task_result, "a result"),
            ):
                if self._fires(marker, workflow_id, topics, topic):
                    log.error("test hook: SIGKILL before the commit of %s on %s", what, workflow_id)
                    os.kill(os.getpid(), signal.SIGKILL)

    @staticmethod
    def _fires(marker: str | None, workflow_id: str, topics: Set[str], topic: str) -> bool:
        return bool(marker) and marker in workflow_id and topic in topics  # type: ignore[operator]
