"""Shared values: small values that parallel jobs share, with compare-and-swap and fences
(``baton kv``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from ._http import Http, segment
from .errors import Error


@dataclass
class Value:
    """A value as read: its text and version (what ``if_version`` compares)."""

    name: str
    value: str
    version: int
    json: bool
    context: str
    fence: Optional[int]
    expires_wall_ms: Optional[int]


class Values:
    """``client.values``: get, set and delete shared values."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def get(self, name: str) -> Optional[Value]:
        """The value, or ``None`` when there is none."""
        try:
            _, answer = self._http.call("GET", self._path(name))
        except Error as error:
            if error.code == "missing":
                return None
            raise
        return Value(
            name=answer["name"],
            value=answer["value"],
            version=answer["version"],
            json=answer["json"],
            context=answer["context"],
            fence=answer.get("fence"),
            expires_wall_ms=answer.get("expires_wall_ms"),
        )

    def set(
        self,
        name: str,
        value: str,
        *,
        if_version: Optional[int] = None,
        if_absent: bool = False,
        fence: Optional[int] = None,
        ttl: Optional[str] = None,
        json: bool = False,
        context: Optional[str] = None,
    ) -> int:
        """Sets the value; its new version. ``if_version``: only if the version is still this
        one; ``if_absent``: only if there is none (else ``PreconditionFailed``); ``fence``:
        refused below the fence that last wrote it (``StaleFence``)."""
        body: Dict[str, object] = {"value": value, "json": json}
        if ttl is not None:
            body["ttl"] = ttl
        if context is not None:
            body["context"] = context
        headers = _conditions(if_version, if_absent, fence)
        _, answer = self._http.call("PUT", self._path(name), body, headers=headers)
        return int(answer["version"])

    def delete(
        self, name: str, *, if_version: Optional[int] = None, fence: Optional[int] = None
    ) -> int:
        """Deletes the value (an admin token's); raises ``Error`` with code ``missing`` when
        there is none."""
        headers = _conditions(if_version, False, fence)
        _, answer = self._http.call("DELETE", self._path(name), headers=headers)
        return int(answer["version"])

    @staticmethod
    def _path(name: str) -> str:
        return f"/v1/values/{segment(name)}"


def _conditions(if_version: Optional[int], if_absent: bool, fence: Optional[int]) -> Dict[str, str]:
    headers: Dict[str, str] = {}
    if if_version is not None:
        headers["If-Match"] = f'"{if_version}"'
    if if_absent:
        headers["If-None-Match"] = "*"
    if fence is not None:
        headers["Baton-Fence"] = str(fence)
    return headers
