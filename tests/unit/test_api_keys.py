"""Key files: keys are stored hashed, revocable, and checked against every stored hash."""

from __future__ import annotations

import stat

import pytest

from services.common import api_keys
from services.common.api_keys import ApiKeys, add_key, check_exposure, key_names, revoke_key


def test_added_keys_are_stored_hashed_and_revoked_keys_stop_working(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(api_keys, "RELOAD_S", 0.0)
    path = tmp_path / "keys"
    alice, bob = add_key(path, "alice"), add_key(path, "bob")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert alice not in path.read_text() and bob not in path.read_text()
    keys = ApiKeys(str(path))
    assert (keys.name_of(alice), keys.name_of(bob), keys.name_of(alice + "x")) == ("alice", "bob", None)
    assert keys.allows_bearer(f"Bearer {bob}") and not keys.allows_bearer(bob) and not keys.allows_bearer(None)
    assert revoke_key(path, "alice") and not revoke_key(path, "alice")
    assert keys.name_of(alice) is None and keys.name_of(bob) == "bob"
    assert key_names(path) == ["bob"]
    with pytest.raises(ValueError, match="already"):
        add_key(path, "bob")


def test_a_malformed_key_file_is_refused(tmp_path) -> None:
    path = tmp_path / "keys"
    path.write_text("alice plain-text-key\n")
    with pytest.raises(ValueError, match="keys:1"):
        ApiKeys(str(path))


def test_without_keys_everything_passes_but_only_loopback_may_be_bound() -> None:
    keys = ApiKeys()
    assert not keys.enabled and keys.allows_bearer(None)
    check_exposure("127.0.0.1", keys, False, "router")
    check_exposure("0.0.0.0", keys, True, "router")
    with pytest.raises(SystemExit, match="without API keys"):
        check_exposure("0.0.0.0", keys, False, "router")
    check_exposure("0.0.0.0", ApiKeys(plain=("k",)), False, "router")


def test_a_tenant_is_the_key_itself_not_its_reusable_name(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(api_keys, "RELOAD_S", 0.0)
    path = tmp_path / "keys"
    old = add_key(path, "alice")
    keys = ApiKeys(str(path))
    tenant = keys.tenant(f"Bearer {old}")
    assert tenant and tenant == keys.tenant(f"Bearer {old}") and "alice" not in tenant
    revoke_key(path, "alice")
    new = add_key(path, "alice")  # re-issued under the same name
    assert keys.name_of(new) == "alice" and keys.tenant(f"Bearer {new}") not in ("", tenant)
    assert keys.tenant(f"Bearer {old}") == ""  # revoked: no tenant (the door refuses it)
    first, second = ApiKeys(plain=("k1", "k2")), ApiKeys(plain=("k2", "k1"))  # named key0, key1 by position
    assert first.tenant("Bearer k1") == second.tenant("Bearer k1") != first.tenant("Bearer k2")
    assert ApiKeys().tenant("Bearer k1") == ""
