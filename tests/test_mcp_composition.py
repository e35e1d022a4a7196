"""McpServer's settings live in its parts and stay readable and settable on the server."""

from __future__ import annotations

from typing import Any

from remember_sync import RememberPlugin
from remember_sync.mcp import McpServer
from tests.mcp_wire import rpc
from tests.test_mcp_wsgi import Wsgi

METADATA = "/.well-known/oauth-protected-resource/mcp"


class _Protected:
    """A token verifier that publishes RFC 9728 metadata (``ProtectedResource``)."""

    resource = "https://mcp.example/mcp"

    def __call__(self, token: str) -> str | None:
        return "alice" if token == "alice-token-0123456789" else None

    def resource_metadata(self, resource: str) -> dict[str, Any]:
        return {"resource": resource, "authorization_servers": ["https://issuer.example"]}


def _plugin() -> RememberPlugin:
    return RememberPlugin.init(encryption={"enabled": False}, skip_legacy_purge=True)


def test_a_verifier_set_after_construction_takes_effect_at_once() -> None:
    """Setting ``token_verifier`` on a running server switches the well-known metadata, the
    ``401`` challenge and the caller check with the next request, both ways."""
    with _plugin() as plugin:
        app = McpServer(plugin, token_verifier=None, principal_resolver=None)
        client = Wsgi(app)
        assert client.request(method="GET", path=METADATA).status == 404
        assert client.request(rpc("ping")).status != 401
        app.token_verifier = _Protected()
        metadata = client.request(method="GET", path=METADATA)
        assert metadata.status == 200, metadata
        assert metadata.json["resource"] == _Protected.resource
        refused = client.request(rpc("ping"))
        assert refused.status == 401
        link = 'resource_metadata="https://mcp.example/.well-known/oauth-protected-resource/mcp"'
        assert link in refused.headers["WWW-Authenticate"]
        app.token_verifier = None
        assert client.request(method="GET", path=METADATA).status == 404
        anonymous = client.request(rpc("ping"))
        assert anonymous.status != 401 and "WWW-Authenticate" not in anonymous.headers


def test_settings_read_and_set_through_the_server() -> None:
    """``allowed_hosts``, ``max_body_bytes`` and the session signer set on the server are the
    ones its HTTP endpoint and session gate use."""
    with _plugin() as plugin:
        app = McpServer(plugin, principal_resolver=None, token_verifier=None)
        client = Wsgi(app)
        assert app.allowed_hosts is None and client.request(rpc("ping")).status != 403
        app.allowed_hosts = frozenset({"elsewhere.example"})
        assert client.request(rpc("ping")).status == 403
        app.allowed_hosts = None
        app.max_body_bytes = 10
        assert client.request(rpc("ping")).status == 413
        app.max_body_bytes = 1_000_000
        other = McpServer(plugin, principal_resolver=None, token_verifier=None)
        app.session_signer = other.session_signer
        session = Wsgi(other).initialize()
        listed = client.request(rpc("tools/list"), headers={"Mcp-Session-Id": session})
        assert listed.status == 200, listed
