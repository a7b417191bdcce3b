"""Conductor-compatible definitions: WorkflowDef, WorkflowTask and TaskDef.

Field names on the wire are Conductor's camelCase names and defaults are Conductor's, so a
definition exported from Conductor loads unchanged. Fields Conductor knows but Cairn does not
implement yet are accepted only at their Conductor default; any other value is rejected by
`shared.core.validation` with the field path, because silently ignoring a setting would make the
workflow behave differently from what its author wrote.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from shared.models.limits import JAVA_INT_MAX, MAX_TIME_MS, DefinitionName, Reference

TASK_NAME_PATTERN = r"^[A-Za-z0-9._-]{1,200}$"
"""What a worker task's name may be: it becomes a topic name (`tasks.<name>`), so Kafka's alphabet."""


class ConductorModel(BaseModel):
    """Base for Conductor JSON: camelCase aliases, unknown fields rejected, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=False,
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The Conductor JSON form: camelCase, without fields left at None."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class RetryLogic(StrEnum):
    FIXED = "FIXED"
    EXPONENTIAL_BACKOFF = "EXPONENTIAL_BACKOFF"
    LINEAR_BACKOFF = "LINEAR_BACKOFF"


class TaskTimeoutPolicy(StrEnum):
    RETRY = "RETRY"
    TIME_OUT_WF = "TIME_OUT_WF"
    ALERT_ONLY = "ALERT_ONLY"


class WorkflowTimeoutPolicy(StrEnum):
    TIME_OUT_WF = "TIME_OUT_WF"
    ALERT_ONLY = "ALERT_ONLY"


# Every task type Conductor defines. A name outside this set is a typo or a custom type and is
# rejected as unknown; a name inside it that Cairn's registry lacks is rejected as unsupported.
CONDUCTOR_TASK_TYPES: frozenset[str] = frozenset(
    {
        "SIMPLE",
        "DYNAMIC",
        "FORK_JOIN",
        "FORK_JOIN_DYNAMIC",
        "DECISION",
        "SWITCH",
        "JOIN",
        "DO_WHILE",
        "SUB_WORKFLOW",
        "START_WORKFLOW",
        "EVENT",
        "WAIT",
        "HUMAN",
        "USER_DEFINED",
        "HTTP",
        "LAMBDA",
        "INLINE",
        "EXCLUSIVE_JOIN",
        "TERMINATE",
        "KAFKA_PUBLISH",
        "JSON_JQ_TRANSFORM",
        "SET_VARIABLE",
        "NOOP",
        "WAIT_FOR_WEBHOOK",
        "BUSINESS_RULE",
        "GET_SIGNED_JWT",
        "UPDATE_SECRET",
        "QUERY_PROCESSOR",
        "OPS_GENIE",
        "GET_WORKFLOW",
        "UPDATE_TASK",
        "LLM_TEXT_COMPLETE",
        "LLM_CHAT_COMPLETE",
        "LIST_MCP_TOOLS",
        "CALL_MCP_TOOL",
        "LLM_GENERATE_EMBEDDINGS",
        "LLM_INDEX_TEXT",
        "LLM_STORE_EMBEDDINGS",
        "LLM_SEARCH_INDEX",
        "LLM_SEARCH_EMBEDDINGS",
        "LLM_GET_EMBEDDINGS",
        "GENERATE_IMAGE",
        "GENERATE_AUDIO",
        "GENERATE_VIDEO",
        "GENERATE_PDF",
        "GET_AGENT_CARD",
        "AGENT",
        "CANCEL_AGENT",
        "JDBC",
    }
)


class TaskDef(ConductorModel):
    """A registered task type's execution policy (retries, timeouts, limits)."""

    name: DefinitionName
    description: str | None = None
    retry_count: int = Field(default=3, ge=0, le=JAVA_INT_MAX)
    timeout_seconds: int = Field(default=0, ge=0, le=JAVA_INT_MAX)
    input_keys: list[str] = Field(default_factory=list)
    output_keys: list[str] = Field(default_factory=list)
    timeout_policy: TaskTimeoutPolicy = TaskTimeoutPolicy.TIME_OUT_WF
    retry_logic: RetryLogic = RetryLogic.FIXED
    retry_delay_seconds: int = Field(default=60, ge=0, le=JAVA_INT_MAX)
    response_timeout_seconds: int = Field(default=3600, ge=1, le=JAVA_INT_MAX)
    concurrent_exec_limit: int | None = Field(default=None, ge=0, le=JAVA_INT_MAX)
    input_template: dict[str, Any] = Field(default_factory=dict)
    rate_limit_per_frequency: int | None = Field(default=None, ge=0, le=JAVA_INT_MAX)
    rate_limit_frequency_in_seconds: int | None = Field(default=None, ge=0, le=JAVA_INT_MAX)
    isolation_group_id: str | None = Field(default=None, alias="isolationGroupId")
    execution_name_space: str | None = None
    owner_email: str | None = None
    poll_timeout_seconds: int | None = Field(default=None, ge=0, le=JAVA_INT_MAX)
    backoff_scale_factor: int = Field(default=1, ge=1, le=JAVA_INT_MAX)
    max_retry_delay_seconds: int | None = Field(default=None, ge=0, le=JAVA_INT_MAX)
    backoff_jitter_ms: int | None = Field(default=None, ge=0, le=JAVA_INT_MAX)
    total_timeout_seconds: int = Field(default=0, ge=0, le=JAVA_INT_MAX)
    base_type: str | None = None
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    enforce_schema: bool = False
    owner_app: str | None = None
    create_time: int | None = Field(default=None, ge=0, le=MAX_TIME_MS)
    update_time: int | None = Field(default=None, ge=0, le=MAX_TIME_MS)
    created_by: str | None = None
    updated_by: str | None = None
    tags: list[dict[str, Any]] | None = None


class SubWorkflowParams(ConductorModel):
    model_config = ConfigDict(extra="allow")
    name: str | None = None
    version: int | None = Field(default=None, ge=1, le=JAVA_INT_MAX)


class WorkflowTask(ConductorModel):
    """One node of a workflow's task graph, as Conductor writes it."""

    name: str = Field(min_length=1, max_length=200)
    task_reference_name: Reference
    description: str | None = None
    input_parameters: dict[str, Any] = Field(default_factory=dict)
    type: str = "SIMPLE"
    dynamic_task_name_param: str | None = None
    case_value_param: str | None = None
    case_expression: str | None = None
    script_expression: str | None = None
    decision_cases: dict[str, list[WorkflowTask]] = Field(default_factory=dict)
    dynamic_fork_join_tasks_param: str | None = None
    dynamic_fork_tasks_param: str | None = None
    dynamic_fork_tasks_input_param_name: str | None = None
    default_case: list[WorkflowTask] = Field(default_factory=list)
    fork_tasks: list[list[WorkflowTask]] = Field(default_factory=list)
    start_delay: int = Field(default=0, ge=0, le=JAVA_INT_MAX)
    sub_workflow_param: SubWorkflowParams | None = None
    join_on: list[str] = Field(default_factory=list)
    sink: str | None = None
    optional: bool = False
    task_definition: TaskDef | None = None
    rate_limited: bool | None = None
    default_exclusive_join_task: list[str] = Field(default_factory=list)
    async_complete: bool = False
    loop_condition: str | None = None
    loop_over: list[WorkflowTask] = Field(default_factory=list)
    items: Any = None
    """DO_WHILE list mode: an expression (or list) of the items to iterate over."""
    retry_count: int | None = Field(default=None, ge=0, le=JAVA_INT_MAX)
    evaluator_type: str | None = None
    expression: str | None = None
    on_state_change: dict[str, Any] = Field(default_factory=dict)
    join_status: str | None = None
    cache_config: dict[str, Any] | None = None
    permissive: bool = False


class ModelPrice(ConductorModel):
    """What one model costs, in US dollars per million tokens (the unit providers publish)."""

    input_per_million: float = Field(ge=0, le=1_000_000)
    output_per_million: float = Field(ge=0, le=1_000_000)


class Budget(ConductorModel):
    """A Cairn extension to Conductor's WorkflowDef (docs/agents.md): limits the decider keeps,
    whatever a model answers. Reaching one ends the workflow FAILED with a reason naming it,
    before the task that would pass it runs; the allowlists refuse a task name or tool name
    that is not on them (a task failure, with the name and the list)."""

    max_tasks: int | None = Field(default=None, ge=1, le=JAVA_INT_MAX)
    """Task executions this run may create (retries and server-side tasks count)."""
    max_iterations: int | None = Field(default=None, ge=1, le=JAVA_INT_MAX)
    """Iterations any one DO_WHILE may start."""
    max_dynamic_fork_width: int | None = Field(default=None, ge=1, le=JAVA_INT_MAX)
    """Branches any one FORK_JOIN_DYNAMIC may make."""
    max_llm_tokens: int | None = Field(default=None, ge=1, le=JAVA_INT_MAX)
    """Tokens (prompt and completion) the LLM tasks of this run may spend, as providers count them."""
    max_cost_usd: float | None = Field(default=None, gt=0, le=1_000_000_000)
    """Dollars the LLM tasks of this run may spend, at `prices`."""
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """Prices by model (`gpt-4o-mini`) or integration and model (`openai/gpt-4o-mini`); the
    decider fills in those of its configuration when the execution starts, so a price change
    never changes a running execution."""
    allowed_tools: list[str] | None = None
    """The only tool names CALL_MCP_TOOL may call (`method`), anywhere in the workflow."""
    allowed_task_names: list[str] | None = None
    """The only task names a DYNAMIC task or a dynamic fork's branch may run."""


class WorkflowDef(ConductorModel):
    """A versioned workflow blueprint. Executions embed a snapshot of it (with TaskDefs resolved)."""

    name: DefinitionName
    description: str | None = None
    version: int = Field(default=1, ge=1, le=JAVA_INT_MAX)
    tasks: list[WorkflowTask] = Field(min_length=1)
    input_parameters: list[str] = Field(default_factory=list)
    output_parameters: dict[str, Any] = Field(default_factory=dict)
    failure_workflow: str | None = None
    schema_version: int = Field(default=2, ge=0, le=JAVA_INT_MAX)
    restartable: bool = True
    workflow_status_listener_enabled: bool = False
    workflow_status_listener_sink: str | None = None
    owner_email: str | None = None
    owner_app: str | None = None
    timeout_policy: WorkflowTimeoutPolicy = WorkflowTimeoutPolicy.ALERT_ONLY
    timeout_seconds: int = Field(default=0, ge=0, le=JAVA_INT_MAX)
    variables: dict[str, Any] = Field(default_factory=dict)
    input_template: dict[str, Any] = Field(default_factory=dict)
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    enforce_schema: bool = False
    rate_limit_config: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    masked_fields: list[str] | None = None
    budget: Budget | None = None
    """Cairn's extension: limits on tasks, iterations, fork width, tokens and dollars."""
    create_time: int | None = Field(default=None, ge=0, le=MAX_TIME_MS)
    update_time: int | None = Field(default=None, ge=0, le=MAX_TIME_MS)
    created_by: str | None = None
    updated_by: str | None = None
    tags: list[dict[str, Any]] | None = Field(
        default=None, validation_alias=AliasChoices("tags"), serialization_alias="tags"
    )

    def all_tasks(self) -> list[WorkflowTask]:
        """Every task node, nested ones included, in definition order."""
        found: list[WorkflowTask] = []

        def walk(tasks: list[WorkflowTask]) -> None:
            for task in tasks:
                found.append(task)
                for branch in task.decision_cases.values():
                    walk(branch)
                walk(task.default_case)
                for fork in task.fork_tasks:
                    walk(fork)
                walk(task.loop_over)

        walk(self.tasks)
        return found
