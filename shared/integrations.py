"""AI integrations: the model providers and MCP servers an AI task names, and model prices.

A task names a provider by `llmProvider` and an MCP server by `mcpServer` (a name configured
here, or a URL, as in Conductor). They come from (a later source wins per name):
1. the providers' own variables, as Conductor reads them: `OPENAI_API_KEY` enables `openai`
   (the openai SDK honours `OPENAI_BASE_URL`, so any OpenAI-compatible server is two variables
   away), `ANTHROPIC_API_KEY` enables `anthropic` (`ANTHROPIC_BASE_URL`), `AZURE_OPENAI_API_KEY`
   with `AZURE_OPENAI_ENDPOINT` enables `azure_openai`, `OLLAMA_HOST` enables `ollama`;
2. `CAIRN_AI_INTEGRATIONS_FILE` (JSON; a mounted Kubernetes Secret or ConfigMap);
3. `CAIRN_AI_INTEGRATIONS` (the same JSON, inline).

```json
{"llm": {"local": {"provider": "openai", "baseUrl": "http://127.0.0.1:8000/v1",
                   "apiKey": "${secrets.LOCAL_KEY}"}},
 "mcp": {"tools": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer ${secrets.T}"}},
         "files": {"command": "python", "args": ["-m", "my_server"]}},
 "prices": {"gpt-4o-mini": {"inputPerMillion": 0.15, "outputPerMillion": 0.6}}}
```

Text values of integrations may name secrets (`${secrets.NAME}`), resolved by the system worker
from its secret store (shared/secrets.py) when it uses them, so the file itself can be public.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from shared.models.definitions import ModelPrice


class IntegrationError(ValueError):
    """Configuration that cannot be used; the message names the source and the field."""


class _Config(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class LlmIntegration(_Config):
    provider: Literal["openai", "anthropic", "azure_openai"]
    """Which SDK speaks to it: `openai` covers every OpenAI-compatible server (vLLM, llama.cpp's
    server, Ollama, LM Studio, gateways) through its base URL."""
    base_url: str | None = None
    """None: the SDK's own default (which honours OPENAI_BASE_URL / ANTHROPIC_BASE_URL)."""
    api_key: str | None = None
    """None: the SDK's own variable (OPENAI_API_KEY / ANTHROPIC_API_KEY)."""
    api_version: str | None = None
    """Azure OpenAI's api-version; Anthropic's anthropic-version header (its SDK's default when unset)."""
    organization: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = Field(600.0, gt=0, le=86_400)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """How an OpenAI-compatible server takes maxTokens: `max_tokens` is what most servers know;
    OpenAI's reasoning models want `max_completion_tokens`."""


class McpIntegration(_Config):
    url: str | None = None
    """A streamable HTTP endpoint (`http://host:port/mcp`)."""
    transport: Literal["auto", "streamable-http", "jsonrpc"] = "auto"
    """`auto`: the MCP handshake, and a bare JSON-RPC POST (Conductor's client) when the server
    does not take it; `jsonrpc`: only the bare POST."""
    headers: dict[str, str] = Field(default_factory=dict)
    command: str | None = None
    """A stdio server: the program to start (one process per task)."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    timeout_seconds: float = Field(60.0, gt=0, le=86_400)

    def model_post_init(self, context: Any) -> None:
        if (self.url is None) == (self.command is None):
            raise ValueError("an MCP server has a url (streamable HTTP) or a command (stdio), one of them")


class Integrations(_Config):
    llm: dict[str, LlmIntegration] = Field(default_factory=dict)
    mcp: dict[str, McpIntegration] = Field(default_factory=dict)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)

    def merged(self, other: Integrations) -> Integrations:
        return Integrations(
            llm={**self.llm, **other.llm},
            mcp={**self.mcp, **other.mcp},
            prices={**self.prices, **other.prices},
        )


def from_provider_variables(environ: Mapping[str, str]) -> Integrations:
    """The integrations Conductor's provider variables enable."""
    llm: dict[str, LlmIntegration] = {}
    if environ.get("OPENAI_API_KEY"):
        llm["openai"] = LlmIntegration(provider="openai")
    if environ.get("ANTHROPIC_API_KEY"):
        llm["anthropic"] = LlmIntegration(provider="anthropic")
    if environ.get("AZURE_OPENAI_API_KEY") and environ.get("AZURE_OPENAI_ENDPOINT"):
        llm["azure_openai"] = LlmIntegration(
            provider="azure_openai",
            base_url=environ["AZURE_OPENAI_ENDPOINT"],
            api_key=environ["AZURE_OPENAI_API_KEY"],
            api_version=environ.get("OPENAI_API_VERSION") or "2024-10-21",
        )
    if environ.get("OLLAMA_HOST"):
        host = environ["OLLAMA_HOST"].rstrip("/")
        host = host if "://" in host else f"http://{host}"
        llm["ollama"] = LlmIntegration(provider="openai", base_url=f"{host}/v1", api_key="ollama")
    return Integrations(llm=llm)


def parse(text: str, source: str) -> Integrations:
    try:
        return Integrations.model_validate(json.loads(text))
    except ValueError as error:  # json.JSONDecodeError and ValidationError both
        if isinstance(error, ValidationError):
            where = "; ".join(
                f"{'.'.join(str(p) for p in item['loc']) or '(root)'}: {item['msg']}"
                for item in error.errors()
            )
            raise IntegrationError(f"{source}: {where}") from None
        raise IntegrationError(f"{source} is not JSON: {error}") from None


def load_integrations(
    file: str | None, inline: str | None, environ: Mapping[str, str], prices: str | None = None
) -> Integrations:
    """Every source merged (see the module's docstring); IntegrationError names a bad one."""
    found = from_provider_variables(environ)
    if file:
        try:
            text = Path(file).read_text()
        except OSError as error:
            raise IntegrationError(f"CAIRN_AI_INTEGRATIONS_FILE {file!r} cannot be read: {error}") from None
        found = found.merged(parse(text, f"CAIRN_AI_INTEGRATIONS_FILE {file!r}"))
    if inline:
        found = found.merged(parse(inline, "CAIRN_AI_INTEGRATIONS"))
    if prices:
        found = found.merged(parse(json.dumps({"prices": _json(prices)}), "CAIRN_AI_PRICES"))
    return found


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise IntegrationError(f"CAIRN_AI_PRICES is not JSON: {error}") from None
