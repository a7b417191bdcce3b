"""TLS and SASL for every Kafka client Cairn opens, from one value.

Production clusters (Strimzi, MSK, Confluent Cloud, Aiven) speak SASL_SSL with SCRAM or PLAIN, or
SSL with client certificates. One `KafkaSecurity` feeds both FastStream's broker (its security
classes: producer and consumers) and aiokafka's admin client (keyword options: topic creation),
so the two can never disagree about how to reach the cluster. A TLS file that cannot be read
becomes a `KafkaSecurityError` naming the setting, before any connection is tried.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    AuthenticationMethodNotSupported,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.helpers import create_ssl_context
from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class KafkaSecurityError(ValueError):
    """The TLS or SASL settings cannot work (a file missing, a key that does not match); the
    message names the CAIRN_KAFKA_* setting to fix."""


@dataclass(frozen=True)
class KafkaSecurity:
    """How to authenticate to and encrypt traffic with the cluster. The default is PLAINTEXT
    (a local broker); CairnSettings checks the combinations before one is built."""

    protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def describe(self) -> str:
        """For logs and errors: the protocol, mechanism and user, never the password."""
        parts: list[str] = [self.protocol]
        if self.uses_sasl:
            parts.append(f"{self.sasl_mechanism} as {self.username!r}")
        if self.uses_tls:
            parts.append(f"CA {self.ssl_cafile or 'system default'}")
            if self.ssl_certfile:
                parts.append(f"client certificate {self.ssl_certfile}")
        return ", ".join(parts)

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context (server certificate verified against the CA file, or the system
        CAs), or None without TLS."""
        if not self.uses_tls:
            return None
        for setting, path in (
            ("CAIRN_KAFKA_SSL_CAFILE", self.ssl_cafile),
            ("CAIRN_KAFKA_SSL_CERTFILE", self.ssl_certfile),
            ("CAIRN_KAFKA_SSL_KEYFILE", self.ssl_keyfile),
        ):
            if path is not None and not Path(path).is_file():
                raise KafkaSecurityError(f"{setting}={path}: no such file")
        try:
            context = create_ssl_context(
                cafile=self.ssl_cafile,
                certfile=self.ssl_certfile,
                keyfile=self.ssl_keyfile,
                password=self.ssl_key_password,
            )
        except ssl.SSLError as error:
            raise KafkaSecurityError(
                f"cannot load the Kafka TLS files (CAIRN_KAFKA_SSL_CAFILE={self.ssl_cafile}, "
                f"CAIRN_KAFKA_SSL_CERTFILE={self.ssl_certfile}, CAIRN_KAFKA_SSL_KEYFILE="
                f"{self.ssl_keyfile}): {error}"
            ) from None
        context.check_hostname = self.ssl_check_hostname
        return context

    def broker_security(self) -> BaseSecurity | None:
        """The FastStream security object for KafkaBroker (producer and consumers)."""
        context = self.ssl_context()
        if not self.uses_sasl:
            return BaseSecurity(ssl_context=context) if context is not None else None
        sasl_class = {"PLAIN": SASLPlaintext, "SCRAM-SHA-256": SASLScram256, "SCRAM-SHA-512": SASLScram512}[
            self.sasl_mechanism or "PLAIN"
        ]
        return sasl_class(
            username=self.username or "",
            password=self.password or "",
            ssl_context=context,
            use_ssl=self.uses_tls,
        )

    def client_options(self) -> dict[str, Any]:
        """Keyword options for an aiokafka client (the admin client that creates topics)."""
        options: dict[str, Any] = {"security_protocol": self.protocol, "ssl_context": self.ssl_context()}
        if self.uses_sasl:
            options.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.username,
                sasl_plain_password=self.password,
            )
        return options


class KafkaAccessError(RuntimeError):
    """Kafka cannot be used as configured. `retryable` when the cluster may merely be down (a
    service waits for it); not when the settings are wrong (waiting cannot fix a password)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


async def explain_bootstrap_failure(bootstrap: str, security: KafkaSecurity) -> KafkaAccessError:
    """Why no bootstrap server answered. aiokafka's own error says only "Unable to bootstrap",
    so each server is dialled once more, directly, to learn the cause: refused credentials and
    untrusted certificates must say which setting to fix instead of looking like an outage."""
    causes = []
    for address in (part.strip() for part in bootstrap.split(",") if part.strip()):
        host, _, port = address.rpartition(":")
        try:
            connection = await create_conn(
                host.strip("[]") or address,
                int(port) if port.isdigit() else 9092,
                client_id="cairn-probe",
                request_timeout_ms=10_000,
                **security.client_options(),
            )
        except Exception as error:  # each cause is classified below; nothing escapes a probe
            verdict = _classify(address, error, security)
            if not verdict.retryable:
                return verdict
            causes.append(str(verdict))
        else:
            connection.close()
            causes.append(f"{address} answered a direct connection; the cluster may be starting")
    return KafkaAccessError(
        "Kafka is not reachable: "
        + "; ".join(causes)
        + f" (check CAIRN_KAFKA_BOOTSTRAP, and that CAIRN_KAFKA_SECURITY_PROTOCOL={security.protocol} "
        "is what the listener speaks)",
        retryable=True,
    )


# TLS alerts a broker sends when it refuses the client's certificate (or its absence). With TLS
# 1.3 they arrive after the handshake, on the first read, so aiokafka reports a closed connection
# caused by them.
CLIENT_CERTIFICATE_ALERTS = (
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED",
)


def _classify(address: str, error: BaseException, security: KafkaSecurity) -> KafkaAccessError:
    cause = error.__cause__
    if isinstance(cause, ssl.SSLError) and getattr(cause, "reason", None) in CLIENT_CERTIFICATE_ALERTS:
        given = (
            f"the certificate {security.ssl_certfile}" if security.ssl_certfile else "no client certificate"
        )
        return KafkaAccessError(
            f"{address}: the broker refused the client's TLS certificate ({cause.reason}; this client sent "
            f"{given}); set CAIRN_KAFKA_SSL_CERTFILE and CAIRN_KAFKA_SSL_KEYFILE to a certificate signed "
            "by a CA the listener trusts",
            retryable=False,
        )
    if isinstance(error, ssl.SSLCertVerificationError):
        hint = (
            "set CAIRN_KAFKA_SSL_CAFILE to the CA that signed the broker's certificate"
            if "hostname" not in str(error.verify_message)
            else "connect by a name the certificate lists (or set CAIRN_KAFKA_SSL_CHECK_HOSTNAME=false)"
        )
        return KafkaAccessError(
            f"{address}: the broker's TLS certificate is not trusted ({error.verify_message}); {hint}",
            retryable=False,
        )
    if isinstance(error, ssl.SSLError):
        return KafkaAccessError(
            f"{address}: the TLS handshake failed ({error}); check that the listener speaks "
            f"{security.protocol} and the CAIRN_KAFKA_SSL_* files",
            retryable=False,
        )
    if isinstance(error, (SaslAuthenticationFailed, AuthenticationFailedError)):
        return KafkaAccessError(
            f"{address}: Kafka refused the credentials of {security.username!r} "
            f"({security.sasl_mechanism}): {error}; check CAIRN_KAFKA_SASL_USERNAME, "
            "CAIRN_KAFKA_SASL_PASSWORD and CAIRN_KAFKA_SASL_MECHANISM",
            retryable=False,
        )
    if isinstance(error, (UnsupportedSaslMechanismError, AuthenticationMethodNotSupported)):
        return KafkaAccessError(
            f"{address}: the listener does not accept SASL {security.sasl_mechanism} ({error}); set "
            "CAIRN_KAFKA_SASL_MECHANISM to one it enables",
            retryable=False,
        )
    return KafkaAccessError(f"{address}: {type(error).__name__}: {error}", retryable=True)
