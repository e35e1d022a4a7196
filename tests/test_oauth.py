"""OAuth 2.1 resource server (issue 20): JWT access tokens of a local issuer, RFC 9728 metadata.

The issuer is served by the test on 127.0.0.1 (a threaded ``http.server``: RFC 8414 or
OpenID discovery document and a JWKS), its RSA and EC keys made with ``cryptography`` and its
tokens signed with PyJWT.  The MCP server is a real one over HTTP: an in-process
:class:`~remember_sync.mcp.McpServer` on the stdlib threaded server, or ``python -m
remember_sync serve --oauth-issuer ...`` in a subprocess.  Clients: raw HTTP, the official
``mcp`` Python client and the TypeScript SDK 1.x client.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from remember_sync import RememberConfigurationError, RememberPlugin
from remember_sync.cli import main as cli_main
from remember_sync.mcp import McpServer, create_app
from remember_sync.mcp.httpd import make_server
from remember_sync.mcp.oauth import OAuthVerifier, metadata_url
from tests.client_drivers import node_binary, node_env, run_node_driver, run_python
from tests.conftest import TEST_SECRET, require_component
from tests.local_http import LocalHttp, serve_in_thread, stop_apps
from tests.served import Served, serve
from tests.test_cli import child_env
from tests.test_mcp_http_conformance import Reply

AUDIENCE = "remember-mcp-test"
MODERN = "2026-07-28"
ACCEPT = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INIT = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "raw", "version": "0"}},
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwk(key: Any, kid: str, alg: str) -> dict[str, Any]:
    maker = RSAAlgorithm if alg.startswith(("RS", "PS")) else ECAlgorithm
    jwk: dict[str, Any] = json.loads(maker.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


class Issuer(LocalHttp):
    """A local authorization server: discovery document, JWKS, tokens; counts JWKS fetches."""

    def __init__(self, discovery: str = "oauth-authorization-server") -> None:
        self.keys: dict[str, tuple[Any, str]] = {
            "rsa-1": (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"),
            "ec-1": (ec.generate_private_key(ec.SECP256R1()), "ES256"),
        }
        self.published = ["rsa-1", "ec-1"]
        self.discovery = discovery
        self.jwks_status = 200
        self.jwks_hits = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == f"/.well-known/{issuer.discovery}":
                    self._send(200, {"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks",
                                     "authorization_endpoint": issuer.url + "/authorize",
                                     "token_endpoint": issuer.url + "/token",
                                     "response_types_supported": ["code"]})
                elif self.path == "/jwks":
                    issuer.jwks_hits += 1
                    if issuer.jwks_status != 200:
                        self._send(issuer.jwks_status, {"error": "down"})
                    else:
                        self._send(200, issuer.jwks())
                else:
                    self._send(404, {"error": "not found"})

            def _send(self, status: int, payload: Any) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)

    def jwks(self) -> dict[str, Any]:
        return {"keys": [_jwk(self.keys[k][0], k, self.keys[k][1]) for k in self.published]}

    def add_key(self, kid: str, alg: str = "RS256") -> None:
        self.keys[kid] = (rsa.generate_private_key(public_exponent=65537, key_size=2048), alg)

    def claims(self, sub: str = "alice", **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {"iss": self.url, "aud": AUDIENCE, "sub": sub, "iat": now, "nbf": now,
                  "exp": now + 300}
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, sub: str = "alice", *, kid: str = "rsa-1", **overrides: Any) -> str:
        key, alg = self.keys[kid]
        return jwt.encode(self.claims(sub, **overrides), key, algorithm=alg,
                          headers={"kid": kid})

    def public_pem(self, kid: str = "rsa-1") -> bytes:
        return bytes(self.keys[kid][0].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as running:
        yield running


def send(base: str, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> Reply:
    host_port = base.split("://", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={**(ACCEPT if data else {}),
                                                        **(headers or {})})
        response = conn.getresponse()
        return Reply(response.status, response.headers, response.read())
    finally:
        conn.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def modern_call(name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 tools/call (no session needed): body and headers."""
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": arguments,
                       "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                 "io.modelcontextprotocol/clientCapabilities": {}}}}
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}
    return body, headers


@dataclass
class Running:
    base: str  # http://127.0.0.1:PORT
    url: str  # .../mcp
    verifier: OAuthVerifier
    plugin: RememberPlugin


@pytest.fixture
def mcp_server(issuer: Issuer) -> Iterator[Any]:
    """Start in-process McpServers whose token verifier is an OAuthVerifier of *issuer*."""
    running: list[tuple[Any, threading.Thread, RememberPlugin]] = []

    def start(**verifier_options: Any) -> Running:
        plugin = RememberPlugin.init(encryption={"secrets": [TEST_SECRET]},
                                     tools={"enabled": True}, skip_legacy_purge=True)
        verifier = OAuthVerifier(issuer.url, AUDIENCE, **verifier_options)
        httpd = make_server("127.0.0.1", 0, lambda environ, start_response: [])
        port = httpd.server_port
        httpd.set_app(McpServer(plugin, token_verifier=verifier,
                                allowed_hosts=[f"127.0.0.1:{port}"]))
        running.append((httpd, serve_in_thread(httpd), plugin))
        base = f"http://127.0.0.1:{port}"
        return Running(base, base + "/mcp", verifier, plugin)

    try:
        yield start
    finally:
        stop_apps(running)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"op": "call", "name": name, "arguments": arguments}


def _structured(outcome: dict[str, Any]) -> dict[str, Any]:
    assert "result" in outcome, outcome
    assert outcome["result"].get("isError") is not True, outcome
    content: dict[str, Any] = outcome["result"]["structuredContent"]
    return content


# -- metadata and the 401 challenge ----------------------------------------------------------


def test_metadata_is_served_and_linked_from_401(issuer: Issuer, mcp_server: Any) -> None:
    """RFC 9728: the document at both well-known paths; every 401 links it."""
    server: Running = mcp_server()
    expected = {"resource": server.url, "authorization_servers": [issuer.url],
                "bearer_methods_supported": ["header"]}
    for path in ("/.well-known/oauth-protected-resource/mcp",
                 "/.well-known/oauth-protected-resource"):
        reply = send(server.base, "GET", path)
        assert reply.status == 200, reply.body
        assert reply.headers["Content-Type"] == "application/json"
        assert expected.items() <= reply.json.items()
        assert "HS256" not in reply.json["resource_signing_alg_values_supported"]
    assert send(server.base, "POST", "/.well-known/oauth-protected-resource").status == 405

    link = f'resource_metadata="{server.base}/.well-known/oauth-protected-resource/mcp"'
    assert metadata_url(server.url) == f"{server.base}/.well-known/oauth-protected-resource/mcp"
    missing = send(server.base, "POST", "/mcp", INIT)
    assert missing.status == 401
    challenge = missing.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ") and link in challenge
    assert "invalid_token" not in challenge
    bad = send(server.base, "POST", "/mcp", INIT, bearer("not-a-jwt"))
    assert bad.status == 401
    assert link in bad.headers["WWW-Authenticate"]
    assert 'error="invalid_token"' in bad.headers["WWW-Authenticate"]


def test_metadata_only_when_oauth_is_configured(tmp_path: Path) -> None:
    """Static tokens (or none): no metadata document, the old challenge."""
    plugin = RememberPlugin.init(encryption={"secrets": [TEST_SECRET]}, tools={"enabled": True},
                                 skip_legacy_purge=True)
    from remember_sync.mcp.auth import StaticTokenVerifier

    app = McpServer(plugin, token_verifier=StaticTokenVerifier({"t" * 20: "bob"}))
    statuses: list[str] = []
    headers: list[Any] = []

    def start_response(status: str, hdrs: Any) -> None:
        statuses.append(status)
        headers.append(dict(hdrs))

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/.well-known/oauth-protected-resource"}
    app(environ, start_response)
    assert statuses[-1].startswith("404")
    plugin.close()


def test_configured_resource_is_published(issuer: Issuer, mcp_server: Any) -> None:
    """--oauth-resource: the document and the challenge use it, not the request's Host."""
    server: Running = mcp_server(resource="https://mcp.example.com/mcp")
    assert send(server.base, "GET", "/.well-known/oauth-protected-resource/mcp").json[
        "resource"] == "https://mcp.example.com/mcp"
    challenge = send(server.base, "POST", "/mcp", INIT).headers["WWW-Authenticate"]
    assert ('resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"'
            in challenge)


# -- valid tokens with real clients ------------------------------------------------------------


def test_valid_tokens_work_with_the_python_client_and_user_memory_is_keyed_by_sub(
    issuer: Issuer, mcp_server: Any
) -> None:
    """RSA and EC tokens, both eras; user memory is the sub's: another sub sees none of it."""
    server: Running = mcp_server()
    alice = bearer(issuer.token("alice"))
    alice_ec = bearer(issuer.token("alice", kid="ec-1"))
    bob = bearer(issuer.token("bob", kid="ec-1"))
    _, stored = run_python(server.url, alice, [
        _call("remember_this", key="colour", value="teal", scope="user")], mode="legacy")
    assert _structured(stored[0])
    for mode in ("legacy", MODERN):
        _, found = run_python(server.url, alice_ec,
                              [_call("recall", key="colour", scope="user")], mode=mode)
        assert _structured(found[0])["value"] == "teal"
        _, other = run_python(server.url, bob, [_call("recall", key="colour", scope="user"),
                                                _call("list_memories", scope="user")], mode=mode)
        assert _structured(other[0])["found"] is False
        assert _structured(other[1])["keys"] == []


def test_valid_token_works_with_the_typescript_sdk_1_client(
    issuer: Issuer, mcp_server: Any, tmp_path: Path
) -> None:
    """@modelcontextprotocol/sdk 1.x with the access token in its request headers."""
    node = node_binary()
    require_component("node", node is not None, "install Node.js (apt-get install nodejs npm)")
    sdk = Path(__file__).parent / "node_modules" / "@modelcontextprotocol" / "sdk"
    require_component("TypeScript SDK 1.x", sdk.is_dir(), "run `npm ci --prefix tests`")
    assert node is not None
    server: Running = mcp_server()
    steps = [_call("remember_this", key="k", value={"n": 1}, scope="user"),
             _call("recall", key="k", scope="user")]
    connect, outcomes = run_node_driver(node, "ts_sdk1.mjs", server.url,
                                        bearer(issuer.token("carol")), steps,
                                        node_env(tmp_path))
    assert connect["sessionId"] is True
    assert _structured(outcomes[1])["value"] == {"n": 1}
    _, seen = run_python(server.url, bearer(issuer.token("carol", kid="ec-1")),
                         [_call("recall", key="k", scope="user")], mode="legacy")
    assert _structured(seen[0])["value"] == {"n": 1}  # the same sub, another client


# -- refused tokens ----------------------------------------------------------------------------


def _forge_hs256_with_public_key(issuer: Issuer) -> str:
    """The algorithm-confusion attack: HS256 keyed with the issuer's public key PEM."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    payload = _b64(json.dumps(issuer.claims("mallory")).encode())
    signing_input = f"{header}.{payload}".encode()
    signature = hmac.new(issuer.public_pem(), signing_input, hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(signature)}"


def _alg_none(issuer: Issuer) -> str:
    header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": "rsa-1"}).encode())
    return f"{header}.{_b64(json.dumps(issuer.claims('mallory')).encode())}."


def _tampered(issuer: Issuer) -> str:
    header, payload, signature = issuer.token("mallory").split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = "alice"  # claim to be someone else, keep the signature
    return f"{header}.{_b64(json.dumps(claims).encode())}.{signature}"


def _bad_signature(issuer: Issuer) -> str:
    header, payload, signature = issuer.token("mallory").split(".")
    raw = bytearray(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
    raw[10] ^= 0x01
    return f"{header}.{payload}.{_b64(bytes(raw))}"


def _rogue_key(issuer: Issuer, kid: str) -> str:
    """Signed by a key the issuer never published, claiming a *kid*."""
    rogue = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(issuer.claims("mallory"), rogue, algorithm="RS256", headers={"kid": kid})


BAD_TOKENS = {
    "expired": lambda i: i.token("mallory", exp=int(time.time()) - 120),
    "not-yet-valid": lambda i: i.token("mallory", nbf=int(time.time()) + 120),
    "wrong-audience": lambda i: i.token("mallory", aud="another-api"),
    "wrong-issuer": lambda i: i.token("mallory", iss="http://127.0.0.1:1"),
    "no-exp": lambda i: i.token("mallory", exp=None),
    "no-sub": lambda i: i.token(None),
    "anonymous-sub": lambda i: i.token("anon:mallory"),
    "alg-none": _alg_none,
    "hs256-with-public-key": _forge_hs256_with_public_key,
    "tampered-claims": _tampered,
    "tampered-signature": _bad_signature,
    "unknown-kid": lambda i: _rogue_key(i, "rogue-1"),
    "known-kid-wrong-key": lambda i: _rogue_key(i, "rsa-1"),
    "ec-kid-with-rs256": lambda i: jwt.encode(i.claims("mallory"), i.keys["rsa-1"][0],
                                              algorithm="RS256", headers={"kid": "ec-1"}),
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
def test_bad_tokens_are_refused_with_401_and_no_memory_access(
    issuer: Issuer, mcp_server: Any, case: str
) -> None:
    """Each forged or invalid token: 401 invalid_token, nothing written, nothing read."""
    server: Running = mcp_server()
    token = BAD_TOKENS[case](issuer)
    body, headers = modern_call("remember_this", {"key": "owned", "value": 1, "scope": "user"})
    for message, extra in ((INIT, {}), (body, headers)):
        reply = send(server.base, "POST", "/mcp", message, {**headers, **bearer(token)}
                     if extra else bearer(token))
        assert reply.status == 401, (case, reply.status, reply.body)
        assert 'error="invalid_token"' in reply.headers["WWW-Authenticate"]
        assert b"owned" not in reply.body
    for sub in ("alice", "mallory"):  # the real users see nothing written
        _, seen = run_python(server.url, bearer(issuer.token(sub)),
                             [_call("list_memories", scope="user")], mode=MODERN)
        assert _structured(seen[0])["keys"] == []


# -- the JWKS: rotation, rate limit, outage ---------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_key_rotation_is_picked_up_and_refreshes_are_rate_limited(
    issuer: Issuer, mcp_server: Any
) -> None:
    """A new kid after a rotation: accepted once the JWKS is refetched (at most once per
    cooldown, however many unknown kids arrive)."""
    server: Running = mcp_server(refresh_cooldown_s=30)
    clock = FakeClock()
    server.verifier._clock = clock
    ok = send(server.base, "POST", "/mcp", INIT, bearer(issuer.token("alice")))
    assert ok.status == 200 and issuer.jwks_hits == 1

    flood = [_rogue_key(issuer, f"made-up-{n}") for n in range(3)]
    for token in flood * 10:  # 30 unknown kids within the cooldown: no fetch at all
        assert send(server.base, "POST", "/mcp", INIT, bearer(token)).status == 401
    assert issuer.jwks_hits == 1

    issuer.add_key("rsa-2")
    issuer.published = ["rsa-2", "ec-1"]  # rotation: rsa-1 withdrawn
    rotated = bearer(issuer.token("alice", kid="rsa-2"))
    assert send(server.base, "POST", "/mcp", INIT, rotated).status == 401  # still cooling down
    assert issuer.jwks_hits == 1

    clock.now += 31
    assert send(server.base, "POST", "/mcp", INIT, rotated).status == 200  # refetched
    assert issuer.jwks_hits == 2
    for token in flood * 10:  # a new cooldown started with that fetch
        assert send(server.base, "POST", "/mcp", INIT, bearer(token)).status == 401
    assert issuer.jwks_hits == 2
    old = send(server.base, "POST", "/mcp", INIT, bearer(issuer.token("alice", kid="rsa-1")))
    assert old.status == 401  # the withdrawn key no longer verifies
    clock.now += 31
    assert send(server.base, "POST", "/mcp", INIT, bearer(flood[0])).status == 401
    assert issuer.jwks_hits == 3  # one fetch per cooldown


def test_concurrent_first_requests_fetch_the_jwks_once(issuer: Issuer, mcp_server: Any) -> None:
    """Twenty callers at once on a cold cache: one JWKS fetch, every one of them served."""
    server: Running = mcp_server()
    tokens = [issuer.token(f"user-{n}", kid="ec-1" if n % 2 else "rsa-1") for n in range(20)]
    barrier = threading.Barrier(len(tokens))
    statuses: list[int] = []

    def one(token: str) -> None:
        barrier.wait(10)
        statuses.append(send(server.base, "POST", "/mcp", INIT, bearer(token)).status)

    threads = [threading.Thread(target=one, args=(t,)) for t in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert statuses == [200] * len(tokens)
    assert issuer.jwks_hits == 1


def test_jwks_down_is_503_never_401_or_anonymous(issuer: Issuer, mcp_server: Any) -> None:
    """The issuer's JWKS failing: 503 + Retry-After, nothing served or written; the server
    survives and recovers; cached keys keep verifying while it is down."""
    server: Running = mcp_server(refresh_cooldown_s=30)
    clock = FakeClock()
    server.verifier._clock = clock
    issuer.jwks_status = 500
    token = issuer.token("alice")
    body, headers = modern_call("remember_this", {"key": "k", "value": 1, "scope": "user"})
    for _ in range(5):
        reply = send(server.base, "POST", "/mcp", body, {**headers, **bearer(token)})
        assert reply.status == 503, reply.body
        assert 1 <= int(reply.headers["Retry-After"]) <= 30
        assert "WWW-Authenticate" not in reply.headers
        assert reply.json["error"]["message"].startswith("Service unavailable")
    assert issuer.jwks_hits == 1  # failures are rate-limited too

    issuer.jwks_status = 200
    clock.now += 31
    reply = send(server.base, "POST", "/mcp", body, {**headers, **bearer(token)})
    assert reply.status == 200 and reply.json["result"]["isError"] is False, reply.body

    issuer.jwks_status = 503  # down again, after the keys were cached
    clock.now += 3601  # and the cache is old: a refetch fails, the cached keys still verify
    assert send(server.base, "POST", "/mcp", INIT, bearer(token)).status == 200
    unknown = send(server.base, "POST", "/mcp", INIT, bearer(_rogue_key(issuer, "new-kid")))
    assert unknown.status == 503  # it cannot tell whether the issuer rotated


def test_openid_configuration_discovery_and_explicit_jwks_url(issuer: Issuer,
                                                             mcp_server: Any) -> None:
    """An issuer with only /.well-known/openid-configuration; or --oauth-jwks-url."""
    issuer.discovery = "openid-configuration"
    server: Running = mcp_server()
    assert send(server.base, "POST", "/mcp", INIT, bearer(issuer.token())).status == 200
    issuer.discovery = "nothing-here"
    direct: Running = mcp_server(jwks_url=issuer.url + "/jwks")
    assert send(direct.base, "POST", "/mcp", INIT, bearer(issuer.token())).status == 200
    undiscoverable: Running = mcp_server()
    assert send(undiscoverable.base, "POST", "/mcp", INIT, bearer(issuer.token())).status == 503


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"algorithms": ["RS256", "HS256"]}, "never none or HS*"),
        ({"algorithms": ["none"]}, "never none or HS*"),
        ({"issuer": "http://issuer.example.com"}, "https://"),
        ({"issuer": "ftp://127.0.0.1"}, "https://"),
        ({"audience": ""}, "audience"),
        ({"jwks_url": "http://keys.example.com/jwks"}, "JWKS URL"),
        ({"leeway_s": -1}, "leeway_s"),
    ],
)
def test_bad_verifier_options_are_refused(options: dict[str, Any], expected: str) -> None:
    args = {"issuer": "https://issuer.example.com", "audience": AUDIENCE, **options}
    with pytest.raises(RememberConfigurationError, match=expected.replace("*", r"\*")):
        OAuthVerifier(args.pop("issuer"), args.pop("audience"), **args)


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jwt", None)
    with pytest.raises(RememberConfigurationError, match=r"remember-sync\[oauth\]"):
        OAuthVerifier("https://issuer.example.com", AUDIENCE)


def test_the_core_never_imports_jwt() -> None:
    code = ("import sys, remember_sync, remember_sync.mcp, remember_sync.cli.serve, "
            "remember_sync.cli; assert 'jwt' not in sys.modules, 'jwt imported'")
    done = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_create_app_reads_the_oauth_environment(issuer: Issuer, tmp_path: Path) -> None:
    env = {"REMEMBER_SECRET": TEST_SECRET, "REMEMBER_OAUTH_ISSUER": issuer.url,
           "REMEMBER_OAUTH_AUDIENCE": AUDIENCE, "REMEMBER_OAUTH_JWKS_URL": issuer.url + "/jwks"}
    app = create_app(environ=env)
    try:
        assert isinstance(app.token_verifier, OAuthVerifier)
        assert app.token_verifier.jwks_url == issuer.url + "/jwks"
        assert app.token_verifier(issuer.token("dora")) == "dora"
    finally:
        app.close()
    with pytest.raises(RememberConfigurationError, match="REMEMBER_OAUTH_AUDIENCE"):
        create_app(environ={"REMEMBER_OAUTH_ISSUER": issuer.url})
    with pytest.raises(RememberConfigurationError, match="not both"):
        create_app(environ={**env, "REMEMBER_AUTH_TOKENS": str(tmp_path / "tokens")})


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--oauth-issuer", "https://i.example"], "needs --oauth-audience"),
        (["--oauth-audience", "a"], "only go with --oauth-issuer"),
        (["--oauth-jwks-url", "https://i.example/jwks"], "only go with --oauth-issuer"),
        (["--oauth-issuer", "https://i.example", "--oauth-audience", "a", "--auth-tokens", "f"],
         "not allowed with argument"),
        (["--oauth-issuer", "https://i.example", "--oauth-audience", "a", "--no-token"],
         "not allowed with argument"),
        (["--oauth-issuer", "https://i.example", "--oauth-audience", "a", "--allow-anonymous"],
         "not allowed with argument"),
        (["--oauth-issuer", "https://i.example", "--oauth-audience", "a", "--user", "x"],
         "--user and --token-file"),
    ],
)
def test_serve_oauth_flag_usage_errors(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["serve", *args]) == 2
    assert expected in capsys.readouterr().err


# -- serve in a subprocess ---------------------------------------------------------------------


def _serve(tmp_path: Path, *args: str) -> Served:
    served = serve(tmp_path, *args,
                   env={"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    served.wait_ready()
    return served


def test_serve_with_oauth_end_to_end(issuer: Issuer, tmp_path: Path) -> None:
    """``serve --oauth-issuer --oauth-audience``: banner, metadata, 401 link, valid tokens with
    the official client, memory per sub, no local token file created."""
    served = _serve(tmp_path, "--oauth-issuer", issuer.url, "--oauth-audience", AUDIENCE)
    try:
        assert f"auth: OAuth access tokens of {issuer.url}" in served.output
        base = served.url.rsplit("/", 1)[0]
        document = send(base, "GET", "/.well-known/oauth-protected-resource/mcp").json
        assert document["resource"] == served.url
        assert document["authorization_servers"] == [issuer.url]
        challenge = send(base, "POST", "/mcp", INIT).headers["WWW-Authenticate"]
        assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in challenge
        expired = bearer(issuer.token("erin", exp=int(time.time()) - 600))
        assert send(base, "POST", "/mcp", INIT, expired).status == 401
        _, stored = run_python(served.url, bearer(issuer.token("erin")),
                               [_call("remember_this", key="k", value="v", scope="user")],
                               mode="legacy")
        assert _structured(stored[0])
        _, seen = run_python(served.url, bearer(issuer.token("erin", kid="ec-1")),
                             [_call("recall", key="k", scope="user")], mode=MODERN)
        assert _structured(seen[0])["value"] == "v"
        _, other = run_python(served.url, bearer(issuer.token("frank")),
                              [_call("recall", key="k", scope="user")], mode=MODERN)
        assert _structured(other[0])["found"] is False
    finally:
        assert served.stop() == 0, served.output
    assert not (tmp_path / "cfg").exists()  # no local token in OAuth mode


def test_serve_with_an_unreachable_issuer_answers_503(issuer: Issuer, tmp_path: Path) -> None:
    """The issuer down from the start: serve starts, requests get 503, it keeps serving."""
    token = issuer.token("gina")
    url = issuer.url
    issuer.stop()  # nothing listens there any more
    served = _serve(tmp_path, "--oauth-issuer", url, "--oauth-audience", AUDIENCE)
    try:
        base = served.url.rsplit("/", 1)[0]
        for _ in range(3):
            reply = send(base, "POST", "/mcp", INIT, bearer(token))
            assert reply.status == 503 and reply.headers["Retry-After"], reply.body
        assert send(base, "GET", "/.well-known/oauth-protected-resource").status == 200
        assert served.proc.poll() is None
    finally:
        assert served.stop() == 0, served.output
    assert "cannot fetch the signing keys of the OAuth issuer" in served.output
    assert token not in served.output
