"""The baseline: word count as a Spark Structured Streaming (micro-batch) query, on the same input.

What a Spark user would write instead of a topology:

    lines -> explode(split(sentence)) as word -> groupBy(word).count()   (update mode, stateful)
          -> foreachBatch sink: the batch's updated counts go into a dict, the visible word counts

The input is the word count benchmark's (benchmarks/wordcount.py's ``make_sentences``: the
sentences of examples/wordcount.py, drawn with a fixed seed). A feeder in this process listens
on 127.0.0.1 and Spark's socket source connects to it. The sentences made available at the
same moment travel as one line: ``last seq \t created \t sentence \x1f sentence ...``, where
``created`` is ``time.time()`` just before the line is written to the socket (the moment the
sentences are made available to the source); the query's first step undoes that grouping
(explode on ``\x1f``), then runs the user's query on one row per sentence.

* Latency: every millisecond the feeder writes the sentences due at ``--rate`` per second
  (5 a line at 5,000/s), for ``--seconds``. The sink notes the wall-clock time at which each
  batch's counts are in the dict (after ``collect()``) and the batch's highest sequence number
  (the aggregation keeps ``max(seq)`` per word next to the count; sequence numbers only grow,
  so the updated words' maxima give the batch's last sentence, and the batch holds every
  sentence after the previous batch's last one). A sentence's latency is its batch's output
  time minus its creation time. Sentences created in the first ``--warmup`` seconds are left
  out, the query is primed (a few sentences, waited for) so that its start-up (code
  generation, first state stores) is not measured, and the throughput run goes first so that
  the JVM is warm. Measured with the default trigger (next batch as soon as the previous one
  is done) and with ``trigger(processingTime="100 milliseconds")``.
* Throughput: the whole list (``--sentences``) is written as fast as the socket takes it
  (1,000 sentences a line); words per second from the first sentence made available until the
  last batch's counts are visible (default trigger).

The source. The socket source (``format("socket")``) was chosen because it runs on loopback
only, needs no files and lets this process decide exactly when each record exists. Its own
part of the latency is small: the line crosses a loopback TCP connection to a reader thread in
the driver, which appends it to an in-memory buffer; the next batch takes everything buffered.
That part is measured (the source's ``includeTimestamp`` receipt time, millisecond
resolution, of each batch's last line) and printed as "the source's own part". The rest --
waiting for the running batch to finish so that the next one can be planned, then running it
(offset log, a shuffle into the state stores, collect, commit log) -- is the micro-batch model
itself, and any source would add to it. One trap: the socket source's partition reader
indexes a ``ListBuffer`` per row (``ListBuffer.apply``, linear), so a batch costs O(rows^2) per
partition -- with one line per sentence, the 200,000-sentence throughput batch took ~54 s
(24k words/s) instead of ~4 s. Hence the grouping into lines, as a producer batches records;
at 5,000 sentences/s it changes nothing else (a line is at most 1 ms of sentences, and the
creation time is taken when the line is written). The alternatives would add delays of their
own: the file source lists its directory once per batch and opens a file per group of records;
the rate source releases rows by whole seconds only (its offsets are seconds since start: up
to 1 s of its own) and does not carry our sentences. The socket source is not fault tolerant,
which does not matter here (no failures are injected).

Spark listens on loopback only (driver host and bind address 127.0.0.1, SPARK_LOCAL_IP, no UI);
``spark.sql.shuffle.partitions`` is set to the number of local cores (2), as a user tuning
this query would: the default, 200, makes every batch run 200 state-store tasks.

Reproduce:
    python benchmarks/structured_streaming.py [--rate 5000] [--seconds 10] [--sentences 200000] [--master local[2]]
From another benchmark:
    from structured_streaming import measure_structured_streaming, loopback_spark_session
    figures = measure_structured_streaming(spark, sentences, rate=5000, duration=10)
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import math
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

PRIMER_SENTENCES = 20  # written and waited for before the measurement: the query's start-up is not measured
TICK = 0.001  # at a fixed rate, the sentences due are written every millisecond, as one line
CHUNK = 1000  # as fast as possible: sentences per line
SEP = "\x1f"  # between the sentences of a line


class _Feeder:
    """Listens on 127.0.0.1; the socket source connects; ``write`` sends sentences made
    available together as one line, ``last seq \\t created \\t sentence \\x1f sentence ...``,
    and remembers each sentence's creation time (index = seq)."""

    def __init__(self):
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(1)
        self.port = self.server.getsockname()[1]
        self.conn: socket.socket | None = None
        self.created: list[float] = []

    def accept(self, timeout: float) -> None:
        self.server.settimeout(timeout)
        self.conn, _ = self.server.accept()
        self.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def write(self, sentences: list[str]) -> None:
        last = len(self.created) + len(sentences) - 1
        now = time.time()
        self.conn.sendall(f"{last}\t{now!r}\t{SEP.join(sentences)}\n".encode())
        self.created.extend(itertools.repeat(now, len(sentences)))

    def close(self) -> None:
        for s in (self.conn, self.server):
            if s is not None:
                s.close()


class _Sink:
    """The foreachBatch function: the batch's updated counts go into ``counts`` (the sink's
    visible output); then the batch's output time and last sequence number are noted."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.batches: list[tuple[float, int, float, int]] = []  # (output time, last seq, its receipt time, batch id)
        self.last_seq = -1
        self.lock = threading.Lock()

    def __call__(self, batch_df, batch_id: int) -> None:
        rows = batch_df.collect()
        if not rows:
            return
        for row in rows:
            self.counts[row["word"]] = row["count"]
        visible = time.time()
        top = max(row["last_seq"] for row in rows)
        received = max(row["last_received"] for row in rows).timestamp()
        with self.lock:
            self.batches.append((visible, top, received, batch_id))
            self.last_seq = top

    def wait_for(self, seq: int, query, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.last_seq < seq:
            if not query.isActive:
                raise RuntimeError(f"the streaming query stopped: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"sentence {seq} not counted after {timeout:g} s (last counted: {self.last_seq})")
            time.sleep(0.005)


def _word_count_query(spark, port: int, sink: _Sink, checkpoint: str, trigger_ms: float | None):
    from pyspark.sql import functions as F

    lines = (spark.readStream.format("socket").option("host", "127.0.0.1").option("port", port)
             .option("includeTimestamp", True).load())
    parts = F.split(lines["value"], "\t", 3)
    sentences = lines.select(
        parts[0].cast("long").alias("seq"),
        lines["timestamp"].alias("received"),
        F.explode(F.split(parts[2], SEP)).alias("sentence"),  # the transport's grouping undone
    )
    # the user's query: sentence -> words -> running count per word
    words = sentences.select(
        "seq", "received", F.explode(F.split(F.trim("sentence"), r"\s+")).alias("word")  # as str.split()
    ).where(F.col("word") != "")
    counts = words.groupBy("word").agg(
        F.count(F.lit(1)).alias("count"), F.max("seq").alias("last_seq"), F.max("received").alias("last_received"))
    writer = counts.writeStream.outputMode("update").foreachBatch(sink).option("checkpointLocation", checkpoint)
    if trigger_ms:
        writer = writer.trigger(processingTime=f"{trigger_ms:g} milliseconds")
    return writer.start()


def measure_structured_streaming(spark, sentences: list[str], rate: float, duration: float,
                                 trigger_ms: float | None = None, warmup: float = 1.0,
                                 timeout: float = 120.0) -> dict:
    """Runs the word count query on ``sentences`` and returns its figures.

    ``rate`` > 0: sentences (``sentences`` cycled) are written at ``rate`` per second for
    ``duration`` seconds; latency figures leave out the first ``warmup`` seconds.
    ``rate`` = 0 or ``math.inf``: ``sentences`` once, as fast as possible (``duration`` unused).
    ``trigger_ms``: None for the default trigger (as soon as possible), else a processing-time trigger.

    Returns a dict: ``words_per_s`` (words made available -> counts visible), ``p50_ms``,
    ``p99_ms``, ``max_ms`` (per sentence: creation -> its batch's counts visible), ``source_p50_ms``
    and ``source_max_ms`` (creation -> receipt by the socket source, each batch's last line),
    ``sentences``, ``words``, ``seconds``, ``measured`` (sentences in the latency figures),
    ``batches``, ``batch_interval_ms`` (median time between batch outputs), ``batch_durations_ms``
    (Spark's progress reports' ``durationMs``, median per phase), ``counts_ok`` (the final counts
    equal a plain count of everything written), ``trigger`` and ``rate``.
    The query, its checkpoint directory and the feeder's socket are gone when it returns.
    """
    if any("\n" in s or "\r" in s or SEP in s for s in sentences):
        raise ValueError("sentences are sent as lines: they must not contain line breaks or \\x1f")
    paced = bool(rate) and math.isfinite(rate)
    if paced and warmup >= duration:
        raise ValueError(f"warmup ({warmup:g} s) leaves nothing of duration ({duration:g} s) to measure")
    feeder, sink = _Feeder(), _Sink()
    checkpoint = tempfile.mkdtemp(prefix="squall-ss-checkpoint-")
    query = None
    try:
        query = _word_count_query(spark, feeder.port, sink, checkpoint, trigger_ms)
        feeder.accept(timeout=60)
        cycle = itertools.cycle(sentences)
        written: list[str] = []

        def write(batch: list[str]) -> None:
            feeder.write(batch)
            written.extend(batch)

        write([next(cycle) for _ in range(PRIMER_SENTENCES)])
        sink.wait_for(PRIMER_SENTENCES - 1, query, timeout)
        first = len(feeder.created)
        batches_before = len(sink.batches)
        if paced:
            start, n, total = time.perf_counter(), 0, int(rate * duration)
            tick = start
            while n < total:
                tick += TICK
                delay = tick - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                else:
                    tick -= delay  # behind: no catching up on ticks (the sentences due are caught up on)
                due = min(total, int((time.perf_counter() - start) * rate))
                if due > n:
                    write([next(cycle) for _ in range(due - n)])
                    n = due
        else:
            for i in range(0, len(sentences), CHUNK):
                write(sentences[i:i + CHUNK])
        last = len(feeder.created) - 1
        sink.wait_for(last, query, timeout)
        time.sleep(0.1)  # the last batch's progress report comes after its output
        progress = [p for p in query.recentProgress if p.batchId >= sink.batches[batches_before][3]]
    finally:
        if query is not None:
            query.stop()
        feeder.close()
        shutil.rmtree(checkpoint, ignore_errors=True)

    created = feeder.created
    batches = sink.batches[batches_before:]
    latencies: list[float] = []
    source: list[float] = []
    prev = first - 1
    measure_from = created[first] + (warmup if paced else 0.0)
    for visible, top, received, _ in batches:
        latencies.extend(visible - created[seq] for seq in range(prev + 1, top + 1) if created[seq] >= measure_from)
        source.append(max(0.0, received - created[top]))
        prev = top
    timed_words = sum(len(s.split()) for s in written[first:])
    elapsed = batches[-1][0] - created[first]
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [latencies[0]] * 99
    intervals = [b[0] - a[0] for a, b in itertools.pairwise(batches)]
    expected: dict[str, int] = {}
    for s in written:
        for w in s.split():
            expected[w] = expected.get(w, 0) + 1
    return {
        "trigger": f"processingTime={trigger_ms:g} ms" if trigger_ms else "default (as soon as possible)",
        "rate": rate if paced else math.inf,
        "sentences": len(created) - first,
        "words": timed_words,
        "seconds": elapsed,
        "words_per_s": timed_words / elapsed,
        "measured": len(latencies),
        "p50_ms": cuts[49] * 1000,
        "p99_ms": cuts[98] * 1000,
        "max_ms": max(latencies) * 1000,
        "source_p50_ms": statistics.median(source) * 1000,
        "source_max_ms": max(source) * 1000,
        "batches": len(batches),
        "batch_interval_ms": statistics.median(intervals) * 1000 if intervals else float("nan"),
        "counts_ok": sink.counts == expected,
        # where a batch's time goes, median ms over the measured batches (Spark's own progress reports)
        "batch_durations_ms": {key: statistics.median(p.durationMs.get(key, 0) for p in progress)
                               for key in sorted({k for p in progress for k in p.durationMs})},
    }


def loopback_spark_session(master: str = "local[2]", shuffle_partitions: int | None = None):
    """A SparkSession that listens on 127.0.0.1 only, with no UI, using this Python for workers."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    if shuffle_partitions is None:
        cores = master[len("local["):-1] if master.startswith("local[") else ""
        shuffle_partitions = os.cpu_count() if cores == "*" else int(cores) if cores.isdigit() else 2
    spark = (SparkSession.builder.master(master).appName("squall-structured-streaming-baseline")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")  # the socket source warns that it is not for production
    return spark


def _make_sentences(n: int) -> list[str]:
    """benchmarks/wordcount.py's input (imported by path: this directory is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "benchmarks_wordcount", os.path.join(os.path.dirname(os.path.abspath(__file__)), "wordcount.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_sentences(n)


def describe(label: str, f: dict) -> None:
    print(f"  {label:<30} {f['measured']:>7,} sentences   p50 {f['p50_ms']:7.1f} ms   p99 {f['p99_ms']:7.1f} ms   "
          f"max {f['max_ms']:7.1f} ms")
    print(f"  {'':<30} {f['batches']:>7,} batches, one every {f['batch_interval_ms']:.0f} ms (median); "
          f"{f['words_per_s']:,.0f} words/s; counts {'ok' if f['counts_ok'] else 'WRONG'}")
    print(f"  {'':<30} the source's own part (made available -> read by Spark; 1 ms resolution): "
          f"p50 {f['source_p50_ms']:.0f} ms, max {f['source_max_ms']:.0f} ms")
    print(f"  {'':<30} a batch, median ms: " + ", ".join(f"{k} {v:g}" for k, v in f["batch_durations_ms"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=5000, help="sentences/s for the latency runs")
    parser.add_argument("--seconds", type=float, default=10, help="length of each latency run")
    parser.add_argument("--warmup", type=float, default=1, help="seconds of sentences left out of the latency figures")
    parser.add_argument("--sentences", type=int, default=200_000, help="input of the throughput run (0: skip it)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=None, help="default: the local cores (2)")
    parser.add_argument("--no-trigger-run", action="store_true", help="skip the 100 ms processing-time trigger run")
    args = parser.parse_args()
    spark = loopback_spark_session(args.master, args.shuffle_partitions)
    try:
        partitions = spark.conf.get("spark.sql.shuffle.partitions")
        sentences = _make_sentences(max(args.sentences, int(args.rate * args.seconds)))
        print(f"Spark {spark.version} Structured Streaming word count ({args.master}, {partitions} shuffle partitions, "
              f"socket source on loopback, update mode, foreachBatch sink); load average "
              f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        if args.sentences:  # first: it also warms the JVM up for the latency runs
            f = measure_structured_streaming(spark, sentences[:args.sentences], math.inf, 0)
            print(f"throughput, {f['sentences']:,} sentences ({f['words']:,} words) as fast as possible, default trigger")
            print(f"  {f['words_per_s']:>10,.0f} words/s   {f['seconds']:.2f} s, {f['batches']} batch(es); "
                  f"counts {'ok' if f['counts_ok'] else 'WRONG'}")
        print(f"latency, sentence made available -> its word counts visible, {args.rate:,.0f} sentences/s "
              f"for {args.seconds:g} s (first {args.warmup:g} s left out)")
        describe("default trigger", measure_structured_streaming(spark, sentences, args.rate, args.seconds,
                                                                 warmup=args.warmup))
        if not args.no_trigger_run:
            describe("trigger every 100 ms", measure_structured_streaming(spark, sentences, args.rate, args.seconds,
                                                                          trigger_ms=100, warmup=args.warmup))
    finally:
        spark.stop()
    print("reproduce: python benchmarks/structured_streaming.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
