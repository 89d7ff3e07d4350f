"""What the command prints about a running topology: its one-line status (``squall run``'s
live line), its per-component summary (at exit) and uptimes (``squall list``). Each takes a
:class:`~squall.runtime.info.TopologyInfo` (:meth:`~squall.cluster.nimbus.Nimbus.topology_info`)."""

from __future__ import annotations

from squall.api.system_ids import is_system_id
from squall.runtime.info import TopologyInfo
from squall.runtime.stats import since_restart


def status_line(info: TopologyInfo) -> str:
    """Name, status, uptime and the totals of the user's components and streams: tuples
    emitted, spout trees acked and failed; and the errors recorded (all of them)."""
    comps = [c for cid, c in info.components.items() if not is_system_id(cid)]
    emitted = sum(counts.emitted for c in comps for stream, counts in c.streams.items() if not is_system_id(stream))
    acked = sum(c.acked for c in comps if c.type == "spout")
    failed = sum(c.failed for c in comps if c.type == "spout")
    errors = sum(c.error_count for c in info.components.values())
    return (f"{info.name} {info.status} {info.uptime_secs:.0f}s | emitted {emitted:,} | "
            f"spout acked {acked:,} failed {failed:,} | errors {errors:,}")


def format_summary(info: TopologyInfo) -> str:
    """A per-component table of the topology's statistics (counted across worker restarts and
    rebalances), the current run's counts where they differ, and the last error of each."""
    header = (f"{'component':<20} {'type':<5} {'tasks':>5} {'emitted':>10} {'transferred':>11} {'acked':>10} "
              f"{'failed':>7} {'exec ms':>8} {'proc ms':>8} {'compl ms':>8} {'capacity':>8}")
    lines = [header, "-" * len(header)]
    for cid, c in info.components.items():
        complete = f"{c.complete_latency_ms:.3f}" if c.type == "spout" else ""
        capacity = f"{c.capacity:.3f}" if c.type == "bolt" else ""
        lines.append(
            f"{cid:<20} {c.type:<5} {c.num_tasks:>5} {c.emitted:>10,} {c.transferred:>11,} "
            f"{c.acked:>10,} {c.failed:>7,} {c.execute_latency_ms:>8.3f} {c.process_latency_ms:>8.3f} "
            f"{complete:>8} {capacity:>8}"
        )
    since = [f"{cid} emitted {now.emitted:,} acked {now.acked:,} failed {now.failed:,}"
             for cid, now in since_restart(info).items()]
    if since:
        lines.append("since the last worker restart or rebalance: " + "; ".join(since))
    for cid, c in info.components.items():
        if c.errors:
            last = c.errors[-1]
            lines.append(f"\n{c.error_count:,} error(s) in {cid!r}; the last (task {last.task}):\n"
                         f"{last.error.rstrip()}")
    return "\n".join(lines)
