"""baton for Python: fair, fenced turns through ``baton serve``.

    import baton

    client = baton.Client("http://127.0.0.1:8080")  # the token: BATON_TOKEN
    with client.turn("deploy/prod", ttl=30) as t:
        deploy(fence=t.fence)
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Dict, List, Optional, Union

from ._http import Http, segment
from .errors import Cancelled, Error, Lost, Superseded, TimedOut
from .turn import Turn

__all__ = ["Client", "Turn", "Error", "TimedOut", "Superseded", "Cancelled", "Lost"]
__version__ = "0.1.0"

Duration = Union[int, float, str, datetime.timedelta]


def duration(value: Duration) -> str:
    """A duration as the server takes it: seconds (a number or a timedelta) or ``"30s"``."""
    if isinstance(value, str):
        return value
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if value < 0:
        raise ValueError(f"a duration cannot be negative: {value}")
    return f"{round(value * 1000)}ms"


class Client:
    """A client of ``baton serve`` at ``url`` (default ``BATON_URL``), with ``token``
    (default ``BATON_TOKEN``; none on a server without tokens)."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None) -> None:
        url = url or os.environ.get("BATON_URL")
        if not url:
            raise ValueError("give the server's URL, or set BATON_URL (http://HOST:PORT)")
        self._http = Http(url, token if token is not None else os.environ.get("BATON_TOKEN"))

    def turn(
        self,
        key: str,
        *,
        ttl: Duration = 30,
        timeout: Optional[Duration] = None,
        limit: Optional[int] = None,
        shared: bool = False,
        order: Optional[str] = None,
        supersede: bool = False,
        keep: bool = False,
        cancel_running: bool = False,
        context: Optional[str] = None,
        slots: Optional[List[str]] = None,
        slot: Optional[str] = None,
        count: Optional[int] = None,
    ) -> Turn:
        """A turn at ``key``, taken when its ``with`` block is entered (or by ``acquire()``).
        The arguments are ``baton acquire``'s flags."""
        ask: Dict[str, Any] = {"ttl": duration(ttl)}
        if timeout is not None:
            ask["timeout"] = duration(timeout)
        for name, value in [
            ("limit", limit),
            ("order", order),
            ("context", context),
            ("slots", slots),
            ("slot", slot),
            ("count", count),
        ]:
            if value is not None:
                ask[name] = value
        for name, flag in [
            ("shared", shared),
            ("supersede", supersede),
            ("keep", keep),
            ("cancel_running", cancel_running),
        ]:
            if flag:
                ask[name] = True
        return Turn(self._http, key, ask)

    def check(self, key: str, fence: int, min_left: Optional[Duration] = None) -> Dict[str, Any]:
        """Whether the turn with ``fence`` still holds ``key``: ``{"holds", "why", ...}``."""
        query = f"?fence={fence}"
        if min_left is not None:
            query += f"&min_left={duration(min_left)}"
        _, answer = self._http.call("GET", f"/v1/turns/{segment(key)}/check{query}")
        return answer
