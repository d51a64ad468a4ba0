"""A TCP proxy in front of a real Postgres that a test can cut and restore: the database
becomes unreachable for the code under test (connections drop, new ones are refused) while
the server itself, shared or embedded, is never touched."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from psycopg.conninfo import conninfo_to_dict, make_conninfo


class DbProxy:
    def __init__(self, url: str) -> None:
        params = conninfo_to_dict(url)
        host = str(params.get("host") or "127.0.0.1")
        port = int(params.get("port") or 5432)
        self._upstream: tuple[socket.AddressFamily, str | tuple[str, int]]
        if host.startswith("/"):
            self._upstream = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
        else:
            self._upstream = (socket.AF_INET, (host, port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = make_conninfo(
            url, host="127.0.0.1", port=str(self._listener.getsockname()[1]), connect_timeout="2"
        )
        self._up = threading.Event()
        self._up.set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def is_up(self) -> bool:
        return self._up.is_set()

    def cut(self) -> None:
        """Drop every connection and refuse new ones until `restore`."""
        self._up.clear()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def restore(self) -> None:
        self._up.set()

    def restore_after(self, seconds: float) -> None:
        timer = threading.Timer(seconds, self.restore)
        timer.daemon = True
        timer.start()

    def close(self) -> None:
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._up.is_set():
                client.close()
                continue
            family, address = self._upstream
            upstream = socket.socket(family, socket.SOCK_STREAM)
            try:
                upstream.connect(address)
            except OSError:
                client.close()
                upstream.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def db_proxy(url: str) -> Iterator[DbProxy]:
    proxy = DbProxy(url)
    try:
        yield proxy
    finally:
        proxy.close()
