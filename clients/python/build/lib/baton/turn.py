"""A turn at a key, held while a thread renews it (the one rule: ``baton.lease``)."""

from __future__ import annotations

import secrets
from typing import Any, Dict, List, Optional

from ._http import Http, segment, take
from .errors import Lost
from .lease import Lease


class Turn(Lease):
    """A turn at ``key``: ``with client.turn("deploy/prod") as t: ...``.

    Leaving the block ends the turn: ``succeeded``, or ``failed`` when it raised. ``lost`` is
    set as soon as the lease can no longer be relied on; the work should look at it before
    each step that must not overlap another holder's.
    """

    def __init__(
        self, http: Http, key: str, ask: Dict[str, Any], retry_for: float = 30.0
    ) -> None:
        self._path = f"/v1/turns/{segment(key)}"
        super().__init__(http, key, self._path + "/renew")
        # The ticket, of this client's making: a request sent again after a lost answer (or to
        # another server after one died) is the same ticket, never a second one.
        self._ask = dict(ask, id=f"t-{secrets.token_hex(8)}", token=secrets.token_hex(16))
        self._retry_for = retry_for
        self.slot: Optional[str] = None
        self.slots: List[str] = []

    def acquire(self) -> "Turn":
        """Waits for the turn (the server waits; a 202 is asked again with the ticket)."""
        answer, sent = take(self._http, self._path, dict(self._ask), self._retry_for)
        self.hold(answer, sent)
        return self

    def hold(self, answer: Dict[str, Any], sent: float) -> None:
        """Holds the turn a grant's answer gives (sent at ``sent``)."""
        self.slot, self.slots = answer.get("slot"), answer.get("slots") or []
        try:
            self._hold(answer, sent)
        except Lost:
            self._end("cancelled")
            raise

    def __enter__(self) -> "Turn":
        return self.acquire()

    def __exit__(self, kind: Any, error: Any, trace: Any) -> bool:
        self.release("failed" if kind else "succeeded")
        return False

    def release(self, outcome: str = "succeeded") -> None:
        """Ends the turn: ``succeeded``, ``failed`` or ``cancelled``. A lost turn is not
        released (it has ended, or will by itself)."""
        self._stop_renewing()
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
