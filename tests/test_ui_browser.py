"""The UI in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``)
driven by Selenium, against a UiServer on 127.0.0.1 over the example word count.

The topology page must list every component, draw every edge with its stream and grouping,
show figures that rise while the topology runs, and deactivate the spouts from its button
(after the confirmation). A screenshot of the page is saved in ``test-artifacts/``.
"""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest

from squall import Config
from squall.testing import wait_until
from squall.ui.server import UiServer

from helpers import stays
from test_ui_rest import NAME, TOKEN, _wordcount

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = pathlib.Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = [
    pytest.mark.skipif(not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
                       reason="needs Debian's chromium and chromium-driver packages (apt-get install chromium "
                              "chromium-driver)"),
    pytest.mark.timeout(120),
]


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,2400"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_topology_page_shows_the_topology_and_its_deactivate_button_stops_the_spouts(cluster, browser):
    from selenium.webdriver.common.by import By

    cluster.submit_topology(NAME, Config().set_max_spout_pending(200), _wordcount().build())
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
            return int(browser.execute_script(
                "return document.querySelector(\"#spouts tr[data-component='sentences'] td.emitted\").textContent"))

        first = shown_emitted()
        wait_until(lambda: shown_emitted() > first, timeout=15, message="the page's figures rising")
        wait_until(lambda: browser.execute_script(
            "return document.querySelectorAll('#plot-throughput polyline').length") == 1, timeout=15,
            message="the throughput plot drawn")

        browser.find_element(By.ID, "deactivate").click()
        browser.switch_to.alert.accept()  # "Deactivate topology wc?"
        wait_until(lambda: browser.execute_script("return document.getElementById('status').textContent")
                   == "INACTIVE", timeout=15,
                   message="the page showing INACTIVE")
        assert cluster.get_topology_info(NAME)["status"] == "INACTIVE"
        spouts = [e for w in cluster._get(NAME).workers for e in w.executors if e.component == "sentences"]
        wait_until(lambda: not any(e.active for e in spouts), timeout=10)
        emitted = cluster.get_topology_info(NAME)["components"]["sentences"]["emitted"]
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
        assert [e for e in browser.get_log("browser") if e["source"] == "javascript"] == []
