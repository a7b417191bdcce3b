"""The keys file: what it accepts, how it names what is wrong, and checking secrets."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from shared.auth.keys import KeysFileError, new_secret, parse_keys, parse_keys_text, read_keys_file
from shared.auth.roles import GRANTS, Permission, Role, allows, roles_allowed

SECRET = "s3cret-s3cret-s3cret"


def entry(**fields: Any) -> dict[str, Any]:
    return {"keyId": "k", "keySecret": SECRET, "role": "operator", **fields}


def problems(data: Any) -> list[tuple[str, str]]:
    with pytest.raises(KeysFileError) as caught:
        parse_keys(data)
    return caught.value.problems


def test_a_key_by_secret_and_one_by_its_sha256() -> None:
    digest = hashlib.sha256(b"another-secret-0123").hexdigest()
    ring = parse_keys(
        [
            entry(keyId="ops"),
            {"keyId": "w", "keySecretSha256": digest, "role": "worker", "taskTypes": ["a", "b.c"]},
        ]
    )
    assert len(ring) == 2
    ops = ring.authenticate("ops", SECRET)
    assert ops is not None and ops.role is Role.OPERATOR and ops.task_types is None
    worker = ring.authenticate("w", "another-secret-0123")
    assert worker is not None and worker.task_types == frozenset({"a", "b.c"})
    assert worker.may_work_on("a") and not worker.may_work_on("d")
    assert ops.may_work_on("anything")


def test_wrong_secret_and_unknown_id_are_refused_alike() -> None:
    ring = parse_keys([entry()])
    assert ring.authenticate("k", SECRET + "x") is None
    assert ring.authenticate("k", "") is None
    assert ring.authenticate("nobody", SECRET) is None


@pytest.mark.parametrize(
    ("data", "where", "says"),
    [
        ([entry(keySecretSha256="0" * 64)], "[0]", "exactly one of keySecret and keySecretSha256"),
        ([{"keyId": "k", "role": "admin"}], "[0]", "exactly one of keySecret and keySecretSha256"),
        ([entry(role="root")], "[0].role", "admin"),
        ([entry(keySecret="short")], "[0].keySecret", "16 characters"),
        ([entry(keySecret=None, keySecretSha256="xyz")], "[0].keySecretSha256", "match pattern"),
        ([entry(taskTypes=["a"])], "[0]", "role operator has no tasks"),
        ([entry(role="worker", taskTypes=["a/b"])], "[0]", "not task type names"),
        ([entry(role="worker", taskTypes=[])], "[0].taskTypes", "at least 1"),
        ([entry(), entry(keyId="x", extra=1)], "[1].extra", "Extra inputs"),
        ([entry(keyId="")], "[0].keyId", "at least 1"),
        ([], "(root)", "no keys"),
        ({"keys": []}, "(root)", "valid list"),
        ([entry(), entry()], "[1].keyId", "given twice"),
    ],
)
def test_each_problem_names_its_entry_and_field(data: Any, where: str, says: str) -> None:
    found = problems(data)
    assert any(path == where and says in text for path, text in found), found


def test_the_file_and_its_content(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps([entry()]))
    ring, content = read_keys_file(path)
    assert ring.get("k") is not None and content == path.read_bytes()
    with pytest.raises(KeysFileError, match="cannot read it"):
        read_keys_file(tmp_path / "missing.json")
    with pytest.raises(KeysFileError, match="not JSON"):
        parse_keys_text("[{")


def test_a_rotated_secret_changes_the_fingerprint() -> None:
    before = parse_keys([entry()]).get("k")
    after = parse_keys([entry(keySecret=SECRET + "2")]).get("k")
    assert before is not None and after is not None
    assert before.fingerprint != after.fingerprint
    assert before.fingerprint == parse_keys([entry(role="admin")]).get("k").fingerprint  # type: ignore[union-attr]


def test_new_secrets_are_long_and_different() -> None:
    first, second = new_secret(), new_secret()
    assert first != second and len(first) >= 40
    parse_keys([entry(keySecret=first)])


def test_what_each_role_may_do() -> None:
    assert GRANTS[Role.ADMIN] == frozenset(Permission)
    assert GRANTS[Role.OPERATOR] == {
        Permission.READ,
        Permission.START,
        Permission.SIGNAL,
        Permission.TERMINATE,
        Permission.OPERATE,
    }
    assert GRANTS[Role.WORKER] == {Permission.WORK}
    assert GRANTS[Role.READER] == {Permission.READ}
    assert not allows(Role.OPERATOR, Permission.DEFINE) and not allows(Role.OPERATOR, Permission.REMOVE)
    assert not allows(Role.WORKER, Permission.READ)
    assert roles_allowed(Permission.ADMINISTER) == [Role.ADMIN]
    assert roles_allowed(Permission.READ) == [Role.ADMIN, Role.OPERATOR, Role.READER]
