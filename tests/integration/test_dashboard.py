"""The fabric page in a real headless Chromium, against ``fabricsched run`` on the local control
plane with the real kube-scheduler and kwok: the demo fabric (2 spines x 4 leaves x 4 hosts of
8 GPUs, leaf l07's uplinks and host gpu-022's link degraded, ``recoverAfterSeconds: 0``).

The browser is Debian's ``chromium`` driven through its ``chromium-driver`` (selenium never
downloads a driver here); without them the tests skip, or fail under ``CI=true``. The run
writes the screenshots docs/dashboard.md shows into docs/images/.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import REPO, TOPOLOGY, Fabric, fabric_cluster
from waiting import wait_for

from fabricsched.cluster import samples

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
IMAGES = REPO / "docs" / "images"
DEGRADED_LEAF = f"domain:leaf/{samples.DEMO_DEGRADED_LEAF}"
DEGRADED_HOST = f"node:{samples.DEMO_DEGRADED_HOST}"
MARKUP = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'


def chromium_or_skip() -> None:
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    message = "the fabric page tests need Debian's chromium and chromium-driver (apt-get install -y " \
              "chromium chromium-driver; .ci/run installs them)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    chromium_or_skip()
    with fabric_cluster(tmp_path_factory.mktemp("dashboard-cluster"), demo=True, dashboard=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1500,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def ns(fabric: Fabric) -> Iterator[str]:
    name = fabric.namespace()
    yield name
    fabric.clean(name)
    wait_for("pods gone", lambda: not fabric.pods(name), timeout=60)


def console_errors(browser: Any) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def open_page(browser: Any, fabric: Fabric, query: str = "") -> None:
    browser.get(f"{fabric.operator.url}/{query}")
    browser.execute_script("window.loadedOnce = true")  # gone if the page ever reloads
    wait_for("the page drew the fabric", lambda: hosts(browser) or browser.execute_script(
        "return document.getElementById('messages').textContent"), timeout=20)


def hosts(browser: Any, css: str = "") -> dict[str, str]:
    """Host tile id -> its class list, for the tiles matching ``css`` (e.g. ``.selected``)."""
    found: dict[str, str] = browser.execute_script(
        "const out = {}; for (const n of document.querySelectorAll('#fabric .host' + arguments[0]))"
        " out[n.getAttribute('data-id')] = n.className; return out;", css)
    return found


def classes(browser: Any, element_id: str) -> str:
    found: str = browser.execute_script(
        "const n = document.querySelector('#fabric [data-id=\"' + arguments[0] + '\"]');"
        " return n ? n.className : '';", element_id)
    return found


def screenshot(browser: Any, name: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(IMAGES / name))


def test_the_page_shows_the_demo_fabric_with_the_degraded_leaf_and_host_in_their_colours(
    fabric: Fabric, browser: Any
) -> None:
    open_page(browser, fabric)
    wait_for("32 host tiles", lambda: len(hosts(browser)) == 32, timeout=20)
    wait_for("the degraded leaf drawn degraded", lambda: "health-degraded" in classes(browser, DEGRADED_LEAF),
             timeout=20)
    tiles = hosts(browser)
    assert "health-degraded" in tiles[DEGRADED_HOST]
    assert all("health-healthy" in c for h, c in tiles.items() if h != DEGRADED_HOST)
    assert all("health-healthy" in classes(browser, f"domain:leaf/l0{i}") for i in (1, 2, 3, 4, 5, 6, 8))
    colours = browser.execute_script(
        "return [arguments[0], arguments[1], 'node:gpu-001'].map((id) =>"
        " getComputedStyle(document.querySelector('#fabric [data-id=\"' + id + '\"]')).borderTopColor);",
        DEGRADED_LEAF, DEGRADED_HOST)
    assert colours[0] == colours[1] == "rgb(249, 168, 37)" and colours[2] == "rgb(76, 175, 80)"
    title = browser.execute_script(
        "return document.querySelector('#fabric [data-id=\"' + arguments[0] + '\"] > .label').title",
        DEGRADED_LEAF)
    assert "4 of 16 uplinks flapping" in title and "since" in title
    screenshot(browser, "dashboard-fabric.png")
    assert console_errors(browser) == []


def test_selecting_a_job_highlights_its_hosts_and_a_host_degraded_under_it_turns_degraded_live(
    fabric: Fabric, browser: Any, ns: str
) -> None:
    fabric.job(ns, "six", pods=6, annotations={
        "fabricsched.io/required-tier": "spine", "fabricsched.io/preferred-tier": "leaf",
        "fabricsched.io/slice-size": "2", "fabricsched.io/slice-required-tier": "leaf",
        "fabricsched.io/traffic": "ring"})
    placed = fabric.placed(ns, "six", 6)
    open_page(browser, fabric)
    row = f'#gangs tr[data-key^="{ns}/six@"]'
    wait_for("the gang listed Bound", lambda: browser.execute_script(
        "const r = document.querySelector(arguments[0]); return r && r.textContent.includes('Bound');", row),
        timeout=20)
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, row).click()
    assert set(hosts(browser, ".selected")) == {f"node:{n}" for n in placed}
    said = browser.execute_script("return document.getElementById('gang-constraints').textContent")
    assert "required tier: spine" in said and "preferred tier: leaf (not held)" in said
    assert "slices of 2 pods in one leaf (required): slice 0 in l0" in said and "slice 2 in l0" in said
    assert "traffic: ring" in said
    screenshot(browser, "dashboard-gang.png")

    host = placed[0]
    fabric.label_health(host, "degraded")
    try:
        started = time.monotonic()
        wait_for(f"{host} degraded on the page", lambda: "health-degraded" in hosts(browser)[f"node:{host}"],
                 timeout=10)
        assert time.monotonic() - started <= 5
        assert browser.execute_script("return window.loadedOnce === true"), "the page reloaded"
        assert "selected" in hosts(browser)[f"node:{host}"], "the selection survives the update"
        wait_for("degraded path shown", lambda: browser.execute_script(
            "return document.querySelector(arguments[0]).lastChild.textContent", row) == "yes", timeout=10)
        browser.find_element(By.CSS_SELECTOR, f'#elements li[data-id="node:{host}"]').click()
        touched = browser.execute_script(
            "return [...document.querySelectorAll('#gangs tr.touched')].map((r) => r.dataset.key)")
        assert len(touched) == 1 and touched[0].startswith(f"{ns}/six@")
        screenshot(browser, "dashboard-element.png")
    finally:
        fabric.label_health(host, None)
    assert console_errors(browser) == []


def test_a_selected_gang_is_diagnosed_on_demand_and_says_what_was_not_measured(
    fabric: Fabric, browser: Any, ns: str
) -> None:
    fabric.job(ns, "four", pods=4)
    fabric.placed(ns, "four", 4)
    open_page(browser, fabric)
    row = f'#gangs tr[data-key^="{ns}/four@"]'
    wait_for("the gang listed Bound", lambda: browser.execute_script(
        "const r = document.querySelector(arguments[0]); return r && r.textContent.includes('Bound');", row),
        timeout=20)
    from selenium.webdriver.common.by import By

    assert not browser.find_element(By.ID, "diagnose-bar").is_displayed()
    browser.find_element(By.CSS_SELECTOR, row).click()
    browser.find_element(By.ID, "diagnose").click()
    wait_for("the diagnosis shown", lambda: browser.execute_script(
        "return document.querySelectorAll('#causes > li').length"), timeout=60)
    panel = browser.find_element(By.ID, "diagnosis").text
    assert f"Diagnosis of {ns}/four" in panel and "application: the job's own code or data" in panel
    assert "Not measured" in panel and "no Prometheus to ask" in panel
    screenshot(browser, "dashboard-diagnosis.png")
    browser.find_element(By.ID, "clear").click()
    assert not browser.find_element(By.ID, "diagnosis").is_displayed()
    assert console_errors(browser) == []


def test_markup_in_a_reason_stays_text(fabric: Fabric, browser: Any) -> None:
    leaf = "l03"
    fabric.set_links([
        {"tier": "leaf", "domain": leaf, "state": "degraded", "capacity": 0.5, "reason": MARKUP}
    ])
    try:
        open_page(browser, fabric)
        wait_for("the leaf degraded", lambda: "health-degraded" in classes(browser, f"domain:leaf/{leaf}"),
                 timeout=20)
        title = browser.execute_script(
            "return document.querySelector('#elements li[data-id=\"domain:leaf/l03\"]').title")
        assert MARKUP in title
        injected = "return document.querySelectorAll('img:not([alt]), main script').length"
        assert browser.execute_script(injected) == 0
        assert browser.execute_script("return window.pwned === undefined")
    finally:
        fabric.set_links([])
    assert console_errors(browser) == []


def get(url: str) -> tuple[int, dict[str, Any] | str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = r.read().decode()
            return r.status, json.loads(body) if r.headers.get_content_type() == "application/json" else body
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_bad_routes_and_queries(fabric: Fabric, browser: Any) -> None:
    base = fabric.operator.url
    for path in ("/nope", "/static/nope.js", "/static/../server.py", "/api/state/x"):
        assert get(base + path)[0] == 404, path
    status, doc = get(base + "/api/state?topology=nope")
    assert status == 200 and isinstance(doc, dict)
    assert doc["fabric"] is None and doc["gangs"] == []
    assert doc["messages"] == ["no FabricTopology named 'nope'"]
    status, doc = get(base + f"/api/state?topology={TOPOLOGY}&gang=team/none")
    assert status == 200 and isinstance(doc, dict) and doc["gangs"] == [] and doc["fabric"] is not None
    assert doc["messages"] == ["no gang named 'team/none'"]
    for query in ("bogus=1", "topology=a&topology=b", "topology=" + "x" * 700, "gang=" + "%00"):
        assert get(base + "/api/state?" + query)[0] == 400, query
    open_page(browser, fabric, "?topology=nope")
    wait_for("the message shown", lambda: browser.execute_script(
        "return document.getElementById('messages').textContent") == "no FabricTopology named 'nope'")
    assert hosts(browser) == {}
    assert console_errors(browser) == []


def test_a_gang_that_cannot_be_placed_is_listed_pending_with_its_reason(
    fabric: Fabric, browser: Any, ns: str
) -> None:
    fabric.job(ns, "huge", pods=40)
    open_page(browser, fabric)
    row = f'#pending tr[data-key^="{ns}/huge@"]'
    cells = wait_for("huge listed Pending", lambda: browser.execute_script(
        "const r = document.querySelector(arguments[0]);"
        " return r && [...r.cells].map((c) => c.textContent);", row), timeout=30)
    assert cells[0] == f"{ns}/huge" and cells[1] == "Unplaceable"
    assert cells[2].startswith("needs 40 x 8 GPUs: the fabric could never hold 40 pods")
    assert console_errors(browser) == []
