"""The asyncio variant: ``baton.aio.Client`` has the same calls as ``baton.Client``, awaitable.

    async with client.turn("deploy/prod", ttl=30) as t:
        await deploy(fence=t.fence)

Requests run in the default executor, and each lease is renewed by its thread as in the
blocking client, so a busy event loop never delays a renewal. ``once`` and ``worker`` take
coroutine functions.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable, Dict, List, Optional

from . import Client as _Blocking
from . import Duration, duration
from ._http import segment, take
from .jobs import Run
from .once import OnceResult
from .turn import Turn
from .values import Value


async def _off_loop(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))


class AsyncTurn:
    """``async with client.turn(...) as t``: a ``baton.Turn`` taken and ended off the loop."""

    def __init__(self, turn: Turn) -> None:
        self._turn = turn

    async def __aenter__(self) -> Turn:
        return await _off_loop(self._turn.acquire)

    async def __aexit__(self, kind: Any, error: Any, trace: Any) -> bool:
        await _off_loop(self._turn.release, "failed" if kind else "succeeded")
        return False


class AsyncValues:
    """``client.values`` of the asyncio client."""

    def __init__(self, blocking: _Blocking) -> None:
        self._values = blocking.values

    async def get(self, name: str) -> Optional[Value]:
        return await _off_loop(self._values.get, name)

    async def set(self, name: str, value: str, **options: Any) -> int:
        return await _off_loop(self._values.set, name, value, **options)

    async def delete(self, name: str, **options: Any) -> int:
        return await _off_loop(self._values.delete, name, **options)


class Client:
    """The asyncio client of ``baton serve`` (``url`` default ``BATON_URL``, ``token``
    default ``BATON_TOKEN``)."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None) -> None:
        self._blocking = _Blocking(url, token)
        self.values = AsyncValues(self._blocking)

    def turn(self, key: str, **options: Any) -> AsyncTurn:
        """``async with client.turn(key, ttl=30) as t``: ``baton acquire``'s flags."""
        return AsyncTurn(self._blocking.turn(key, **options))

    async def once(
        self, key: str, fn: Callable[[Turn], Awaitable[Any]], **options: Any
    ) -> OnceResult:
        """Awaits ``fn(turn)`` unless a run of it already succeeded on ``key``."""
        http = self._blocking._http
        ask: Dict[str, Any] = {"ttl": duration(options.pop("ttl", 30))}
        for name in ("retain", "timeout"):
            if options.get(name) is not None:
                ask[name] = duration(options.pop(name))
        ask.update({k: v for k, v in options.items() if v is not None})
        answer, sent = await _off_loop(take, http, f"/v1/once/{segment(key)}", ask)
        if answer["verdict"] != "run":
            return OnceResult(verdict=answer["verdict"], ran=False)
        turn = Turn(http, key, {})
        await _off_loop(turn.hold, answer, sent)
        try:
            value = await fn(turn)
        except BaseException:
            await _off_loop(turn.release, "failed")
            raise
        await _off_loop(turn.release, "succeeded")
        return OnceResult(verdict="run", ran=True, value=value, attempt=answer.get("attempt", 1))

    async def submit(self, key: str, params: Any = None, **options: Any) -> Dict[str, Any]:
        return await _off_loop(self._blocking.submit, key, params, **options)

    async def job(self, key: str, id: str) -> Dict[str, Any]:
        return await _off_loop(self._blocking.job, key, id)

    async def wait_job(self, key: str, id: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        return await _off_loop(self._blocking.wait_job, key, id, timeout)

    async def worker(
        self,
        keys: List[str],
        handler: Callable[[Run], Awaitable[Any]],
        *,
        ttl: Duration = 30,
        wait: Duration = 20,
        stop: Optional[asyncio.Event] = None,
        max_jobs: Optional[int] = None,
    ) -> int:
        """Runs jobs of ``keys`` with ``await handler(run)`` until ``stop`` is set."""
        from .jobs import claim
        from . import _clock

        http, ran = self._blocking._http, 0
        while not (stop and stop.is_set()) and (max_jobs is None or ran < max_jobs):
            run = await _off_loop(claim, http, keys, duration(wait), duration(ttl), _clock.now)
            if run is None:
                continue
            ran += 1
            try:
                await handler(run)
            except Exception as error:  # noqa: BLE001 - a handler's failure is the job's
                await _off_loop(run.complete, "failed", f"{type(error).__name__}: {error}")
            else:
                await _off_loop(run.complete, "succeeded")
        return ran

    async def check(self, key: str, fence: int, min_left: Optional[Duration] = None) -> Dict[str, Any]:
        return await _off_loop(self._blocking.check, key, fence, min_left)


__all__ = ["Client", "AsyncTurn", "AsyncValues"]
