"""The outbox port: a decision's commit and the messages it publishes, written as one.

Why it exists: without it a decision costs three writes — the commit (its outbox stored in the
document), the publish, and marking the outbox sent — and a crash between the first two leaves
the messages to the sweeper's republish. Where the store and the bus live in one database
(`cairn dev`: one SQLite file) an adapter can do all of it in one transaction, and acknowledge
the delivered batch in it too. Where they do not (MongoDB and Kafka) there is no adapter, and the
decider commits, publishes and marks as before (docs/semantics.md: both are at-least-once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from shared.ports.bus import Outgoing, Received
from shared.ports.store import Commit


class AtomicOutbox(Protocol):
    async def commit_and_publish(
        self,
        commits: Sequence[Commit],
        messages: Sequence[Sequence[Outgoing] | None],
        *,
        acknowledge: Sequence[Received] | None = None,
    ) -> list[bool]:
        """Commit each decision on its own version check, as `Store.commit_workflows` does, and
        in the same transaction append `messages[i]` for each commit that won, its outbox then
        recorded as sent. `None` for a commit: its messages are not published here (its outbox
        stays unsent, for the caller to publish and mark). With `acknowledge`, the batch being
        delivered to the caller — if it is the very batch the bus delivered, and every commit
        won — is acknowledged in the same transaction too. Returns, per commit, whether it won."""
        ...
