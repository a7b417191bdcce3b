"""DaprWorkflowClient: schedule, read, wait for, signal and operate code workflows over Cairn's
HTTP api (the same routes as JSON workflows, docs/code-workflows.md). Dapr's constructor
arguments are accepted; the address is CAIRN_SERVER (default: `cairn dev` on 127.0.0.1:8080) and
the app is CAIRN_APP (default `default`)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from typing import Any

import httpx

from cairn.auth import ApiKey, ApiKeyAuth
from cairn.backends import DEFAULT_SERVER
from cairn.workflow._context import name_of
from cairn.workflow._serialization import encode
from cairn.workflow.state import TERMINAL, WorkflowState, WorkflowStatus
from shared.config import CairnSettings


class WorkflowClientError(Exception):
    """The api refused a request (the message says why and what to do)."""


def server_url() -> str:
    return (CairnSettings().server or DEFAULT_SERVER).rstrip("/")


def app_name() -> str:
    return CairnSettings().app


def http_client(server: str, timeout: float = 30.0) -> httpx.Client:
    key = ApiKey.from_settings(CairnSettings())
    return httpx.Client(base_url=server, timeout=timeout, auth=ApiKeyAuth(server, key) if key else None)


def _check(response: httpx.Response, what: str) -> httpx.Response:
    if response.is_success:
        return response
    try:
        message = response.json().get("message", response.text)
    except ValueError:
        message = response.text
    raise WorkflowClientError(f"{what}: {message} (HTTP {response.status_code})")


class DaprWorkflowClient:
    def __init__(
        self,
        host: str | None = None,
        port: str | None = None,
        logger_options: Any = None,
        max_grpc_message_length: int | None = None,
        **_: Any,
    ) -> None:
        self._server = server_url()
        self._app = app_name()
        self._http = http_client(self._server)

    def schedule_new_workflow(
        self,
        workflow: Any,
        *,
        input: Any = None,
        instance_id: str | None = None,
        start_at: datetime | None = None,
        reuse_id_policy: Any = None,
    ) -> str:
        if start_at is not None and start_at > datetime.now(start_at.tzinfo):
            raise WorkflowClientError("start_at in the future is not supported by Cairn; schedule it then")
        body = {
            "name": name_of(workflow),
            "input": {"input": encode(input)},
            "workflowId": instance_id or uuid.uuid4().hex,
            "kind": "code",
            "app": self._app,
        }
        response = _check(self._http.post("/api/workflow", json=body), f"scheduling {body['name']}")
        return response.text

    def get_workflow_state(self, instance_id: str, *, fetch_payloads: bool = True) -> WorkflowState | None:
        response = self._http.get(f"/api/workflow/{instance_id}", params={"includeTasks": "false"})
        if response.status_code == 404:
            return None
        return WorkflowState(_check(response, f"reading {instance_id}").json(), fetch_payloads=fetch_payloads)

    def wait_for_workflow_start(
        self, instance_id: str, *, fetch_payloads: bool = False, timeout_in_seconds: int = 0
    ) -> WorkflowState | None:
        return self._wait(
            instance_id,
            lambda s: s.runtime_status is not WorkflowStatus.PENDING,
            fetch_payloads,
            timeout_in_seconds,
            "Timed-out waiting for the orchestration to start",
        )

    def wait_for_workflow_completion(
        self, instance_id: str, *, fetch_payloads: bool = True, timeout_in_seconds: int = 0
    ) -> WorkflowState | None:
        return self._wait(
            instance_id,
            lambda s: s.runtime_status in TERMINAL,
            fetch_payloads,
            timeout_in_seconds,
            "Timed-out waiting for the orchestration to complete",
        )

    def _wait(
        self, instance_id: str, done: Any, fetch_payloads: bool, timeout_s: float, timed_out: str
    ) -> WorkflowState | None:
        deadline = time.monotonic() + timeout_s if timeout_s else None
        delay = 0.01
        while True:
            state = self.get_workflow_state(instance_id, fetch_payloads=fetch_payloads)
            if state is not None and done(state):
                return state
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(timed_out)
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def raise_workflow_event(self, instance_id: str, event_name: str, *, data: Any = None) -> None:
        payload = encode(data) if data else None  # Dapr sends falsy data as none
        response = self._http.post(f"/api/workflow/{instance_id}/events/{event_name}", json=payload)
        _check(response, f"raising {event_name!r} on {instance_id}")

    def terminate_workflow(self, instance_id: str, *, output: Any = None, recursive: bool = True) -> None:
        params = {"reason": json.dumps(encode(output))} if output else {}
        _check(self._http.delete(f"/api/workflow/{instance_id}", params=params), f"terminating {instance_id}")

    def pause_workflow(self, instance_id: str) -> None:
        _check(self._http.put(f"/api/workflow/{instance_id}/pause"), f"pausing {instance_id}")

    def resume_workflow(self, instance_id: str) -> None:
        _check(self._http.put(f"/api/workflow/{instance_id}/resume"), f"resuming {instance_id}")

    def purge_workflow(self, instance_id: str, recursive: bool = True) -> None:
        """Remove a finished instance and its history (with its children, when recursive)."""
        response = self._http.get(f"/api/workflow/{instance_id}", params={"includeTasks": "true"})
        if response.status_code == 404:
            return
        workflow = _check(response, f"reading {instance_id}").json()
        if recursive:
            for task in workflow.get("tasks", []):
                if task.get("subWorkflowId"):
                    self.purge_workflow(task["subWorkflowId"], recursive=True)
        _check(self._http.delete(f"/api/workflow/{instance_id}/remove"), f"purging {instance_id}")

    def close(self) -> None:
        self._http.close()
