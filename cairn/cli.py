"""`cairn`: the command line for people (tables, colours) and scripts (`--json`)."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cairn import cli_operations
from cairn.backends import DEFAULT_SERVER, Backend
from cairn.cli_common import (
    InsecureOption,
    JsonOption,
    ServerOption,
    console,
    err,
    fail,
    json_arg,
    new_table,
    styled,
    when,
    with_backend,
)
from cairn.cli_deadletters import deadletter_app
from cairn.cli_history import history_app
from cairn.keys_cli import keys_app
from cairn.tree import is_nested, line, task_tree
from shared.config import CairnSettings
from shared.core.validation import DefinitionError, parse_task_def, parse_workflow_def
from shared.models.definitions import TaskDef, WorkflowDef
from shared.models.runtime import WorkflowStatus

app = typer.Typer(
    help="Cairn: durable workflows on Kafka + MongoDB.", no_args_is_help=True, add_completion=False
)
def_app = typer.Typer(help="Manage workflow and task definitions.", no_args_is_help=True)
app.add_typer(def_app, name="def")
app.add_typer(deadletter_app, name="deadletter")
app.add_typer(keys_app, name="keys")
app.add_typer(history_app, name="history")


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"cairn {version('cairn')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Cairn: durable workflows on Kafka + MongoDB."""


def main() -> None:
    """The `cairn` command: the Typer app, with a bad CAIRN_* setting reported as one line per
    problem and exit code 2 instead of a traceback."""
    from pydantic import ValidationError

    from shared.config import settings_problems

    try:
        app()
    except ValidationError as error:
        if error.title != CairnSettings.__name__:
            raise
        err.print("[bold red]error:[/] invalid settings (environment variables):")
        for line in settings_problems(error):
            err.print(f"  {line}", soft_wrap=True)
        err.print("[dim]docs/configuration.md lists every setting and its allowed values[/]")
        sys.exit(2)


@app.command()
def run(
    service: Annotated[
        str, typer.Argument(help="api | decider | scheduler | timer | sweeper | system-worker")
    ],
    host: Annotated[str | None, typer.Option(help="api: address to listen on (CAIRN_API_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="api: port to listen on (CAIRN_API_PORT).")] = None,
    insecure: InsecureOption = False,
) -> None:
    """Run one Cairn service on Kafka and MongoDB, configured by CAIRN_* environment variables."""
    from services.assembly import SERVICES, run_production_service
    from services.runtime import run_service

    if service not in SERVICES:
        fail(f"unknown service {service!r}", f"choose one of: {', '.join(SERVICES)}")
    settings = _with_api_address(CairnSettings(), host, port, insecure)

    async def main(settings: CairnSettings, stop: asyncio.Event) -> None:
        await run_production_service(service, settings, stop)

    run_service(service, main, settings, heartbeat=True)


@app.command()
def health(
    service: Annotated[
        str | None, typer.Argument(help="Service to check; default: the one running on this host.")
    ] = None,
    max_age: Annotated[float, typer.Option(help="Seconds a heartbeat stays fresh.")] = 30.0,
) -> None:
    """Exit 0 if the `cairn run` service on this host (container) is healthy, 1 if not: its
    heartbeat file is fresh, and for the api, GET /health on CAIRN_API_PORT answers 200.
    Probes should run `python -m services.probe`: the same check, without this CLI's start-up."""
    from services.probe import Unhealthy, check

    try:
        healthy = check(service, max_age)
    except ValueError as error:
        fail(str(error))
    except Unhealthy as error:
        err.print(f"unhealthy: {error}")
        raise typer.Exit(1) from None
    console.print(f"{healthy} healthy")


def _with_api_address(
    settings: CairnSettings, host: str | None, port: int | None, insecure: bool = False
) -> CairnSettings:
    changes: dict[str, Any] = {"insecure": True} if insecure else {}
    if host is not None:
        changes["api_host"] = host
    if port is not None:
        changes["api_port"] = port
    return settings.model_copy(update=changes)


@app.command()
def dev(
    db: Annotated[
        Path | None, typer.Option(help="State file: store and bus (CAIRN_DEV_DB; default ./cairn-dev.db).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Address the api listens on (CAIRN_API_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port the api listens on (CAIRN_API_PORT).")] = None,
    kafka: Annotated[
        str | None, typer.Option(help="Use this Kafka instead of the embedded bus (CAIRN_KAFKA_BOOTSTRAP).")
    ] = None,
    mongo: Annotated[
        str | None, typer.Option(help="Use this MongoDB instead of the state file (CAIRN_MONGO_URL).")
    ] = None,
    insecure: InsecureOption = False,
) -> None:
    """Run the whole engine in one process: api, decider, scheduler, timer and sweeper. Open
    (no keys) on 127.0.0.1; on another address it needs CAIRN_AUTH_KEYS_FILE or --insecure."""
    from services.api.auth import api_auth, describe
    from services.dev import DevPlan, run_dev
    from services.runtime import run_service

    settings = _with_api_address(CairnSettings(), host, port, insecure)
    plan = DevPlan(
        db_path=(db or Path(settings.dev_db)).resolve(),
        kafka=kafka or os.environ.get("CAIRN_KAFKA_BOOTSTRAP"),
        mongo=mongo or os.environ.get("CAIRN_MONGO_URL"),
    )
    base = f"http://{settings.api_host}:{settings.api_port}"

    def announce() -> None:
        table = Table.grid(padding=(0, 2))
        table.add_row("[bold]api[/]", f"{base}/api")
        table.add_row("[bold]docs[/]", f"{base}/docs")
        for what, where in plan.describe():
            table.add_row(f"[bold]{what}[/]", where)
        table.add_row("[bold]auth[/]", describe(api_auth(settings), settings))
        err.print("[bold green]cairn dev[/] is running")
        err.print(table)
        server = "" if base == DEFAULT_SERVER else f" --server {base}"
        err.print(f"next: [cyan]cairn worker examples.workers{server}[/] (workers poll {base})")
        err.print("Ctrl-C stops")

    async def main(settings: CairnSettings, stop: asyncio.Event) -> None:
        await run_dev(plan, settings, stop, announce)

    run_service("dev", main, settings)


@app.command("worker")
def worker_command(
    target: Annotated[str, typer.Argument(help="module or module:attr holding @worker functions")],
    concurrency: Annotated[
        int | None, typer.Option(help="Tasks run at once (CAIRN_WORKER_CONCURRENCY).")
    ] = None,
    server: ServerOption = None,
    heartbeat: Annotated[
        bool,
        typer.Option(
            "--heartbeat/--no-heartbeat",
            help="Report running tasks IN_PROGRESS every responseTimeoutSeconds/3 (default on); "
            "off leaves only cairn.heartbeat() calls.",
        ),
    ] = True,
) -> None:
    """Run the @worker functions of a module: over HTTP against a Cairn api (`cairn dev`, or
    --server/CAIRN_SERVER), or on Kafka when CAIRN_KAFKA_BOOTSTRAP is set and no server is."""
    from services.runtime import run_service

    workers = _import_workers(target)
    settings = CairnSettings()
    http_server = server or settings.server
    if not http_server and not os.environ.get("CAIRN_KAFKA_BOOTSTRAP"):
        http_server = DEFAULT_SERVER
    limit = concurrency or settings.worker_concurrency
    types = ", ".join(spec.task_type for spec in workers)

    async def main(settings: CairnSettings, stop: asyncio.Event) -> None:
        if http_server:
            from cairn.auth import ApiKey
            from cairn.http_worker import HttpWorkerRunner

            err.print(f"running workers for: {types} (polling {http_server})")
            runner = HttpWorkerRunner(
                http_server, workers, limit, auto_heartbeat=heartbeat, api_key=ApiKey.from_settings(settings)
            )
            await runner.run(stop)
        else:
            from cairn.worker import WorkerRunner
            from services.common import reachable_kafka_bus
            from shared.guard import GuardedBus

            err.print(f"running workers for: {types} (Kafka {settings.kafka_bootstrap})")
            kafka = await reachable_kafka_bus(settings, "cairn-worker", stop)
            bus = GuardedBus(kafka, settings.topics.dead_letter, settings.fault_poison_marker)
            await WorkerRunner(bus, settings.topics, workers, limit, auto_heartbeat=heartbeat).run(stop)

    run_service("worker", main, settings)


def _import_workers(target: str) -> list[Any]:
    from cairn.worker import registered_workers

    sys.path.insert(0, str(Path.cwd()))
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        fail(f"cannot import {module_name!r}: {error}", "run from the directory that holds the module")
    if attr and not hasattr(module, attr):
        fail(f"module {module_name!r} has no attribute {attr!r}")
    workers = registered_workers()
    if attr:
        chosen = getattr(module, attr)
        functions = chosen if isinstance(chosen, list | tuple) else [chosen]
        workers = [spec for spec in workers if spec.function in functions]
    if not workers:
        fail(f"no @worker functions found in {target!r}")
    return workers


def _load_definitions(path: Path) -> tuple[list[TaskDef], list[WorkflowDef]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        fail(f"{path}: no such file")
    except json.JSONDecodeError as error:
        fail(f"{path}: not valid JSON: {error}")
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
            fail(f"{path}: invalid definition\n{lines}")
    return task_defs, workflow_defs


@def_app.command("register")
def def_register(file: Path, as_json: JsonOption = False, server: ServerOption = None) -> None:
    """Register workflow and/or task definitions from a JSON file (object or list)."""
    task_defs, workflow_defs = _load_definitions(file)
    with_backend(server, lambda backend: backend.register(task_defs, workflow_defs))
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
def def_ls(
    tasks: Annotated[bool, typer.Option("--tasks", help="List task definitions instead.")] = False,
    as_json: JsonOption = False,
    server: ServerOption = None,
) -> None:
    """List registered workflow definitions (or, with --tasks, task definitions)."""
    if tasks:
        task_defs = with_backend(server, lambda backend: backend.task_definitions())
        if as_json:
            print(json.dumps(task_defs))
            return
        table = new_table("name", "retries", "timeout", "response timeout", "rate limit")
        for t in task_defs:
            limit = f"{t.get('rateLimitPerFrequency', 0)}/{t.get('rateLimitFrequencyInSeconds', 1)}s"
            table.add_row(
                t["name"],
                str(t.get("retryCount", 3)),
                f"{t.get('timeoutSeconds', 0)}s",
                f"{t.get('responseTimeoutSeconds', 3600)}s",
                limit if t.get("rateLimitPerFrequency") else "-",
            )
        console.print(table)
        return
    definitions = with_backend(server, lambda backend: backend.list_definitions())
    if as_json:
        print(json.dumps(definitions))
        return
    table = new_table("name", "version", "tasks")
    for d in definitions:
        table.add_row(
            d["name"], str(d.get("version", 1)), ", ".join(t["taskReferenceName"] for t in d["tasks"])
        )
    console.print(table)


@app.command()
def start(
    name: str,
    input: Annotated[str, typer.Option("--input", "-i", help="Workflow input as a JSON object.")] = "{}",
    workflow_id: Annotated[
        str | None, typer.Option("--id", help="Workflow id (default: a new UUID); starting twice is a no-op.")
    ] = None,
    version: Annotated[int | None, typer.Option(help="Definition version (default: latest).")] = None,
    correlation_id: Annotated[str | None, typer.Option("--correlation-id")] = None,
    as_json: JsonOption = False,
    server: ServerOption = None,
) -> None:
    """Start a workflow."""
    payload = json_arg(input, "--input")

    async def begin(backend: Backend) -> tuple[str, dict[str, Any] | None]:
        existing = await backend.workflow(workflow_id, include_tasks=False) if workflow_id else None
        if existing is not None:
            return existing["workflowId"], existing
        started = await backend.start(
            name, payload, workflow_id=workflow_id, version=version, correlation_id=correlation_id
        )
        return started, None

    started, existing = with_backend(server, begin)
    if as_json:
        print(json.dumps({"workflowId": started, **({"existed": True} if existing else {})}))
    elif existing is not None:
        console.print(
            f"[yellow]workflow [cyan]{started}[/] already exists[/] ({existing['workflowName']}, "
            f"{styled(existing['status'])}): nothing started  (cairn status {started})"
        )
    else:
        console.print(f"started [bold]{name}[/] as [cyan]{started}[/]  (cairn status {started})")


@app.command()
def status(workflow_id: str, as_json: JsonOption = False, server: ServerOption = None) -> None:
    """Show a workflow and its task executions."""
    workflow = with_backend(server, lambda backend: backend.workflow(workflow_id))
    if workflow is None:
        fail(
            f"workflow {workflow_id!r} not found",
            "check the id; `cairn start` prints it, `cairn ls` lists them",
        )
        return
    if as_json:
        print(json.dumps(workflow))
        return
    console.print(
        f"[bold]{workflow['workflowName']}[/] v{workflow['workflowVersion']}  [cyan]{workflow_id}[/]  "
        f"{styled(workflow['status'])}"
    )
    if workflow.get("reasonForIncompletion"):
        console.print(f"reason: {workflow['reasonForIncompletion']}")
    console.print(f"input:  {json.dumps(workflow['input'])}")
    if workflow["status"] != "RUNNING":
        console.print(f"output: {json.dumps(workflow['output'])}")
    if is_nested(workflow):  # operators: the executions as a tree, iterations numbered
        console.print(task_tree(workflow, "[dim]tasks[/]", lambda task: line(task, styled)))
        return
    table = new_table("seq", "ref", "type", "status", "attempt", "output", "updated")
    for task in workflow["tasks"]:
        table.add_row(
            str(task["seq"]),
            task["referenceTaskName"],
            task["taskType"],
            styled(task["status"]),
            str(task["retryCount"]),
            json.dumps(task["outputData"])[:60],
            when(task["updateTime"]),
        )
    console.print(table)


@app.command("ls")
def list_workflows(
    status: Annotated[str | None, typer.Option(help="RUNNING, COMPLETED, FAILED, TERMINATED, …")] = None,
    name: Annotated[str | None, typer.Option(help="Workflow name.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 50,
    query: Annotated[
        str | None,
        typer.Option(
            "--query",
            "-q",
            help="Conductor's search query: 'status IN (FAILED) AND startTime > 1700000000000'.",
        ),
    ] = None,
    as_json: JsonOption = False,
    server: ServerOption = None,
) -> None:
    """List workflow executions, most recently updated first."""
    try:
        wanted = WorkflowStatus(status.upper()) if status else None
    except ValueError:
        fail(f"unknown status {status!r}", f"use one of {', '.join(s.value for s in WorkflowStatus)}")
        return
    found = with_backend(
        server, lambda backend: backend.workflows(status=wanted, name=name, limit=limit, query=query)
    )
    if as_json:
        print(json.dumps(found))
        return
    table = new_table("workflow", "name", "status", "started", "took", "output / reason")
    for summary in found:
        took = f"{summary['executionTime'] / 1000:.2f}s" if summary["endTime"] else "-"
        detail = (
            summary["output"]
            if summary["status"] == "COMPLETED"
            else summary.get("reasonForIncompletion") or ""
        )
        table.add_row(
            summary["workflowId"],
            f"{summary['workflowType']} v{summary['version']}",
            styled(summary["status"]),
            when(summary["startTime"]),
            took,
            (detail or "")[:60],
        )
    console.print(table)
    if not found:
        err.print("[dim]no workflows match[/]")


@app.command()
def watch(
    workflow_ids: Annotated[list[str], typer.Argument(help="Workflow ids to follow.")],
    within: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 120.0,
    as_json: JsonOption = False,
    server: ServerOption = None,
) -> None:
    """Follow workflows until they finish: a progress bar, then a table of outcomes."""
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    async def follow(backend: Backend) -> dict[str, dict[str, Any]]:
        finished: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + within
        with Progress(
            TextColumn("[bold]workflows"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            disable=as_json,
        ) as progress:
            bar = progress.add_task("run", total=len(workflow_ids))
            while len(finished) + len(unknown) < len(workflow_ids) and time.monotonic() < deadline:
                for wid in [w for w in workflow_ids if w not in finished and w not in unknown]:
                    workflow = await backend.workflow(wid, include_tasks=False)
                    if workflow is None:
                        unknown.append(wid)
                    elif workflow["status"] not in ("RUNNING", "PAUSED"):
                        finished[wid] = workflow
                progress.update(bar, completed=len(finished))
                if len(finished) < len(workflow_ids):
                    await asyncio.sleep(0.3)
        return finished

    unknown: list[str] = []
    finished = with_backend(server, follow)
    missing = [wid for wid in workflow_ids if wid not in finished and wid not in unknown]
    if as_json:
        print(json.dumps(finished | {"unfinished": missing, "notFound": unknown}))
    else:
        table = new_table("workflow", "status", "took", "output / reason")
        for wid, workflow in finished.items():
            detail = (
                json.dumps(workflow["output"])
                if workflow["status"] == "COMPLETED"
                else workflow["reasonForIncompletion"]
            )
            table.add_row(
                wid,
                styled(workflow["status"]),
                f"{(workflow['endTime'] - workflow['createTime']) / 1000:.2f}s",
                detail,
            )
        console.print(table)
    if unknown:
        fail(f"not found: {', '.join(unknown)}", "check the ids; `cairn ls` lists workflows")
    if missing:
        fail(f"{len(missing)} workflow(s) still running after {within:.0f}s: {', '.join(missing)}")
    failed = [wid for wid, workflow in finished.items() if workflow["status"] != "COMPLETED"]
    if failed:  # for scripts: the exit code says whether everything completed
        if not as_json:
            err.print(f"[bold red]did not complete:[/] {', '.join(failed)}")
        raise typer.Exit(1)


for _command in cli_operations.COMMANDS:  # after the commands above, in `cairn --help` too
    app.command()(_command)
