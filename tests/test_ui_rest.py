"""Storm UI's REST API (squall.ops.ui): a real HTTP server on 127.0.0.1 over a LocalCluster running
the example word count; every endpoint's JSON is checked against Storm UI's field names and
types, and against get_topology_info. Also: Storm's windows (squall.cluster.stats_history),
bad ids and parameters, and who may POST."""

from __future__ import annotations

import asyncio
import os
import time
import urllib.error
import urllib.request

import pytest

from squall import Config, LocalCluster, Spout, TopologyBuilder
from squall.cluster.stats_history import COUNTERS, FINE_SECS, StatsHistory, parse_window, window_pretty
from squall.streams import StreamBuilder
from squall.testing import FeederSpout, wait_until

from helpers import stays
from metered_topology import run_metered
from process_topologies import SentenceSpout, StuckBolt
from ui_client import AUTH, NAME, TOKEN, call, wordcount_example
from squall.ops.ui.server import COOKIE, CSRF_HEADER, UiServer, csrf_token

@pytest.fixture
def ui(cluster):
    conf = Config().set_max_spout_pending(200)
    conf["topology.state.provider.config"] = {"host": "127.0.0.1", "password": "hunter2"}
    conf["my.api.token"] = "s3cret"
    cluster.submit_topology(NAME, conf, wordcount_example().build())
    with UiServer(cluster, TOKEN, port=0) as server:
        yield server


WINDOW_FIELDS = {"windowPretty": str, "window": str, "emitted": int, "transferred": int, "acked": int, "failed": int}
ERROR_FIELDS = {"lastError": str, "errorHost": str, "errorWorkerLogLink": str}


def check_fields(obj: dict, fields: dict[str, type], where: str) -> None:
    for field, kind in fields.items():
        assert field in obj, f"{where}: no {field!r} in {sorted(obj)}"
        assert isinstance(obj[field], kind), f"{where}: {field!r} is {obj[field]!r}, not {kind.__name__}"


def is_number_string(value: str) -> bool:
    return isinstance(value, str) and float(value) >= 0 and len(value.split(".")[1]) == 3


def test_summaries_name_every_running_topology(ui, cluster):
    status, body, _ = call(ui.url + "/api/v1/topology/summary")
    assert status == 200
    (entry,) = body["topologies"]
    check_fields(entry, {"id": str, "name": str, "status": str, "uptime": str, "uptimeSeconds": int,
                         "tasksTotal": int, "workersTotal": int, "executorsTotal": int}, "topology/summary")
    info = cluster.get_topology_info(NAME)
    executors = [e for w in info["workers"] for e in w["executors"]]
    assert (entry["id"], entry["status"]) == (NAME, "ACTIVE")
    assert entry["executorsTotal"] == len(executors)
    assert entry["tasksTotal"] == sum(len(e["tasks"]) for e in executors)
    assert entry["workersTotal"] == len(info["workers"])

    status, summary, _ = call(ui.url + "/api/v1/cluster/summary")
    assert status == 200
    check_fields(summary, {"stormVersion": str, "supervisors": int, "topologies": int, "slotsTotal": int,
                           "slotsUsed": int, "executorsTotal": int, "tasksTotal": int}, "cluster/summary")
    assert (summary["topologies"], summary["executorsTotal"]) == (1, entry["executorsTotal"])


def test_topology_page_has_storm_ui_fields_and_figures_that_rise(ui, cluster):
    def page():
        status, body, _ = call(ui.url + f"/api/v1/topology/{NAME}")
        assert status == 200
        return body

    first = page()
    check_fields(first, {"id": str, "name": str, "status": str, "uptimeSeconds": int, "msgTimeout": int,
                         "window": str, "windowHint": str, "topologyStats": list, "spouts": list, "bolts": list,
                         "workers": list, "configuration": dict}, "topology")
    assert [s["window"] for s in first["topologyStats"]] == ["600", "10800", "86400", ":all-time"]
    assert [s["windowPretty"] for s in first["topologyStats"]] == ["10m 0s", "3h 0m 0s", "1d 0h 0m 0s", "All time"]
    for stats in first["topologyStats"]:
        check_fields(stats, WINDOW_FIELDS, "topologyStats")
        assert is_number_string(stats["completeLatency"])
    (spout,) = first["spouts"]
    check_fields(spout, {"spoutId": str, "executors": int, "tasks": int, "emitted": int, "transferred": int,
                         "acked": int, "failed": int, **ERROR_FIELDS}, "spouts")
    assert is_number_string(spout["completeLatency"])
    assert sorted(b["boltId"] for b in first["bolts"]) == ["count", "report", "split"]
    for bolt in first["bolts"]:
        check_fields(bolt, {"executed": int, "executors": int, "tasks": int, "acked": int, **ERROR_FIELDS}, "bolts")
        for field in ("capacity", "executeLatency", "processLatency"):
            assert is_number_string(bolt[field]), (field, bolt[field])
    assert first["configuration"]["topology.max.spout.pending"] == 200
    # secrets in the config are not shown (reads need no token on 127.0.0.1)
    assert first["configuration"]["topology.state.provider.config"] == {"host": "127.0.0.1", "password": "REDACTED"}
    assert first["configuration"]["my.api.token"] == "REDACTED"
    assert {r["key"]: r["value"] for r in first["configurationDocs"]}["my.api.token"] == "REDACTED"
    assert first["msgTimeout"] == cluster.get_topology_conf(NAME)["topology.message.timeout.secs"]
    (worker,) = first["workers"]
    assert worker["componentNumTasks"] == {"sentences": 2, "split": 4, "count": 2, "report": 1, "__acker": 1}

    # the figures rise while it runs, and agree with get_topology_info taken around them
    wait_until(lambda: page()["spouts"][0]["acked"] > spout["acked"] + 1000, timeout=10)
    before = cluster.get_topology_info(NAME)["components"]
    later = page()
    after = cluster.get_topology_info(NAME)["components"]
    for entry in later["spouts"] + later["bolts"]:
        cid = entry.get("spoutId") or entry.get("boltId")
        assert before[cid]["acked"] <= entry["acked"] <= after[cid]["acked"], cid
        assert before[cid]["emitted"] <= entry["emitted"] <= after[cid]["emitted"], cid
    all_time = later["topologyStats"][-1]
    assert all_time["acked"] == later["spouts"][0]["acked"]
    # a topology younger than a window shows the same figures in it
    assert all(s["acked"] == all_time["acked"] for s in later["topologyStats"])


def test_component_page_and_visualization(ui, cluster):
    status, page, _ = call(ui.url + f"/api/v1/topology/{NAME}/component/split?window=600")
    assert status == 200
    check_fields(page, {"id": str, "name": str, "componentType": str, "executors": int, "tasks": int,
                        "window": str, "windowHint": str, "componentErrors": list, "boltStats": list,
                        "inputStats": list, "outputStats": list, "executorStats": list}, "component")
    assert (page["id"], page["componentType"], page["window"], page["windowHint"]) == ("split", "bolt", "600", "10m 0s")
    (inputs,) = page["inputStats"]
    assert (inputs["component"], inputs["stream"], inputs["grouping"]) == ("sentences", "default", "shuffle")
    info = cluster.get_topology_info(NAME)["components"]["split"]
    assert len(page["executorStats"]) == 2
    for executor in page["executorStats"]:
        check_fields(executor, {"id": str, "host": str, "port": int, "uptimeSeconds": int, "emitted": int,
                                "transferred": int, "acked": int, "failed": int, "executed": int}, "executorStats")
        assert is_number_string(executor["capacity"]) and is_number_string(executor["processLatency"])
    assert sorted(e["id"] for e in page["executorStats"]) == sorted(
        f"[{e['tasks'][0]}-{e['tasks'][-1]}]" for e in info["executors"])
    (output,) = page["outputStats"]
    assert output["stream"] == "default" and 0 < output["emitted"] <= info["emitted"]
    status, spout, _ = call(ui.url + f"/api/v1/topology/{NAME}/component/sentences")
    assert status == 200 and spout["componentType"] == "spout" and len(spout["spoutSummary"]) == 4

    status, graph, _ = call(ui.url + f"/api/v1/topology/{NAME}/visualization")
    assert status == 200
    assert set(graph) == {"sentences", "split", "count", "report"}
    assert graph["sentences"][":type"] == "spout" and graph["sentences"][":inputs"] == []
    edges = {(cid, i[":component"], i[":stream"], i[":grouping"]) for cid, node in graph.items() for i in node[":inputs"]}
    assert edges == {("split", "sentences", "default", "shuffle"), ("count", "split", "default", "fields"),
                     ("report", "count", "default", "global")}


def test_unknown_topology_or_component_is_404_and_a_bad_window_400(ui):
    status, body, _ = call(ui.url + "/api/v1/topology/no-such-topology")
    assert status == 404 and "no-such-topology" in body["errorMessage"]
    status, body, _ = call(ui.url + f"/api/v1/topology/{NAME}/component/no-such-bolt")
    assert status == 404 and "no-such-bolt" in body["errorMessage"]
    status, body, _ = call(ui.url + f"/api/v1/topology/{NAME}?window=ten")
    assert status == 400 and "window" in body["errorMessage"] and "'ten'" in body["errorMessage"]
    status, body, _ = call(ui.url + "/api/v1/topology/no-such-topology/activate", "POST", AUTH)
    assert status == 404
    status, body, _ = call(ui.url + f"/api/v1/topology/{NAME}/kill/soon", "POST", AUTH)
    assert status == 400 and "wait-time" in body["errorMessage"]


def _spout_emitted(cluster) -> int:
    return cluster.get_topology_info(NAME)["components"]["sentences"]["emitted"]


def test_posts_need_the_token_and_deactivate_stops_the_spouts(ui, cluster):
    url = ui.url + f"/api/v1/topology/{NAME}/deactivate"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": f"{COOKIE}={TOKEN}"}):
        status, body, _ = call(url, "POST", headers)
        assert status == 401, headers
        assert "token" in body["errorMessage"]
    assert cluster.get_topology_info(NAME)["status"] == "ACTIVE"

    status, body, _ = call(url, "POST", AUTH)
    assert (status, body) == (200, {"topologyOperation": "deactivate", "topologyId": NAME, "status": "success"})
    assert cluster.get_topology_info(NAME)["status"] == "INACTIVE"
    # the spouts stop emitting, once the deactivation reached them through their queues
    spouts = [e for e in cluster.executors(NAME) if e.component == "sentences"]
    wait_until(lambda: not any(e.active for e in spouts), timeout=10)
    stopped = _spout_emitted(cluster)
    # an inactive spout's executor only waits: nothing marks that it did not emit, so watch it
    stays(lambda: _spout_emitted(cluster) == stopped, secs=0.5, what="the spouts' emitted count")

    # a browser: the printed URL sets the cookie; its POSTs carry the CSRF header too
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    opener.open(ui.url + f"/?token={TOKEN}", timeout=10).read()
    activate = urllib.request.Request(ui.url + f"/api/v1/topology/{NAME}/activate", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(activate, timeout=10)
    assert refused.value.code == 401
    assert cluster.get_topology_info(NAME)["status"] == "INACTIVE"
    activate.add_header(CSRF_HEADER, csrf_token(TOKEN))
    assert opener.open(activate, timeout=10).status == 200
    assert cluster.get_topology_info(NAME)["status"] == "ACTIVE"
    wait_until(lambda: _spout_emitted(cluster) > stopped + 100, timeout=10)


def test_kill_through_the_api(ui, cluster):
    status, body, _ = call(ui.url + f"/api/v1/topology/{NAME}/kill/0", "POST", AUTH)
    assert (status, body["topologyOperation"]) == (200, "kill")
    assert cluster.get_topologies() == []
    status, body, _ = call(ui.url + "/api/v1/topology/summary")
    assert (status, body["topologies"]) == (200, [])


def asgi_status(app, path: str, headers: dict | None = None) -> int:
    """The status of a GET of ``path`` from ``app``, called in memory (no socket)."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
             "client": ("192.0.2.99", 50000), "server": ("192.0.2.10", 8080)}
    asyncio.run(app(scope, receive, send))
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


def test_a_ui_bound_to_another_address_wants_the_token_for_reads_too(cluster):
    """Checked on the application alone (no socket: tests listen on loopback only)."""
    cluster.submit_topology(NAME, Config(), wordcount_example().build(limit=10))
    app = UiServer(cluster, TOKEN, host="192.0.2.10").app()
    assert asgi_status(app, "/api/v1/topology/summary") == 401
    assert asgi_status(app, "/api/v1/topology/summary", AUTH) == 200
    assert asgi_status(UiServer(cluster, TOKEN, host="127.0.0.1").app(), "/api/v1/topology/summary") == 200


# -- the windows ------------------------------------------------------------------------------


def totals(acked: float) -> dict:
    return {"bolt": tuple(acked if name == "acked" else 0.0 for name in COUNTERS)}


def acked_in(history: StatsHistory, now: float, current: float, window) -> float:
    return history.window(now, totals(current), window)["bolt"][COUNTERS.index("acked")]


def test_a_window_counts_what_happened_in_it():
    history = StatsHistory(started=0.0)
    for t in range(0, 4000, 5):  # one tuple acked per second
        history.record(float(t), totals(float(t)))
    now = 4000.0
    assert acked_in(history, now, now, 600) == pytest.approx(600, abs=5)  # fine samples: within one step
    assert acked_in(history, now, now, 3000) == pytest.approx(3000, abs=60)  # minute samples
    assert acked_in(history, now, now, 10800) == now  # younger than the window: everything
    assert acked_in(history, now, now, None) == now
    # a worker restarted since: its counts start over, a window never shows less than 0
    assert acked_in(history, now, 10.0, 600) == 0.0


def test_history_memory_is_bounded():
    history = StatsHistory(started=0.0)
    for t in range(0, 3 * 86400, 1):
        history.record(float(t), totals(float(t)))
    assert len(history) <= 600 / FINE_SECS + 10800 / 60 + 86400 / 600 + 3
    assert acked_in(history, 3 * 86400.0, 3 * 86400.0, 86400) == pytest.approx(86400, abs=600)


def test_window_parameter_and_names():
    assert parse_window(None) is None and parse_window(":all-time") is None and parse_window("600") == 600
    for bad in ("0", "-5", "abc", "1.5"):
        with pytest.raises(ValueError, match="window"):
            parse_window(bad)
    assert [window_pretty(w) for w in (600, 10800, 86400, None, 61)] == \
        ["10m 0s", "3h 0m 0s", "1d 0h 0m 0s", "All time", "1m 1s"]


# -- user metrics and Prometheus ----------------------------------------------------------------


def test_user_metrics_reach_the_component_page_and_the_prometheus_endpoint(cluster):
    from prometheus_client.parser import text_string_to_metric_families

    run_metered(cluster, 20)
    metered = cluster.get_topology_info("t")["components"]["metered"]
    with UiServer(cluster, TOKEN, port=0) as ui:
        status, page, _ = call(ui.url + "/api/v1/topology/t/component/metered")
        assert status == 200
        assert page["userMetrics"]["processed"]["count"] == 20
        assert page["userMetrics"]["work"]["count"] == 20
        assert sum(m["processed"]["count"] for m in page["taskUserMetrics"].values()) == 20
        assert sorted(e["id"] for e in page["executorStats"]) == sorted(
            f"[{e['tasks'][0]}-{e['tasks'][-1]}]" for e in metered["executors"])
        assert sum(e["executed"] for e in page["executorStats"]) == metered["executed"] == 20
        with urllib.request.urlopen(ui.url + "/metrics", timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    processed = [s for s in families["squall_user_processed"].samples if s.labels["component"] == "metered"]
    assert sum(s.value for s in processed) == 20
    assert {s.labels["topology"] for s in processed} == {"t"}
    assert {s.labels["task"] for s in processed} == {str(t) for t in page["taskUserMetrics"]}
    assert sum(s.value for s in families["squall_user_work_seconds"].samples
               if s.name == "squall_user_work_seconds_count" and s.labels["component"] == "metered") == 20


@pytest.mark.parametrize("explicit", [False, True], ids=["default port", "port asked for"])
def test_a_taken_ui_port_falls_back_to_a_free_one_saying_so_only_when_it_was_asked_for(capsys, explicit):
    import socket

    from squall.ops.command.serve import serve_ui
    from squall.cluster.registry.local import LocalRegistry
    from squall.ops.ui.machine import MachineUi

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ui = serve_ui(lambda p: MachineUi(TOKEN, "127.0.0.1", p, LocalRegistry()), "127.0.0.1", port, explicit)
        try:
            assert ui.port not in (port, 0)
            assert call(f"http://127.0.0.1:{ui.port}/api/v1/cluster/summary", headers=AUTH)[0] == 200
        finally:
            ui.stop()
    err = capsys.readouterr().err
    if explicit:
        assert err.startswith(f"squall: the UI cannot listen on 127.0.0.1:{port} (Address already in use")
        assert err.count("\n") == 1, err
    else:
        assert err == ""


def test_the_topology_totals_leave_the_checkpoint_spouts_barriers_out(cluster, tmp_path):
    import os
    import sys

    from squall.api.system_ids import CHECKPOINT_COMPONENT

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    import stateful_wordcount as swc

    words = swc.make_input(str(tmp_path / "words.txt"), 500)
    cluster.submit_topology("stateful", {"topology.state.checkpoint.interval.ms": 100}, swc.build(words))
    wait_until(lambda: cluster.get_topology_info("stateful")["components"][CHECKPOINT_COMPONENT]["acked"] > 2,
               message="checkpoints acked")
    with UiServer(cluster, TOKEN, port=0) as server:
        status, page, _ = call(f"{server.url}/api/v1/topology/stateful", headers=AUTH)
        status_sys, page_sys, _ = call(f"{server.url}/api/v1/topology/stateful?sys=true", headers=AUTH)
        status_bad, bad, _ = call(f"{server.url}/api/v1/topology/stateful?sys=yes", headers=AUTH)
    assert status == status_sys == 200
    # the file spout's tuples are untracked (its checkpoints make it reliable): no spout tree the user's
    assert [(s["windowPretty"], s["acked"]) for s in page["topologyStats"] if s["window"] == ":all-time"] == \
        [("All time", 0)]
    assert [s["spoutId"] for s in page["spouts"]] == ["lines"]
    # Storm UI's "Show System Stats": the checkpoint spout's trees count, and it is listed
    assert [s["spoutId"] for s in page_sys["spouts"]] == [CHECKPOINT_COMPONENT, "lines"]
    assert page_sys["topologyStats"][-1]["acked"] >= page_sys["spouts"][0]["acked"] > 0
    assert status_bad == 400 and "sys" in bad["errorMessage"] and "'yes'" in bad["errorMessage"]
    assert page["currentRun"] == []  # no worker restarted, no rebalance


def test_streams_api_bolts_name_the_operations_they_run(cluster):
    builder = StreamBuilder()
    (builder.new_stream(FeederSpout(["line"])).flat_map(str.split).map_to_pair(lambda w: (w, 1))
        .repartition(2).count_by_key().print())
    cluster.submit_topology("streams-ui", Config(), builder.build())
    with UiServer(cluster, TOKEN, port=0) as server:
        status, page, _ = call(server.url + "/api/v1/topology/streams-ui")
        assert status == 200
        assert {b["boltId"]: b["operations"] for b in page["bolts"]} == {
            "bolt1": "flat_map -> map_to_pair", "bolt2": "count_by_key -> print"}
        assert "operations" not in page["spouts"][0]
        status, component, _ = call(server.url + "/api/v1/topology/streams-ui/component/bolt2")
        assert status == 200 and component["operations"] == "count_by_key -> print"


# -- a look inside: tuple sampling (Storm's Debug) and a worker's stacks (Storm's JStack) ---------


def test_sampling_keeps_the_chosen_components_tuples_only_and_stops_by_itself(ui, cluster):
    base = ui.url + f"/api/v1/topology/{NAME}/component/split"
    status, body, _ = call(base + "/debug/enable/100?secs=1", "POST", AUTH)
    assert (status, body["topologyOperation"]) == (200, "debug/enable")
    status, page, _ = call(base)
    assert (page["debug"], page["samplingPct"]) == (True, 100) and 0 < page["samplingSecsLeft"] <= 1

    def sampled():
        return call(base + "/samples", headers=AUTH)[1]["samples"]

    wait_until(lambda: len(sampled()) >= 5, timeout=10, message="tuples of split sampled")
    split_tasks = {t for e in cluster.get_topology_info(NAME)["components"]["split"]["executors"] for t in e["tasks"]}
    for sample in sampled():
        assert sample["stream"] == "default" and isinstance(sample["values"][0], str), sample
        assert sample["task"] in split_tasks, sample
    assert cluster.samples(NAME, "count") == [], "only the chosen component's tuples"
    # it stops by itself: the page says so, the workers drop their samplers, and no tuple is added
    wait_until(lambda: call(base)[1]["samplingPct"] == 0, timeout=10, message="sampling over")
    workers = cluster.runner(NAME).workers
    wait_until(lambda: all(not w._samplers for w in workers), timeout=10, message="samplers dropped")
    count = len(cluster.samples(NAME, "split"))
    stays(lambda: len(cluster.samples(NAME, "split")) == count, secs=0.5, what="the samples")


class PacedSpout(Spout):
    """Sleeps in next_tuple (holding its executor's lock nearly all the time), then emits."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        time.sleep(0.01)
        self.n += 1
        self.collector.emit([self.n])


def test_a_spout_busy_in_next_tuple_is_sampled_from_the_start_of_the_sampling_to_its_end(cluster):
    builder = TopologyBuilder()
    builder.set_spout("paced", PacedSpout())
    cluster.submit_topology("paced", Config(), builder.create_topology())
    wait_until(lambda: cluster.get_topology_info("paced")["components"]["paced"]["emitted"] > 0, timeout=10)
    started = time.time()
    cluster.set_sampling("paced", "paced", 100, 1)
    # about 100 emits in the second: the sampler reaches the spout between two of its calls (a
    # message on its queue), not when its lock happens to be free
    wait_until(lambda: time.time() > started + 2.5, timeout=10)
    times = [s.time for s in cluster.samples("paced", "paced")]
    assert len(times) >= 50, times
    # it stops within the worker's look at the samplings (0.5 s) of the end, plus slack
    assert max(times) <= started + 1 + 0.5 + 0.3, (max(times) - started)


def test_sampling_and_stacks_refusals_are_one_line(ui):
    base = ui.url + f"/api/v1/topology/{NAME}"
    cases = [
        ("POST", "/component/split/debug/enable/10", {}, 401, "token"),
        ("GET", "/component/split/samples", {}, 401, "token"),
        ("POST", "/profiling/dumpstacks/127.0.0.1:1", {}, 401, "token"),
        ("POST", "/component/nope/debug/enable/10", AUTH, 404, "topology 'wc' has no component 'nope'"),
        ("GET", "/component/nope/samples", AUTH, 404, "topology 'wc' has no component 'nope'"),
        ("POST", "/component/split/debug/enable/0", AUTH, 400, "enable needs a sampling percentage above 0"),
        ("POST", "/component/split/debug/enable/150", AUTH, 400, "between 0 and 100, not 150"),
        ("POST", "/component/split/debug/enable/10?secs=0", AUTH, 400, "duration must be between 1 and 3600"),
        ("POST", "/component/split/debug/start/10", AUTH, 400, "the action is enable or disable, not 'start'"),
        ("POST", "/profiling/dumpstacks/127.0.0.1:1", AUTH, 404, "has no worker on port 1"),
        ("POST", "/profiling/dumpstacks/nowhere", AUTH, 400, "a worker is host:port, not 'nowhere'"),
    ]
    for method, path, headers, status, message in cases:
        got, body, _ = call(base + path, method, headers)
        assert got == status and message in body["errorMessage"] and "\n" not in body["errorMessage"], (path, body)


def stacks_of_the_stuck_bolts_worker(cluster, name: str) -> str:
    port = cluster.get_topology_info(name)["workers"][0]["port"]
    return cluster.dump_stacks(name, port)


@pytest.mark.parametrize("processes", [False, pytest.param(True, marks=pytest.mark.processes)])
def test_a_workers_stacks_name_the_function_its_bolt_is_stuck_in(tmp_path, processes):
    release = tmp_path / "release"
    builder = TopologyBuilder()
    builder.set_spout("feed", SentenceSpout(["x"]))
    builder.set_bolt("stuck", StuckBolt(str(release))).shuffle_grouping("feed")
    with LocalCluster(processes=processes) as cluster:
        cluster.submit_topology("stuck", Config(), builder.create_topology())
        try:
            wait_until(lambda: "stuck_in_a_known_function" in stacks_of_the_stuck_bolts_worker(cluster, "stuck"),
                       timeout=20, message="the bolt's function in its worker's stacks")
            port = cluster.get_topology_info("stuck")["workers"][0]["port"]
            with UiServer(cluster, TOKEN, port=0) as server:
                status, body, _ = call(server.url + f"/api/v1/topology/stuck/profiling/dumpstacks/127.0.0.1:{port}",
                                       "POST", AUTH)
            assert status == 200 and "in stuck_in_a_known_function" in body["stacks"], body
            assert (os.getpid() != cluster.get_topology_info("stuck")["workers"][0]["pid"]) == processes
        finally:
            release.touch()
