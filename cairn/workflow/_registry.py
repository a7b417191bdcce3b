"""Which function runs a workflow or an activity of a given name (and, for named versions, of a
given version), with Dapr's rules: an unversioned registration wins; a running instance keeps
the version it recorded in its first turn; a new one takes the latest."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Function = Callable[..., Any]


class OrchestratorNotRegisteredError(Exception):
    pass


class VersionNotRegisteredError(Exception):
    def __init__(self, name: str, version: str) -> None:
        super().__init__(f"Version not available: {version}")
        self.name, self.version = name, version


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.workflows: dict[str, Function] = {}
        self.versioned: dict[str, dict[str, Function]] = {}
        self.latest: dict[str, str] = {}
        self.activities: dict[str, Function] = {}

    def add_workflow(self, name: str, fn: Function) -> None:
        with self._lock:
            if name in self.workflows:
                raise ValueError(f"A '{name}' orchestrator already exists.")
            self.workflows[name] = fn

    def add_versioned_workflow(self, name: str, version: str, fn: Function, *, is_latest: bool) -> None:
        with self._lock:
            versions = self.versioned.setdefault(name, {})
            if version in versions:
                raise ValueError(f"The version '{version}' of '{name}' orchestrator already exists.")
            versions[version] = fn
            if is_latest:
                self.latest[name] = version

    def add_activity(self, name: str, fn: Function) -> None:
        with self._lock:
            if name in self.activities:
                raise ValueError(f"A '{name}' activity already exists.")
            self.activities[name] = fn

    def orchestrator(self, name: str, recorded_version: str | None) -> tuple[Function, str | None]:
        """The function for an instance of `name` and the version it runs (None: unversioned)."""
        with self._lock:
            if name in self.workflows:
                return self.workflows[name], None
            versions = self.versioned.get(name)
            version = recorded_version or self.latest.get(name)
            if not versions or version is None:
                raise OrchestratorNotRegisteredError(f"A '{name}' orchestrator was not registered.")
            if version not in versions:
                raise VersionNotRegisteredError(name, version)
            return versions[version], version
