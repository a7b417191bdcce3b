"""Who may call the api: API keys, their roles, and the signed tokens the api hands out for them.

Pure logic (standard library and pydantic): no I/O besides reading the keys file, no clock it was
not handed, so every rule is unit-tested without a server (tests/unit/test_auth_*.py).
"""
