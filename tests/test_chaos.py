"""benchmarks/chaos.py: its checks find a planted duplicate, loss and wrong count, and a two-minute
chaos run (CI's version) loses nothing, duplicates nothing and ends with exact state."""

from __future__ import annotations

import collections
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import chaos  # noqa: E402

from kafka_broker import kafka_broker  # noqa: E402 F401 (the fixture's package checks)

WORDS = collections.Counter({"a": 3, "b": 2})


def tally(*records: tuple[str, int]) -> chaos.OutputTally:
    t = chaos.OutputTally()
    for word, n in records:
        t.add(word, n)
    return t


def test_an_exact_output_passes():
    check = chaos.check_output(WORDS, tally(("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)))
    assert check.exact and check.records == 5, check.describe()


def test_a_planted_duplicate_is_reported():
    check = chaos.check_output(WORDS, tally(("a", 1), ("a", 2), ("a", 2), ("a", 3), ("b", 1), ("b", 2)))
    assert not check.exact
    assert check.duplicated == [("a", 2)] and not check.lost and not check.unexpected
    assert "1 duplicated (e.g. [('a', 2)])" in check.describe()


def test_a_planted_loss_is_reported():
    check = chaos.check_output(WORDS, tally(("a", 1), ("a", 3), ("b", 1), ("b", 2)))
    assert check.lost == [("a", 2)] and not check.duplicated and not check.unexpected


def test_records_beyond_the_input_are_unexpected():
    check = chaos.check_output(WORDS, tally(("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 1), ("b", 2), ("c", 1),
                                            ("b", 0)))
    assert sorted(check.unexpected) == [("a", 4), ("b", 0), ("c", 1)] and not check.lost


def test_a_wrong_committed_count_is_reported():
    assert chaos.check_state(WORDS, {"a": 3, "b": 2}) == []
    assert chaos.check_state(WORDS, {"a": 4, "b": 2, "z": 1}) == ["a: 4 != 3", "z: 1 != 0"]


def test_a_run_with_a_planted_fault_fails_naming_it():
    report = chaos.Report(60, output=chaos.check_output(WORDS, tally(("a", 1), ("a", 1))), state_read=True,
                          faults=[chaos.Fault("kill-worker", 10, recovery=45.0)], rss_growth=0.25)
    failures = report.failures()
    assert failures[0].startswith("output: 2 records: 4 lost"), failures
    assert "1 duplicated" in failures[0]
    assert failures[1] == "recovery over 30 s: kill-worker at 10s (45.0s)"
    assert failures[2] == "memory: the workers' RSS grew 25% (at most 10%)"


def test_memory_growth_compares_the_warm_up_with_the_end():
    flat = [(t, 100.0) for t in range(0, 600, 5)]
    assert chaos.rss_growth(flat, after=300) == 0.0
    growing = [(t, 100.0 + t / 10) for t in range(0, 600, 5)]
    # the medians of 300-355 s and of 535-595 s
    assert chaos.rss_growth(growing, after=300) == pytest.approx((100 + 56.5) / (100 + 32.75) - 1)
    assert chaos.rss_growth(flat[:10], after=300) is None  # too short to tell


def test_a_fault_of_the_bed_is_refused_without_it(capsys):
    with pytest.raises(SystemExit) as refused:
        chaos.main(["--faults", "kill-worker,kill-host"])
    assert refused.value.code == 2
    assert "--faults: kill-host not among kill-worker, kill-workers, freeze-worker" in capsys.readouterr().err


def test_recovery_is_the_first_two_seconds_at_nine_tenths_of_the_input_rate():
    samples = [chaos.Sample(t / 2, 1, n, (), 0) for t, n in enumerate([0, 50, 100, 100, 100, 100, 150, 200, 250, 300])]
    # 100/s before; a stall from 1 s to 2.5 s; back at 100/s from 2.5 s: the window 2.5 - 4.5 s
    assert chaos.recovery_secs(samples, at=1.0, rate=100) == 3.5
    assert chaos.recovery_secs(samples, at=1.0, rate=200) is None
    restarted = [chaos.Sample(0, 1, 500, (), 0), chaos.Sample(1, 2, 0, (), 0), chaos.Sample(3, 2, 200, (), 0)]
    assert chaos.recovery_secs(restarted, at=0, rate=100) == 3  # a new driver's figures start again


@pytest.mark.processes
@pytest.mark.timeout(600)
def test_a_two_minute_chaos_run_loses_and_duplicates_nothing(kafka_broker, tmp_path, capsys):  # noqa: F811
    report = chaos.Chaos(str(tmp_path), duration=120, rate=200, gap=(3, 10), seed=4).run()
    chaos.print_report(report)
    out = capsys.readouterr().out
    assert report.faults, out
    assert report.output is not None and report.output.records == report.words > 0, out
    assert report.failures() == [], out


def test_the_output_read_afresh_tells_records_of_an_open_transaction_from_committed_ones(kafka_broker):  # noqa: F811
    from confluent_kafka import Producer

    topic = "chaos-read-afresh"
    kafka_broker.create_topics(topic, partitions=chaos.PARTITIONS)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "transactional.id": "chaos-read-afresh"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, key="a", value="1", partition=0)
    producer.produce(topic, key="b", value="1", partition=1)
    producer.commit_transaction(10)
    producer.begin_transaction()  # left open: (a, 2) is not committed
    producer.produce(topic, key="a", value="2", partition=2)
    producer.flush(10)
    words = collections.Counter({"a": 2, "b": 1})
    committed = chaos.check_output(words, chaos.read_output(kafka_broker.bootstrap_servers, topic, "read_committed"))
    assert committed.lost == [("a", 2)] and committed.records == 2, committed.describe()
    everything = chaos.check_output(words, chaos.read_output(kafka_broker.bootstrap_servers, topic, "read_uncommitted"))
    assert everything.exact, everything.describe()
    producer.abort_transaction(10)
