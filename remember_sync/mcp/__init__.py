"""An MCP server for remember_sync: Streamable HTTP with JSON responses, as a WSGI app.

Run it with ``remember-sync serve``, or under any WSGI server::

    gunicorn 'remember_sync.mcp:create_app()'

or build one yourself and add your own tools::

    from remember_sync import RememberPlugin
    from remember_sync.mcp import McpServer, ToolContext

    plugin = RememberPlugin.init(tools={"enabled": True})
    server = McpServer(plugin)

    @server.tool(name="greet", description="Greet the user",
                 input_schema={"type": "object", "properties": {"name": {"type": "string"}}})
    def greet(input, ctx):
        ctx.remember.set("last_greeted", input.get("name"))
        return "Hello!"

This package imports nothing from the ``mcp`` SDK.
"""

from .._sessions import SessionSigner
from .app import create_app, plugin_from_options
from .auth import PrincipalResolver, StaticTokenVerifier, TokenVerifier, load_token_file
from .authoring import ToolContext, ToolError
from .server import McpServer

__all__ = [
    "McpServer",
    "PrincipalResolver",
    "SessionSigner",
    "StaticTokenVerifier",
    "TokenVerifier",
    "ToolContext",
    "ToolError",
    "create_app",
    "load_token_file",
    "plugin_from_options",
]
