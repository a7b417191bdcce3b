"""Documents this decider committed a moment ago, so its next decision on them skips the read.

A decision takes its document out (`take`) and puts back what it committed, so no two decisions
ever hold one document object: the decider changes a taken document in place
(services/decider/deciding.py).

Safe by construction: a commit built on a stale copy fails its version check (the fence for the
next version exists), the loser is dropped from here and reloaded. A decision that commits nothing
has no version check, so when one made on a copy from here refuses events, the handler drops the
copy and decides again on a fresh read (another replica may have moved the workflow on). Entries
expire long before the store prunes the fences that make this true (seconds here, minutes there).

Only what may be decided on again soon is kept, and nothing past its time: a finished execution is
not kept (the events that may still come for it are rare, and a read serves them), and expired
entries leave at every `put`, not only when their workflow is looked up again. Otherwise every
execution finished in the last `capacity` stays in memory (10,000 documents, hundreds of MB), and
the garbage collector's full passes over them grow with it: the embedded soak's throughput fell by
a fifth over 14 minutes while its cache filled.
"""

from __future__ import annotations

from collections import OrderedDict

from shared.models.documents import WorkflowDocument


class RecentDocuments:
    def __init__(self, capacity: int = 10_000, ttl_ms: int = 30_000) -> None:
        self._capacity = capacity
        self._ttl_ms = ttl_ms
        self._entries: OrderedDict[str, tuple[WorkflowDocument, int]] = OrderedDict()

    def get(self, workflow_id: str, now: int) -> WorkflowDocument | None:
        entry = self._entries.get(workflow_id)
        if entry is None:
            return None
        document, cached_at = entry
        if now - cached_at > self._ttl_ms:
            del self._entries[workflow_id]
            return None
        return document

    def take(self, workflow_id: str, now: int) -> WorkflowDocument | None:
        """The document, out of the cache: the taker owns it (its decision may change it in
        place), and a decision made meanwhile on the same workflow reads its own from the store.
        The taker puts back what it committed."""
        document = self.get(workflow_id, now)
        self._entries.pop(workflow_id, None)
        return document

    def put(self, document: WorkflowDocument, now: int) -> None:
        if document.state.status.is_terminal:
            self._entries.pop(document.workflow_id, None)
        else:
            self._entries[document.workflow_id] = (document, now)
            self._entries.move_to_end(document.workflow_id)
        self._expire(now)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def _expire(self, now: int) -> None:
        """Entries are in the order they were put, so the expired ones are at the front."""
        while self._entries:
            _, (_, cached_at) = next(iter(self._entries.items()))
            if now - cached_at <= self._ttl_ms:
                return
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)

    def drop(self, workflow_id: str) -> None:
        self._entries.pop(workflow_id, None)
