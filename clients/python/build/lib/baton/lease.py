"""A lease a thread renews: the one rule every baton client keeps.

A lease is usable until the moment, on this machine's clock, *before the request that set it
was sent*, plus ``lease_ms``, less the server's ``started_before_ms``, less ``margin_ms``. A
grant that came after a wait says ``renew_first``: it is renewed before it is used, and counted
from before that renewal. The thread renews a third of the way into the lease; when the bound
passes without a renewal landing, ``lost`` is set and the work must stop.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional

from . import _clock
from ._http import Http
from .errors import Error, Lost


class Lease:
    """What a turn and a job's run share: the ticket, its fence, and the renewing thread."""

    def __init__(self, http: Http, key: str, renew_path: str) -> None:
        self._http = http
        self._renew_path = renew_path
        self.key = key
        self.id: str = ""
        self.token: str = ""
        #: Rises with every grant of the key: hand it to what the work changes.
        self.fence: int = 0
        #: Set when the lease can no longer be relied on: stop the work.
        self.lost = threading.Event()
        #: Who asked this holder to stop (``cancel_running``), if anyone did.
        self.stop_asked: Optional[str] = None
        self._bound = 0.0
        self._lease = 0.0
        self._renewed_sent = 0.0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._on_lost: List[Callable[[Any], None]] = []

    def _hold(self, answer: Dict[str, Any], sent: float) -> None:
        """Takes a grant's answer: renews first when it says so, checks the bound, and starts
        the renewing thread. A lease already past its bound is lost."""
        self.id, self.token, self.fence = answer["id"], answer["token"], answer["fence"]
        if answer["renew_first"]:
            self.renew()
        else:
            self._count(answer, sent)
        if not self.holds():
            self.lost.set()
            raise Lost("lost", f"{self.key}: the lease ran out before its answer could be used")
        self._thread = threading.Thread(target=self._keep, name=f"baton {self.key}", daemon=True)
        self._thread.start()

    def _count(self, answer: Dict[str, Any], sent: float) -> None:
        """Sets the bound by the one rule, from a grant's or a renewal's answer."""
        usable_ms = answer["lease_ms"] - answer["started_before_ms"] - answer["margin_ms"]
        self._bound = sent + usable_ms / 1000.0
        self._lease = answer["lease_ms"] / 1000.0
        self._renewed_sent = sent

    def renew(self) -> None:
        """Renews the lease now (the thread does this by itself)."""
        sent = _clock.now()
        left = self._bound - sent if self._bound else 30.0
        _, answer = self._http.call(
            "POST", self._renew_path, {"token": self.token}, timeout=max(left, 0.01)
        )
        self._count(answer, sent)
        if answer.get("stop_asked"):
            self.stop_asked = answer["stop_asked"]

    def holds(self) -> bool:
        """Whether the lease may still be relied on now."""
        return not self.lost.is_set() and _clock.now() < self._bound

    def left(self) -> float:
        """Seconds until the bound, at least 0."""
        return max(0.0, self._bound - _clock.now())

    def on_lost(self, callback: Callable[[Any], None]) -> None:
        """Calls ``callback(lease)`` from the renewing thread when the lease is lost."""
        self._on_lost.append(callback)

    def _keep(self) -> None:
        """Renews at a third of the lease; sets ``lost`` when the bound passes first."""
        while not self._stop.is_set():
            now = _clock.now()
            if now >= self._bound:
                return self._lose()
            due = self._renewed_sent + self._lease / 3.0
            if self._stop.wait(max(0.0, min(due, self._bound) - now)):
                return None
            if _clock.now() >= self._bound:
                return self._lose()
            if _clock.now() < due:
                continue
            try:
                self.renew()
            except Lost:
                return self._lose()
            except Error as error:
                if not error.transient:
                    return self._lose()
                # Try again soon, while the lease stands.
                self._renewed_sent = _clock.now() - self._lease / 3.0 + min(1.0, self.left() / 4)
        return None

    def _lose(self) -> None:
        self.lost.set()
        for callback in self._on_lost:
            callback(self)

    def _stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
