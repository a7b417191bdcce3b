"""Where the CLI sends its commands: a Cairn api over HTTP (`cairn dev`, the api service), or
straight to Kafka and MongoDB. Both answer in Conductor's JSON shapes, so every command prints
the same tables either way.

Choice (see `backend_for`): `--server`/CAIRN_SERVER means HTTP; otherwise CAIRN_MONGO_URL in the
environment means direct; otherwise HTTP to `cairn dev`'s default address.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Protocol, Self

import httpx

from cairn.auth import ApiKey, ApiKeyAuth, AuthenticationFailed
from cairn.operations import Operation
from shared.config import CairnSettings
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.runtime import TaskStatus, WorkflowStatus

DEFAULT_SERVER = "http://127.0.0.1:8080"
NOT_FOUND_HINT = "check the id; `cairn ls` lists workflows"
OPERATION_WITHIN_S = 10.0
"""How long the direct backend waits for a decider to take a lifecycle command."""


class BackendError(Exception):
    """A refused or failed command, with what the user can do about it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class Backend(Protocol):
    where: str

    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    async def register(self, task_defs: Sequence[TaskDef], workflow_defs: Sequence[WorkflowDef]) -> None: ...
    async def list_definitions(self) -> list[dict[str, Any]]: ...
    async def start(
        self,
        name: str,
        input: dict[str, Any],
        *,
        workflow_id: str | None,
        version: int | None,
        correlation_id: str | None,
    ) -> str: ...
    async def signal(
        self, workflow_id: str, task_ref: str, output: dict[str, Any], status: TaskStatus
    ) -> None: ...
    async def terminate(
        self, workflow_id: str, reason: str | None, trigger_failure_workflow: bool = False
    ) -> None: ...
    async def operate(self, operation: Operation) -> None:
        """Carry out a lifecycle operation; BackendError (with the engine's reason) if it does not apply."""
        ...

    async def remove(self, workflow_id: str) -> None: ...
    async def workflow(self, workflow_id: str, include_tasks: bool = True) -> dict[str, Any] | None: ...
    async def workflows(
        self, *, status: WorkflowStatus | None, name: str | None, limit: int, query: str | None = None
    ) -> list[dict[str, Any]]:
        """WorkflowSummaries, most recently updated first; `query` in Conductor's search language."""
        ...

    async def task_definitions(self) -> list[dict[str, Any]]: ...
    async def history(self, workflow_id: str) -> dict[str, Any] | None:
        """A code workflow's history (None: no such workflow); a JSON workflow's is an error."""
        ...

    async def dead_letters(self, limit: int) -> list[dict[str, Any]]: ...
    async def dead_letter(self, letter_id: str) -> dict[str, Any] | None: ...
    async def replay(self, letter_id: str) -> dict[str, Any]: ...


def backend_for(settings: CairnSettings) -> Backend:
    if settings.server:
        return HttpBackend(settings.server, ApiKey.from_settings(settings))
    if os.environ.get("CAIRN_MONGO_URL"):
        return DirectBackend(settings)
    return HttpBackend(DEFAULT_SERVER, ApiKey.from_settings(settings))


def _dump(model: TaskDef | WorkflowDef) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


KEY_HINT = "set CAIRN_API_KEY_ID and CAIRN_API_KEY_SECRET to one of its keys (docs/deploy.md#security)"


class HttpBackend:
    """A Cairn api over HTTP; with `api_key`, authenticated with a token from POST /api/token."""

    def __init__(self, server: str, api_key: ApiKey | None = None) -> None:
        self.where = server.rstrip("/")
        self.api_key = api_key
        auth = ApiKeyAuth(self.where, api_key) if api_key else None
        self._client = httpx.AsyncClient(base_url=self.where, timeout=30.0, auth=auth)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._client.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.ConnectError:
            raise BackendError(
                f"no Cairn api at {self.where}",
                "start one with `cairn dev`, or point CAIRN_SERVER (or --server) at yours",
            ) from None
        except AuthenticationFailed as error:
            raise BackendError(str(error), "check CAIRN_API_KEY_ID and CAIRN_API_KEY_SECRET") from None
        if response.status_code >= 400 and response.status_code != 404:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            hints = {
                401: KEY_HINT if self.api_key is None else "check CAIRN_API_KEY_ID and CAIRN_API_KEY_SECRET",
                403: "the key's role does not allow this: use a key with a role that does",
            }
            raise BackendError(
                f"{self.where} answered {response.status_code}: {message}", hints.get(response.status_code)
            )
        return response

    async def register(self, task_defs: Sequence[TaskDef], workflow_defs: Sequence[WorkflowDef]) -> None:
        if task_defs:
            await self._call("POST", "/api/metadata/taskdefs", json=[_dump(t) for t in task_defs])
        if workflow_defs:
            await self._call("PUT", "/api/metadata/workflow", json=[_dump(w) for w in workflow_defs])

    async def list_definitions(self) -> list[dict[str, Any]]:
        body: list[dict[str, Any]] = (await self._call("GET", "/api/metadata/workflow")).json()
        return body

    async def start(
        self,
        name: str,
        input: dict[str, Any],
        *,
        workflow_id: str | None,
        version: int | None,
        correlation_id: str | None,
    ) -> str:
        request = {
            "name": name,
            "input": input,
            "version": version,
            "correlationId": correlation_id,
            "workflowId": workflow_id,
        }
        response = await self._call(
            "POST", "/api/workflow", json={k: v for k, v in request.items() if v is not None}
        )
        if response.status_code == 404:
            raise BackendError(
                response.json().get("message", "not found"), "register it with `cairn def register FILE`"
            )
        return response.text

    async def signal(
        self, workflow_id: str, task_ref: str, output: dict[str, Any], status: TaskStatus
    ) -> None:
        response = await self._call(
            "POST", f"/api/tasks/{workflow_id}/{task_ref}/{status.value}", json=output
        )
        if response.status_code == 404:
            raise BackendError(response.json().get("message", "not found"))

    async def terminate(
        self, workflow_id: str, reason: str | None, trigger_failure_workflow: bool = False
    ) -> None:
        params: dict[str, Any] = {"reason": reason} if reason else {}
        if trigger_failure_workflow:
            params["triggerFailureWorkflow"] = "true"
        response = await self._call("DELETE", f"/api/workflow/{workflow_id}", params=params)
        if response.status_code == 404:
            raise BackendError(f"workflow {workflow_id!r} not found", NOT_FOUND_HINT)

    async def operate(self, operation: Operation) -> None:
        method, path, request = operation.http_request()
        response = await self._call(method, path, **request)
        if response.status_code == 404:
            raise BackendError(response.json().get("message", "not found"), NOT_FOUND_HINT)

    async def remove(self, workflow_id: str) -> None:
        response = await self._call("DELETE", f"/api/workflow/{workflow_id}/remove")
        if response.status_code == 404:
            raise BackendError(f"workflow {workflow_id!r} not found", NOT_FOUND_HINT)

    async def history(self, workflow_id: str) -> dict[str, Any] | None:
        response = await self._call("GET", f"/api/workflow/{workflow_id}/history")
        if response.status_code == 404:
            return None
        body: dict[str, Any] = response.json()
        return body

    async def workflow(self, workflow_id: str, include_tasks: bool = True) -> dict[str, Any] | None:
        response = await self._call(
            "GET", f"/api/workflow/{workflow_id}", params={"includeTasks": str(include_tasks).lower()}
        )
        if response.status_code == 404:
            return None
        body: dict[str, Any] = response.json()
        return body

    async def workflows(
        self, *, status: WorkflowStatus | None, name: str | None, limit: int, query: str | None = None
    ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"size": limit, "sort": "updateTime:DESC"}
        if status:
            params["status"] = status.value
        if name:
            params["workflowType"] = name
        if query:
            params["query"] = query
        body = (await self._call("GET", "/api/workflow/search", params=params)).json()
        results: list[dict[str, Any]] = body["results"]
        return results

    async def task_definitions(self) -> list[dict[str, Any]]:
        body: list[dict[str, Any]] = (await self._call("GET", "/api/metadata/taskdefs")).json()
        return body

    async def dead_letters(self, limit: int) -> list[dict[str, Any]]:
        letters: list[dict[str, Any]] = (
            await self._call("GET", "/api/deadletters", params={"limit": limit})
        ).json()
        return letters

    async def dead_letter(self, letter_id: str) -> dict[str, Any] | None:
        response = await self._call("GET", f"/api/deadletters/{letter_id}")
        letter: dict[str, Any] | None = None if response.status_code == 404 else response.json()
        return letter

    async def replay(self, letter_id: str) -> dict[str, Any]:
        response = await self._call("POST", f"/api/deadletters/{letter_id}/replay")
        if response.status_code == 404:
            raise BackendError(
                response.json().get("message", "not found"), "list them with `cairn deadletter ls`"
            )
        replayed: dict[str, Any] = response.json()
        return replayed


class DirectBackend:
    """Straight to MongoDB (reads, definitions) and Kafka (commands), as the services see them."""

    def __init__(self, settings: CairnSettings) -> None:
        self.settings = settings
        self.where = f"MongoDB {settings.mongo_url} / Kafka {settings.kafka_bootstrap}"
        self._store: Any = None
        self._bus: Any = None

    async def __aenter__(self) -> Self:
        from services.common import kafka_bus, mongo_store

        self._store = await mongo_store(self.settings)
        self._bus = kafka_bus(self.settings, "cairn-cli")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._bus.stop()
        await self._store.close()

    def _client(self) -> Any:
        from cairn.client import CairnClient

        return CairnClient(self._bus, self.settings.topics)

    async def register(self, task_defs: Sequence[TaskDef], workflow_defs: Sequence[WorkflowDef]) -> None:
        for task_def in task_defs:
            await self._store.put_task_def(task_def)
        for definition in workflow_defs:
            await self._store.put_workflow_def(definition)

    async def list_definitions(self) -> list[dict[str, Any]]:
        return [_dump(d) for d in await self._store.list_workflow_defs()]

    async def start(
        self,
        name: str,
        input: dict[str, Any],
        *,
        workflow_id: str | None,
        version: int | None,
        correlation_id: str | None,
    ) -> str:
        workflow_id = workflow_id or str(uuid.uuid4())
        result: str = await self._client().start_workflow(
            name, input, workflow_id=workflow_id, version=version, correlation_id=correlation_id
        )
        return result

    async def signal(
        self, workflow_id: str, task_ref: str, output: dict[str, Any], status: TaskStatus
    ) -> None:
        await self._client().signal(workflow_id, task_ref, output, status)

    async def terminate(
        self, workflow_id: str, reason: str | None, trigger_failure_workflow: bool = False
    ) -> None:
        await self._client().terminate(workflow_id, reason, trigger_failure_workflow)

    async def operate(self, operation: Operation) -> None:
        from shared.messaging import outgoing
        from shared.operations import await_operation

        if await self._store.load_workflow(operation.workflow_id) is None:
            raise BackendError(f"workflow {operation.workflow_id!r} not found", NOT_FOUND_HINT)
        command = operation.command()
        topic = self.settings.topics.workflow_command
        await self._bus.publish([outgoing(topic, command, command.workflow_id, {})])
        record = await await_operation(self._store, command.workflow_id, command.id, OPERATION_WITHIN_S)
        if record is None:
            raise BackendError(
                f"the {operation.kind} is published; no decider applied it within {OPERATION_WITHIN_S:g} s",
                "check that the decider runs (`cairn run decider`): it applies it once it catches up",
            )
        if not record.applied:
            raise BackendError(f"workflow {operation.workflow_id!r}: {record.reason}")

    async def remove(self, workflow_id: str) -> None:
        document = await self._store.load_workflow(workflow_id)
        if document is None:
            raise BackendError(f"workflow {workflow_id!r} not found", NOT_FOUND_HINT)
        if not document.state.status.is_terminal:
            raise BackendError(
                f"workflow {workflow_id!r} is {document.state.status}",
                "terminate it first: `cairn terminate`",
            )
        await self._store.remove_workflow(workflow_id)

    async def history(self, workflow_id: str) -> dict[str, Any] | None:
        from services.api.code_workflows import history_json

        document = await self._store.load_workflow(workflow_id)
        if document is None:
            return None
        if document.state.code is None:
            raise BackendError(
                f"workflow {workflow_id!r} is a JSON workflow: it has task records, not a history"
            )
        return await history_json(self._store, document)

    async def workflow(self, workflow_id: str, include_tasks: bool = True) -> dict[str, Any] | None:
        from services.api.conductor import workflow_json
        from services.api.views import load_executions

        document = await self._store.load_workflow(workflow_id)
        if document is None:
            return None
        tasks = await load_executions(self._store, document) if include_tasks else None
        return workflow_json(document, tasks)

    async def workflows(
        self, *, status: WorkflowStatus | None, name: str | None, limit: int, query: str | None = None
    ) -> list[dict[str, Any]]:
        from services.api.conductor import workflow_summary_json
        from shared.search import AllOf, Condition, Query, QueryError, SearchRequest, parse_query

        if query is None:
            documents = await self._store.list_workflows(status=status, name=name, limit=limit)
            return [workflow_summary_json(d) for d in documents]
        try:
            parsed = parse_query(query)
        except QueryError as error:
            raise BackendError(str(error), "docs/operations.md shows the query language") from None
        conditions: list[Query] = [parsed] if parsed is not None else []
        if status is not None:
            conditions.append(Condition("status", "=", (status.value,)))
        if name is not None:
            conditions.append(Condition("workflowType", "=", (name,)))
        request = SearchRequest(AllOf(tuple(conditions)), None, (("updateTime", True),), 0, limit)
        _, documents = await self._store.search_workflows(request)
        return [workflow_summary_json(d) for d in documents]

    async def task_definitions(self) -> list[dict[str, Any]]:
        return [_dump(task_def) for task_def in await self._store.list_task_defs()]

    async def dead_letters(self, limit: int) -> list[dict[str, Any]]:
        from shared.deadletters import list_letters

        return await list_letters(self._bus, self.settings.topics.dead_letter, limit)

    async def dead_letter(self, letter_id: str) -> dict[str, Any] | None:
        from shared.deadletters import DeadLetterNotFoundError, find_letter, letter_json

        try:
            return letter_json(await find_letter(self._bus, self.settings.topics.dead_letter, letter_id))
        except DeadLetterNotFoundError:
            return None

    async def replay(self, letter_id: str) -> dict[str, Any]:
        from shared.deadletters import DeadLetterNotFoundError, replay_letter

        try:
            return await replay_letter(self._bus, self.settings.topics.dead_letter, letter_id)
        except DeadLetterNotFoundError as error:
            raise BackendError(str(error), "list them with `cairn deadletter ls`") from None
