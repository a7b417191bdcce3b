"""The secret store of the system-task worker, and the places a secret may go.

Secrets come from, in this order (a later source wins for a name):
- a JSON file of name -> value (`CAIRN_SECRETS_FILE`);
- a directory of files, one per secret, named after it (`CAIRN_SECRETS_DIR`: a Kubernetes Secret
  mounted as a volume; one trailing newline is dropped, as `kubectl create secret --from-file`
  of an edited file usually has one);
- environment variables `CAIRN_SECRET_<NAME>` (settings).

`${secrets.NAME}` is resolved only at the places the decider marked in a task's input
(`secret_paths`, shared/core/secret_refs.py), in memory, just before the call; what goes back
into the task's result (output, reason) and every log line of the process has the values of
the secrets it used replaced by `***` (`Redactor`), so a server that echoes a header or an error
that quotes a URL does not carry the secret into the store.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.core.secret_refs import SECRET_NAME, SECRET_REFERENCE
from shared.core.secret_refs import Path as InputPath

ENV_PREFIX = "CAIRN_SECRET_"
MASK = "***"
MIN_REDACTED_LENGTH = 4
"""Shorter values are not masked in text: masking `a` would mangle every word with an a in it."""


class SecretError(ValueError):
    """A reference to a secret the store does not have, or a store that cannot be read."""


@dataclass
class SecretStore:
    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_sources(
        cls,
        file: str | None = None,
        directory: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> SecretStore:
        values: dict[str, str] = {}
        if file:
            values.update(_from_file(Path(file)))
        if directory:
            values.update(_from_directory(Path(directory)))
        for name, value in (os.environ if environ is None else environ).items():
            if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
                values[name[len(ENV_PREFIX) :]] = value
        return cls(values)

    def get(self, name: str) -> str:
        try:
            return self.values[name]
        except KeyError:
            raise SecretError(
                f"secret {name!r} is not in the secret store (set CAIRN_SECRET_{name}, or add it to "
                "CAIRN_SECRETS_FILE or CAIRN_SECRETS_DIR)"
            ) from None

    def resolve_text(self, text: str, used: set[str]) -> str:
        """`text` with each `${secrets.NAME}` replaced by its value; the names go into `used`."""

        def value(match: Any) -> str:
            used.add(match.group(1))
            return self.get(match.group(1))

        return SECRET_REFERENCE.sub(value, text)

    def resolve(self, data: dict[str, Any], paths: Iterable[InputPath]) -> tuple[dict[str, Any], set[str]]:
        """A copy of `data` with the secret references at `paths` resolved (only there), and the
        names of the secrets it used. `data` itself is left as it was."""
        used: set[str] = set()
        resolved = json.loads(json.dumps(data))
        for path in paths:
            if not path:
                continue
            parent = _walk(resolved, path[:-1])
            last = path[-1]
            if isinstance(parent, dict) and isinstance(last, str) and isinstance(parent.get(last), str):
                parent[last] = self.resolve_text(parent[last], used)
            elif isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent):
                if isinstance(parent[last], str):
                    parent[last] = self.resolve_text(parent[last], used)
        return resolved, used

    def redactor(self, names: Iterable[str]) -> Redactor:
        return Redactor([self.values[name] for name in names if name in self.values])

    def all_values_redactor(self) -> Redactor:
        return Redactor(list(self.values.values()))


def _walk(data: Any, path: InputPath) -> Any:
    for part in path:
        if isinstance(data, dict) and isinstance(part, str):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return None
    return data


def _from_file(path: Path) -> dict[str, str]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SecretError(f"CAIRN_SECRETS_FILE {str(path)!r} cannot be read as JSON: {error}") from None
    if not isinstance(loaded, dict) or not all(isinstance(v, str) for v in loaded.values()):
        raise SecretError(f"CAIRN_SECRETS_FILE {str(path)!r} must be a JSON object of name -> text")
    return {str(name): value for name, value in loaded.items()}


def _from_directory(path: Path) -> dict[str, str]:
    if not path.is_dir():
        raise SecretError(f"CAIRN_SECRETS_DIR {str(path)!r} is not a directory")
    name_rule = re.compile(rf"^{SECRET_NAME}$")
    values = {}
    for entry in sorted(path.iterdir()):
        # A mounted Secret also holds `..data` and timestamped directories: only plain names count.
        if entry.name.startswith(".") or not entry.is_file() or not name_rule.match(entry.name):
            continue
        text = entry.read_text()
        values[entry.name] = text[:-1] if text.endswith("\n") else text
    return values


class Redactor:
    """Replaces secret values in text and in JSON-like data by `***`."""

    def __init__(self, values: Iterable[str]) -> None:
        # Longest first: a value that contains another is masked whole.
        self.values = sorted({v for v in values if len(v) >= MIN_REDACTED_LENGTH}, key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, MASK)
        return text

    def data(self, value: Any) -> Any:
        if not self.values:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.data(item) for item in value]
        return value


class RedactingFilter(logging.Filter):
    """A logging filter that masks every secret of the store in every record it passes: the
    last line of defence (a library that logs a request line with a token in its query)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.redactor.values:
            return True
        message = record.getMessage()
        masked = self.redactor.text(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_info[1] is not None:
            text = self.redactor.text(logging.Formatter().formatException(record.exc_info))
            record.exc_info, record.exc_text = None, text
        return True


def install_log_redaction(store: SecretStore) -> None:
    """Mask the store's secrets in everything this process logs (every handler of the root
    logger, present and future records alike)."""
    redacting = RedactingFilter(store.all_values_redactor())
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(redacting)
