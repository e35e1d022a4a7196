"""Helpers for testing applications (and this library) against real servers.

Nothing in the core imports this package.  It starts throw-away
``redis-server`` processes and clusters on free loopback ports and, in
:mod:`remember_sync.testing.kv_emulator`, an Upstash-REST emulator.
:class:`HashingEmbedder` is a deterministic stand-in for an embedding model
(``RememberPlugin.init(search={"embedder": HashingEmbedder()})``).
"""

from ._embedder import HashingEmbedder

__all__ = ["HashingEmbedder"]
