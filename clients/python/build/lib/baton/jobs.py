"""Jobs: work queued per key (``baton submit``), and workers that run it (``baton worker``).

A job runs at least once: a worker that finishes and dies before its completion lands leaves
the job to run again. Hand the run's fence to what the work changes, or make it idempotent.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional

from ._http import Http, segment
from .errors import Error, Lost
from .lease import Lease


class Run(Lease):
    """A claimed run of a job: its ``params``, ``attempt`` and lease (renewed by a thread)."""

    def __init__(self, http: Http, answer: Dict[str, Any]) -> None:
        self._path = f"/v1/jobs/{segment(answer['key'])}/{segment(answer['id'])}"
        super().__init__(http, answer["key"], self._path + "/renew")
        self.params: Any = answer["params"]
        self.attempt: int = answer["attempt"]

    def complete(self, result: str = "succeeded", error: Optional[str] = None) -> None:
        """Ends the run: ``succeeded``, ``failed`` (an attempt spent: retried after its backoff,
        dead when the attempts are spent) or ``released_back`` (no attempt spent). A lost run
        sends nothing: it has lapsed, and the job runs again."""
        self._stop_renewing()
        if self.lost.is_set():
            return
        body: Dict[str, Any] = {"token": self.token, "result": result}
        if error is not None:
            body["error"] = error[:1000]
        try:
            self._http.call("POST", self._path + "/complete", body)
        except Lost:
            self.lost.set()


def claim(
    http: Http, keys: List[str], wait: str, ttl: str, sent_clock: Callable[[], float]
) -> Optional[Run]:
    """Claims the next ready job of ``keys``, waiting up to ``wait``; ``None`` if none came."""
    sent = sent_clock()
    status, answer = http.call("POST", "/v1/claims", {"keys": keys, "wait": wait, "ttl": ttl})
    if status == 204:
        return None
    run = Run(http, answer)
    run._hold(answer, sent)
    return run


def work(
    http: Http,
    keys: List[str],
    handler: Callable[[Run], Any],
    *,
    wait: str,
    ttl: str,
    stop: threading.Event,
    max_jobs: Optional[int],
    sent_clock: Callable[[], float],
) -> int:
    """Claims and runs jobs until ``stop`` is set (or ``max_jobs`` ran); how many ran."""
    ran = 0
    while not stop.is_set() and (max_jobs is None or ran < max_jobs):
        try:
            run = claim(http, keys, wait, ttl, sent_clock)
        except Lost:
            continue
        except Error as error:
            if not error.transient:
                raise
            stop.wait(1.0)
            continue
        if run is None:
            continue
        ran += 1
        try:
            handler(run)
        except Exception as error:  # noqa: BLE001 - a handler's failure is the job's
            run.complete("failed", f"{type(error).__name__}: {error}")
        else:
            run.complete("succeeded")
    return ran


def submit_ask(params: Any, options: Dict[str, Any]) -> Dict[str, Any]:
    """The body of a submit, without the options left out."""
    body: Dict[str, Any] = {"params": {} if params is None else params}
    for name, value in options.items():
        if value is not None and value is not False:
            body[name] = value
    return body
