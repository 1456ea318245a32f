"""Run once: ``client.once("charge/1", fn)`` runs ``fn`` unless a run of it already succeeded
on the key. Duplicates wait for the running one, then skip if it succeeded or try in turn if it
failed; the verdicts are the server's (``baton once``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from ._http import Http, segment, take
from .turn import Turn


@dataclass
class OnceResult:
    """What ``once`` did: ``ran`` and ``value`` (what ``fn`` returned), or the verdict that said
    there was nothing to do (``skipped``: a success is remembered; ``replay``: the step is
    done)."""

    verdict: str
    ran: bool
    value: Any = None
    attempt: int = 0


def once(
    http: Http, key: str, fn: Callable[[Turn], Any], ask: Dict[str, Any]
) -> OnceResult:
    """Runs ``fn(turn)`` holding the key's turn if the verdict is to run: its return records the
    success, an exception spends an attempt (and is raised again). ``Dead`` and ``OutOfOrder``
    are raised when it may not run."""
    answer, sent = take(http, f"/v1/once/{segment(key)}", dict(ask))
    if answer["verdict"] != "run":
        return OnceResult(verdict=answer["verdict"], ran=False)
    turn = Turn(http, key, {})
    turn.hold(answer, sent)
    try:
        value = fn(turn)
    except BaseException:
        turn.release("failed")
        raise
    turn.release("succeeded")
    return OnceResult(verdict="run", ran=True, value=value, attempt=answer.get("attempt", 1))


def once_ask(
    seq: Optional[int],
    max_attempts: Optional[int],
    retain: Optional[str],
    ttl: str,
    timeout: Optional[str],
    context: Optional[str],
) -> Dict[str, Any]:
    """The body of a once request, without the fields left out."""
    ask: Dict[str, Any] = {"ttl": ttl}
    for name, value in [
        ("seq", seq),
        ("max_attempts", max_attempts),
        ("retain", retain),
        ("timeout", timeout),
        ("context", context),
    ]:
        if value is not None:
            ask[name] = value
    return ask
