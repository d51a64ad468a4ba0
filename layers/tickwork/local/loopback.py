"""The HTTP server under the local runtime's stand-ins for the outside world (the webhook
receiver, the provider sandbox)."""

from __future__ import annotations

from http.server import ThreadingHTTPServer


class LoopbackServer(ThreadingHTTPServer):
    """http.server's threading server, with a listen backlog that holds a burst. At the
    default backlog of 5, the dispatchers' sixteen provider calls connecting at once lost
    connection requests, and TCP retries a lost one only after a second: a burst of
    webhooks crawled at a few hundred a second, in steps of a second."""

    request_queue_size = 1024
    daemon_threads = True
