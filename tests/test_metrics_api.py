"""Storm's metrics v2 (squall.api.metrics2): user metrics registered on the TopologyContext, reported
per task and per component in get_topology_info (in-process and from worker processes'
heartbeats), multilang ``metrics`` commands, metrics consumers and the Prometheus exposition."""

from __future__ import annotations

import logging
import math
import sys
import textwrap
import threading

import msgspec
import pytest
import pystorm
from helpers import CountingSpout, errors_of, feed_and_wait, feeder_builder, tasks_of
from metered_topology import Metered, metered_topology, run_metered
from prometheus_client.parser import text_string_to_metric_families

import squall.api.metrics2.metrics as metrics_module
from squall import Bolt, Config, LocalCluster, TopologySetupError
from squall.runtime.messaging import schema
from squall.api.metrics2 import Counter, Gauge, Histogram, Meter, MetricRegistry, MetricsConsumer, Timer
from squall.api.metrics2.metrics import WINDOW_SIZE
from squall.ops.prometheus import cluster_infos, exposition
from squall.runtime.stats import carry_over
from squall.api.metrics2.registry import user_metrics_summary
from squall.multilang import ShellBolt
from squall.streamparse.pystorm_adapter import PystormBolt
from squall.testing import wait_until

CONSUMERS = "topology.metrics.consumer.register"
BUCKET = "topology.builtin.metrics.bucket.size.secs"

# -- components and consumers -----------------------------------------------------------------------


class Confused(Bolt):
    """Registers "latency" as a counter, then as a histogram."""

    def prepare(self, conf, context, collector):
        context.register_counter("latency")
        context.register_histogram("latency")

    def execute(self, tup):
        pass


_lock = threading.Lock()
RECEIVED: dict[str, list] = {}  # a Collecting consumer's argument -> [(task_info, data points)]
CLEANED: list[str] = []


class Collecting(MetricsConsumer):
    """Keeps every data point it gets under its registration's argument."""

    def prepare(self, conf, argument, context_info):
        self.key = argument
        self.context_info = context_info

    def handle_data_points(self, task_info, data_points):
        with _lock:
            RECEIVED.setdefault(self.key, []).append((task_info, list(data_points)))

    def cleanup(self):
        CLEANED.append(self.key)


class Exploding(MetricsConsumer):
    def handle_data_points(self, task_info, data_points):
        raise RuntimeError("consumer goes boom")


class NotPreparing(MetricsConsumer):
    def prepare(self, conf, argument, context_info):
        raise OSError("no route to the metrics store")


@pytest.fixture(autouse=True)
def _fresh_consumers():
    RECEIVED.clear()
    CLEANED.clear()


def points(key: str) -> list[tuple]:
    with _lock:
        return [(info, point) for info, batch in RECEIVED.get(key, []) for point in batch]


def latest(key: str, component: str, name: str) -> dict[int, object]:
    """task -> the last value a Collecting consumer got for data point ``name`` of ``component``."""
    out = {}
    for info, point in points(key):
        if info.src_component_id == component and point.name == name:
            out[info.src_task_id] = point.value
    return out


def prometheus_samples(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


# -- the metric types -------------------------------------------------------------------------------


def test_histogram_percentiles_of_a_known_distribution():
    h = Histogram()
    for v in range(1000, 0, -1):  # the order does not matter
        h.update(v)
    assert (h.count, h.sum, h.min, h.max, h.mean) == (1000, 500500.0, 1, 1000, 500.5)
    # Dropwizard's interpolation: position q * (n + 1) among the sorted values
    assert h.p50 == pytest.approx(500.5)
    assert h.p75 == pytest.approx(750.75)
    assert h.p95 == pytest.approx(950.95)
    assert h.p99 == pytest.approx(990.99)
    assert h.p999 == pytest.approx(999.999)
    assert h.stddev == pytest.approx(math.sqrt(sum((v - 500.5) ** 2 for v in range(1, 1001)) / 999))
    snapshot = h.snapshot()
    assert snapshot["type"] == "histogram" and snapshot["p98"] == pytest.approx(980.98)


def test_histogram_keeps_a_sliding_window_but_counts_everything():
    h = Histogram()
    for v in range(1, 2001):
        h.update(v)
    assert h.count == 2000 and h.sum == sum(range(1, 2001))
    assert (h.min, h.max) == (2001 - WINDOW_SIZE, 2000)  # the window: the last WINDOW_SIZE values
    assert len(h.values()) == WINDOW_SIZE
    with pytest.raises(ValueError, match="non-finite"):
        h.update(float("nan"))
    with pytest.raises(TypeError):
        h.update("7")
    assert h.count == 2000
    empty = Histogram().snapshot()
    assert empty["count"] == 0 and empty["p99"] == 0.0 and empty["max"] == 0.0


def test_counter_gauge_meter_and_timer(monkeypatch):
    c = Counter()
    c.inc()
    c.inc(5)
    c.dec(2)
    assert c.count == 4 and c.snapshot() == {"type": "counter", "count": 4}
    settable = Gauge()
    settable.set(2.5)
    assert settable.snapshot() == {"type": "gauge", "value": 2.5}
    assert Gauge(lambda: 1 / 0).snapshot() is None  # a gauge that cannot be read is left out
    assert Gauge(lambda: float("nan")).snapshot() is None
    assert Gauge(lambda: 10 ** 30).snapshot() == {"type": "gauge", "value": (1 << 63) - 1}  # clipped to 64 bits
    with pytest.raises(TypeError):
        Gauge(lambda: 1).set(3)

    now = [1000.0]
    monkeypatch.setattr(metrics_module, "time", type("Clock", (), {"monotonic": lambda: now[0],
                                                                   "perf_counter": lambda: now[0]}))
    m = Meter()
    m.mark(300)
    assert m.m1_rate == 0.0  # no tick yet (every 5 s)
    now[0] += 5.5
    assert m.m1_rate == pytest.approx(60.0)  # the first tick: 300 events in 5 s
    assert m.mean_rate == pytest.approx(300 / 5.5)
    now[0] += 15  # three more ticks, read at once: nothing counted, so three decays
    alpha1, alpha15 = 1 - math.exp(-5 / 60), 1 - math.exp(-5 / 900)
    assert m.m1_rate == pytest.approx(60.0 * (1 - alpha1) ** 3)
    assert m.m15_rate == pytest.approx(60.0 * (1 - alpha15) ** 3)
    t = Timer()
    with t.time():
        now[0] += 0.25
    t.update(0.75)
    assert (t.count, t.sum, t.max, t.mean) == (2, 1.0, 0.75, 0.5)
    assert t.snapshot()["type"] == "timer" and "m5_rate" in t.snapshot()


def test_registry_names_types_and_limits():
    registry = MetricRegistry("split", 7)
    counter = registry.register("words", Counter)
    assert registry.register("words", Counter) is counter
    with pytest.raises(ValueError, match=r"component 'split' task 7: metric 'words' is already registered as a "
                                         r"counter, not a timer"):
        registry.register("words", Timer)
    for bad in ("", "x" * 257, 3):
        with pytest.raises(ValueError, match="metric name"):
            registry.register(bad, Counter)
    for i in range(999):
        registry.register(f"m{i}", Counter)
    with pytest.raises(ValueError, match="at most 1000 metrics"):
        registry.register("one-too-many", Counter)


def test_component_aggregate_of_task_snapshots():
    low, high = Histogram(), Histogram()
    for v in range(1, 11):
        low.update(v)
    for v in range(100, 131):
        high.update(v)
    per_task = {
        1: {"n": {"type": "counter", "count": 3}, "g": {"type": "gauge", "value": 1.5}, "h": low.snapshot(),
            "e": Histogram().snapshot(), "mixed": {"type": "counter", "count": 1}},
        2: {"n": {"type": "counter", "count": 4}, "g": {"type": "gauge", "value": 2}, "h": high.snapshot(),
            "e": high.snapshot(), "mixed": {"type": "gauge", "value": 9}},
    }
    total = user_metrics_summary(per_task)
    assert total["n"] == {"type": "counter", "count": 7}
    assert total["g"] == {"type": "gauge", "value": 3.5}
    h = total["h"]
    assert (h["count"], h["sum"], h["min"], h["max"]) == (41, 55 + sum(range(100, 131)), 1, 130)
    assert h["mean"] == pytest.approx((55 + sum(range(100, 131))) / 41)  # count-weighted
    assert h["p50"] == high.p50  # the greatest over the tasks: an upper bound
    assert total["e"]["min"] == 100  # an empty task's zeros bound nothing
    assert total["mixed"] == {"type": "counter", "count": 1}  # the lowest task's type wins
    assert per_task[1]["n"]["count"] == 3  # the tasks' own figures are left as they were


def test_heartbeat_schema_carries_user_metrics_and_refuses_forged_ones():
    registry = MetricRegistry("b", 3)
    registry.register("n", Counter).inc(2)
    registry.register("g", Gauge, lambda: Gauge(lambda: 1.5))
    registry.register("t", Timer).update(0.5)
    registry.register("m", Meter).mark()
    registry.register("h", Histogram).update(4)
    snapshot = registry.snapshot()
    figures = {"emitted": 1, "transferred": 1, "acked": 0, "failed": 0, "executed": 1, "execute_secs": 0.1,
               "process_secs": 0.1, "process_count": 1, "complete_secs": 0.0, "complete_count": 0, "capacity": 0.1,
               "user_metrics": {3: snapshot}}
    report = schema.ExecutorReport("b", [3], msgspec.convert(figures, schema.ExecutorFigures))
    beat = schema.decode(schema.encode(schema.Heartbeat([report], [])), schema.WorkerMessage)
    assert schema.to_dict(beat.executors[0].stats)["user_metrics"] == {3: snapshot}

    def forged(user_metrics):
        raw = {"type": "heartbeat", "errors": [],
               "executors": [{"component": "b", "tasks": [3], "stats": {**figures, "user_metrics": user_metrics}}]}
        return msgspec.msgpack.encode(raw)

    for bad in ({3: {"g": {"type": "gauge", "value": float("nan")}}},
                {3: {"g": {"type": "gauge", "value": float("inf")}}},
                {3: {"n": {"type": "counter", "count": "many"}}},
                {3: {"n": {"type": "rocket", "count": 1}}},
                {3: {"x" * 257: {"type": "counter", "count": 1}}},
                {-1: {"n": {"type": "counter", "count": 1}}},
                {3: {"h": {"type": "histogram", "count": 1}}},
                {3: {f"m{i}": {"type": "counter", "count": 1} for i in range(1001)}}):
        with pytest.raises(schema.MalformedMessage):
            schema.decode(forged(bad), schema.WorkerMessage)


# -- in a topology ------------------------------------------------------------------------------------


def test_user_metrics_per_task_and_per_component(cluster):
    run_metered(cluster, 100)

    info = cluster.get_topology_info("t")["components"]
    metered = info["metered"]
    user = metered["user_metrics"]
    assert user["processed"] == {"type": "counter", "count": 100}
    assert user["marks"]["count"] == 200 and user["marks"]["type"] == "meter"
    assert user["one"] == {"type": "gauge", "value": 4}  # summed over the 4 tasks
    assert user["work"]["type"] == "timer" and user["work"]["count"] == 100
    assert 0 <= user["work"]["min"] <= user["work"]["p50"] <= user["work"]["max"] < 1
    assert (user["values"]["count"], user["values"]["sum"], user["values"]["min"], user["values"]["max"]) == (
        100, 5050, 1, 100)

    tasks = tasks_of(cluster, "t", "metered")
    assert sorted(metered["tasks"]) == tasks
    per_task = [metered["tasks"][t]["user_metrics"] for t in tasks]
    assert sum(m["processed"]["count"] for m in per_task) == 100
    assert all(m["work"]["count"] == m["processed"]["count"] == m["values"]["count"] for m in per_task)
    assert all(m["one"]["value"] == 1 for m in per_task)
    assert sorted(t for e in metered["executors"] for t in e["tasks"]) == tasks
    assert sum(e["executed"] for e in metered["executors"]) == metered["executed"] == 100

    values = info["single"]["user_metrics"]["values"]  # one task got 1..100
    assert (values["p50"], values["p75"], values["p99"], values["mean"]) == pytest.approx((50.5, 75.75, 99.99, 50.5))
    assert info["spout"]["user_metrics"] == {}


def test_a_name_registered_with_another_type_fails_the_start_naming_it(cluster):
    feeder, b = feeder_builder()
    b.set_bolt("confused", Confused()).shuffle_grouping("spout")
    with pytest.raises(TopologySetupError, match=r"component 'confused' task \d+: metric 'latency' is already "
                                                 r"registered as a counter, not a histogram"):
        cluster.submit_topology("t", Config(), b.create_topology())


def test_prometheus_text_parses_with_builtin_and_user_metrics(cluster):
    run_metered(cluster, 20)

    samples = prometheus_samples(exposition(cluster_infos(cluster)).decode())
    processed = {s.labels["task"]: s.value for s in samples["squall_user_processed"]
                 if s.labels["component"] == "metered"}
    assert all(s.labels["topology"] == "t" for s in samples["squall_user_processed"])
    assert sorted(map(int, processed)) == tasks_of(cluster, "t", "metered")
    assert sum(processed.values()) == 20
    work = [s for s in samples["squall_user_work_seconds"] if s.labels["component"] == "single"]
    assert {s.labels.get("quantile") for s in work} >= {"0.5", "0.99", None}
    assert next(s.value for s in work if s.name == "squall_user_work_seconds_count") == 20
    assert [s.value for s in samples["squall_user_marks"] if s.labels["component"] == "single"] == [40]
    acked = {s.labels["component"]: s.value for s in samples["squall_component_acked"]}
    assert acked["spout"] == 20 and acked["metered"] == 20
    assert {s.labels["executor"] for s in samples["squall_executor_executed"] if s.labels["component"] == "metered"} \
        == {f"[{e['tasks'][0]}-{e['tasks'][-1]}]"
            for e in cluster.get_topology_info("t")["components"]["metered"]["executors"]}
    assert samples["squall_component_capacity"]


# -- consumers ----------------------------------------------------------------------------------------


def test_logging_consumer_logs_every_tasks_data_points(cluster, caplog):
    caplog.set_level(logging.INFO, logger="squall.metrics2.LoggingMetricsConsumer")
    conf = {CONSUMERS: [{"class": "org.apache.storm.metric.LoggingMetricsConsumer", "parallelism.hint": 1}],
            BUCKET: 0.1}
    run_metered(cluster, 10, conf)
    single = tasks_of(cluster, "t", "single")[0]

    def logged(name):
        return [r.getMessage().split("\t") for r in caplog.records
                if r.name == "squall.metrics2.LoggingMetricsConsumer"
                and r.getMessage().split("\t")[3].strip() == name]

    wait_until(lambda: any(line[4] == "10" and line[2].strip() == f"{single}:single"
                           for line in logged("processed")), message="the logged count reaching 10")
    # The consumer logs one line at a time on its own thread: the lines after "processed" may still be coming.
    wait_until(lambda: any(line[2].strip() == f"{single}:single" for line in logged("work.p99")),
               message="the histogram's p99 logged for the single task")
    wait_until(lambda: any(line[2].strip().endswith(":spout") for line in logged("__emit-count")),
               message="the spout's built-in emit count logged")


def test_user_consumers_get_data_points_and_one_that_raises_is_only_logged(cluster, caplog):
    conf = {CONSUMERS: [{"class": "test_metrics_api:Collecting", "argument": "mine", "parallelism.hint": 2},
                        {"class": Exploding}], BUCKET: 0.1}
    run_metered(cluster, 30, conf)
    tasks = tasks_of(cluster, "t", "metered")
    wait_until(lambda: sum(latest("mine", "metered", "processed").values()) == 30,
               message="the consumer seeing every count")
    assert sorted(latest("mine", "metered", "processed")) == tasks
    # its own bucket, which may come a beat after the one above
    single = {tasks_of(cluster, "t", "single")[0]: 30}
    wait_until(lambda: latest("mine", "single", "values.max") == single, message=f"the consumer seeing {single}")
    wait_until(lambda: any("metrics consumer Exploding.handle_data_points raised" in r.getMessage()
                           for r in caplog.records), message="the exploding consumer's error logged")
    info, _ = points("mine")[0]
    assert info.update_interval_secs == 0.1 and info.src_worker_port > 0

    cluster.kill_topology("t", wait_secs=0)
    assert CLEANED == ["mine", "mine"]  # both instances (parallelism.hint 2), once killed
    # the built-in figures are counts of a bucket: with the last one, at the kill, they add up
    # to the totals (one emit and two transfers per tuple: the spout has two subscribers)
    for name, total in (("__emit-count", 30), ("__transfer-count", 60), ("__ack-count", 30)):
        assert sum(p.value for i, p in points("mine") if i.src_component_id == "spout" and p.name == name) == total


def test_a_bad_consumer_registration_fails_at_submit(cluster):
    feeder, b = feeder_builder()
    b.set_bolt("metered", Metered()).shuffle_grouping("spout")
    topology = b.create_topology()
    with pytest.raises(ValueError, match=r"topology\.metrics\.consumer\.register: unknown metrics consumer class "
                                         r"'no\.such\.Consumer'"):
        cluster.submit_topology("t", {CONSUMERS: [{"class": "no.such.Consumer"}]}, topology)
    with pytest.raises(ValueError, match=r"'parallelism\.hint'"):
        cluster.submit_topology("t", {CONSUMERS: [{"class": Collecting, "parallelism.hint": 0}]}, topology)
    with pytest.raises(ValueError, match=BUCKET.replace(".", r"\.")):
        cluster.submit_topology("t", {CONSUMERS: [{"class": Collecting}], BUCKET: 0}, topology)
    with pytest.raises(TopologySetupError, match="no route to the metrics store"):
        cluster.submit_topology("t", {CONSUMERS: [{"class": Collecting, "argument": "x"},
                                                  {"class": NotPreparing}]}, topology)
    assert CLEANED == ["x"] and cluster.get_topologies() == []


# -- multilang and pystorm ------------------------------------------------------------------------------

METRICS_SCRIPT = r'''
import sys
from pystorm import Bolt


class Reporting(Bolt):
    """Reports metrics about each input, among them malformed ones; auto-acks."""

    def process(self, tup):
        word = tup.values[0]
        self.report_metric("words", 1)                  # a name never registered: a counter
        self.report_metric("lengths", len(word))        # a histogram the ShellBolt registered
        self.report_metric("last-length", len(word))    # a settable gauge it registered
        self.report_metric("words", "not a number")     # dropped
        self.report_metric("lengths", None)             # dropped
        self.send_message({"command": "metrics"})       # no name: dropped


if __name__ == "__main__":
    Reporting(serializer=sys.argv[1]).run()
'''


class MeteredShellBolt(ShellBolt):
    """Registers the metrics the subprocess updates, as a Storm ShellBolt subclass would."""

    def prepare(self, conf, context, collector):
        context.register_histogram("lengths")
        context.register_gauge("last-length")
        super().prepare(conf, context, collector)


class ReportingPystorm(pystorm.Bolt):
    """The same reports, from a pystorm bolt run natively."""

    def process(self, tup):
        self.report_metric("words", 1)
        self.report_metric("lengths", len(tup.values[0]))
        self.report_metric("words", [1, 2])


WORDS = ["a", "bb", "ccc", "dddd"]


def user_metrics_after_the_words(cluster, bolt) -> dict:
    """Run ``bolt`` on WORDS, each acked before the next; its component's user metrics then."""
    feeder, b = feeder_builder()
    b.set_bolt("reporting", bolt).shuffle_grouping("spout")
    cluster.submit_topology("t", Config(), b.create_topology())
    for i, word in enumerate(WORDS):
        feed_and_wait(feeder, [word], i)  # acked: the component is alive after the bad messages
    assert not errors_of(cluster, "t", "reporting")
    return cluster.get_topology_info("t")["components"]["reporting"]["user_metrics"]


@pytest.mark.processes
@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_multilang_metrics_commands_update_the_tasks_metrics(cluster, tmp_path, caplog, serializer):
    script = tmp_path / "reporting.py"
    script.write_text(textwrap.dedent(METRICS_SCRIPT))
    user = user_metrics_after_the_words(
        cluster, MeteredShellBolt(sys.executable, str(script), serializer, serializer=serializer))
    assert user["words"] == {"type": "counter", "count": len(WORDS)}
    assert (user["lengths"]["type"], user["lengths"]["count"], user["lengths"]["max"]) == ("histogram", 4, 4)
    assert user["last-length"] == {"type": "gauge", "value": 4}
    dropped = [r.getMessage() for r in caplog.records if "dropped metrics message" in r.getMessage()]
    assert len(dropped) == 3  # once per name: "words", "lengths", and the message without one
    assert any("'not a number'" in m for m in dropped)


def test_a_natively_run_pystorm_bolts_report_metric_updates_its_tasks_metrics(cluster):
    user = user_metrics_after_the_words(cluster, PystormBolt(ReportingPystorm, {}))
    assert user["words"] == {"type": "counter", "count": len(WORDS)}
    # an unregistered name with a number becomes a counter; so "lengths" here counts the lengths
    assert user["lengths"] == {"type": "counter", "count": 10}


# -- worker processes -----------------------------------------------------------------------------------


@pytest.mark.processes
def test_user_metrics_consumers_and_prometheus_from_worker_processes():
    conf = {"topology.workers": 2, "worker.heartbeat.frequency.secs": 0.2,
            CONSUMERS: [{"class": Collecting, "argument": "procs"}], BUCKET: 0.2}
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("t", conf, metered_topology(CountingSpout(200)))
        metered = lambda: cluster.get_topology_info("t")["components"]["metered"]  # noqa: E731
        wait_until(lambda: metered()["user_metrics"].get("processed", {}).get("count") == 200, timeout=30,
                   message="every input counted, as the heartbeats say")
        # a heartbeat may be taken inside the last execute, after its counter's update and before its timer's
        wait_until(lambda: metered()["user_metrics"]["work"]["count"] == 200, timeout=10,
                   message="every input timed, as the heartbeats say")
        tasks = tasks_of(cluster, "t", "metered")
        # load-aware shuffling may send every input to the spout's worker, which can finish them
        # before the other worker's first heartbeat
        wait_until(lambda: sorted(metered()["tasks"]) == tasks, timeout=10, message="every task's worker reporting")
        per_task = {t: metered()["tasks"][t]["user_metrics"] for t in tasks}
        assert sum(m["processed"]["count"] for m in per_task.values()) == 200
        assert all(m["work"]["count"] == m["processed"]["count"] for m in per_task.values())
        assert {w["pid"] for w in cluster.get_topology_info("t")["workers"]} != {None}

        samples = prometheus_samples(exposition(cluster_infos(cluster)).decode())
        by_task = {int(s.labels["task"]): s.value for s in samples["squall_user_processed"]
                   if s.labels["component"] == "metered"}
        assert sorted(by_task) == tasks and sum(by_task.values()) == 200

        wait_until(lambda: sum(latest("procs", "metered", "processed").values()) == 200, timeout=10,
                   message="the consumer seeing every count")
        # single, in the other worker, may still have tuples queued: a kill drops them
        wait_until(lambda: cluster.get_topology_info("t")["components"]["single"]["user_metrics"]
                   .get("processed", {}).get("count") == 200, timeout=10, message="single processing every input")
        final = cluster.kill_topology_and_get_info("t", wait_secs=0)
    assert final["components"]["single"]["user_metrics"]["values"]["max"] == 199
    assert CLEANED == ["procs"]


@pytest.mark.spark
@pytest.mark.processes
@pytest.mark.timeout(120)
def test_user_metrics_from_spark_workers():
    pytest.importorskip("pyspark")  # the spark extra: only this test needs it
    from squall.cluster.spark import SparkCluster
    from squall.cluster.spark.cluster import start_session

    session = start_session("local[2]", {"spark.ui.enabled": "false"})
    try:
        with SparkCluster(spark=session) as cluster:
            conf = {"topology.workers": 2, "worker.heartbeat.frequency.secs": 0.2,
                    CONSUMERS: [{"class": Collecting, "argument": "spark"}], BUCKET: 0.2}
            cluster.submit_topology("t", conf, metered_topology(CountingSpout(100)))
            metered = lambda: cluster.get_topology_info("t")["components"]["metered"]  # noqa: E731
            wait_until(lambda: metered()["user_metrics"].get("work", {}).get("count") == 100, timeout=30,
                       message="every input timed, as the Spark workers' heartbeats say")
            # a heartbeat may read a task's counter just before its last execute, and its timer just after
            wait_until(lambda: sum(t["user_metrics"]["processed"]["count"] for t in metered()["tasks"].values()) == 100,
                       timeout=10, message="every input counted, as the Spark workers' heartbeats say")
            wait_until(lambda: sum(latest("spark", "metered", "processed").values()) == 100, timeout=10,
                       message="the consumer, in the driver, seeing every count")
    finally:
        session.stop()


def test_a_component_with_more_own_metrics_than_a_heartbeat_carries_still_reports():
    """A connector with, say, a lag per partition of thousands of partitions: the heartbeat
    carries the first names and how many were left out, and its schema accepts it."""
    from squall.runtime.stats import MAX_COMPONENT_METRICS, OMITTED_METRICS, component_metrics

    class Wide:
        metrics = {"read": 7, "lag": {f"topic:{p}": 1 for p in range(1500)}}

    totals = component_metrics([Wide()])
    assert len(totals) == MAX_COMPONENT_METRICS
    assert totals[OMITTED_METRICS] == 1501 - (MAX_COMPONENT_METRICS - 1)
    assert totals["read"] == 7  # the plain counters are kept first
    figures = dict.fromkeys(("emitted", "transferred", "acked", "failed", "executed", "execute_secs",
                             "process_secs", "process_count", "complete_secs", "complete_count", "capacity"), 0)
    msgspec.convert({**figures, "metrics": totals}, schema.ExecutorFigures)  # no ValidationError


def _figures(n: int, **extra) -> dict:
    keys = ("emitted", "transferred", "acked", "failed", "executed", "execute_secs", "process_secs", "process_count",
            "complete_secs", "complete_count")
    return {**dict.fromkeys(keys, n), "capacity": n / 10, **extra}


def test_an_executors_figures_add_up_over_its_runs_but_its_gauges_are_the_current_runs():
    earlier = _figures(5, streams={"default": (5, 4)}, metrics={"lag": 7.0}, user_metrics={1: {"m": {}}})
    current = _figures(2, streams={"default": (1, 1), "other": (2, 2)}, metrics={"lag": 3.0}, user_metrics={})
    assert carry_over(earlier, current) == _figures(7, capacity=0.2, streams={"default": (6, 5), "other": (2, 2)},
                                                    metrics={"lag": 3.0}, user_metrics={})
    assert carry_over(None, current) == current
    # between a worker's death and its restart: what it did, not running
    assert carry_over(earlier, None) == _figures(5, capacity=0.0, streams={"default": (5, 4)}, metrics={},
                                                 user_metrics={})
