"""The UI in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``)
driven by Selenium, against a UiServer on 127.0.0.1 over the example word count.

The topology page must list every component, draw every edge with its stream and grouping,
show figures that rise while the topology runs, and deactivate the spouts from its button
(after the confirmation). On a stateful topology (a ``$checkpoint`` stream beside each
``default`` one), every label of the graph must be clear of the others, the plots' legends clear
of the plots, their axes in human numbers, errors folded, and a browser without the token must
find the controls disabled and a note saying how to get it. Screenshots of the pages are saved
in ``test-artifacts/``.
"""

from __future__ import annotations

import base64
import os
import pathlib
import re
import shutil
import tempfile
from typing import Any

import pytest

from squall import Config, TopologyBuilder
from squall.testing import wait_until
from squall.ops.ui.server import UiServer

from helpers import stays
from redis_server import require
from ui_client import NAME, TOKEN, wordcount_example
from wordcount_state import swc

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = pathlib.Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):  # skipped, but failed under CI
        require("Debian's chromium and chromium-driver packages", "apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,2400"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # get_log("browser") sees every error
    # its temporary files (with --disable-dev-shm-usage, its shared memory too) in a directory
    # removed afterwards: Chromium leaves some org.chromium.Chromium.* behind otherwise. A short
    # path: it makes unix sockets there (108 bytes at most), too long under pytest's tmp_path
    temp = tempfile.mkdtemp(prefix="squall-chromium-")
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER, env={**os.environ, "TMPDIR": temp}),
                                  options=options)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_the_topology_page_shows_the_topology_and_its_deactivate_button_stops_the_spouts(cluster, browser):
    from selenium.webdriver.common.by import By

    cluster.submit_topology(NAME, Config().set_max_spout_pending(200), wordcount_example().build())
    with UiServer(cluster, TOKEN, port=0) as ui:
        browser.get(f"{ui.url}/?token={TOKEN}")  # the URL squall prints: sets the cookie
        link = f"return document.querySelector(\"tr[data-topology='{NAME}'] a\")?.href"
        wait_until(lambda: browser.execute_script(link), timeout=15, message="the topology listed")
        browser.get(browser.execute_script(link))  # the list is redrawn: follow its link, not a found element

        # read through the page's own DOM in one script call: the tables are redrawn every 2 s, so an
        # element found in one call may be stale by the next
        def attributes(selector: str, *names: str) -> set[tuple[str, ...]]:
            rows = browser.execute_script(
                "return [...document.querySelectorAll(arguments[0])].map(e => arguments[1].map(n => e.getAttribute(n)))",
                selector, list(names))
            return {tuple(row) for row in rows}

        wait_until(lambda: attributes("#spouts tr[data-component], #bolts tr[data-component]", "data-component")
                   == {("sentences",), ("split",), ("count",), ("report",)}, timeout=15,
                   message="every component in the tables")
        assert attributes("#graph g[data-edge]", "data-edge", "data-stream", "data-grouping") == {
            ("sentences->split", "default", "shuffle"), ("split->count", "default", "fields"),
            ("count->report", "default", "global")}
        assert attributes("#graph g[data-component]", "data-component") == \
            {("sentences",), ("split",), ("count",), ("report",)}

        def shown_emitted() -> int:
            text = browser.execute_script(
                "return document.querySelector(\"#spouts tr[data-component='sentences'] td.emitted\").textContent")
            assert re.fullmatch(r"\d{1,3}(,\d{3})*", text), f"not a human number: {text!r}"
            return int(text.replace(",", ""))

        first = shown_emitted()
        wait_until(lambda: shown_emitted() > first, timeout=15, message="the page's figures rising")
        wait_until(lambda: browser.execute_script(
            "return [...document.querySelectorAll('#plot-throughput polyline')].map(p => p.dataset.series)")
            == ["emitted", "acked"], timeout=15, message="the throughput plot drawn")

        browser.find_element(By.ID, "deactivate").click()
        browser.switch_to.alert.accept()  # "Deactivate topology wc?"
        wait_until(lambda: browser.execute_script("return document.getElementById('status').textContent")
                   == "INACTIVE", timeout=15,
                   message="the page showing INACTIVE")
        assert cluster.get_topology_info(NAME)["status"] == "INACTIVE"
        spouts = [e for e in cluster.executors(NAME) if e.component == "sentences"]
        wait_until(lambda: not any(e.active for e in spouts), timeout=10)
        emitted = cluster.get_topology_info(NAME)["components"]["sentences"]["emitted"]
        # an inactive spout's executor only waits: nothing marks that it did not emit, so watch it
        stays(lambda: cluster.get_topology_info(NAME)["components"]["sentences"]["emitted"] == emitted, secs=0.5,
              what="the spouts' emitted count")
        ARTIFACTS.mkdir(exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "ui-topology-page.png"))

        # the rebalance button's dialog: workers, executors, wait; the topology stays deactivated
        browser.find_element(By.ID, "rebalance").click()
        for answer in ("2", "split=4", "0"):
            alert = browser.switch_to.alert
            alert.send_keys(answer)
            alert.accept()
        wait_until(lambda: len(cluster.get_topology_info(NAME)["workers"]) == 2
                   and cluster.get_topology_info(NAME)["status"] == "INACTIVE", timeout=20,
                   message="rebalanced to 2 workers, still deactivated")
        splits = [e for w in cluster.get_topology_info(NAME)["workers"] for e in w["executors"]
                  if e["component"] == "split"]
        assert len(splits) == 4
        # the new workers count from 0: the page says so beside the totals of the whole life
        wait_until(lambda: browser.execute_script(
            "const p = document.getElementById('current-run'); return !p.hidden && p.textContent"),
            timeout=15, message="the figures since the rebalance shown")
        assert [e for e in browser.get_log("browser") if e["source"] == "javascript"] == []


# -- a stateful topology ---------------------------------------------------------------------------

STATEFUL = "stateful-page"  # the memory state provider keys by name: not test_ui_rest's "stateful"


class Split(swc.SplitLine):
    """The example's split; every 200th line reports one of two errors in turn, so that the
    component's list of errors interleaves them."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.seen = 0

    def execute(self, tup: Any, collector: Any) -> None:
        self.seen += 1
        if self.seen % 200 == 0:
            try:
                if self.seen % 400:
                    raise ValueError("a sentence without a verb")
                raise KeyError("no such word")
            except (ValueError, KeyError) as e:
                collector.report_error(e)
        super().execute(tup, collector)


def _stateful_topology(tmp_path: pathlib.Path) -> Any:
    """examples/stateful_wordcount.py's spout (paced) and count, the split above between them."""
    words = swc.make_input(str(tmp_path / "words.txt"), 20_000)
    builder = TopologyBuilder()
    builder.set_spout("sentences", swc.FileSpout(words, lines_per_sec=2000))
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", swc.WordCount(), 2).fields_grouping("split", ["word"])
    return builder.create_topology()


def _overlapping(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The pairs of ``boxes`` (each ``what`` and a DOMRect's x, y, width, height) that overlap."""
    def meet(a: dict[str, Any], b: dict[str, Any]) -> bool:
        return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
                and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])
    return [(a["what"], b["what"]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if meet(a, b)]


def _save_full_page(browser: Any, name: str) -> None:
    """A screenshot of the whole page, below the window's fold too (Chromium's own capture)."""
    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / name).write_bytes(base64.b64decode(shot["data"]))


# every label of the graph (edges' and components'), every legend entry and plot area, as one
# snapshot: the page redraws itself every 2 s, so separate calls could see different drawings
PAGE_BOXES = """
const box = (what, e) => { const r = e.getBoundingClientRect();
                           return {what, x: r.x, y: r.y, width: r.width, height: r.height}; };
return {
  labels: [...document.querySelectorAll('#graph g[data-edge]')].map(g => box(
             `${g.dataset.edge} ${g.dataset.stream}`, g.querySelector('text')))
    .concat([...document.querySelectorAll('#graph g[data-component] text')].map(t => box(t.textContent, t))),
  paths: [...document.querySelectorAll('#graph g[data-edge] path')].map(p => p.getAttribute('d')),
  legends: [...document.querySelectorAll('.plots .legend span')].map(s => box(`legend ${s.dataset.series}`, s)),
  plots: [...document.querySelectorAll('.plots rect.plot-area')].map(r => box(`plot ${r.closest('svg').id}`, r)),
  ticks: [...document.querySelectorAll('.plots text.y-tick')].map(t => t.textContent),
};
"""


def test_a_stateful_topologys_page_is_legible_and_read_only_without_the_token(cluster, browser, tmp_path):
    cluster.submit_topology(STATEFUL, {"topology.state.checkpoint.interval.ms": 200}, _stateful_topology(tmp_path))
    with UiServer(cluster, TOKEN, port=0) as ui:
        browser.get(f"{ui.url}/topology.html?id={STATEFUL}")  # no token: the page may read, not act
        script = browser.execute_script

        edges = ("return [...document.querySelectorAll('#graph g[data-edge]')]"
                 ".map(g => [g.dataset.edge, g.dataset.stream, g.dataset.grouping])")
        wait_until(lambda: {tuple(e) for e in script(edges)} == {
            ("$checkpointspout->sentences", "$checkpoint", "all"),
            ("sentences->split", "default", "shuffle"), ("sentences->split", "$checkpoint", "all"),
            ("split->count", "default", "fields"), ("split->count", "$checkpoint", "all")},
            timeout=15, interval=0.1, message="the graph with the checkpoint stream beside each default one")
        wait_until(lambda: script("return document.querySelectorAll('.plots polyline').length") == 5, timeout=20,
                   interval=0.1, message="every line of the plots drawn")

        page = script(PAGE_BOXES)
        assert len(set(page["paths"])) == len(page["paths"]) == 5, "parallel edges drawn as distinct curves"
        assert len(page["labels"]) == 5 + 2 * 4  # an edge's label; a component's id and its figure
        assert _overlapping(page["labels"]) == []
        assert {b["what"] for b in page["legends"]} == {"legend emitted", "legend acked", "legend complete",
                                                      "legend split", "legend count"}
        assert [(a, b) for a, b in _overlapping(page["legends"] + page["plots"]) if "legend" in a] == []
        assert page["ticks"] and all(re.fullmatch(r"\d+(\.\d+)?[kMG]?", t) for t in page["ticks"]), page["ticks"]
        assert script("return [human(21600), human(1.2e6), human(0.25), human(480)]") == \
            ["21.6k", "1.2M", "0.25", "480"]

        # the errors list: each error once with its count, though split's own list alternates them
        wait_until(lambda: len(cluster.get_topology_info(STATEFUL)["components"]["split"]["errors"]) > 2,
                   timeout=20, interval=0.1, message="split's errors interleaved")

        def errors() -> list[list[Any]]:
            return script("return [...document.querySelectorAll('#errors tr[data-error-component=split]')].map("
                          "r => [r.querySelector('summary').textContent, +r.querySelector('td.count').textContent])")

        wait_until(lambda: len(rows := errors()) == 2 and sum(count for _, count in rows) > 2, timeout=20,
                   interval=0.1, message="split's errors folded")
        assert sorted(headline for headline, _ in errors()) == ["KeyError: 'no such word'",
                                                                "ValueError: a sentence without a verb"]
        # the last error in the table: its exception line (not the traceback's header) and its age
        last = script("return document.querySelector(\"#bolts tr[data-component='split'] td:last-child\").textContent")
        assert re.fullmatch(r"(ValueError: a sentence without a verb|KeyError: 'no such word') "
                            r"\((just now|\d+s ago|\d+m( \d+s)? ago)\)", last), last

        # without the token: the controls are disabled, and the note says where the token is
        assert script("return [...document.querySelectorAll('button.control')].map(b => [b.id, b.disabled])") == [
            ["activate", True], ["deactivate", True], ["rebalance", True], ["kill", True]]
        note = script("const n = document.getElementById('token-note'); "
                      "return n.offsetParent !== null && n.textContent")
        assert note and "token" in note and "squall run" in note
        _save_full_page(browser, "ui-stateful-topology-page.png")

        # the system components: out of the tables and totals, unless asked for
        spouts = "return [...document.querySelectorAll('#spouts tr[data-component]')].map(r => r.dataset.component)"
        assert script(spouts) == ["sentences"]
        browser.find_element("id", "sys").click()
        wait_until(lambda: script(spouts) == ["$checkpointspout", "sentences"], timeout=15, interval=0.1,
                   message="the checkpoint spout listed")
        assert "sys=true" in browser.current_url
        _save_full_page(browser, "ui-stateful-topology-page-sys.png")
        assert script("return document.getElementById('message').textContent") == ""

        # with the token: the controls are there, the note is not
        browser.get(f"{ui.url}/?token={TOKEN}")
        browser.get(f"{ui.url}/topology.html?id={STATEFUL}")
        assert script("return [...document.querySelectorAll('button.control')].every(b => !b.disabled)")
        assert script("return document.getElementById('token-note').offsetParent") is None
        assert [e for e in browser.get_log("browser") if e["source"] == "javascript"
                or (e["level"] == "SEVERE" and "favicon.ico" not in e["message"])] == []


def test_a_components_page_opens_from_the_topology_page_with_its_sections_and_samples(cluster, browser, tmp_path):
    cluster.submit_topology(STATEFUL, {"topology.state.checkpoint.interval.ms": 200}, _stateful_topology(tmp_path))
    with UiServer(cluster, TOKEN, port=0) as ui:
        script = browser.execute_script
        browser.get(f"{ui.url}/?token={TOKEN}")
        browser.get(f"{ui.url}/topology.html?id={STATEFUL}")
        link = "return document.querySelector(\"#bolts tr[data-component='count'] a\")?.href"
        wait_until(lambda: script(link), timeout=15, message="the count bolt listed")
        # the graph scales down to a narrow window rather than run off its right edge
        browser.set_window_size(800, 2400)
        wait_until(lambda: script("return document.querySelectorAll('#graph g[data-component]').length") == 4,
                   timeout=15, message="the graph drawn")
        assert script("return document.getElementById('graph').getBoundingClientRect().right "
                      "<= document.documentElement.clientWidth")
        _save_full_page(browser, "ui-topology-page-800px.png")
        browser.set_window_size(1400, 2400)
        browser.get(script(link))

        rows = "return [...document.querySelectorAll(arguments[0] + ' tbody tr')].map(r => r.textContent)"
        wait_until(lambda: len(script(rows, "#executors")) == 2, timeout=15, message="count's two executors")
        assert script("return document.getElementById('name').textContent") == "count"
        assert script("return document.getElementById('type').textContent") == "Bolt"
        assert len(script(rows, "#stats")) == 4, "one row per window"
        inputs = script("return [...document.querySelectorAll('#inputs tr[data-input]')].map(r => r.dataset.input)")
        assert sorted(inputs) == ["split:$checkpoint", "split:default"]
        assert script(rows, "#outputs") == [] or all(r for r in script(rows, "#outputs"))
        for selector in ("#summary", "#errors", "#metrics"):
            assert script("return document.querySelector(arguments[0]).textContent", selector), selector
        wait_until(lambda: script("return document.querySelectorAll('.plots polyline').length") == 3, timeout=20,
                   interval=0.1, message="the component's plots drawn")

        # human numbers: wait for thousands executed, then read them as people write them
        executed = "return [...document.querySelectorAll('#executors td.executed')].map(t => t.textContent)"
        wait_until(lambda: any("," in t for t in script(executed)), timeout=30, interval=0.2,
                   message="thousands executed, written with separators")
        assert all(re.fullmatch(r"\d{1,3}(,\d{3})*", t) for t in script(executed)), script(executed)
        page = script(PAGE_BOXES)
        assert [(a, b) for a, b in _overlapping(page["legends"] + page["plots"]) if "legend" in a] == []
        ticks = script("return [...document.querySelectorAll('.plots text')].map(t => { const r = "
                       "t.getBoundingClientRect(); return {what: t.closest('svg').id + ' ' + t.textContent, "
                       "x: r.x, y: r.y, width: r.width, height: r.height}; })")
        assert _overlapping(ticks) == []

        # sampling, from the page: the count bolt's own tuples, then it stops by itself
        browser.find_element("id", "sample-pct").clear()
        browser.find_element("id", "sample-pct").send_keys("100")
        browser.find_element("id", "sample-secs").clear()
        browser.find_element("id", "sample-secs").send_keys("2")
        browser.find_element("id", "sample-start").click()
        wait_until(lambda: len(script(rows, "#samples")) > 3, timeout=15, message="samples shown")
        assert "sampling 100%" in script("return document.getElementById('sampling').textContent")
        wait_until(lambda: script("return document.getElementById('sampling').textContent") == "off", timeout=15,
                   message="the sampling over")
        _save_full_page(browser, "ui-component-page.png")
        assert script("return document.getElementById('message').textContent") == ""
        assert [e for e in browser.get_log("browser") if e["source"] == "javascript"
                or (e["level"] == "SEVERE" and "favicon.ico" not in e["message"])] == []
