"""`cairn`: the command line for people (tables, colours) and scripts (`--json`)."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from shared.config import CairnSettings
from shared.core.validation import DefinitionError, parse_task_def, parse_workflow_def
from shared.models.definitions import TaskDef, WorkflowDef

app = typer.Typer(
    help="Cairn: durable workflows on Kafka + MongoDB.", no_args_is_help=True, add_completion=False
)
def_app = typer.Typer(help="Manage workflow and task definitions.", no_args_is_help=True)
app.add_typer(def_app, name="def")
console = Console()
err = Console(stderr=True)
T = TypeVar("T")

SERVICES = ("decider", "scheduler", "timer", "sweeper")
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


def _run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(coro_fn())  # type: ignore[arg-type]


def _fail(message: str, hint: str | None = None) -> None:
    err.print(f"[bold red]error:[/] {message}")
    if hint:
        err.print(f"[dim]{hint}[/]")
    raise typer.Exit(2)


def _json_arg(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        _fail(f"{what} is not valid JSON: {error}", f'example: {what} \'{{"key": "value"}}\'')
    if not isinstance(value, dict):
        _fail(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _when(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]


@app.command()
def run(service: Annotated[str, typer.Argument(help="decider | scheduler | timer | sweeper")]) -> None:
    """Run one Cairn service, configured by CAIRN_* environment variables."""
    from services.runtime import run_service

    if service not in SERVICES:
        _fail(f"unknown service {service!r}", f"choose one of: {', '.join(SERVICES)}")
    module = importlib.import_module(f"services.{service}.main")
    run_service(service, module.main)


@app.command("worker")
def worker_command(
    target: Annotated[str, typer.Argument(help="module or module:attr holding @worker functions")],
    concurrency: Annotated[
        int | None, typer.Option(help="Tasks run at once (CAIRN_WORKER_CONCURRENCY).")
    ] = None,
) -> None:
    """Run the @worker functions of a module against Kafka."""
    from cairn.worker import WorkerRunner, registered_workers
    from services.common import kafka_bus
    from services.runtime import run_service

    sys.path.insert(0, str(Path.cwd()))
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        _fail(f"cannot import {module_name!r}: {error}", "run from the directory that holds the module")
    if attr and not hasattr(module, attr):
        _fail(f"module {module_name!r} has no attribute {attr!r}")
    workers = registered_workers()
    if attr:
        chosen = getattr(module, attr)
        functions = chosen if isinstance(chosen, list | tuple) else [chosen]
        workers = [spec for spec in workers if spec.function in functions]
    if not workers:
        _fail(f"no @worker functions found in {target!r}")

    async def main(settings: CairnSettings, stop: asyncio.Event) -> None:
        bus = kafka_bus(settings, "cairn-worker")
        runner = WorkerRunner(bus, settings.topics, workers, concurrency or settings.worker_concurrency)
        err.print(f"running workers for: {', '.join(spec.task_type for spec in workers)}")
        await runner.run(stop)

    run_service("worker", main)


def _load_definitions(path: Path) -> tuple[list[TaskDef], list[WorkflowDef]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        _fail(f"{path}: no such file")
    except json.JSONDecodeError as error:
        _fail(f"{path}: not valid JSON: {error}")
    items = data if isinstance(data, list) else [data]
    task_defs, workflow_defs = [], []
    for index, item in enumerate(items):
        where = f"[{index}]." if isinstance(data, list) else ""
        try:
            if isinstance(item, dict) and "tasks" in item:
                workflow_defs.append(parse_workflow_def(item))
            else:
                task_defs.append(parse_task_def(item))
        except DefinitionError as error:
            lines = "\n".join(f"  {where}{p}: {m}" for p, m in error.problems)
            _fail(f"{path}: invalid definition\n{lines}")
    return task_defs, workflow_defs


@def_app.command("register")
def def_register(file: Path, as_json: JsonOption = False) -> None:
    """Register workflow and/or task definitions from a JSON file (object or list)."""
    from services.common import mongo_store

    task_defs, workflow_defs = _load_definitions(file)

    async def register() -> None:
        store = await mongo_store(CairnSettings())
        try:
            for task_def in task_defs:
                await store.put_task_def(task_def)
            for definition in workflow_defs:
                await store.put_workflow_def(definition)
        finally:
            await store.close()

    _run(register)
    registered = [{"kind": "taskDef", "name": t.name} for t in task_defs] + [
        {"kind": "workflowDef", "name": w.name, "version": w.version} for w in workflow_defs
    ]
    if as_json:
        print(json.dumps(registered))
    else:
        for item in registered:
            suffix = f" v{item['version']}" if "version" in item else ""
            console.print(f"[green]registered[/] {item['kind']} {item['name']}{suffix}")


@def_app.command("ls")
def def_ls(as_json: JsonOption = False) -> None:
    """List registered workflow definitions."""
    from services.common import mongo_store

    async def fetch() -> list[WorkflowDef]:
        store = await mongo_store(CairnSettings())
        try:
            return await store.list_workflow_defs()
        finally:
            await store.close()

    definitions = _run(fetch)
    if as_json:
        print(json.dumps([d.to_json_dict() for d in definitions]))
        return
    table = Table("name", "version", "tasks")
    for d in definitions:
        table.add_row(d.name, str(d.version), ", ".join(t.task_reference_name for t in d.tasks))
    console.print(table)


def _client_call(action: Callable[[Any], Awaitable[T]]) -> T:
    from cairn.client import CairnClient
    from services.common import kafka_bus

    async def call() -> T:
        settings = CairnSettings()
        bus = kafka_bus(settings, "cairn-cli")
        try:
            return await action(CairnClient(bus, settings.topics))
        finally:
            await bus.stop()

    return _run(call)


@app.command()
def start(
    name: str,
    input: Annotated[str, typer.Option("--input", "-i", help="Workflow input as a JSON object.")] = "{}",
    workflow_id: Annotated[
        str | None, typer.Option("--id", help="Workflow id (default: a new UUID).")
    ] = None,
    version: Annotated[int | None, typer.Option(help="Definition version (default: latest).")] = None,
    correlation_id: Annotated[str | None, typer.Option("--correlation-id")] = None,
    as_json: JsonOption = False,
) -> None:
    """Start a workflow by publishing a start event."""
    payload = _json_arg(input, "--input")
    started = _client_call(
        lambda client: client.start_workflow(
            name, payload, workflow_id=workflow_id, version=version, correlation_id=correlation_id
        )
    )
    if as_json:
        print(json.dumps({"workflowId": started}))
    else:
        console.print(f"started [bold]{name}[/] as [cyan]{started}[/]  (cairn status {started})")


@app.command()
def signal(
    workflow_id: str,
    task_ref: str,
    data: Annotated[str, typer.Option("--data", "-d", help="Task output as a JSON object.")] = "{}",
    status: Annotated[
        str, typer.Option(help="COMPLETED, FAILED or FAILED_WITH_TERMINAL_ERROR")
    ] = "COMPLETED",
) -> None:
    """Complete (or fail) a WAIT task by its reference name."""
    from shared.models.runtime import TaskStatus

    payload = _json_arg(data, "--data")
    try:
        task_status = TaskStatus(status)
    except ValueError:
        _fail(f"unknown status {status!r}", "use COMPLETED, FAILED or FAILED_WITH_TERMINAL_ERROR")
    _client_call(lambda client: client.signal(workflow_id, task_ref, payload, task_status))
    console.print(f"signalled [bold]{task_ref}[/] of [cyan]{workflow_id}[/]")


@app.command()
def terminate(workflow_id: str, reason: Annotated[str | None, typer.Option()] = None) -> None:
    """Terminate a running workflow."""
    _client_call(lambda client: client.terminate(workflow_id, reason))
    console.print(f"terminate sent for [cyan]{workflow_id}[/]")


STATUS_STYLE = {
    "COMPLETED": "green",
    "RUNNING": "cyan",
    "SCHEDULED": "cyan",
    "IN_PROGRESS": "yellow",
    "FAILED": "red",
    "FAILED_WITH_TERMINAL_ERROR": "red",
    "TERMINATED": "magenta",
    "CANCELED": "magenta",
}


def _styled(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


@app.command()
def status(workflow_id: str, as_json: JsonOption = False) -> None:
    """Show a workflow and its task executions."""
    from services.common import mongo_store

    async def fetch() -> tuple[Any, list[Any]]:
        store = await mongo_store(CairnSettings())
        try:
            document = await store.load_workflow(workflow_id)
            tasks = await store.list_tasks(workflow_id) if document else []
            return document, tasks
        finally:
            await store.close()

    document, tasks = _run(fetch)
    if document is None:
        _fail(f"workflow {workflow_id!r} not found", "check the id; `cairn start` prints it")
    state = document.state
    # The document is authoritative; a task record newer than it belongs to an uncommitted decision.
    current = {task.task_id: task for task in state.tasks.values()}
    history = [current.get(t.task_id, t) for t in tasks if t.workflow_version <= document.version]
    if as_json:
        body = state.to_json_dict()
        body.pop("tasks", None)
        body["tasks"] = [t.to_json_dict() for t in history]
        body["version"] = document.version
        print(json.dumps(body))
        return
    console.print(
        f"[bold]{state.workflow_name}[/] v{state.workflow_version}  [cyan]{state.workflow_id}[/]  "
        f"{_styled(state.status.value)}"
    )
    if state.reason_for_incompletion:
        console.print(f"reason: {state.reason_for_incompletion}")
    console.print(f"input:  {json.dumps(state.input)}")
    if state.status.is_terminal:
        console.print(f"output: {json.dumps(state.output)}")
    table = Table("seq", "ref", "type", "status", "attempt", "output", "updated")
    for task in history:
        table.add_row(
            str(task.seq),
            task.reference_task_name,
            task.task_type,
            _styled(task.status.value),
            str(task.retry_count),
            json.dumps(task.output_data)[:60],
            _when(task.update_time),
        )
    console.print(table)


@app.command()
def watch(
    workflow_ids: Annotated[list[str], typer.Argument(help="Workflow ids to follow.")],
    within: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 120.0,
    as_json: JsonOption = False,
) -> None:
    """Follow workflows until they finish: a progress bar, then a table of outcomes."""
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from services.common import mongo_store

    async def follow() -> dict[str, Any]:
        store = await mongo_store(CairnSettings())
        finished: dict[str, Any] = {}
        deadline = time.monotonic() + within
        try:
            with Progress(
                TextColumn("[bold]workflows"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err,
                disable=as_json,
            ) as progress:
                bar = progress.add_task("run", total=len(workflow_ids))
                while len(finished) < len(workflow_ids) and time.monotonic() < deadline:
                    pending = [wid for wid in workflow_ids if wid not in finished]
                    for wid, document in (await store.load_workflows(pending)).items():
                        if document.state.status.is_terminal:
                            finished[wid] = document.state
                    progress.update(bar, completed=len(finished))
                    if len(finished) < len(workflow_ids):
                        await asyncio.sleep(0.3)
            return finished
        finally:
            await store.close()

    finished = _run(follow)
    missing = [wid for wid in workflow_ids if wid not in finished]
    if as_json:
        print(
            json.dumps(
                {wid: state.to_json_dict() for wid, state in finished.items()} | {"unfinished": missing}
            )
        )
    else:
        table = Table("workflow", "status", "took", "output / reason")
        for wid, state in finished.items():
            detail = json.dumps(state.output) if state.status.is_successful else state.reason_for_incompletion
            table.add_row(
                wid,
                _styled(state.status.value),
                f"{(state.end_time - state.create_time) / 1000:.2f}s",
                detail,
            )
        console.print(table)
    if missing:
        _fail(f"{len(missing)} workflow(s) still running after {within:.0f}s: {', '.join(missing)}")
