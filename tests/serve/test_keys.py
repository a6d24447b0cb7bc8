"""The keys file: secrets stored only as hashes, bindings by id or prefix, revocation counted from the next read,
a damaged file refused (naming the field), and the ``memevolve keys`` commands."""
from __future__ import annotations

import json
import os

import pytest

from evolve.cli import keys as keys_cli
from evolve.cli.main import main
from evolve.errors import ConfigError
from evolve.serve.keys import SCOPES, KeyStore, KeysUnreadable, add_key, read_keys, revoke_key


def test_a_secret_is_kept_only_as_its_hash_and_authenticates(tmp_path):
    path = tmp_path / "keys.json"
    key, secret = add_key(path, ["alice", "acme-*"], ["recall", "capture"], "support bot")
    text = path.read_text()
    token = secret.split("_", 2)[2]  # mev_<id>_<token>: the token may itself hold "_"
    assert secret not in text and token not in text and key.sha256 in text
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    store = KeyStore(path)
    assert store.authenticate(secret) == key
    assert store.authenticate(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    assert store.authenticate(None) is None and store.authenticate("mev_nothing") is None
    assert key.acts_for("alice") and key.acts_for("acme-7") and not key.acts_for("alice2")
    assert not key.acts_for("bob") and not key.acts_for("acme")


def test_a_revoked_or_added_key_counts_from_the_next_request(tmp_path):
    path = tmp_path / "keys.json"
    first, secret = add_key(path, ["*"], ["admin"])
    store = KeyStore(path)
    assert store.authenticate(secret) == first
    second, other = add_key(path, ["bob"], ["recall"])
    assert store.authenticate(other) == second
    revoke_key(path, first.id)
    assert store.authenticate(secret) is None
    assert read_keys(path).keys[0].revoked is not None  # kept, so the audit's key ids stay meaningful


def test_a_damaged_keys_file_names_the_field_and_fails_closed(tmp_path):
    path = tmp_path / "keys.json"
    _, secret = add_key(path, ["alice"], ["recall"])
    store = KeyStore(path)
    data = json.loads(path.read_text())
    data["keys"][0]["scopes"] = ["everything"]
    path.write_text(json.dumps(data))
    with pytest.raises(KeysUnreadable, match=r"keys\.json: keys\.0\.scopes\.0: Input should be"):
        store.authenticate(secret)
    with pytest.raises(ConfigError, match="no keys file"):
        KeyStore(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="users: Value error, 'a/b' is not a user id"):
        add_key(path.with_name("other.json"), ["a/b"], ["recall"])


def test_keys_commands_print_the_secret_once_and_never_list_it(tmp_path, capsys):
    path = str(tmp_path / "keys.json")
    assert main(["keys", "add", "--auth", path, "--user", "alice", "--scope", "recall", "--note", "bot"]) == 0
    out = capsys.readouterr().out
    secret = out.split("secret (shown once, stored only as its sha256): ")[1].strip()
    key = KeyStore(path).authenticate(secret)
    assert key is not None and key.scopes == ["recall"] and key.note == "bot"
    assert main(["keys", "list", "--auth", path]) == 0
    listed = capsys.readouterr().out
    assert key.id in listed and "live" in listed and secret not in listed
    assert main(["keys", "revoke", "--auth", path, key.id]) == 0
    assert main(["keys", "revoke", "--auth", path, "000000000000"]) == 2
    assert "no key '000000000000'" in capsys.readouterr().err
    assert KeyStore(path).authenticate(secret) is None
    assert keys_cli.SCOPES == SCOPES


def test_a_keys_file_holding_one_id_twice_is_refused_so_a_revoked_key_never_stays_live(tmp_path):
    """A hand merge leaves the key twice; revoking it marked one entry while the service kept the other live. Now the
    file is refused (naming the id and both entries): the service fails closed and the revoke says why."""
    path = tmp_path / "keys.json"
    key, secret = add_key(path, ["*"], ["recall"])
    store = KeyStore(path)
    assert store.authenticate(secret) == key
    data = json.loads(path.read_text())
    path.write_text(json.dumps({"keys": data["keys"] * 2}))
    with pytest.raises(KeysUnreadable, match=f"key id '{key.id}' appears twice \\(entries 0 and 1\\)"):
        read_keys(path)
    with pytest.raises(KeysUnreadable, match="appears twice"):
        revoke_key(path, key.id)
    with pytest.raises(KeysUnreadable):
        store.authenticate(secret)  # the service answers 503 until the file is fixed
    path.write_text(json.dumps({"keys": data["keys"]}))
    revoke_key(path, key.id)
    assert store.authenticate(secret) is None
