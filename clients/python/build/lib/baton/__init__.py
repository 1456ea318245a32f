"""baton for Python: fair, fenced turns, run-once, jobs and shared values through
``baton serve``.

    import baton

    client = baton.Client("http://127.0.0.1:8080")  # the token: BATON_TOKEN
    with client.turn("deploy/prod", ttl=30) as t:
        deploy(fence=t.fence)
"""

from __future__ import annotations

import datetime
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Union

from . import _clock
from ._http import Http, segment
from .errors import (
    Cancelled,
    Dead,
    Error,
    Lost,
    OutOfOrder,
    PreconditionFailed,
    StaleFence,
    Superseded,
    TimedOut,
)
from .jobs import Run, submit_ask, work
from .once import OnceResult, once, once_ask
from .turn import Turn
from .values import Value, Values

__all__ = [
    "Client",
    "Turn",
    "Run",
    "OnceResult",
    "Value",
    "Values",
    "Error",
    "TimedOut",
    "Superseded",
    "Cancelled",
    "Lost",
    "PreconditionFailed",
    "StaleFence",
    "Dead",
    "OutOfOrder",
]
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


def _maybe(value: Optional[Duration]) -> Optional[str]:
    return None if value is None else duration(value)


class Client:
    """A client of ``baton serve`` at ``url`` (default ``BATON_URL``), with ``token``
    (default ``BATON_TOKEN``; none on a server without tokens)."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None) -> None:
        url = url or os.environ.get("BATON_URL")
        if not url:
            raise ValueError("give the server's URL, or set BATON_URL (http://HOST:PORT)")
        self._http = Http(url, token if token is not None else os.environ.get("BATON_TOKEN"))
        #: Shared values: ``client.values.get(name)``, ``.set(...)``, ``.delete(...)``.
        self.values = Values(self._http)

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
        options: Dict[str, Any] = {
            "ttl": duration(ttl),
            "timeout": _maybe(timeout),
            "limit": limit,
            "order": order,
            "context": context,
            "slots": slots,
            "slot": slot,
            "count": count,
            "shared": shared or None,
            "supersede": supersede or None,
            "keep": keep or None,
            "cancel_running": cancel_running or None,
        }
        return Turn(self._http, key, {k: v for k, v in options.items() if v is not None})

    def once(
        self,
        key: str,
        fn: Callable[[Turn], Any],
        *,
        seq: Optional[int] = None,
        max_attempts: Optional[int] = None,
        retain: Optional[Duration] = None,
        ttl: Duration = 30,
        timeout: Optional[Duration] = None,
        context: Optional[str] = None,
    ) -> OnceResult:
        """Runs ``fn(turn)`` unless a run of it already succeeded on ``key`` (``baton once``):
        its return records the success, an exception spends an attempt and is raised again.
        Raises ``Dead`` when the attempts are spent and ``OutOfOrder`` for a step whose
        predecessor has not completed."""
        ask = once_ask(seq, max_attempts, _maybe(retain), duration(ttl), _maybe(timeout), context)
        return once(self._http, key, fn, ask)

    def submit(self, key: str, params: Any = None, **options: Any) -> Dict[str, Any]:
        """Queues a job for ``key`` with JSON ``params`` (``baton submit``): ``{key, id, state,
        already}``. Options: ``id``, ``limit``, ``order``, ``supersede``, ``keep``,
        ``max_attempts``, ``backoff``, ``delay``, ``max_run``, ``context``."""
        for name in ("backoff", "delay", "max_run"):
            if options.get(name) is not None:
                options[name] = duration(options[name])
        _, answer = self._http.call("POST", f"/v1/jobs/{segment(key)}", submit_ask(params, options))
        return answer

    def job(self, key: str, id: str) -> Dict[str, Any]:
        """Where job ``id`` stands: ``{state, position, attempt, ...}``."""
        _, answer = self._http.call("GET", f"/v1/jobs/{segment(key)}/{segment(id)}")
        return answer

    def wait_job(self, key: str, id: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Waits for job ``id`` to end (``baton wait``) and says how: ``{state, reason, ...}``;
        after ``timeout`` seconds, where it stands. Without one it waits as long as it takes."""
        deadline = None if timeout is None else _clock.now() + timeout
        path = f"/v1/jobs/{segment(key)}/{segment(id)}/wait"
        while True:
            left = 50.0 if deadline is None else max(0.0, deadline - _clock.now())
            status, answer = self._http.call("GET", f"{path}?timeout={duration(min(left, 50.0))}")
            if status == 200 or (deadline is not None and _clock.now() >= deadline):
                return answer

    def worker(
        self,
        keys: List[str],
        handler: Callable[[Run], Any],
        *,
        ttl: Duration = 30,
        wait: Duration = 20,
        stop: Optional[threading.Event] = None,
        max_jobs: Optional[int] = None,
    ) -> int:
        """Runs jobs of ``keys`` (exact keys, and prefixes ending in ``/``) with
        ``handler(run)`` until ``stop`` is set (or ``max_jobs`` ran): a return completes the
        run as succeeded, an exception as failed (retried after its backoff). ``run.params``
        are the job's parameters, ``run.fence`` its fence, ``run.lost`` set if its lease is
        lost. Returns how many ran."""
        return work(
            self._http,
            keys,
            handler,
            wait=duration(wait),
            ttl=duration(ttl),
            stop=stop or threading.Event(),
            max_jobs=max_jobs,
            sent_clock=_clock.now,
        )

    def check(self, key: str, fence: int, min_left: Optional[Duration] = None) -> Dict[str, Any]:
        """Whether the turn with ``fence`` still holds ``key``: ``{"holds", "why", ...}``."""
        query = f"?fence={fence}"
        if min_left is not None:
            query += f"&min_left={duration(min_left)}"
        _, answer = self._http.call("GET", f"/v1/turns/{segment(key)}/check{query}")
        return answer
