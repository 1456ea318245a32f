"""What can go wrong, by the names of baton's exit codes."""

from __future__ import annotations

from typing import Optional


class Error(Exception):
    """An error answered by baton serve, or the server could not be reached.

    ``code`` is the API's stable word (``timed_out``, ``lost``, ``bad_request``, ...),
    ``status`` the HTTP status (0: no answer at all).
    """

    def __init__(self, code: str, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    @property
    def transient(self) -> bool:
        """Whether trying again may help: no answer, or the store was unavailable."""
        return self.status == 0 or (self.status == 503 and self.code != "store_unusable")


class TimedOut(Error):
    """The wait ran out (``baton`` exits 75); the ticket was withdrawn."""


class Superseded(Error):
    """A newer ticket superseded this one while queued (exit 76)."""


class Cancelled(Error):
    """The ticket was cancelled, by an operator or a withdrawal (exit 77)."""


class Lost(Error):
    """The turn was lost: its lease ran out before a renewal landed (exit 78). Stop the work."""


class PreconditionFailed(Error):
    """A value's version was not the one given (``if_version``), or it existed (``if_absent``):
    someone wrote in between (``baton kv`` exits 4). Nothing was written."""


class StaleFence(Error):
    """A higher fence already wrote the value: a newer holder took over. Nothing was written."""


class Dead(Error):
    """A run-once key whose attempts are spent: nothing runs until ``baton retry KEY``."""


class OutOfOrder(Error):
    """A step whose predecessor has not completed (``baton once`` exits 80)."""


_BY_CODE = {
    "timed_out": TimedOut,
    "superseded": Superseded,
    "cancelled": Cancelled,
    "lost": Lost,
    "precondition_failed": PreconditionFailed,
    "stale_fence": StaleFence,
    "dead": Dead,
    "out_of_order": OutOfOrder,
}


def from_answer(status: int, body: Optional[dict]) -> Error:
    """The error an answer's JSON body says, as its class."""
    error = (body or {}).get("error") or {}
    code = str(error.get("code") or "error")
    message = str(error.get("message") or f"HTTP {status}")
    return _BY_CODE.get(code, Error)(code, message, status)
