"""The operations layer: how people and tools reach a running topology (Storm's ``command``
line, UI, REST API and metrics export).

:mod:`~squall.ops.cli` and :mod:`~squall.ops.command` (``squall run``, ``submit``, ``list``...),
:mod:`~squall.ops.control` (the authenticated control socket those commands talk to),
:mod:`~squall.ops.ui` (Storm UI and its REST API) and :mod:`~squall.ops.prometheus`. It sits on
top: nothing below imports it.
"""
