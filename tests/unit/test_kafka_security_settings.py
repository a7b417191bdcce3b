"""Kafka TLS/SASL settings: combinations that cannot work are refused at start, naming the
variable to fix; a valid combination reaches FastStream and aiokafka as the same options."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed, UnsupportedSaslMechanismError
from faststream.kafka.security import parse_security
from faststream.security import BaseSecurity
from pydantic import ValidationError

from services.common import kafka_security
from shared.adapters.kafka_security import KafkaSecurity, KafkaSecurityError, _classify
from shared.config import CairnSettings, settings_problems

ROOT = Path(__file__).resolve().parents[2]
SASL = {
    "kafka_security_protocol": "SASL_SSL",
    "kafka_sasl_mechanism": "SCRAM-SHA-512",
    "kafka_sasl_username": "cairn",
    "kafka_sasl_password": "s3cret-pw",
}


def _problems(**values: object) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        CairnSettings(**values)  # type: ignore[arg-type]
    return settings_problems(caught.value)


def test_sasl_without_credentials_names_every_missing_variable() -> None:
    assert _problems(kafka_security_protocol="SASL_SSL") == [
        "CAIRN_KAFKA_SECURITY_PROTOCOL is SASL_SSL: set CAIRN_KAFKA_SASL_MECHANISM, "
        "CAIRN_KAFKA_SASL_USERNAME, CAIRN_KAFKA_SASL_PASSWORD"
    ]


def test_credentials_the_protocol_would_ignore_are_refused() -> None:
    """A password with PLAINTEXT means the operator forgot the protocol: connecting without
    authentication would fail later, or worse, succeed against an open listener."""
    problems = _problems(kafka_sasl_username="cairn", kafka_sasl_password="s3cret-pw")
    assert problems == [
        "CAIRN_KAFKA_SASL_USERNAME, CAIRN_KAFKA_SASL_PASSWORD set but CAIRN_KAFKA_SECURITY_PROTOCOL "
        "is PLAINTEXT: use SASL_SSL (or SASL_PLAINTEXT) to authenticate"
    ]
    assert "s3cret-pw" not in " ".join(problems)


def test_tls_files_without_tls_are_refused() -> None:
    assert _problems(
        **{**SASL, "kafka_security_protocol": "SASL_PLAINTEXT", "kafka_ssl_cafile": "/ca.pem"}
    ) == [
        "CAIRN_KAFKA_SSL_CAFILE set but CAIRN_KAFKA_SECURITY_PROTOCOL is SASL_PLAINTEXT: "
        "use SSL or SASL_SSL for TLS"
    ]


def test_a_client_key_needs_its_certificate() -> None:
    assert _problems(kafka_security_protocol="SSL", kafka_ssl_keyfile="/client.key") == [
        "CAIRN_KAFKA_SSL_KEYFILE needs CAIRN_KAFKA_SSL_CERTFILE (the client certificate)"
    ]


def test_an_unknown_protocol_or_mechanism_lists_the_allowed_values() -> None:
    [protocol] = _problems(kafka_security_protocol="SASL")
    assert protocol.startswith("CAIRN_KAFKA_SECURITY_PROTOCOL: Input should be 'PLAINTEXT', 'SSL', ")
    assert protocol.endswith("(got 'SASL')")
    [mechanism] = _problems(**{**SASL, "kafka_sasl_mechanism": "SCRAM"})
    assert "CAIRN_KAFKA_SASL_MECHANISM" in mechanism and "'SCRAM-SHA-512'" in mechanism


@pytest.mark.parametrize(
    ("mechanism", "protocol"),
    [("PLAIN", "SASL_SSL"), ("SCRAM-SHA-256", "SASL_SSL"), ("SCRAM-SHA-512", "SASL_PLAINTEXT")],
)
def test_sasl_settings_reach_faststream_and_aiokafka_alike(mechanism: str, protocol: str) -> None:
    settings = CairnSettings(  # type: ignore[call-arg]
        **{**SASL, "kafka_sasl_mechanism": mechanism, "kafka_security_protocol": protocol}
    )
    security = kafka_security(settings)
    broker = parse_security(security.broker_security())
    admin = security.client_options()
    for options in (broker, admin):
        assert options["security_protocol"] == protocol
        assert options["sasl_mechanism"] == mechanism
        assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("cairn", "s3cret-pw")
        assert (options["ssl_context"] is not None) == (protocol == "SASL_SSL")
    assert "s3cret-pw" not in repr(security) and "s3cret-pw" not in security.describe()


def test_plaintext_is_the_default_and_adds_nothing() -> None:
    security = kafka_security(CairnSettings())
    assert security.broker_security() is None
    assert security.client_options() == {"security_protocol": "PLAINTEXT", "ssl_context": None}


def test_ssl_without_files_trusts_the_system_cas(tmp_path: Path) -> None:
    security = KafkaSecurity(protocol="SSL", ssl_check_hostname=False)
    broker = security.broker_security()
    assert isinstance(broker, BaseSecurity) and broker.use_ssl
    context = security.ssl_context()
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is False


def test_a_missing_or_unreadable_tls_file_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(KafkaSecurityError, match=r"CAIRN_KAFKA_SSL_CAFILE=/nowhere/ca.pem: no such file"):
        KafkaSecurity(protocol="SSL", ssl_cafile="/nowhere/ca.pem").ssl_context()
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(
        KafkaSecurityError, match=r"cannot load the Kafka TLS files \(CAIRN_KAFKA_SSL_CAFILE="
    ):
        KafkaSecurity(protocol="SSL", ssl_cafile=str(garbage)).ssl_context()


def test_failures_are_classified_by_what_can_fix_them() -> None:
    security = KafkaSecurity(
        protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username="cairn", password="x"
    )
    refused = _classify("k:9093", SaslAuthenticationFailed("bad password"), security)
    assert not refused.retryable and "CAIRN_KAFKA_SASL_PASSWORD" in str(refused) and "'cairn'" in str(refused)
    mechanism = _classify("k:9093", UnsupportedSaslMechanismError("no"), security)
    assert not mechanism.retryable and "CAIRN_KAFKA_SASL_MECHANISM" in str(mechanism)
    untrusted = ssl.SSLCertVerificationError(1, "certificate verify failed")
    untrusted.verify_message = "unable to get local issuer certificate"
    verdict = _classify("k:9093", untrusted, security)
    assert not verdict.retryable and "CAIRN_KAFKA_SSL_CAFILE" in str(verdict)
    alert = ssl.SSLError(1, "[SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert bad certificate")
    alert.reason = "SSLV3_ALERT_BAD_CERTIFICATE"
    closed = KafkaConnectionError("Connection at k:9093 closed")
    closed.__cause__ = alert  # TLS 1.3: the broker's refusal arrives on the first read
    no_certificate = _classify("k:9093", closed, security)
    assert not no_certificate.retryable and "CAIRN_KAFKA_SSL_CERTFILE" in str(no_certificate)
    down = _classify("k:9093", ConnectionRefusedError(111, "refused"), security)
    assert down.retryable
    assert _classify("k:9093", KafkaConnectionError("reset"), security).retryable


def test_the_cli_reports_bad_settings_as_lines_not_a_traceback() -> None:
    env = {
        **os.environ,
        "CAIRN_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "CAIRN_KAFKA_SASL_PASSWORD": "s3cret-pw",
        "CAIRN_SERVER": "http://127.0.0.1:9",
    }
    result = subprocess.run(
        [sys.executable, "-m", "cairn", "ls"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "CAIRN_KAFKA_SASL_MECHANISM, CAIRN_KAFKA_SASL_USERNAME" in result.stderr
    assert "s3cret-pw" not in result.stderr + result.stdout


def test_an_empty_variable_means_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Templates render unset optional values as empty strings; that must not read as a CA file
    named "" (or a blank password)."""
    monkeypatch.setenv("CAIRN_KAFKA_SSL_CAFILE", "")
    monkeypatch.setenv("CAIRN_KAFKA_SASL_PASSWORD", "")
    settings = CairnSettings()
    assert settings.kafka_ssl_cafile is None and settings.kafka_sasl_password is None
