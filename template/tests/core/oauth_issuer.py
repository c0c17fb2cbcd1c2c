# Template-owned: `copier update` replaces this file; put your tests in tests/tools/.
"""A real authorization server's public side, on loopback: its metadata, its JWKS, tokens it signs."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


@dataclass
class Issuer:
    """Signs RS256 access tokens with a key pair made for this test run."""

    url: str
    key: rsa.RSAPrivateKey = field(default_factory=lambda: rsa.generate_private_key(65537, 2048))
    kid: str = "test-key-1"

    def jwks(self) -> dict[str, Any]:
        public = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def token(
        self,
        audience: str,
        *,
        scopes: str = "",
        subject: str = "user-42",
        lifetime_s: float = 600,
        issuer: str | None = None,
        key: rsa.RSAPrivateKey | None = None,
        claims: dict[str, Any] | None = None,
    ) -> str:
        """A signed token; `claims` replace or add to the usual ones."""
        now = int(time.time())
        usual = {
            "iss": issuer or self.url,
            "sub": subject,
            "aud": audience,
            "iat": now,
            "nbf": now,
            "exp": now + int(lifetime_s),
            "scope": scopes,
            "client_id": "test-client",
        }
        return jwt.encode(
            {**usual, **(claims or {})}, key or self.key, algorithm="RS256", headers={"kid": self.kid}
        )


@contextmanager
def serve_issuer() -> Iterator[Issuer]:
    """Metadata at /.well-known/oauth-authorization-server and keys at /jwks.json, on a free port."""
    holder: list[Issuer] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            issuer = holder[0]
            documents = {
                "/.well-known/oauth-authorization-server": {
                    "issuer": issuer.url,
                    "jwks_uri": f"{issuer.url}/jwks.json",
                },
                "/jwks.json": issuer.jwks(),
            }
            document = documents.get(self.path)
            body = json.dumps(document).encode()
            self.send_response(200 if document else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Issuer(f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def hanging_issuer() -> Iterator[Issuer]:
    """An issuer whose port accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield Issuer(f"http://127.0.0.1:{listener.getsockname()[1]}")
