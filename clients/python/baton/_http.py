"""JSON over HTTP with the standard library: one request, one answer, errors as baton's."""

from __future__ import annotations

import json
import time
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional, Tuple

from . import _clock
from .errors import Error, from_answer


class Http:
    """The server's address and the caller's token."""

    def __init__(self, url: str, token: Optional[str], timeout: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(
        self,
        method: str,
        path: str,
        body: Optional[dict] = None,
        timeout: Optional[float] = None,
        headers: Optional[Dict[str, str]] = None,
    ) -> Tuple[int, Any]:
        """Sends one request; returns a 2xx answer's status and JSON, raises the others."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as answer:
                text = answer.read()
                return answer.status, json.loads(text) if text else None
        except urllib.error.HTTPError as answer:
            try:
                parsed = json.loads(answer.read() or b"null")
            except ValueError:
                parsed = None
            raise from_answer(answer.code, parsed) from None
        except (urllib.error.URLError, socket.timeout, ConnectionError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, ConnectionRefusedError):
                # Nothing was sent: nothing listens there.
                raise Error(
                    "unreachable",
                    f"{self.url}: nothing listens there ({reason}): is baton serve running, "
                    "and is the URL right?",
                ) from None
            raise Error("no_answer", f"{self.url}: no answer: {e}") from None


def segment(key: str) -> str:
    """A key as one path segment: its ``/`` sent as ``%2F``."""
    return urllib.parse.quote(key, safe="")


def take(
    http: Http, path: str, body: Dict[str, Any], retry_for: float = 0.0
) -> Tuple[Dict[str, Any], float]:
    """POSTs a request the server may answer 202 (still waiting) and asks again with the
    ticket's token until it answers otherwise; the answer, and when its last request was sent
    (on the lease clock). With ``retry_for``, a request that got no answer (or a server that no
    longer keeps the wait) is sent again, as first asked, for that many seconds: the body names
    a ticket of the client's making, so the server takes it up as the same ticket."""
    first = dict(body)
    give_up = _clock.now() + retry_for
    reached = False
    while True:
        sent = _clock.now()
        try:
            status, answer = http.call("POST", path, body)
        except Error as error:
            # A server never reached is a wrong URL or a server not started: said at once. One
            # that answered before and refuses now is restarting: asked again.
            refused_first = error.code == "unreachable" and not reached
            again = (error.transient and not refused_first) or error.code == "no_such_wait"
            reached = reached or error.status != 0
            if retry_for and again and _clock.now() < give_up:
                body = first
                time.sleep(0.2)
                continue
            raise
        reached = True
        if status != 202:
            return answer, sent
        body = {"resume": answer["token"]}
