"""Authentication, tenants, audit and purpose through the app: the 401/403 matrix (every route x no key / wrong
user / wrong scope / right scope), "unknown" and "not yours" alike for a key outside its users, every operation and
refusal an audit line that outlives the user's erasure, and a recall's purpose checked against the capture's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evolve.errors import ConfigError
from evolve.serve.access import Access
from evolve.serve.app import create_app
from evolve.serve.audit import AUDIT_FILE, FileAudit
from evolve.serve.pseudonym import Pseudonyms
from evolve.serve.filestore import FileBackend
from evolve.serve.keys import SCOPES, KeyStore, add_key
from evolve.serve.memory import MemoryService
from evolve.serve.server import ServeConfig, check_open
from evolve.serve.strategy import RuntimeParts, StrategySlot

TURN = {"id": "D1:1", "speaker": "Ann", "text": "I keep bees on the roof of the library.", "session": "D1",
        "time": "2023-05-08T13:56:00"}
#: Every route: (method, path, body, scope); ``{user}`` is filled in.
ROUTES = [
    ("POST", "/v1/users/{user}/turns", {"turns": [{**TURN, "id": "D1:2"}]}, "capture"),
    ("POST", "/v1/users/{user}/close", None, "capture"),
    ("POST", "/v1/users/{user}/recall", {"question": "Where are the bees?"}, "recall"),
    ("POST", "/v1/users/{user}/answer", {"question": "Where are the bees?"}, "answer"),
    ("DELETE", "/v1/users/{user}/turns/D1:1", None, "erase"),
    ("DELETE", "/v1/users/{user}", None, "erase"),
    ("GET", "/v1/strategy", None, "admin"),
    ("GET", "/metrics", None, "admin"),
]


class Served:
    def __init__(self, tmp_path: Path, serving: Path, embedder):
        self.data, self.keys = tmp_path / "data", tmp_path / "keys.json"
        self.secrets = {"all": add_key(self.keys, ["alice"], list(SCOPES))[1],
                        "bob": add_key(self.keys, ["bob", "team-*"], list(SCOPES))[1]}
        for scope in SCOPES:
            self.secrets[f"only-{scope}"] = add_key(self.keys, ["alice"], [scope])[1]
            self.secrets[f"not-{scope}"] = add_key(self.keys, ["alice"], [s for s in SCOPES if s != scope])[1]
        slot = StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True)
        self.memory = MemoryService(FileBackend(self.data), lambda: slot.current)
        self.audit = FileAudit(self.data)
        self.client = TestClient(create_app(slot, self.memory, access=Access(KeyStore(self.keys), self.audit)))

    def call(self, method: str, path: str, body, key: str | None, user: str = "alice"):
        headers = {"Authorization": f"Bearer {self.secrets[key]}"} if key else {}
        return self.client.request(method, path.format(user=user), json=body, headers=headers)

    def capture(self, user: str = "alice", **extra):
        key = "all" if user == "alice" else "bob"
        return self.call("POST", "/v1/users/{user}/turns", {"turns": [TURN], **extra}, key, user)

    def lines(self, type: str | None = None) -> list[dict]:
        return [e for e in self.audit.entries() if type is None or e["type"] == type]


@pytest.fixture
def served(tmp_path, serving, embedder) -> Served:
    return Served(tmp_path, serving, embedder)


def test_the_401_403_matrix_every_route_and_every_refusal_audited(served):
    for method, path, body, scope in ROUTES:
        served.capture()
        user_route = "{user}" in path
        cases = [(None, 401), (f"not-{scope}", 403), (f"only-{scope}", None)] + ([("bob", 403)] if user_route else [])
        for key, status in cases:
            denials = len(served.lines("DENY"))
            reply = served.call(method, path, body, key)
            if status is None:
                assert reply.status_code in (200, 201), (method, path, key, reply.text)
                assert len(served.lines("DENY")) == denials
            else:
                assert reply.status_code == status, (method, path, key, reply.text)
                deny = served.lines("DENY")[-1]["payload"]
                assert len(served.lines("DENY")) == denials + 1 and deny["status"] == status
                assert deny["operation"] == scope and deny["user"] == (Pseudonyms().of("alice") if user_route else None)
            if status == 401:
                assert reply.headers["www-authenticate"] == "Bearer"
    assert served.client.get("/healthz").status_code == 200  # liveness stays open
    assert served.audit.verify().ok


def test_a_key_outside_its_users_learns_nothing_about_which_exist(served):
    served.capture()
    for method, path, body, _ in [r for r in ROUTES if "{user}" in r[1]]:
        known = served.call(method, path, body, "bob", "alice")
        unknown = served.call(method, path, body, "bob", "nobody")
        assert known.status_code == unknown.status_code == 403
        assert known.json()["error"]["message"].replace("alice", "X") == \
            unknown.json()["error"]["message"].replace("nobody", "X")
    assert served.call("POST", "/v1/users/{user}/recall", {"question": "q"}, "bob", "team-7").status_code == 404
    revoked = served.secrets["all"]
    served.call("GET", "/metrics", None, "all")
    assert served.call("POST", "/v1/users/{user}/recall", {"question": "q"}, None).status_code == 401
    served.client.headers["Authorization"] = f"Bearer {revoked[:-2]}xx"
    assert served.client.post("/v1/users/alice/recall", json={"question": "q"}).status_code == 401
    deny = served.lines("DENY")[-1]["payload"]
    assert deny["reason"] == "unknown or revoked key" and deny["key"] == revoked.split("_")[1]


def test_operations_are_audited_without_content_and_the_audit_outlives_erasure(served):
    assert served.capture().status_code == 201
    recalled = served.call("POST", "/v1/users/{user}/recall", {"question": "Where are the bees?"}, "all").json()
    assert served.call("DELETE", "/v1/users/{user}", None, "all").json()["erased"] is True
    assert served.call("POST", "/v1/users/{user}/recall", {"question": "bees?"}, "all").status_code == 404
    capture, recall, erase = (served.lines(t)[-1]["payload"] for t in ("CAPTURE", "RECALL", "ERASE"))
    key = served.secrets["all"].split("_")[1]
    assert capture["ids"] == ["D1:1"] and capture["key"] == key and capture["user"] == Pseudonyms().of("alice")
    assert recall["ids"] == sorted({s for p in recalled["packed"] for s in p["source_ids"]})
    assert recall["counts"] == {"packed": len(recalled["packed"]), "words": recalled["words"]}
    assert erase["counts"] == {"turns": 1}
    text = (served.data / AUDIT_FILE).read_text()
    assert "bees" not in text and "alice" not in text and "Ann" not in text
    assert served.audit.verify().ok and not (served.data / "users" / "alice").exists()


def test_a_turn_erasure_is_audited_by_the_turns_id(served):
    assert served.capture().status_code == 201
    assert served.call("POST", "/v1/users/{user}/turns", {"turns": [{**TURN, "id": "D1:2"}]}, "all").status_code == 201
    assert served.call("DELETE", "/v1/users/{user}/turns/D1:1", None, "only-erase").json()["turn"]["turn"] == "D1:1"
    erase = served.lines("ERASE")[-1]["payload"]
    assert erase["ids"] == ["D1:1"] and erase["counts"] == {"turns": 1} and erase["user"] == Pseudonyms().of("alice")
    assert served.call("DELETE", "/v1/users/{user}/turns/D1:1", None, "all").status_code == 404  # erased already
    assert served.call("DELETE", "/v1/users/{user}/turns/D1:2", None, "only-capture").status_code == 403
    assert served.audit.verify().ok


def test_a_recall_for_another_purpose_is_refused_and_audited(served):
    assert served.capture(purpose="support").status_code == 201
    ask = lambda purpose: served.call("POST", "/v1/users/{user}/recall",  # noqa: E731
                                      {"question": "Where are the bees?", "purpose": purpose}, "all")
    refused = ask("marketing")
    message = refused.json()["error"]["message"]
    assert refused.status_code == 403 and "not captured for the purpose" in message and "support" not in message
    assert ask(None).status_code == 403
    deny = served.lines("DENY")[-1]["payload"]
    assert deny["reason"] == "purpose" and deny["operation"] == "recall"
    assert ask("support").status_code == 200 and served.lines("RECALL")[-1]["payload"]["purpose"] == "support"
    other = served.call("POST", "/v1/users/{user}/turns", {"turns": [{**TURN, "id": "D1:9"}], "purpose": "ads"},
                        "all")
    assert other.status_code == 409 and "already holds memory captured for purpose 'support'" in other.text
    inherited = served.call("POST", "/v1/users/{user}/turns", {"turns": [{**TURN, "id": "D1:8"}]}, "all")
    assert inherited.status_code == 201  # a capture naming no purpose joins the user's
    assert [e.purpose for e in FileBackend(served.data).events("alice")] == ["support", "support"]
    reloaded = MemoryService(FileBackend(served.data), served.memory.current)
    assert reloaded.purpose("alice") == "support"  # read back from the capture log after a restart


@pytest.mark.parametrize("host, auth, override, refused", [
    ("127.0.0.1", None, False, False), ("::1", None, False, False), ("0.0.0.0", None, False, True),
    ("10.1.2.3", Path("keys.json"), False, False), ("10.1.2.3", None, True, False),
])
def test_serving_beyond_loopback_without_auth_is_refused_unless_overridden(tmp_path, caplog, host, auth, override,
                                                                          refused):
    config = ServeConfig(tmp_path, tmp_path / "s.yaml", None, host=host, auth=auth, allow_unauthenticated=override)
    if refused:
        with pytest.raises(ConfigError, match="refusing to serve beyond loopback without --auth"):
            check_open(host, config)
    else:
        check_open(host, config)
        assert ("without authentication (--allow-unauthenticated)" in caplog.text) == override


def test_the_real_server_under_uvicorn_admits_by_key_and_audits(tmp_path, serving, capsys):
    import httpx

    from evolve.cli.main import main
    from server_process import ServeProcess

    keys = tmp_path / "keys.json"
    _, writer = add_key(keys, ["alice"], ["capture", "recall"])
    _, admin = add_key(keys, ["*"], ["admin"])
    with ServeProcess(tmp_path / "data", serving, None, "--allow-untracked", "--auth", str(keys)) as server:
        bearer = lambda secret: {"Authorization": f"Bearer {secret}"}  # noqa: E731
        assert httpx.post(f"{server.url}/v1/users/alice/turns", json={"turns": [TURN]}).status_code == 401
        assert httpx.post(f"{server.url}/v1/users/alice/turns", json={"turns": [TURN]},
                          headers=bearer(writer)).status_code == 201
        assert httpx.post(f"{server.url}/v1/users/alice/recall", json={"question": "bees?"},
                          headers=bearer(writer)).status_code == 200
        assert httpx.delete(f"{server.url}/v1/users/alice", headers=bearer(writer)).status_code == 403
        assert httpx.get(f"{server.url}/metrics", headers=bearer(writer)).status_code == 403
        assert httpx.get(f"{server.url}/metrics", headers=bearer(admin)).status_code == 200
        # a second service on the same data directory would fork the audit chain: refused before it writes
        second = main(["serve", "--data", str(tmp_path / "data"), "--serving", str(serving), "--port", "0",
                       "--allow-untracked", "--auth", str(keys)])
        said = capsys.readouterr()
        assert second == 2 and "another service serves this data directory" in said.out + said.err
    assert main(["audit", "verify", "--data", str(tmp_path / "data")]) == 0
    assert capsys.readouterr().out.startswith("ok: 6 lines chain")
    types = [e["type"] for e in FileAudit(tmp_path / "data").entries()]
    assert types == ["START", "DENY", "CAPTURE", "RECALL", "DENY", "DENY"]


def test_a_keys_file_that_stops_reading_refuses_every_request(served):
    served.keys.write_text('{"keys": [{"id": "nothex"}]}')
    reply = served.call("POST", "/v1/users/{user}/recall", {"question": "q"}, "all")
    assert reply.status_code == 503 and "keys.json: keys.0.id: String should match pattern" in reply.json()["error"]["message"]


def test_an_admitted_request_that_fails_is_audited_under_its_key(served):
    """A key may probe which users and turns exist through 404s; each such failure (and a 409 or 422) is a FAIL line
    with the key, the user's hash, the scope and the status, never the words."""
    served.capture()
    bob = served.secrets["bob"]
    cases = [("POST", "/v1/users/{user}/recall", {"question": "q"}, "team-7", 404),          # unknown user
             ("DELETE", "/v1/users/{user}/turns/D9:9", None, "bob", 404),                     # unknown user's turn
             ("POST", "/v1/users/{user}/turns", {"turns": [TURN], "retain_until": "2020-01-01T00:00:00Z"}, "team-1",
              422)]
    for method, path, body, user, status in cases:
        before = len(served.lines("FAIL"))
        reply = served.client.request(method, path.format(user=user), json=body,
                                      headers={"Authorization": f"Bearer {bob}"})
        assert reply.status_code == status, reply.text
        fail = served.lines("FAIL")
        assert len(fail) == before + 1, (method, path)
        payload = fail[-1]["payload"]
        assert payload["status"] == status and payload["user"] == Pseudonyms().of(user) and payload["key"] is not None
        assert "q" not in json.dumps(payload["ids"])
    assert served.call("DELETE", "/v1/users/{user}/turns/D9:9", None, "all").status_code == 404  # alice's unknown turn
    assert served.lines("FAIL")[-1]["payload"]["reason"] == "UnknownTurn"
    assert served.audit.verify().ok


def test_a_flood_of_refusals_is_one_line_a_minute_per_kind_and_the_chain_holds(served):
    """500 requests without a key: the first is a DENY line at once, the other 499 one line with their count when
    the minute is over (the next housekeeping, or the stop); another kind of refusal still gets its own line."""
    access = served.client.app.state.access
    access.clock = lambda: 600_030.0  # the flood within one minute, wherever the wall clock stands
    before = len(served.lines("DENY"))
    for _ in range(500):
        assert served.call("POST", "/v1/users/{user}/recall", {"question": "q"}, None).status_code == 401
    assert len(served.lines("DENY")) == before + 1
    assert served.call("POST", "/v1/users/{user}/answer", {"question": "q"}, None).status_code == 401  # other route
    assert len(served.lines("DENY")) == before + 2
    assert access.flush() == 0  # the minute is not over
    assert access.flush(float("inf")) == 1
    repeated = served.lines("DENY")[-1]["payload"]
    assert repeated["counts"] == {"repeated": 499} and repeated["status"] == 401 and repeated["operation"] == "recall"
    assert access.flush(float("inf")) == 0 and served.audit.verify().ok


def test_a_key_bound_to_purposes_reads_and_writes_only_memory_held_for_them(served):
    """Echoing the memory's purpose no longer lets any recall key in: a key added with --purpose recalls and captures
    only for its purposes; the refusal names no purpose."""
    assert served.capture(purpose="support").status_code == 201
    _, ads = add_key(served.keys, ["alice"], ["recall", "capture"], purposes=["ads"])
    _, support = add_key(served.keys, ["alice"], ["recall"], purposes=["support"])
    ask = lambda secret: served.client.post("/v1/users/alice/recall", json={"question": "bees?", "purpose": "support"},  # noqa: E731
                                            headers={"Authorization": f"Bearer {secret}"})
    refused = ask(ads)
    assert refused.status_code == 403 and "support" not in refused.text
    assert served.lines("DENY")[-1]["payload"]["reason"] == "purpose"
    assert ask(support).status_code == 200
    write = served.client.post("/v1/users/bo/turns", json={"turns": [TURN]}, headers={"Authorization": f"Bearer {ads}"})
    assert write.status_code == 403  # bo is not its user either; and a capture naming no purpose is refused for it
    own = served.client.post("/v1/users/alice/turns", json={"turns": [{**TURN, "id": "D1:7"}], "purpose": "support"},
                             headers={"Authorization": f"Bearer {ads}"})
    assert own.status_code == 403 and "its own purposes" in own.text
    with pytest.raises(ConfigError, match="is not a purpose"):
        add_key(served.keys, ["alice"], ["recall"], purposes=["a b"])
