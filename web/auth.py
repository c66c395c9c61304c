"""Who may read the dashboard: a bearer token and/or HTTP basic credentials, from the
environment, checked on every request; and the security headers every response carries."""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from collections.abc import Mapping
from typing import Final, TypedDict

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import (
    ASGIApp,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    Message,
    Receive,
    Scope,
    Send,
)

#: Served with every response: the pages show user input (Pod names, annotations, messages),
#: so scripts run only from our own origin, even if escaping ever failed.
SECURITY_HEADERS: Final = (
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     b"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)


class DashboardAuth(TypedDict):
    auth_token: str | None
    basic_auth: tuple[str, str] | None


def auth_from_env(environ: Mapping[str, str] | None = None) -> DashboardAuth:
    """``SUNK_DASHBOARD_TOKEN`` (a bearer token) and ``SUNK_DASHBOARD_BASIC_AUTH``
    (``user:password``), as a Secret mounted as environment provides them. A malformed value
    raises: a typo must not silently serve the dashboard without authentication."""
    env = os.environ if environ is None else environ
    token = env.get("SUNK_DASHBOARD_TOKEN", "").strip() or None
    basic: tuple[str, str] | None = None
    if raw := env.get("SUNK_DASHBOARD_BASIC_AUTH", "").strip():
        user, sep, password = raw.partition(":")
        if not sep or not user or not password:
            raise ValueError("SUNK_DASHBOARD_BASIC_AUTH must be user:password")
        basic = (user, password)
    return {"auth_token": token, "basic_auth": basic}


class Guard(ASGIMiddleware):
    """Refuses requests without the configured credentials (401), and adds the security headers
    to every response. Credentials are compared in constant time."""

    scopes = (ScopeType.HTTP,)

    def __init__(self, token: str | None, basic: tuple[str, str] | None) -> None:
        self.token = token.encode() if token else None
        self.basic = (basic[0].encode(), basic[1].encode()) if basic else None
        challenges: list[tuple[bytes, bytes]] = []
        if self.basic:  # first: browsers prompt for the first scheme they know
            challenges.append((b"www-authenticate", b'Basic realm="sunk", charset="UTF-8"'))
        if self.token:
            challenges.append((b"www-authenticate", b'Bearer realm="sunk"'))
        self.challenges = challenges

    def _allowed(self, scope: Scope) -> bool:
        if self.token is None and self.basic is None:
            return True
        header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        scheme, _, credentials = header.partition(b" ")
        scheme, credentials = scheme.lower(), credentials.strip()
        if scheme == b"bearer" and self.token is not None:
            return secrets.compare_digest(credentials, self.token)
        if scheme == b"basic" and self.basic is not None:
            try:
                decoded = base64.b64decode(credentials, validate=True)
            except (binascii.Error, ValueError):
                return False
            user, sep, password = decoded.partition(b":")
            ok_user = secrets.compare_digest(user, self.basic[0])
            ok_password = secrets.compare_digest(password, self.basic[1])
            return bool(sep) and ok_user and ok_password
        return False

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *SECURITY_HEADERS]
            await send(message)

        if self._allowed(scope):
            await next_app(scope, receive, send_secured)
            return
        body = b"authentication required\n"
        start: HTTPResponseStartEvent = {
            "type": "http.response.start", "status": 401,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()), *self.challenges]}
        await send_secured(start)
        end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body,
                                      "more_body": False}
        await send(end)
