"""Settings, from CAIRN_* environment variables; every one has a default that works locally."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.topics import Topics


class CairnSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CAIRN_", extra="ignore")

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
    mongo_url: str = Field("mongodb://127.0.0.1:27017/", description="MongoDB connection string.")
    mongo_db: str = Field("cairn", description="Database name.")
    mongo_timeout_ms: int = Field(
        30_000,
        description="Bound on every MongoDB operation (server selection included): a request the server "
        "never answers fails and is retried instead of wedging a service.",
    )
    topic_prefix: str = Field("cairn.", description="Prefix of every topic name.")
    decider_max_batch: int = Field(200, description="Messages the decider takes per batch.")
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
    timer_poll_interval_s: float = Field(
        0.5, description="How often the timer service scans for due timers (bounds firing lateness)."
    )
    timer_lease_s: float = Field(
        30.0, description="How long a claimed timer is held before another replica may fire it."
    )
    api_host: str = Field("127.0.0.1", description="Address the api listens on.")
    api_port: int = Field(8080, description="Port the api listens on.")
    api_poll_idle_close_s: float = Field(
        120.0,
        description="A task type no HTTP worker polled for this long is handed back to bus workers.",
    )
    dev_db: str = Field("cairn-dev.db", description="State file of `cairn dev` (embedded store and bus).")
    server: str | None = Field(
        None, description="URL of a Cairn api (http://127.0.0.1:8080); the CLI and workers then use HTTP."
    )
    worker_concurrency: int = Field(10, description="Tasks a worker process runs at once.")
    otlp_endpoint: str | None = Field(
        None, description="OTLP/HTTP endpoint; tracing export is off when unset."
    )
    log_level: str = Field("INFO", description="Python logging level.")
    startup_retry_s: float = Field(
        300.0,
        description="How long a service keeps retrying to reach MongoDB when it starts (with backoff) "
        "before it gives up with exit code 2.",
    )

    @property
    def topics(self) -> Topics:
        return Topics(self.topic_prefix)
