"""Conductor's official Python client with `AuthenticationSettings(key_id, key_secret)`, unchanged,
against a Cairn api with keys: an admin key registers, an operator key starts, the client's
TaskHandler runs the workers with a worker key (each worker process fetching its own token), a
reader key follows the workflows. A role that may not is refused with 403, and a client whose
token expired or is not the server's renews it on Orkes's EXPIRED_TOKEN / INVALID_TOKEN and
carries on.

The workflow, its workers and helpers are test_conductor_client.py's, so this is that test with
authentication on.
"""

# No `from __future__ import annotations`: see test_conductor_client.py (the client inspects the
# worker functions' annotations at run time).
import time
import uuid

import pytest
from conductor.client.automator.task_handler import TaskHandler
from conductor.client.configuration.configuration import Configuration
from conductor.client.configuration.settings.authentication_settings import AuthenticationSettings
from conductor.client.http.models import StartWorkflowRequest
from conductor.client.http.rest import AuthorizationException
from conductor.client.orkes.orkes_metadata_client import OrkesMetadataClient
from conductor.client.orkes.orkes_workflow_client import OrkesWorkflowClient
from conductor.client.worker.worker import Worker

from tests.authkeys import expired_token, secret_of
from tests.devserver import DevServer
from tests.integration import test_conductor_client as plain

pytestmark = pytest.mark.integration


def configuration(server: DevServer, key_id: str) -> Configuration:
    return Configuration(
        server_api_url=f"{server.url}/api",
        authentication_settings=AuthenticationSettings(key_id=key_id, key_secret=secret_of(key_id)),
    )


def test_official_client_with_keys_registers_starts_and_runs_workers(auth_dev_server: DevServer) -> None:
    suffix = uuid.uuid4().hex[:10]
    t1, t2, t3 = f"cca_double_{suffix}", f"cca_add_ten_{suffix}", f"cca_describe_{suffix}"
    workflow_name = f"cca_pipeline_{suffix}"
    admin = OrkesMetadataClient(configuration(auth_dev_server, "admin"))
    for name in (t1, t2, t3):
        admin.register_task_def(plain.task_def(name))
    admin.register_workflow_def(plain.workflow_def(workflow_name, t1, t2, t3), overwrite=True)

    reader_metadata = OrkesMetadataClient(configuration(auth_dev_server, "reader"))
    assert reader_metadata.get_workflow_def(workflow_name).name == workflow_name
    with pytest.raises(AuthorizationException) as refused:
        reader_metadata.register_task_def(plain.task_def(f"cca_refused_{suffix}"))
    assert refused.value.status == 403

    operator = OrkesWorkflowClient(configuration(auth_dev_server, "operator"))
    workflow_ids = [
        operator.start_workflow_by_name(workflow_name, {"n": n, "label": f"wf-{n}"}) for n in plain.INPUTS[:2]
    ]
    workflow_ids.append(
        operator.start_workflow(
            StartWorkflowRequest(
                name=workflow_name, version=1, input={"n": plain.INPUTS[2], "label": f"wf-{plain.INPUTS[2]}"}
            )
        )
    )
    workers = [
        Worker(
            task_definition_name=name, execute_function=function, poll_interval=100, worker_id=f"cca-{suffix}"
        )
        for name, function in ((t1, plain.double), (t2, plain.add_ten), (t3, plain.describe))
    ]
    handler: TaskHandler | None = None
    reader = OrkesWorkflowClient(configuration(auth_dev_server, "reader"))
    try:
        handler = TaskHandler(
            workers=workers,
            configuration=configuration(auth_dev_server, "worker"),
            scan_for_annotated_workers=False,
            monitor_processes=False,
        )
        handler.start_processes()
        finished = plain.wait_until_finished(reader, workflow_ids)
    finally:
        if handler is not None:
            plain.stop(handler)
    for workflow_id, n in zip(workflow_ids, plain.INPUTS, strict=True):
        assert finished[workflow_id].output == plain.expected_output(n)


@pytest.mark.parametrize("stale", ["expired", "foreign"])
def test_official_client_renews_a_token_the_server_no_longer_takes(
    auth_dev_server: DevServer, stale: str
) -> None:
    settings = configuration(auth_dev_server, "reader")
    client = OrkesMetadataClient(settings)
    assert isinstance(client.get_all_workflow_defs(), list)
    first = settings.AUTH_TOKEN
    # As if the token had been issued long ago (EXPIRED_TOKEN), or by another server (INVALID_TOKEN).
    bad = expired_token("reader", int(time.time())) if stale == "expired" else first[:-4] + "AAAA"
    settings.AUTH_TOKEN = bad
    assert isinstance(client.get_all_workflow_defs(), list)  # 401, a new token, the call again
    assert settings.AUTH_TOKEN not in (None, bad)


def test_official_client_with_a_wrong_secret_is_refused_without_looping(auth_dev_server: DevServer) -> None:
    """POST /api/token's 401 carries no INVALID_TOKEN: the client gives up on the token instead
    of asking again and again, and its call fails with 401."""
    settings = Configuration(
        server_api_url=f"{auth_dev_server.url}/api",
        authentication_settings=AuthenticationSettings(key_id="reader", key_secret="not-the-secret-at-all"),
    )
    started = time.monotonic()
    with pytest.raises(AuthorizationException) as refused:
        OrkesMetadataClient(settings).get_all_workflow_defs()
    assert refused.value.status == 401 and time.monotonic() - started < 10
