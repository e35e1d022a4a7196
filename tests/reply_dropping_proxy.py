"""A TCP proxy on loopback that lets one chosen command through and drops its reply.

Put it in front of a real redis-server (or one Cluster node) and :meth:`arm` it
with bytes that identify a command (e.g. a script's SHA): the next request
holding them is forwarded, the server runs it, and its reply is thrown away
with both connections closed -- what a client sees when a network path fails
just after the server answered.  Every other byte goes through unchanged.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any


class ReplyDroppingProxy:
    """A threaded proxy to ``target`` listening on ``127.0.0.1:<port>``."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self._in_gap: Callable[[], None] | None = None
        self._unless: tuple[bytes, ...] = ()
        #: Set once a reply was dropped (the server had answered the armed command).
        self.dropped = threading.Event()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(
        self,
        marker: bytes,
        in_gap: Callable[[], None] | None = None,
        unless: tuple[bytes, ...] = (),
    ) -> None:
        """Drop the reply of the next request containing *marker* and none of *unless*.

        *in_gap* runs after the server answered and before the client's
        connection is closed (another writer acting while the reply is lost).
        """
        with self._lock:
            self._marker, self._in_gap, self._unless = marker, in_gap, unless
            self.dropped.clear()

    def close(self) -> None:
        """Stop listening and close every connection."""
        self._closed = True
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                _close(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets += [client, server]
            pending = threading.Event()  # this connection's next reply is to be dropped
            threading.Thread(target=self._up, args=(client, server, pending), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, pending), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, pending: threading.Event) -> None:
        while True:
            try:
                data = client.recv(65536)
            except OSError:
                data = b""
            if not data:
                _close(server)
                return
            with self._lock:
                if (
                    self._marker is not None
                    and self._marker in data
                    and not any(u in data for u in self._unless)
                ):
                    self._marker = None
                    pending.set()
            try:
                server.sendall(data)
            except OSError:
                _close(client)
                return

    def _down(self, server: socket.socket, client: socket.socket, pending: threading.Event) -> None:
        while True:
            try:
                data = server.recv(65536)
            except OSError:
                data = b""
            if not data:
                _close(client)
                return
            if pending.is_set():
                with self._lock:
                    in_gap, self._in_gap = self._in_gap, None
                if in_gap is not None:
                    in_gap()
                _close(client)
                _close(server)
                self.dropped.set()
                return
            try:
                client.sendall(data)
            except OSError:
                _close(server)
                return


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


@contextlib.contextmanager
def proxied_cluster(
    startup_nodes: list[tuple[str, int]], make_client: Callable[..., Any]
) -> Iterator[tuple[Any, list[ReplyDroppingProxy]]]:
    """A cluster client whose every node is reached through its own proxy, and the proxies.

    *make_client* is :meth:`remember_sync.testing.redis_server.RedisCluster.client`;
    redis-py's ``address_remap`` sends each node's traffic to its proxy.
    """
    proxies = {port: ReplyDroppingProxy(host, port) for host, port in startup_nodes}

    def remap(address: tuple[str, int]) -> tuple[str, int]:
        return ("127.0.0.1", proxies[address[1]].port)

    try:
        yield make_client(address_remap=remap), list(proxies.values())
    finally:
        for proxy in proxies.values():
            proxy.close()
