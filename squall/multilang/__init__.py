"""Storm's multilang protocol: spouts and bolts written in any language, run as subprocesses
that talk JSON (or msgpack) over their stdin and stdout — existing pystorm and streamparse
components, unchanged.

* :mod:`~squall.multilang.serializer`: framing (JSON documents ended by ``end``; msgpack).
* :mod:`~squall.multilang.shell_process`: one subprocess: handshake, pipes, death, kill.
* :mod:`~squall.multilang.protocol`: what both components share (handshake, timeout, logs).
* :mod:`~squall.multilang.shell_bolt` / :mod:`~squall.multilang.shell_spout`: the components.
"""

from squall.multilang.shell_bolt import ShellBolt
from squall.multilang.shell_spout import ShellSpout

__all__ = ["ShellBolt", "ShellSpout"]
