"""The checks of a windowed bolt, before anything runs: at ``create_topology``
(:func:`check_windowed_bolt`) and at submission (:func:`check_topology_windows`).

Storm checks a window in its executor's ``prepare`` (``WindowedBoltExecutor.validate``), once
the topology runs; Squall checks the same things earlier, with an
:class:`~squall.InvalidTopologyError` naming the component:

* the window's ``Duration`` parts against ``topology.message.timeout.secs``: the length plus
  the sliding interval when both are durations, else the one that is (``length + sliding >
  timeout`` is refused); its ``Count`` parts likewise against ``topology.max.spout.pending``
  (when set). Both values come from the bolt's configuration over the topology's: at
  ``create_topology`` only what the component's configuration sets is known, so the check
  runs there for that, and at submission (``Nimbus.submit_topology``, next to the state
  checks) against the merged configuration. A stateful windowed bolt is exempt, as Storm's
  persistent one is: its tuples are acked at checkpoints, not when they leave the window.
* (``create_topology`` only) a window length is set; the configuration keys hold valid
  values; a late tuple stream needs event time and must be a declared stream of the bolt;
  every input stream declares the timestamp field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from squall.api.config import Config
from squall.api.errors import InvalidTopologyError
from squall.api.system_ids import CHECKPOINT_STREAM
from squall.api.windowing.config import Count, Duration, WindowConfig

if TYPE_CHECKING:
    from squall.api.storm_topology import StormTopology



def check_windowed_bolt(cid: str, conf: dict[str, Any], extractor: Callable[..., Any] | None,
                        inputs: dict[tuple[str, str], Any], outputs: dict[str, dict[str, Any]],
                        stateful: bool) -> None:
    """``create_topology``'s checks of windowed bolt ``cid`` (see the module), with its final
    component configuration ``conf`` (the window's keys, then the bolt's configuration, then
    ``add_configuration``'s), its subscriptions (already checked) and every component's
    declared streams. Adds to ``conf`` the tick frequency the window needs, unless it is set."""
    where = f"windowed bolt {cid!r}"
    try:
        window = WindowConfig.from_conf(conf)
    except (TypeError, ValueError) as e:
        raise InvalidTopologyError(f"{where}: {e}") from None
    if window.length is None:
        raise InvalidTopologyError(f"{where}: the window has no length: call with_window(...) or "
                                   "with_tumbling_window(...)")
    event_time = extractor is not None or window.timestamp_field is not None
    late = window.late_tuple_stream
    if late is not None:
        if not event_time:
            raise InvalidTopologyError(f"{where}: a late tuple stream ({late!r}) needs event time: call "
                                       "with_timestamp_field(...) or with_timestamp_extractor(...)")
        if late not in outputs[cid]:
            raise InvalidTopologyError(f"{where}: its late tuple stream {late!r} is not declared (declared: "
                                       f"{sorted(outputs[cid])}); set it with with_late_tuple_stream(...)")
    if extractor is None and window.timestamp_field is not None:
        name = window.timestamp_field
        for source, stream in inputs:
            if stream == CHECKPOINT_STREAM:
                continue
            fields = outputs[source][stream].fields
            if name not in fields:
                raise InvalidTopologyError(
                    f"{where}: its timestamp field {name!r} is not declared by its input stream "
                    f"{source!r}:{stream!r} (fields {fields.to_list()})")
    check_window_limits(where, window, conf, stateful)
    if conf.get(Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS) is None:
        conf[Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS] = tick_secs(window, event_time)


def check_topology_windows(name: str, topology: StormTopology, conf: dict[str, Any]) -> None:
    """The submission's check of every windowed bolt of ``topology`` against ``conf`` (the
    topology's merged configuration) under each bolt's own (see the module)."""
    for spec in topology.bolts:
        if WindowConfig.describes(spec.conf):
            check_window_limits(f"topology {name!r}: windowed bolt {spec.id!r}", WindowConfig.from_conf(spec.conf),
                                {**conf, **spec.conf}, spec.stateful)


def check_window_limits(where: str, window: WindowConfig, conf: dict[str, Any], stateful: bool) -> None:
    """Storm's ``WindowedBoltExecutor.validate``: the ``Duration`` parts of the window against
    the message timeout, its ``Count`` parts against the max spout pending; each only when
    ``conf`` sets that value (as a number). Nothing for a stateful windowed bolt."""
    if stateful:
        return
    parts = [("window length", window.length), ("sliding interval", window.sliding)]
    timeout = conf.get(Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS)
    durations = [(what, p) for what, p in parts if isinstance(p, Duration)]
    if durations and _is_number(timeout) and sum(p.millis for _, p in durations) > timeout * 1000:
        raise InvalidTopologyError(
            f"{where}: {_describe(durations, 'ms')} is more than topology.message.timeout.secs ({timeout} s): "
            "a tuple is acked "
            "only when it leaves the window, so it would time out and be replayed while in it; raise the "
            "timeout or shorten the window")
    pending = conf.get(Config.TOPOLOGY_MAX_SPOUT_PENDING)
    counts = [(what, p) for what, p in parts if isinstance(p, Count)]
    if counts and _is_number(pending) and sum(p.value for _, p in counts) > pending:
        raise InvalidTopologyError(
            f"{where}: {_describe(counts, 'tuples')} is more than topology.max.spout.pending ({pending}): a tuple is "
            "acked only when it leaves the window, so a spout would stop before the window fills; raise the "
            "max spout pending or shorten the window")


def tick_secs(window: WindowConfig, event_time: bool) -> float | None:
    """How often the executor of ``window`` needs a tick tuple: every watermark interval in
    event time; in processing time, a tenth of its shortest ``Duration`` (10 ms to 1 s), or
    never for a window of counts only."""
    if event_time:
        return window.watermark_interval.millis / 1000
    spans = [p.millis for p in (window.length, window.sliding) if isinstance(p, Duration)]
    if not spans:
        return None
    return min(max(min(spans) / 10, 10), 1000) / 1000


def _describe(parts: list[tuple[str, Count | Duration]], unit: str) -> str:
    size = [p.millis if isinstance(p, Duration) else p.value for _, p in parts]
    text = " + ".join(f"{what} {p!r}" for what, p in parts)
    return f"{text} ({sum(size)} {unit})"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
