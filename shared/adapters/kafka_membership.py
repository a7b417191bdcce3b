"""Static group membership (KIP-345) for the Kafka bus: stable consumer ids, leaving on close, and
telling the operator when two processes share an id.

Why static: a dynamic member that is SIGKILLed stays in its group until its session times out,
and the rebalance its restarted self triggers waits for that (4-12 s of no progress, more when
rebalances cascade). A static member that comes back under the same `group.instance.id` is handed
its old partitions at once, without a rebalance.

Ids are `<CAIRN_INSTANCE_ID>.<group>.<n>`: `n` is the lowest index not held in this process, so
two consumers of one group in one process (CAIRN_DECIDER_CONSUMERS) never share an id, and the
same process restarted claims the same ids in the same order.

aiokafka never sends a LeaveGroup for a static member (Kafka's choice: a rolling restart should
not rebalance). Cairn leaves on a graceful stop anyway, with LeaveGroup v3 naming the instance id
(what Java's AdminClient.removeMembersFromConsumerGroup sends): a scaled-down replica or a closed
hand-out group of the api hands its partitions over at once, as a dynamic member would. Only a
crash relies on the session timeout, and only if the process does not come back.

Two processes with one instance id displace each other at every heartbeat (aiokafka's heartbeat
carries no instance id, so the displaced one just sees its member id unknown and rejoins, taking
the id back). A static member never sees that otherwise, except after a pause longer than the
session timeout, so `FencingAlarm` turns it into an error line naming the setting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

log = logging.getLogger(__name__)


class FencedInstanceIdError(kafka_errors.BrokerResponseError):
    """Kafka's FENCED_INSTANCE_ID (82), which aiokafka 0.14 does not name: registered so that a
    refusal reads as what it is instead of UnknownError."""

    errno = 82
    message = "FENCED_INSTANCE_ID"
    description = "another consumer with the same group.instance.id has joined the group"


kafka_errors.kafka_errors.setdefault(FencedInstanceIdError.errno, FencedInstanceIdError)


class _LeaveGroupResponseV3(Response):
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")), ("group_instance_id", String("utf-8")), ("error_code", Int16)
            ),
        ),
    )


class _LeaveGroupRequestV3(RequestStruct):
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = _LeaveGroupResponseV3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class StaticLeaveGroupRequest(Request[_LeaveGroupRequestV3]):
    """LeaveGroup for static members, named by instance id (the member id may be unknown)."""

    API_KEY = 13

    def __init__(self, group: str, instance_ids: Iterable[str]) -> None:
        self._group = group
        self._instance_ids = list(instance_ids)

    def build(self, request_struct_class: type[_LeaveGroupRequestV3]) -> _LeaveGroupRequestV3:
        return request_struct_class(self._group, [("", instance_id) for instance_id in self._instance_ids])


async def leave_static(admin: AIOKafkaAdminClient, group: str, instance_ids: Iterable[str]) -> None:
    """Remove static members from `group` now, so the rest are assigned their partitions without
    waiting for a session timeout. A member already gone is no error."""
    node = await admin.find_coordinator(group)
    response = await admin._send_request_to_node(node, StaticLeaveGroupRequest(group, instance_ids))
    errors = [
        f"{instance_id}: {kafka_errors.for_code(code).__name__}"
        for _, instance_id, code in getattr(response, "members", ())
        if code not in (0, kafka_errors.UnknownMemberIdError.errno)
    ]
    if response.error_code or errors:
        raise kafka_errors.KafkaError(
            f"leaving {group} refused: {kafka_errors.for_code(response.error_code).__name__} {errors}"
        )


class InstanceIds:
    """The instance ids of one process's consumers: `<base>.<group>.<n>`, `n` the lowest free."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._held: set[tuple[str, int]] = set()

    def claim(self, group: str) -> str:
        index = 0
        while (group, index) in self._held:
            index += 1
        self._held.add((group, index))
        return f"{self.base}.{group}.{index}"

    def release(self, group: str, instance_id: str) -> None:
        self._held.discard((group, int(instance_id.rsplit(".", 1)[1])))


DISPLACED = "member_id was not recognized"
"""What aiokafka logs when the broker no longer knows this member (its heartbeat carries no
instance id, so a displacement by a namesake reads this way)."""


class FencingAlarm(logging.Filter):
    """Watches aiokafka's and FastStream's log records of a process with static members: a member
    displaced or fenced is logged as an error saying what to fix, at most once per `every_s`."""

    def __init__(self, base: str, session_timeout_ms: int, every_s: float = 30.0) -> None:
        super().__init__()
        self.base = base
        self.session_timeout_ms = session_timeout_ms
        self.every_s = every_s
        self._last = -every_s
        self.raised = 0

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f" {record.exc_info[1]!r}"
        if DISPLACED in text or FencedInstanceIdError.__name__ in text or "FENCED_INSTANCE_ID" in text:
            self.raised += 1
            now = time.monotonic()
            if now - self._last >= self.every_s:
                self._last = now
                log.error(
                    "Kafka dropped a consumer of this process from its group: another process "
                    "is using the same instance id (CAIRN_INSTANCE_ID=%s; its consumers are %s.<group>.<n>) "
                    "and the two displace each other. Give every replica its own CAIRN_INSTANCE_ID (the pod "
                    "name in Kubernetes). Seen once, it can also mean this process stalled longer than "
                    "CAIRN_KAFKA_SESSION_TIMEOUT_MS=%d.",
                    self.base,
                    self.base,
                    self.session_timeout_ms,
                )
        return True


WATCHED_LOGGERS = ("aiokafka.consumer.group_coordinator", "cairn.kafka")


def install_alarm(alarm: FencingAlarm) -> None:
    for name in WATCHED_LOGGERS:
        logging.getLogger(name).addFilter(alarm)


def remove_alarm(alarm: FencingAlarm) -> None:
    for name in WATCHED_LOGGERS:
        logging.getLogger(name).removeFilter(alarm)
