"""The web console in a real browser: headless Chromium (the system's, driven by Playwright) against
``seqsketch serve`` — gunicorn request workers and the job-runner process — on a loopback port.

The browser builds a dataset from the server's inputs and watches its job, picks the real running-example log
(built through the API first), runs a query and finds on the timeline exactly the matches the API answers,
opens one and sees its bound events with their attributes, and sees a broken query underlined at the line and
column the API gave.  Chromium comes from the system's packages (``./dev`` installs it); Playwright never
downloads a browser here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.client import Client, QueryError
from bench.load import served

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAIR_QUERY = ("PATTERN SEQ('register request' r, 'pay compensation' p) PARTITION BY case "
              "STRATEGY skip_till_any_match")
BROKEN_QUERY = "PATTERN SEQ('register request' r,\n  'decide' d 'pay compensation' p)"


def chromium() -> Path:
    """The system's Chromium, installed with the system's package manager when missing (as ./dev does)."""
    if not CHROMIUM.exists() and shutil.which("apt-get") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
            try:
                subprocess.run(command, env=env, capture_output=True, timeout=900, check=False)
            except (OSError, subprocess.SubprocessError):
                break
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing and could not be installed (apt-get install chromium, as ./dev "
                    "does)")
    return CHROMIUM


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[tuple[str, Client]]:
    """The production server (2 gunicorn workers, a job runner), the running example built over HTTP."""
    home = tmp_path_factory.mktemp("console") / "home"
    home.mkdir()
    env = {"SEQSKETCH_INPUT_ROOTS": str(shared_data), "SEQSKETCH_BUILD_ENGINE": "local"}
    with served(home, server="gunicorn", workers=2, env=env) as url:
        client = Client(url, retries=0, timeout=60)
        job = client.build("running", ["running-example.xes"], engine="local")
        assert client.wait(job["job_id"], timeout=120)["state"] == "succeeded"
        yield url, client


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a test dependency")
    executable = chromium()
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(executable), args=ARGS, headless=True,
            viewport={"width": 1400, "height": 1000})
        yield context
        context.close()


@pytest.fixture
def page(browser: Any, server: tuple[str, Client], tmp_path: Path) -> Iterator[Any]:
    url, _ = server
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
    page.on("console", lambda msg: problems.append(msg.text) if "Content Security Policy" in msg.text
            else None)
    page.goto(url + "/")
    page.wait_for_selector("#datasets li[data-name='running']")
    yield page
    page.screenshot(path=str(tmp_path / "console.png"), full_page=True)  # for a look after a failure
    page.close()
    assert problems == [], problems  # no script error, nothing the page's policy had to block


def pick(page: Any, name: str) -> None:
    page.click(f"#datasets li[data-name='{name}']")
    page.wait_for_function("name => document.querySelector('#info-title').textContent === name", arg=name)
    page.wait_for_function("() => document.querySelector('#timeline').childElementCount > 0")


def run(page: Any, query: str) -> None:
    page.fill("#query", query)
    page.click("#run")
    page.wait_for_function("() => document.querySelector('#run').textContent === 'Run query'")


def test_the_answer_is_drawn_on_the_timeline(page: Any, server: tuple[str, Client]) -> None:
    _, client = server
    pick(page, "running")
    info = client.info("running")
    assert page.inner_text("#info").count(f"{info['events']}") >= 1
    assert page.locator("#types tr").count() >= 1  # the types with their counts
    run(page, PAIR_QUERY)
    answer = client.query("running", PAIR_QUERY, mode="verified", limit=100)
    assert answer.matches, "the running example has compensated cases"
    assert page.locator("#timeline rect.match").count() == len(answer.matches)
    assert page.locator("#timeline rect.candidate").count() >= 1
    assert page.locator("#timeline path.density").count() == 1
    assert page.locator("#timeline path.match-density").count() == 1  # where all matches lie
    summary = page.inner_text("#summary")
    assert f"{answer.count} match" in summary
    stats = page.inner_text("#stats")
    assert f"{answer.stats['events_total']}" in stats and "spared" in stats
    assert "candidate interval" in page.inner_text("#explain")
    # each mark lies where its match lies: left to right in the order of their start times
    xs = page.eval_on_selector_all("#timeline rect.match",
                                   "els => els.map(e => [Number(e.dataset.i), Number(e.getAttribute('x'))])")
    starts = {i: m["start_ts"] for i, m in enumerate(answer.matches)}
    by_x = [i for i, _ in sorted(xs, key=lambda p: (p[1], starts[p[0]]))]
    assert [starts[i] for i in by_x] == sorted(starts.values())


def test_return_cases_lists_each_case_once(page: Any, server: tuple[str, Client]) -> None:
    _, client = server
    pick(page, "running")
    query = PAIR_QUERY + " RETURN cases"
    run(page, query)
    answer = client.query("running", query, mode="verified", limit=100)
    assert answer.cases and answer.case_count == len(answer.cases)
    rows = page.eval_on_selector_all("#match-list tbody tr", "rows => rows.map(r => [...r.cells].map(c => "
                                     "c.innerText))")
    assert [(r[1], int(r[2])) for r in rows] == [(str(c["case"]), c["matches"]) for c in answer.cases]
    assert f"in {answer.case_count} case" in page.inner_text("#summary")
    assert page.locator("#timeline rect.match").count() == len(answer.cases)  # each case's first match
    page.click("#timeline rect.match[data-i='0']")  # a case's mark opens no match panel, and breaks nothing
    assert page.locator("#match-detail").is_hidden()


def test_summaries_are_drawn_as_the_api_answers_them(page: Any, server: tuple[str, Client]) -> None:
    """A funnel's bars, the next events' bars and the duration histograms, each bar the API's number."""
    _, client = server
    pick(page, "running")
    funnel = ("PATTERN SEQ('register request' r, decide d, 'pay compensation' p) PARTITION BY case "
              "RETURN funnel")
    run(page, funnel)
    answer = client.query("running", funnel)
    page.wait_for_selector("svg.chart.funnel rect.bar")
    values = page.eval_on_selector_all("svg.chart.funnel rect.bar", "els => els.map(e => Number(e.dataset.value))")
    assert values == [s["reached"] for s in answer.funnel] and values[0] > 0
    assert f"{answer['unit_count']} partitions reached step 1" in page.inner_text("#summary")
    following = "PATTERN SEQ(decide d) PARTITION BY case RETURN next 2"
    run(page, following)
    answer = client.query("running", following)
    bars = page.eval_on_selector_all("svg.chart.next rect.bar", "els => els.map(e => Number(e.dataset.value))")
    assert bars == [r["count"] for r in answer.next][:len(bars)] and len(bars) == len(answer.next)
    assert page.locator(".summary-chart h3").first.inner_text() == "What comes next"
    spans = PAIR_QUERY + " RETURN durations"
    run(page, spans)
    answer = client.query("running", spans)
    assert page.locator("svg.chart.histogram").count() == len(answer.durations) == 2
    counts = page.eval_on_selector_all("svg.chart.histogram rect.bar", "els => els.map(e => Number(e.dataset.count))")
    assert sum(counts) == sum(d["count"] for d in answer.durations) == 2 * answer.count


def test_the_watch_toggle_adds_live_matches(page: Any, server: tuple[str, Client]) -> None:
    """With "watch" on, a match of events appended afterwards (by the SDK) is added to the timeline when it
    completes — with the append of its last event, its window still open; turning it off deletes the watch."""
    _, client = server
    job = client.build("live", ["running-example.xes"], engine="local")
    assert client.wait(job["job_id"], timeout=120)["state"] == "succeeded"
    page.click("#refresh")
    page.wait_for_selector("#datasets li[data-name='live']")
    pick(page, "live")
    query = ("PATTERN SEQ('register request' r, 'pay compensation' p) PARTITION BY case WITHIN 10 days "
             "STRATEGY skip_till_any_match")
    run(page, query)
    before = page.locator("#timeline rect.match").count()
    assert before == len(client.query("live", query).matches)
    page.check("#watch")
    page.wait_for_function("() => document.querySelector('#watch-state').textContent.startsWith('watching')")
    page.wait_for_function("() => true", polling=500, timeout=2000)  # the stream is open
    client.append("live", [{"type": "register request", "ts": "2011-03-01T09:00:00Z", "case": "new"},
                           {"type": "pay compensation", "ts": "2011-03-01T17:00:00Z", "case": "new"}])
    page.wait_for_function(f"() => document.querySelectorAll('#timeline rect.match').length === {before + 1}",
                           timeout=20000)
    assert "1 new match" in page.inner_text("#watch-state")
    assert len(client.watches("live")) == 1
    page.uncheck("#watch")
    page.wait_for_function("() => document.querySelector('#watch-state').textContent === ''")
    assert client.watches("live") == []


def test_a_match_opens_its_bound_events(page: Any, server: tuple[str, Client]) -> None:
    _, client = server
    pick(page, "running")
    run(page, PAIR_QUERY)
    answer = client.query("running", PAIR_QUERY, mode="verified", limit=100, include_events=True)
    page.click("#timeline rect.match[data-i='0']")
    page.wait_for_selector("#match-detail table tbody tr")
    rows = page.eval_on_selector_all("#match-detail tbody tr", "rows => rows.map(r => [...r.cells].map(c => "
                                     "c.innerText))")
    events = answer.matches[0]["events"]
    assert [int(r[0]) for r in rows] == [e["seq"] for e in events]
    assert [r[3] for r in rows] == [e["type"] for e in events]
    for row, event in zip(rows, events, strict=True):
        for key, value in event["attrs"].items():
            assert f"{key}={value}" in row[4], (key, value, row)
    assert f"case = {events[0]['attrs']['case']}" in page.inner_text("#match-detail")  # PARTITION BY value


def test_a_broken_query_is_underlined_where_the_api_says(page: Any, server: tuple[str, Client]) -> None:
    _, client = server
    pick(page, "running")
    with pytest.raises(QueryError) as refused:
        client.query("running", BROKEN_QUERY)
    position = refused.value.position
    assert position and position["line"] == 2
    run(page, BROKEN_QUERY)
    page.wait_for_selector("#highlight .err")
    mark = page.eval_on_selector("#highlight .err", "e => [e.dataset.line, e.dataset.column, e.textContent]")
    assert (int(mark[0]), int(mark[1])) == (position["line"], position["column"])
    lines = BROKEN_QUERY.split("\n")
    assert lines[position["line"] - 1][position["column"] - 1:].startswith(mark[2])
    style = page.eval_on_selector("#highlight .err", "e => getComputedStyle(e).textDecorationLine")
    assert "underline" in style
    assert page.is_visible("#query-error") and str(position["column"]) in page.inner_text("#query-error")


def test_the_editor_knows_the_language_and_the_types(page: Any) -> None:
    pick(page, "running")
    page.fill("#query", "")
    page.click("#query")
    page.keyboard.type("PATTERN SEQ(reg")
    page.wait_for_selector("#completions:not([hidden]) li")
    assert "'register request'" in page.inner_text("#completions")
    page.keyboard.press("Tab")
    assert page.input_value("#query") == "PATTERN SEQ('register request'"
    assert page.locator("#highlight .tok-kw").count() == 2
    assert page.locator("#highlight .tok-type").count() == 1
    page.keyboard.type(" r) STRATEGY ")
    page.keyboard.press("Control+Space")
    assert "skip_till_any_match" in page.inner_text("#completions")
    page.keyboard.press("Escape")
    page.fill("#query", "PATTERN SEQ('register request' r, decide d) RETURN count")
    page.select_option("#strategy", "strict_contiguity")
    assert page.input_value("#query") == ("PATTERN SEQ('register request' r, decide d) "
                                          "STRATEGY strict_contiguity RETURN count")


def test_zoom_and_reset(page: Any) -> None:
    pick(page, "running")
    run(page, PAIR_QUERY)
    whole = page.inner_text("#view-range")
    assert "the whole history" in whole
    box = page.locator("#timeline").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + 20)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 20, steps=5)
    page.mouse.up()
    zoomed = page.inner_text("#view-range")
    assert zoomed != whole and "the whole history" not in zoomed
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 30)
    page.mouse.wheel(0, -300)
    assert page.inner_text("#view-range") != zoomed
    page.click("#zoom-reset")
    assert page.inner_text("#view-range") == whole


def test_a_build_started_in_the_console_runs_in_the_job_runner(page: Any, server: tuple[str, Client]) -> None:
    _, client = server
    page.wait_for_selector("#build-input option[value='running-example.xes']", state="attached")
    page.fill("#build-name", "fromconsole")
    page.select_option("#build-input", "running-example.xes")
    page.click("#build-start")
    page.wait_for_selector("#jobs li.succeeded", timeout=120_000)
    assert "100 %" in page.inner_text("#jobs li.succeeded")
    page.wait_for_selector("#datasets li[data-name='fromconsole']")
    assert client.info("fromconsole")["events"] == client.info("running")["events"]


def test_a_dataset_under_retention_shows_where_its_history_starts(page: Any, server: tuple[str, Client]) -> None:
    _, client = server
    job = client.build("kept", ["running-example.xes"], engine="local", leaf_size=4)
    assert client.wait(job["job_id"], timeout=120)["state"] == "succeeded"
    for day in (1, 2):
        client.append("kept", [{"type": "late", "ts": f"2030-01-0{day}T00:00:0{i}Z"} for i in range(5)])
    info = client.retain("kept", "5 events")
    assert info["retained_from"] > 0
    page.reload()
    page.wait_for_selector("#datasets li[data-name='kept']")
    pick(page, "kept")
    shown = page.inner_text("#info")
    assert "keeps 5 events" in shown and f"history from seq {info['retained_from']}" in shown
    assert f"{info['decayed']['units']} filters" in shown


def test_with_tokens_the_page_asks_for_one_and_keeps_it_for_the_tab(browser: Any, tmp_path: Path,
                                                                      shared_data: Path) -> None:
    from api.auth import create_token
    from api.catalog import open_catalog
    from api.service import build_from_inputs

    home = tmp_path / "home"
    home.mkdir()
    build_from_inputs(home, "running", [str(shared_data / "running-example.xes")])
    catalog = open_catalog(f"sqlite:///{home / 'catalog.db'}")
    _, secret = create_token(catalog, "console", "read")
    catalog.dispose()
    with served(home, server="gunicorn", workers=1) as url:
        page = browser.new_page()
        try:
            page.goto(url + "/")
            page.wait_for_selector("#token-box:not([hidden])")
            page.wait_for_function("() => /token/.test(document.querySelector('#datasets-note').textContent)")
            assert page.locator("#datasets li").count() == 0
            page.fill("#token", secret)
            page.click("#token-use")
            page.wait_for_selector("#datasets li[data-name='running']")
            assert page.evaluate("() => sessionStorage.getItem('seqsketch.token')") == secret
            assert page.evaluate("() => document.cookie") == ""  # never a cookie
            page.reload()
            page.wait_for_selector("#datasets li[data-name='running']")  # the tab keeps it
            page.click("#token-forget")
            page.wait_for_function("() => !document.querySelector('#datasets li')")
        finally:
            page.close()
