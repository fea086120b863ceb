"""One TLS context for every HTTP client the tuner opens.

httpx builds a new context for each client and loads the CA bundle into it: about 20 ms of
CPU on the project's 2-core box, and a trial opens several clients (the readiness probe, the
workload's, the `/metrics` scraper). The engines the tuner starts speak plain HTTP on
loopback, so the context is only ever used against a server the user names with https://;
it is built once, on first use, with httpx's defaults (certifi's bundle, SSL_CERT_FILE and
SSL_CERT_DIR honoured), and shared. What may be assumed: verification is never turned off.
"""

from __future__ import annotations

import functools
import ssl


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verifying context, built once per process."""
    import httpx

    return httpx.create_ssl_context()
