"""Authentication and encryption of a topology's links: ZeroMQ CURVE, one key pair per topology.

Every ZeroMQ link of a topology — master <-> workers, worker <-> worker (tuples and
backpressure), the command line <-> the control socket — uses CURVE (elliptic-curve
encryption and authentication, libzmq's own, through pyzmq):

* the driver generates a :class:`LinkKeys` pair per topology (:meth:`LinkKeys.generate`) and
  hands it to the workers through the channel that starts them — a worker process's stdin, a
  Spark task's closure — never over a socket; the control socket has a pair of its own, kept
  in the registry entry (readable by its owner only);
* every server socket (bound) proves it holds the secret key, and lets in only clients that
  prove they hold it too: a ZAP handler (pyzmq's :class:`~zmq.auth.thread.ThreadAuthenticator`)
  accepts the topology's public key and nothing else. The handshake happens before ZeroMQ
  delivers any message, so a peer without the keys is refused before any byte of it is decoded
  — and another topology's traffic on a re-used port is refused the same way;
* servers require the ZAP handler (``ZAP_ENFORCE_DOMAIN``): should it be missing, connections
  are refused, never let through;
* refused handshakes are logged with the socket they were refused on
  (:meth:`LinkSecurity.log_refusals`, read from a monitor socket by the thread that owns the
  server socket's poller; libzmq's events name the local endpoint, not the peer's, and a
  connection whose first bytes are not ZMTP at all is closed by libzmq without an event).

``topology.messaging.secure = False`` turns this off (keys are then None): plain TCP, for
measuring what security costs on a machine nobody else can reach.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.auth.thread
from zmq.utils.monitor import parse_monitor_message

from squall.api.config import Config
from squall.api.errors import SecurityError

log = logging.getLogger("squall.security")

# The ZAP domain of Squall's server sockets.
_DOMAIN = "squall"
_REFUSALS = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "authentication failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "protocol error (not a CURVE peer of this topology)",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed or abandoned",
}
_REFUSAL_EVENTS = 0
for _event in _REFUSALS:
    _REFUSAL_EVENTS |= _event


def require_curve() -> None:
    """Raise :class:`SecurityError` if this machine's ZeroMQ cannot do CURVE."""
    if not zmq.has("curve"):
        raise SecurityError(
            f"this machine's ZeroMQ (libzmq {zmq.zmq_version()}, pyzmq {zmq.__version__}) has no CURVE "
            "support, which Squall uses to authenticate and encrypt a topology's links: install a pyzmq "
            "built with libsodium (PyPI's wheels are), or set topology.messaging.secure=false to run "
            "without authentication or encryption on a machine nobody else can reach"
        )


@dataclass(frozen=True)
class LinkKeys:
    """A CURVE key pair, Z85-encoded (40 characters each). Whoever holds ``secret`` is one of
    the topology's own processes; keep it out of logs, configs and command lines."""

    public: str
    secret: str

    @classmethod
    def generate(cls) -> LinkKeys:
        require_curve()
        public, secret = zmq.curve_keypair()
        return cls(public.decode("ascii"), secret.decode("ascii"))

    @classmethod
    def for_topology(cls, conf: dict[str, Any]) -> LinkKeys | None:
        """A new pair when the topology's links are secure (``topology.messaging.secure``),
        else None."""
        return cls.generate() if conf[Config.TOPOLOGY_MESSAGING_SECURE] else None

    def to_json(self) -> str:
        return json.dumps({"public": self.public, "secret": self.secret})

    @classmethod
    def from_json(cls, text: str) -> LinkKeys | None:
        """The pair :meth:`to_json` wrote; None for ``null`` (links not secure)."""
        data = json.loads(text)
        if data is None:
            return None
        if not (isinstance(data, dict) and all(isinstance(data.get(k), str) and len(data[k]) == 40
                                               for k in ("public", "secret"))):
            raise SecurityError("malformed link keys: expected {'public': Z85, 'secret': Z85}")
        return cls(data["public"], data["secret"])


def keys_json(keys: LinkKeys | None) -> str:
    """``keys`` as one line of JSON (``null`` when links are not secure)."""
    return "null" if keys is None else keys.to_json()


class _OneKey:
    """The ZAP credentials provider: the topology's public key, and no other."""

    def __init__(self, public: str) -> None:
        self._public = public.encode("ascii")

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self._public


class LinkSecurity:
    """The security of one ZeroMQ context's sockets (see the module's docstring).

    Create it right after the context and before any socket binds or connects; call
    :meth:`server` on every socket that binds and :meth:`client` on every socket that connects,
    before it does; :meth:`close` before terminating the context (the ZAP handler holds a
    socket of it). With ``keys`` None every call leaves the socket as it is.

    :attr:`monitors` are sockets to poll (from the thread that polls the servers); when one is
    readable, :meth:`log_refusals` logs what it says. Never raises on a malformed event.
    """

    def __init__(self, context: zmq.Context, keys: LinkKeys | None, owner: str) -> None:
        self.keys = keys
        self.owner = owner  # for the log: "the master of topology 'x'", "worker 1 of topology 'x'"
        self.monitors: list[zmq.Socket] = []
        self._described: dict[zmq.Socket, str] = {}
        self._authenticator: zmq.auth.thread.ThreadAuthenticator | None = None
        if keys is not None:
            require_curve()
            self._authenticator = zmq.auth.thread.ThreadAuthenticator(context, log=log.getChild("zap"))
            self._authenticator.start()
            self._authenticator.configure_curve_callback(_DOMAIN, _OneKey(keys.public))

    @property
    def secure(self) -> bool:
        return self.keys is not None

    def server(self, sock: zmq.Socket, what: str) -> None:
        """Make ``sock`` (about to bind; ``what`` names it in the log, e.g. "worker port") a
        CURVE server that admits the topology's key only."""
        if self.keys is None:
            return
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.keys.secret.encode("ascii"))
        sock.setsockopt(zmq.ZAP_DOMAIN, _DOMAIN.encode("ascii"))
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
        monitor = sock.get_monitor_socket(_REFUSAL_EVENTS)
        self.monitors.append(monitor)
        self._described[monitor] = what

    def client(self, sock: zmq.Socket) -> None:
        """Make ``sock`` (about to connect) a CURVE client holding the topology's keys and
        accepting only a server that holds them too."""
        if self.keys is None:
            return
        public = self.keys.public.encode("ascii")
        sock.setsockopt(zmq.CURVE_SERVERKEY, public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.keys.secret.encode("ascii"))

    def log_refusals(self, monitor: zmq.Socket) -> int:
        """Log every refused handshake ``monitor`` reports (without waiting); return how many."""
        refused = 0
        while True:
            try:
                frames = monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return refused
            try:
                event = parse_monitor_message(frames)
                why = _REFUSALS.get(event["event"])
                if why is None:
                    continue
                endpoint = event["endpoint"].decode(errors="replace")
            except Exception as e:  # noqa: BLE001 - a monitor's oddity must not stop its reader
                log.warning("%s: unreadable monitor event %r: %s", self.owner, frames, e)
                continue
            refused += 1
            log.warning("%s refused a connection on its %s (%s): %s", self.owner, self._described[monitor],
                        endpoint, why)

    def close(self) -> None:
        """Stop the ZAP handler and close the monitors (before the context is terminated)."""
        for monitor in self.monitors:
            monitor.close(linger=0)
        self.monitors.clear()
        if self._authenticator is not None:
            self._authenticator.stop()
            self._authenticator = None
