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
    """Signs RS256 access tokens with a key pair made for this test run.

    `jwks_answer` is what its JWKS endpoint does: "keys" (serves them), "503" (down) or
    "hang" (accepts the request and never answers, until the issuer stops).
    """

    url: str
    key: rsa.RSAPrivateKey = field(default_factory=lambda: rsa.generate_private_key(65537, 2048))
    kid: str = "test-key-1"
    published: dict[str, rsa.RSAPrivateKey] = field(default_factory=dict)  # keys beside `key`
    jwks_answer: str = "keys"
    jwks_requests: int = 0
    stopping: threading.Event = field(default_factory=threading.Event)

    def jwks(self) -> dict[str, Any]:
        keys = {self.kid: self.key, **self.published}
        public = {kid: json.loads(RSAAlgorithm.to_jwk(key.public_key())) for kid, key in keys.items()}
        return {"keys": [{**jwk, "kid": kid, "use": "sig", "alg": "RS256"} for kid, jwk in public.items()]}

    def publish_new_key(self, kid: str) -> None:
        """A second signing key in the JWKS, as an issuer rotating its keys publishes one."""
        self.published[kid] = rsa.generate_private_key(65537, 2048)

    def token(
        self,
        audience: str,
        *,
        scopes: str = "",
        subject: str = "user-42",
        lifetime_s: float = 600,
        issuer: str | None = None,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        claims: dict[str, Any] | None = None,
        without: tuple[str, ...] = (),
    ) -> str:
        """A signed token; `claims` replace or add to the usual ones, `without` names ones left out.

        `kid` names the key in its header: a published one signs with that key, any other with `key`.
        """
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
        payload = {name: value for name, value in {**usual, **(claims or {})}.items() if name not in without}
        kid = kid or self.kid
        signer = key or self.published.get(kid) or self.key
        return jwt.encode(payload, signer, algorithm="RS256", headers={"kid": kid})


@contextmanager
def serve_issuer() -> Iterator[Issuer]:
    """Metadata at /.well-known/oauth-authorization-server and keys at /jwks.json, on a free port."""
    holder: list[Issuer] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            issuer = holder[0]
            if self.path == "/jwks.json":
                issuer.jwks_requests += 1
                if issuer.jwks_answer == "hang":
                    issuer.stopping.wait()
                    return
                if issuer.jwks_answer == "503":
                    self.send_error(503)
                    return
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
    server.daemon_threads = True
    holder.append(Issuer(f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        holder[0].stopping.set()  # a hanging answer ends
        server.shutdown()
        server.server_close()


@contextmanager
def hanging_issuer() -> Iterator[Issuer]:
    """An issuer whose port accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield Issuer(f"http://127.0.0.1:{listener.getsockname()[1]}")
