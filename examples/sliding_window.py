"""Top words of a sliding window in event time: the last 10 seconds, every 2 seconds.

    events (spout) --shuffle--> top_words (windowed bolt) --global--> print

* ``events`` replays a generated stream of words, each carrying its event time (``ts``,
  milliseconds) in the tuple. Event time runs ``SPEEDUP`` times faster than the wall clock, so
  a minute of events takes six seconds; the timestamps arrive up to 0.8 s out of order. It is
  a reliable spout: every word has a message id and is replayed if it fails.
* ``top_words`` is a windowed bolt in event time:
  ``with_window(Duration(10), Duration(2)).with_timestamp_field("ts").with_lag(Duration(1))``.
  The watermark (the newest timestamp minus the 1 s lag) moves every 100 ms of wall clock;
  each window fires once the watermark has passed its end, and emits its top words.
  The words are acked as they leave the windows.
* ``print`` prints one line per window.

In event time the windows depend on the data only: however fast or slow the topology runs,
the same stream gives the same windows (the lag covers the disorder, so no word is late).

Run it:  squall run examples/sliding_window.py --duration 10
    or:  python examples/sliding_window.py
"""

from __future__ import annotations

import random
import time
from collections import Counter

from squall import BaseWindowedBolt, BasicBolt, Config, Duration, Spout, TopologyBuilder

WORDS = ("storm squall window stream tuple spout bolt acker watermark event time lag slide tumble count "
         "duration topology worker executor task").split()
EVENTS = 3000  # one word every STEP_MS of event time: a minute
STEP_MS = 20
JITTER_MS = 400  # how far a timestamp strays from its place in the stream
SPEEDUP = 10  # event time per wall-clock time
WINDOW, SLIDE, LAG = Duration(10), Duration(2), Duration(1)
TOP = 3


def events(count: int = EVENTS, seed: int = 11) -> list[tuple[str, int]]:
    """The stream, in arrival order: (word, event timestamp in ms). Word frequencies are skewed
    (the first words of WORDS are the most frequent) and drift, so the top words change."""
    rng = random.Random(seed)
    stream = []
    for i in range(count):
        drift = i * len(WORDS) // count  # the favourite words move along the list
        word = WORDS[(drift + min(int(rng.expovariate(0.5)), len(WORDS) - 1)) % len(WORDS)]
        stream.append((word, JITTER_MS + i * STEP_MS + rng.randint(-JITTER_MS, JITTER_MS)))
    return stream


class EventSpout(Spout):
    """Replays :func:`events` at SPEEDUP times event time; failed words are emitted again."""

    outputs = ["word", "ts"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.events = events()
        self.next = 0
        self.started = time.monotonic()
        self.replay: list[int] = []

    def next_tuple(self):
        if self.replay:
            i = self.replay.pop()
            self.collector.emit(list(self.events[i]), msg_id=i)
            return
        due = int((time.monotonic() - self.started) * 1000 * SPEEDUP / STEP_MS)  # in arrival order
        for i in range(self.next, min(due, len(self.events), self.next + 100)):
            self.collector.emit(list(self.events[i]), msg_id=i)
            self.next = i + 1

    def fail(self, msg_id):
        self.replay.append(msg_id)


def top_words(words: list[str], top: int = TOP) -> list[list]:
    """The ``top`` most frequent words, as [word, count], most frequent first (then by word)."""
    return [[w, c] for w, c in sorted(Counter(words).items(), key=lambda wc: (-wc[1], wc[0]))[:top]]


class TopWords(BaseWindowedBolt):
    """Each window's top words: emits (start, end, [[word, count], ...]), anchored to the window."""

    outputs = ["start", "end", "top"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        self.collector.emit([window.start_timestamp, window.end_timestamp,
                             top_words([t["word"] for t in window.get()])])


def format_window(start: int, end: int, top: list[list]) -> str:
    return f"window ({start / 1000:g} s, {end / 1000:g} s]: " + ", ".join(f"{w}={c}" for w, c in top)


class PrintWindows(BasicBolt):
    def execute(self, tup, collector):
        print(format_window(tup["start"], tup["end"], tup["top"]), flush=True)


def expected_windows(stream: list[tuple[str, int]] | None = None) -> list[tuple[int, int, list[list]]]:
    """The windows of ``stream`` (default: :func:`events`) by Storm's event-time rule, computed
    directly: windows end at multiples of the slide, hold (end - length, end], and fire (if not
    empty) once the watermark, the newest timestamp minus the lag, is past their end."""
    stream = events() if stream is None else stream
    slide, length = SLIDE.millis, WINDOW.millis
    watermark = max(ts for _, ts in stream) - LAG.millis
    end = -(-min(ts for _, ts in stream) // slide) * slide
    result = []
    while end < watermark:
        words = [w for w, ts in sorted(stream, key=lambda e: e[1]) if end - length < ts <= end]
        if words:
            result.append((end - length, end, top_words(words)))
        end += slide
    return result


def build():
    builder = TopologyBuilder()
    builder.set_spout("events", EventSpout())
    windowed = (TopWords().with_window(WINDOW, SLIDE).with_timestamp_field("ts").with_lag(LAG)
                .with_watermark_interval(Duration.milliseconds(100)))
    builder.set_bolt("top_words", windowed).shuffle_grouping("events")
    builder.set_bolt("print", PrintWindows()).global_grouping("top_words")
    return builder.create_topology()


topology = build()
config = Config()

if __name__ == "__main__":
    from squall import LocalCluster

    with LocalCluster() as cluster:
        cluster.submit_topology("sliding_window", config, topology)
        time.sleep(EVENTS * STEP_MS / 1000 / SPEEDUP + 1)  # the whole stream, and its last watermarks
