"""How Squall builds a redis-py client: the settings shared by the Redis state provider and the
Redis connectors (timeouts on connecting and on every reply, no silent retries), and the
address a message names."""

from __future__ import annotations

from typing import Any


def redis_address(host: str, port: int, unix_socket_path: str | None) -> str:
    """``host:port``, or ``unix:PATH`` when a unix socket is used: what error messages name."""
    return f"unix:{unix_socket_path}" if unix_socket_path else f"{host}:{port}"


def redis_settings(host: str, port: int, unix_socket_path: str | None, db: int, password: str | None,
                   timeout_secs: float, **more: Any) -> dict[str, Any]:
    """Keyword arguments for ``redis.Redis``: connecting and waiting for any reply take at most
    ``timeout_secs``, and a failed call is not retried by redis-py (whose default retries with
    backoff for many seconds): the caller decides what to do, within the timeout."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return {
        "host": host, "port": port, "unix_socket_path": unix_socket_path, "db": db, "password": password,
        "socket_timeout": timeout_secs, "socket_connect_timeout": timeout_secs,
        "retry": Retry(NoBackoff(), 0), **more,
    }


def connect_failure(address: str, error: Exception, password: str | None) -> str:
    """Why a client could not talk to Redis at ``address``, in words that name the fix: a
    refused or missing password is not "cannot reach"."""
    import redis

    if isinstance(error, redis.AuthenticationError):
        if password is None:  # the server's words are about AUTH and HELLO: no help here
            return f"Redis at {address} requires a password: give password="
        return f"Redis at {address} refused the password ({error}): check password="
    return f"cannot reach Redis at {address}: {error} (is redis-server running there?)"
