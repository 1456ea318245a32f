"""A turn at a key, held while a thread renews it.

The one rule (the same in every baton client): a lease is usable until the moment, on this
machine's clock, *before the request that set it was sent*, plus ``lease_ms``, less the
server's ``started_before_ms``, less ``margin_ms``. A grant that came after a wait says
``renew_first``: it is renewed before it is used, and counted from before that renewal. The
thread renews a third of the way into the lease; when the bound passes without a renewal
landing, ``lost`` is set and the work must stop.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional

from . import _clock
from ._http import Http, segment
from .errors import Error, Lost


class Turn:
    """A turn at ``key``: ``with client.turn("deploy/prod") as t: ...``.

    Leaving the block ends the turn: ``succeeded``, or ``failed`` when it raised. ``fence``
    rises with every grant of the key: hand it to whatever the work changes, so that a
    lower fence can be refused. ``lost`` is set as soon as the lease can no longer be relied
    on; the work should look at it before each step that must not overlap another holder's.
    """

    def __init__(self, http: Http, key: str, ask: Dict[str, Any]) -> None:
        self._http = http
        self._path = f"/v1/turns/{segment(key)}"
        self._ask = ask
        self.key = key
        self.id: str = ""
        self.token: str = ""
        self.fence: int = 0
        self.slot: Optional[str] = None
        self.slots: List[str] = []
        #: Set when the lease can no longer be relied on: stop the work.
        self.lost = threading.Event()
        #: Who asked this holder to stop (``cancel_running``), if anyone did.
        self.stop_asked: Optional[str] = None
        self._bound = 0.0
        self._lease = 0.0
        self._renewed_sent = 0.0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._on_lost: List[Callable[["Turn"], None]] = []

    # -- taking -------------------------------------------------------------------------

    def acquire(self) -> "Turn":
        """Waits for the turn (the server waits; a 202 is asked again with the ticket)."""
        body: Dict[str, Any] = dict(self._ask)
        while True:
            sent = _clock.now()
            status, answer = self._http.call("POST", self._path, body)
            if status != 202:
                break
            self.id, self.token = answer["id"], answer["token"]
            body = {"resume": answer["token"]}
        self.id, self.token, self.fence = answer["id"], answer["token"], answer["fence"]
        self.slot, self.slots = answer.get("slot"), answer.get("slots") or []
        if answer["renew_first"]:
            self.renew()
        else:
            self._count(answer, sent)
        if not self.holds():
            self._end("cancelled")
            raise Lost("lost", f"{self.key}: the lease ran out before its answer could be used")
        self._thread = threading.Thread(target=self._keep, name=f"baton {self.key}", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> "Turn":
        return self.acquire()

    def __exit__(self, kind: Any, error: Any, trace: Any) -> bool:
        self.release("failed" if kind else "succeeded")
        return False

    # -- holding ------------------------------------------------------------------------

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
            "POST", self._path + "/renew", {"token": self.token}, timeout=max(left, 0.01)
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

    def on_lost(self, callback: Callable[["Turn"], None]) -> None:
        """Calls ``callback(turn)`` from the renewing thread when the turn is lost."""
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

    # -- ending -------------------------------------------------------------------------

    def release(self, outcome: str = "succeeded") -> None:
        """Ends the turn: ``succeeded``, ``failed`` or ``cancelled``. A lost turn is not
        released (it has ended, or will by itself)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.lost.is_set():
            return
        self._end(outcome)

    def _end(self, outcome: str) -> None:
        try:
            self._http.call("DELETE", self._path, {"token": self.token, "outcome": outcome})
        except Lost:
            self.lost.set()

    def check(self, min_left: Optional[str] = None) -> Dict[str, Any]:
        """Asks the server whether this turn's fence still holds the key (``baton check``)."""
        query = f"?fence={self.fence}" + (f"&min_left={min_left}" if min_left else "")
        _, answer = self._http.call("GET", self._path + "/check" + query)
        return answer
