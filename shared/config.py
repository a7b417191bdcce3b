"""Settings, from CAIRN_* environment variables; every one has a default that works locally."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.models.limits import PayloadLimits
from shared.topics import Topics


class CairnSettings(BaseSettings):
    # An empty variable means its default: compose files and Helm templates often render an
    # optional setting as `CAIRN_X=""`, which must not become a file named "" or a blank password.
    model_config = SettingsConfigDict(env_prefix="CAIRN_", extra="ignore", env_ignore_empty=True)

    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, comma separated.")
    kafka_partitions: int = Field(4, description="Partitions for topics Cairn creates.")
    kafka_replication_factor: int = Field(
        1,
        ge=1,
        description="Replication factor of the topics Cairn creates: 1 for a single local broker, "
        "3 on a production cluster.",
    )
    kafka_fetch_max_wait_ms: int = Field(
        100,
        description="Longest a broker holds an empty fetch. Data completes a fetch at once, so this "
        "bounds idle polling (CPU), not latency.",
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT",
        description="How clients reach Kafka: PLAINTEXT (local), SSL (TLS, optionally with a client "
        "certificate), SASL_SSL (TLS and a user/password: the usual managed cluster) or SASL_PLAINTEXT.",
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="SASL mechanism; required with SASL_SSL and SASL_PLAINTEXT."
    )
    kafka_sasl_username: str | None = Field(None, description="SASL user name.")
    kafka_sasl_password: SecretStr | None = Field(
        None, description="SASL password (keep it in a secret, not in a config file)."
    )
    kafka_ssl_cafile: str | None = Field(
        None,
        description="PEM file of the CA that signed the brokers' certificates; the system CAs when unset.",
    )
    kafka_ssl_certfile: str | None = Field(
        None, description="PEM client certificate (mutual TLS); may also hold the key."
    )
    kafka_ssl_keyfile: str | None = Field(None, description="PEM private key of the client certificate.")
    kafka_ssl_key_password: SecretStr | None = Field(None, description="Password of an encrypted client key.")
    kafka_ssl_check_hostname: bool = Field(
        True,
        description="Check that a broker's certificate names the host connected to. Turn off only "
        "for brokers reached by an address their certificate does not list.",
    )
    instance_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._{}-]{1,200}$",
        description="This replica's stable name, which makes its Kafka consumers static group members "
        "(KIP-345): restarted after a crash under the same name, it is handed its partitions back at once "
        "instead of after a session timeout and a rebalance. Every live replica needs its own: two processes "
        "with one name displace each other (an error is logged). `{hostname}` is replaced by the host name "
        "(a container's id in docker compose, the pod name in Kubernetes). Unset: dynamic membership, "
        "nothing to get wrong, and a restarted service waits out CAIRN_KAFKA_SESSION_TIMEOUT_MS first.",
    )
    kafka_session_timeout_ms: int = Field(
        10_000,
        ge=1000,
        description="How long a consumer that stopped heartbeating (a crashed process) keeps its partitions "
        "before the rest of its group takes them over; a static member restarted within it resumes at "
        "once. Brokers accept 6000 to 1800000 by default (group.min/max.session.timeout.ms).",
    )
    mongo_url: str = Field("mongodb://127.0.0.1:27017/", description="MongoDB connection string.")
    mongo_db: str = Field("cairn", description="Database name.")
    mongo_timeout_ms: int = Field(
        30_000,
        description="Bound on every MongoDB operation (server selection included): a request the server "
        "never answers fails and is retried instead of wedging a service.",
    )
    mongo_fence_retention_s: float = Field(
        600.0,
        gt=0,
        description="How long MongoDB keeps a commit's fence record: fences go to buckets this wide by "
        "the time of the version they are based on, dropped whole once no commit can reach them (an "
        "unmaterialised newest commit is rolled forward first); every decider must use the same value "
        '(docs/architecture.md, "Fences in time buckets").',
    )
    topic_prefix: str = Field("cairn.", description="Prefix of every topic name.")
    decider_max_batch: int = Field(200, description="Messages the decider takes per batch.")
    decider_consumers: int = Field(
        1,
        ge=1,
        description="Members each decider process runs in its consumer group: the inbound partitions are "
        "shared among them, so a decision waiting on a slow script holds up only its own partitions. More "
        "than one costs latency (a workflow's topics may land on different members): set it when slow "
        "scripts are expected, or run more decider replicas.",
    )
    decision_max_steps: int = Field(
        200,
        ge=1,
        description="Server-side tasks (INLINE, SWITCH, loop iterations, ...) one decision may run before it "
        "commits and continues in a decision of its own, so no decision runs unbounded.",
    )
    code_turn_timeout_s: int = Field(
        60,
        ge=1,
        le=86_400,
        description="How long a code workflow's runtime may hold a turn without a word (it heartbeats while "
        "it replays): a turn held longer was lost with its runtime and is handed out again.",
    )
    script_timeout_ms: int = Field(
        4000, ge=1, description="Time limit of one JavaScript or jq evaluation (Conductor's default: 4 s)."
    )
    script_memory_mb: int = Field(64, ge=1, description="Memory limit of one JavaScript or jq evaluation.")
    jq_workers: int = Field(
        2,
        ge=1,
        description="Helper processes the decider runs jq in (jq cannot be stopped inside a process; a "
        "helper past its time limit is killed and replaced).",
    )
    max_payload_bytes: int = Field(
        512 * 1024,
        ge=1024,
        le=64 * 1024 * 1024,
        description="Largest payload (a workflow's input, a task's input or output, a signal's output) as "
        "compact JSON. One travels in one Kafka message (1 MiB by default): raise the brokers' "
        "message.max.bytes before raising this.",
    )
    max_payload_depth: int = Field(
        32,
        ge=2,
        le=64,
        description="Deepest nesting of objects and lists in a payload (definitions may nest twice as deep).",
    )
    max_payload_keys: int = Field(
        10_000, ge=1, description="Most object keys in one payload, counted at every level."
    )
    api_max_request_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1024,
        description="Largest request body the api reads; a larger one is answered 413 before it is parsed.",
    )
    sweeper_interval_s: float = Field(5.0, description="Seconds between sweeps.")
    sweeper_outbox_grace_s: float = Field(
        30.0,
        description="An outbox unsent for this long is republished by the sweeper. Keep it well above "
        "the decider's slowest batch: republishing work that is merely slow adds load to a slow store.",
    )
    sweeper_stale_after_s: float = Field(
        300.0, description="A RUNNING workflow with no commit for this long is re-decided."
    )
    sweeper_stale_interval_s: float = Field(
        60.0, description="Seconds between scans for stale RUNNING workflows (a full scan on some servers)."
    )
    sweeper_housekeeping_interval_s: float = Field(
        60.0, gt=0, description="Seconds between housekeeping passes (pruning; purging past the retention)."
    )
    retention_days: float = Field(
        30.0,
        ge=0,
        description="Finished executions (with their task records, claims, timers) are purged this many "
        "days after their last write; 0 keeps them forever. Fractions are allowed.",
    )
    sqlite_synchronous: Literal["NORMAL", "FULL", "EXTRA"] = Field(
        "NORMAL",
        description="`cairn dev`'s SQLite durability. NORMAL (WAL, no fsync per commit) keeps every "
        "committed step through a process kill and may lose the last ones on an OS crash or power cut; "
        "FULL fsyncs every commit, so they survive those too, at one fsync per transaction.",
    )
    bus_group_retention_s: float = Field(
        7 * 86_400.0,
        ge=0,
        description="Embedded bus: a consumer group no member consumed for this long is forgotten with its "
        "offsets (Kafka's offsets.retention.minutes, whose default it copies), so it stops holding messages "
        "back. On Kafka the broker's setting applies.",
    )
    events_refresh_s: float = Field(
        5.0,
        gt=0,
        description="How often the events service reads the event handlers from the store: a handler "
        "registered, changed or removed takes effect within this.",
    )
    timer_poll_interval_s: float = Field(
        0.5, description="How often the timer service scans for due timers (bounds firing lateness)."
    )
    timer_lease_s: float = Field(
        30.0, description="How long a claimed timer is held before another replica may fire it."
    )
    api_host: str = Field("127.0.0.1", description="Address the api listens on.")
    api_port: int = Field(8080, description="Port the api listens on.")
    api_start_visible_s: float = Field(
        5.0,
        gt=0,
        description="How long `POST /api/workflow` waits for a new execution to be readable before it "
        "answers 503 (the start is durable; the engine is catching up) instead of an id that would 404.",
    )
    api_max_polled_task_types: int = Field(
        500,
        ge=1,
        description="Task types one api serves to HTTP pollers at once (each is a consumer of its own); "
        "a poll for one more is answered 429 until an idle type is released.",
    )
    api_poll_idle_close_s: float = Field(
        120.0,
        description="A task type no HTTP worker polled for this long is handed back to bus workers.",
    )
    api_handout_confirm_s: float = Field(
        10.0,
        gt=0,
        description="How long a task handed to an HTTP poller is held before the poll's answer has been "
        "sent. Once sent, the task is held for its responseTimeoutSeconds; never sent (the poller hung up, "
        "the api died), it is handed out again after at most about this long, not after the response "
        "timeout. Give every api replica the same value.",
    )
    api_started_report_delay_s: float = Field(
        0.0,
        ge=0,
        description="How long the report that a poller took a task (the task shown IN_PROGRESS) may wait "
        "for the task's result, so the two are decided together (one decision per task instead of two); "
        "a task still running then is reported alone. 0 (the default) reports every hand-out before the "
        "poll is answered. `cairn dev` on its embedded bus uses 0.1 unless this is set (services/dev.py).",
    )
    api_dispatch_consumers: int = Field(
        1,
        ge=1,
        description="Members the api runs in a polled task type's worker group: its partitions are shared "
        "among them, and each takes its next batch once every dispatch of its last one is settled (handed "
        "out, confirmed and reported), so a slow hand-out holds up only its own partitions. `cairn dev` on "
        "its embedded bus uses 2 unless this is set (services/dev.py).",
    )
    auth_keys_file: str | None = Field(
        None,
        description="JSON file of the api's keys (a list of {keyId, keySecret or keySecretSha256, role, "
        "taskTypes?}; docs/deploy.md#security). Set, every request but GET /health needs a token from "
        "POST /api/token. Unset, the api is open, which it allows only on a loopback address or with "
        "CAIRN_INSECURE.",
    )
    auth_token_secret: SecretStr | None = Field(
        None,
        description="Key the api signs its tokens with (at least 32 characters); every api replica must "
        "have the same. Unset: derived from the keys file's content, so replicas that mount the same file "
        "accept each other's tokens.",
    )
    auth_token_ttl_s: int = Field(
        3600,
        ge=60,
        le=7 * 86400,
        description="How long a token from POST /api/token is valid. Clients fetch a new one when told it "
        "expired (conductor-python also renews every 45 minutes).",
    )
    insecure: bool = Field(
        False,
        description="Let the api listen on a non-loopback address without CAIRN_AUTH_KEYS_FILE, open to "
        "anyone who reaches it (`--insecure`). Without it, that refuses to start.",
    )
    api_key_id: str | None = Field(
        None,
        description="Key id the CLI and HTTP workers authenticate to the api with (POST /api/token), "
        "when the api has keys.",
    )
    api_key_secret: SecretStr | None = Field(None, description="The secret of CAIRN_API_KEY_ID.")
    dev_db: str = Field("cairn-dev.db", description="State file of `cairn dev` (embedded store and bus).")
    server: str | None = Field(
        None, description="URL of a Cairn api (http://127.0.0.1:8080); the CLI and workers then use HTTP."
    )
    worker_concurrency: int = Field(10, description="Tasks a worker process runs at once.")
    workflow_strict: bool = Field(
        False,
        description="Development and tests: a code workflow's runtime stalls an instance whose orchestrator "
        "reads the wall clock or random numbers itself (its replays would differ), naming the call and where "
        "it was made. It watches orchestrator code only, at some cost per turn.",
    )
    workflow_transport: Literal["auto", "http", "kafka"] = Field(
        "auto",
        description="How a cairn.workflow runtime takes its turns and activities: long-polled from the "
        "api (CAIRN_SERVER), or consumed from Kafka like a Kafka worker; `auto` chooses as `cairn worker` "
        "does: HTTP when CAIRN_SERVER is set, else Kafka when CAIRN_KAFKA_BOOTSTRAP is, else HTTP. With "
        "`kafka` and CAIRN_SERVER both, the runtime also announces itself to the api (registers its "
        "workflows, wakes stalled instances).",
    )
    app: str = Field(
        "default",
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        description="The app of `cairn.workflow`: the code workflows a WorkflowRuntime hosts and a "
        "DaprWorkflowClient starts (their turns go to `orchestrations.<app>`).",
    )
    ai_integrations_file: str | None = Field(
        None,
        description="JSON file of the AI integrations (docs/agents.md): `llm` providers by name "
        "(openai, anthropic, azure_openai; baseUrl, apiKey, ...), `mcp` servers by name (a url, or a "
        "stdio command) and `prices` by model. A Kubernetes Secret or ConfigMap mounted as a file works. "
        "The system worker reads the providers and servers, the decider the prices.",
    )
    ai_integrations: str | None = Field(
        None, description="The same as CAIRN_AI_INTEGRATIONS_FILE's content, inline (JSON); it wins per name."
    )
    ai_prices: str | None = Field(
        None,
        description="Prices of models for budgets in dollars, JSON: "
        '{"gpt-4o-mini": {"inputPerMillion": 0.15, "outputPerMillion": 0.6}} (a key may be '
        '"<integration>/<model>"). The decider copies them into each execution whose budget has '
        "maxCostUsd when it starts.",
    )
    ai_max_retry_after_s: int = Field(
        600,
        ge=0,
        le=86_400,
        description="Most a provider's Retry-After (or an MCP server's) may hold a task's retry back; a "
        "longer one is cut to this.",
    )
    secrets_file: str | None = Field(
        None,
        description="JSON file of secrets (name -> text) for `${secrets.NAME}` in system tasks' inputs "
        "(docs/agents.md); CAIRN_SECRET_<NAME> variables add to them.",
    )
    secrets_dir: str | None = Field(
        None,
        description="Directory of secrets, one file per secret named after it: a Kubernetes Secret "
        "mounted as a volume.",
    )
    otlp_endpoint: str | None = Field(
        None, description="OTLP/HTTP endpoint; tracing export is off when unset."
    )
    log_level: str = Field("INFO", description="Python logging level.")
    event_loop: Literal["uvloop", "asyncio"] = Field(
        "uvloop",
        description="The event loop a service process runs on: uvloop (libuv, the default: every hop of a "
        "step is a loop wake-up, and uvloop's cost less CPU) or Python's own asyncio loop.",
    )
    fault_poison_marker: str | None = Field(
        None,
        description="Tests only: every consumer fails on messages containing this text, to show that "
        "they are dead-lettered after a bounded number of attempts. Never set it in production.",
    )
    fault_freeze_marker: str | None = Field(
        None,
        description="Tests only: a decider stops itself (SIGSTOP) before committing its first decision on a "
        "signal for a workflow whose id contains this text, to show that a frozen decider cannot commit "
        "over newer state. Never set it in production.",
    )
    fault_kill_before_command_commit: str | None = Field(
        None,
        description="Tests only: a decider kills its own process (SIGKILL) right before committing a "
        "decision that applies a lifecycle command (pause, restart, ...) to a workflow whose id contains "
        "this text, to show that the command is not lost. Never set it in production.",
    )
    fault_kill_before_result_commit: str | None = Field(
        None,
        description="Tests only: a decider kills its own process (SIGKILL) right before committing a "
        "decision on a task result (a worker's, or a code workflow runtime's answer to a turn) for a "
        "workflow whose id contains this text, to show that nothing of it is lost. Never set it in "
        "production.",
    )
    fault_kill_after_claim: str | None = Field(
        None,
        description="Tests only: the api kills its own process (SIGKILL) right after claiming a task of this "
        "type for an HTTP poller, before the poll is answered, to show that the hand-out is not lost. Never "
        "set it in production.",
    )
    startup_retry_s: float = Field(
        300.0,
        description="How long a service keeps retrying to reach MongoDB when it starts (with backoff) "
        "before it gives up with exit code 2.",
    )

    @model_validator(mode="after")
    def _kafka_security_is_complete(self) -> Self:
        """Credentials or TLS files that the chosen protocol would ignore are a mistake, not a
        preference: refusing them at start beats connecting in plain text by accident."""
        protocol = self.kafka_security_protocol
        where = f"CAIRN_KAFKA_SECURITY_PROTOCOL is {protocol}"
        sasl = {
            "CAIRN_KAFKA_SASL_MECHANISM": self.kafka_sasl_mechanism,
            "CAIRN_KAFKA_SASL_USERNAME": self.kafka_sasl_username,
            "CAIRN_KAFKA_SASL_PASSWORD": self.kafka_sasl_password,
        }
        tls_files = {
            "CAIRN_KAFKA_SSL_CAFILE": self.kafka_ssl_cafile,
            "CAIRN_KAFKA_SSL_CERTFILE": self.kafka_ssl_certfile,
            "CAIRN_KAFKA_SSL_KEYFILE": self.kafka_ssl_keyfile,
        }
        if protocol.startswith("SASL_"):
            if missing := [name for name, value in sasl.items() if not value]:
                raise ValueError(f"{where}: set {', '.join(missing)}")
        elif given := [name for name, value in sasl.items() if value]:
            raise ValueError(
                f"{', '.join(given)} set but {where}: use SASL_SSL (or SASL_PLAINTEXT) to authenticate"
            )
        if protocol not in ("SSL", "SASL_SSL") and (
            given := [name for name, value in tls_files.items() if value]
        ):
            raise ValueError(f"{', '.join(given)} set but {where}: use SSL or SASL_SSL for TLS")
        if self.kafka_ssl_keyfile and not self.kafka_ssl_certfile:
            raise ValueError(
                "CAIRN_KAFKA_SSL_KEYFILE needs CAIRN_KAFKA_SSL_CERTFILE (the client certificate)"
            )
        return self

    @model_validator(mode="after")
    def _auth_is_complete(self) -> Self:
        if (self.api_key_id is None) != (self.api_key_secret is None):
            raise ValueError("set both CAIRN_API_KEY_ID and CAIRN_API_KEY_SECRET, or neither")
        if self.auth_token_secret is not None and len(self.auth_token_secret.get_secret_value()) < 32:
            raise ValueError("CAIRN_AUTH_TOKEN_SECRET must be at least 32 characters (a random string)")
        return self

    @property
    def topics(self) -> Topics:
        return Topics(self.topic_prefix)

    @property
    def payload_limits(self) -> PayloadLimits:
        return PayloadLimits(self.max_payload_bytes, self.max_payload_depth, self.max_payload_keys)


def settings_problems(error: ValidationError) -> list[str]:
    """One line per bad setting, named as the operator writes it (CAIRN_...): a pydantic
    traceback names a Python field and hides which environment variable to fix. Secret values
    are never echoed."""
    lines = []
    for problem in error.errors():
        message = problem["msg"].removeprefix("Value error, ")
        if not problem["loc"]:
            lines.append(message)
            continue
        field = str(problem["loc"][0])
        name = f"CAIRN_{field.upper()}"
        secret = field in CairnSettings.model_fields and CairnSettings.model_fields[field].annotation in (
            SecretStr,
            SecretStr | None,
        )
        shown = "" if secret or "input" not in problem else f" (got {problem['input']!r})"
        lines.append(f"{name}: {message}{shown}")
    return lines
