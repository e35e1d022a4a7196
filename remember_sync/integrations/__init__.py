"""Framework integrations, one module per framework, each imported only when used.

* :mod:`remember_sync.integrations.wsgi` -- WSGI middleware binding the identity
  of each request.
* :mod:`remember_sync.integrations.flask` -- ``init_app`` and ``REMEMBER_*`` config.
* :mod:`remember_sync.integrations.django` -- middleware and ``settings.REMEMBER``.
* :mod:`remember_sync.integrations.langgraph` -- a LangGraph ``BaseStore``
  (``RememberStore``) kept per person.
* :mod:`remember_sync.integrations.fastmcp` -- the memory tools on an ``mcp``
  SDK server (``MCPServer``).

Nothing here is imported by ``import remember_sync``: each module imports its
framework, and only it does.
"""
