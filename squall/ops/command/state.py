"""What ``squall run`` and ``squall submit`` say about a stateful topology's state before they
submit it, and ``--fresh``."""

from __future__ import annotations

import sys
import time
from typing import Any

from squall.api.state.provider import Commit, StateProviderError, provider_for
from squall.api.storm_topology import StormTopology
from squall.ops.command import UsageError


def announce_state(name: str, topology: StormTopology, conf: dict[str, Any], fresh: bool) -> None:
    """For a topology with stateful components, one line on stderr: "resuming NAME from the
    state committed at TIME (checkpoint N) in WHERE", or "starting NAME with empty state in
    WHERE". With ``fresh``, the state there is dropped first, after a line saying what is.

    Raises :class:`UsageError` for ``fresh`` on a topology without state, or when the state
    cannot be dropped. A location that cannot be read is left for the submission to report."""
    if not topology.checkpointed:
        if fresh:
            raise UsageError(f"--fresh: topology {name!r} has no stateful component: it keeps no state to drop")
        return
    provider = provider_for(conf, name)
    try:
        try:
            commit = provider.last_commit()
        except StateProviderError:
            if fresh:
                raise
            return  # unreachable, or another topology's: the submission says so, in its own words
        if fresh:
            what = f"committed at {_when(commit)}" if commit is not None else "nothing committed yet"
            print(f"squall: --fresh: dropping the state of {name!r} in {provider.location} ({what})", file=sys.stderr)
            provider.drop()
            commit = None
    except StateProviderError as e:
        raise UsageError(f"--fresh: {e}") from None
    finally:
        provider.close()
    if commit is None:
        print(f"squall: starting {name!r} with empty state in {provider.location}", file=sys.stderr)
    else:
        print(f"squall: resuming {name!r} from the state committed at {_when(commit)} in {provider.location} "
              f"(--fresh starts over)", file=sys.stderr)


def _when(commit: Commit) -> str:
    """``2026-11-26 04:10:03 (checkpoint 42)``, local time."""
    at = "an unrecorded time" if commit.at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(commit.at))
    return f"{at} (checkpoint {commit.txid})"
