"""One REST client for Conductor's API, used unchanged against Conductor OSS and `cairn dev`.

Only the calls the conformance suite needs, with Conductor's paths and bodies. Workflow
definitions go in with `PUT /api/metadata/workflow` and a list: Conductor 3.32's
`POST /api/metadata/workflow` takes exactly one definition (a list there is a 500), while the
PUT creates or replaces a list on both servers, so a rerun on a kept server does not collide.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx

TERMINAL = frozenset({"COMPLETED", "FAILED", "TERMINATED", "TIMED_OUT"})


class RestError(AssertionError):
    """A call answered with a non-2xx status (the message has the method, path and body)."""


class ConductorRest:
    def __init__(self, name: str, base_url: str) -> None:
        """`base_url` ends in /api, as CAIRN_CONDUCTOR_URL does."""
        self.name = name
        self.base_url = base_url.rstrip("/")
        self._local = threading.local()

    @property
    def http(self) -> httpx.Client:
        """One connection pool per thread: the worker threads and the case runners share this
        object, and httpx clients are not meant to be shared across threads under load."""
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(30.0))
            self._local.client = client
        return client

    def close(self) -> None:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is not None:
            client.close()
            self._local.client = None

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self.http.request(method, path, **kwargs)
        if response.status_code >= 300:
            raise RestError(
                f"{self.name}: {method} {path} -> HTTP {response.status_code}: {response.text[:2000]}"
            )
        return response

    # ---- metadata ------------------------------------------------------------------------------

    def register_task_defs(self, task_defs: list[dict[str, Any]]) -> None:
        self._call("POST", "/metadata/taskdefs", json=task_defs)

    def register_workflows(self, definitions: list[dict[str, Any]]) -> None:
        self._call("PUT", "/metadata/workflow", json=definitions)

    # ---- executions ----------------------------------------------------------------------------

    def start(
        self, name: str, version: int, workflow_input: dict[str, Any], idempotency_key: str | None = None
    ) -> str:
        """POST /api/workflow with a StartWorkflowRequest; the new workflow's id."""
        request: dict[str, Any] = {"name": name, "version": version, "input": workflow_input}
        if idempotency_key is not None:
            request["idempotencyKey"] = idempotency_key
        return self._call("POST", "/workflow", json=request).text.strip().strip('"')

    def get(self, workflow_id: str) -> dict[str, Any]:
        body: dict[str, Any] = self._call(
            "GET", f"/workflow/{workflow_id}", params={"includeTasks": "true"}
        ).json()
        return body

    # ---- tasks ---------------------------------------------------------------------------------

    def poll_batch(
        self, task_type: str, count: int, timeout_ms: int, worker_id: str = "conformance"
    ) -> list[dict[str, Any]]:
        response = self._call(
            "GET",
            f"/tasks/poll/batch/{task_type}",
            params={"count": count, "timeout": timeout_ms, "workerid": worker_id},
        )
        if response.status_code == 204 or not response.content:
            return []
        tasks: list[dict[str, Any]] = response.json()
        return tasks

    def update_task(self, result: dict[str, Any]) -> None:
        """POST /api/tasks with a TaskResult."""
        self._call("POST", "/tasks", json=result)
