import pytest

from shared.core.tasktypes import TaskTypeRegistry, UnknownTaskTypeError
from shared.core.tasktypes.simple import SimpleTask
from shared.core.validation import DefinitionError, parse_task_def, parse_workflow_def


def definition(**overrides: object) -> dict:
    base: dict = {
        "name": "w",
        "tasks": [{"name": "a", "taskReferenceName": "a"}, {"name": "b", "taskReferenceName": "b"}],
    }
    base.update(overrides)
    return base


def problems(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(DefinitionError) as caught:
        parse_workflow_def(data)
    return caught.value.problems


def test_valid_definition_with_conductor_defaults() -> None:
    parsed = parse_workflow_def(definition(ownerEmail="a@b.c", schemaVersion=2, timeoutSeconds=0))
    assert parsed.version == 1 and parsed.tasks[0].type == "SIMPLE"


def test_unknown_task_type_names_the_path() -> None:
    data = definition()
    data["tasks"][1]["type"] = "SIMPEL"
    assert problems(data) == [("tasks[1].type", "unknown task type 'SIMPEL'")]


def test_unsupported_conductor_type_is_named() -> None:
    data = definition()
    data["tasks"][0]["type"] = "KAFKA_PUBLISH"
    [(path, message)] = problems(data)
    assert path == "tasks[0].type" and "not supported by Cairn yet" in message


def test_missing_and_wrong_typed_fields_name_their_path() -> None:
    data = definition()
    del data["tasks"][1]["taskReferenceName"]
    data["tasks"][0]["inputParameters"] = "nope"
    found = dict(problems(data))
    assert "tasks[1].taskReferenceName" in found
    assert "tasks[0].inputParameters" in found


def test_unknown_field_is_rejected() -> None:
    data = definition(taskz=[])
    assert problems(data)[0][0] == "taskz"


def test_duplicate_reference_names() -> None:
    data = definition()
    data["tasks"][1]["taskReferenceName"] = "a"
    [(path, message)] = problems(data)
    assert path == "tasks[1].taskReferenceName" and "duplicate" in message


def test_unsupported_non_default_fields_are_rejected_not_ignored() -> None:
    found = dict(problems(definition(inputTemplate={"a": 1}, workflowStatusListenerEnabled=True)))
    assert set(found) == {"inputTemplate", "workflowStatusListenerEnabled"}
    data = definition()
    data["tasks"][0]["taskDefinition"] = {"name": "a", "concurrentExecLimit": 5}
    assert problems(data)[0][0] == "tasks[0].taskDefinition.concurrentExecLimit"
    data["tasks"][0]["taskDefinition"] = {"name": "a", "timeoutSeconds": 5}
    assert problems(data) == [
        ("tasks[0].taskDefinition.responseTimeoutSeconds", "must not exceed timeoutSeconds (as in Conductor)")
    ]


def test_task_def_validation() -> None:
    assert parse_task_def({"name": "t", "retryCount": 2}).retry_count == 2
    with pytest.raises(DefinitionError) as caught:
        parse_task_def({"name": "t", "retryCount": -1})
    assert caught.value.problems[0][0] == "retryCount"


def test_registry_fails_loudly() -> None:
    registry = TaskTypeRegistry()
    registry.register(SimpleTask())
    with pytest.raises(ValueError, match="already registered"):
        registry.register(SimpleTask())
    with pytest.raises(UnknownTaskTypeError):
        registry.get("WAIT")


def test_worker_task_names_must_be_usable_as_topic_names() -> None:
    data = definition()
    data["tasks"][1]["name"] = "charge card!"
    [(path, message)] = problems(data)
    assert path == "tasks[1].name" and "topic name" in message
    # WAIT tasks are never dispatched to a topic: any name goes.
    parse_workflow_def(definition(tasks=[{"name": "wait for ana", "taskReferenceName": "w", "type": "WAIT"}]))
    with pytest.raises(DefinitionError) as caught:
        parse_task_def({"name": "a/b"})
    assert caught.value.problems[0][0] == "name"
