"""What an operator watches, on a real ``coddl server start`` (4 logical GPUs, max-min, real training
processes) shared by this module's tests: /metrics scraped with the metrics token while real jobs start,
resize and finish; and the web dashboard in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by selenium): the pages load, a submitted job appears without a reload, a
resize shows, a user never sees another user's job, and a server started with a queue file shows each
queue's quota and use (members only to admins and the queue's own users). Screenshots of the overview, a
job's page and the queues are written to the test's directory, and to ``$CODDL_SCREENSHOTS`` when it is
set (that is how docs/dashboard-*.png are made)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from runtime_live import Server, coddl, tiny_job, wait_for
from test_metrics import samples, value

pytestmark = pytest.mark.slow

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail("Debian's chromium and chromium-driver are required in CI", pytrace=False)
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    os.environ.setdefault("SE_OFFLINE", "true")  # never let selenium look for a browser or driver to download
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1366,900",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("dashboard") / "state", gpus=4, policy="max-min")
    yield s
    s.cleanup()


def login(driver, srv: Server, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(f"{srv.url}/ui/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()
    wait_for(lambda: driver.current_url.endswith("/ui/") or found(driver, "#login-error"), 30, "the login's answer")


def found(driver, css: str) -> list[dict[str, str]]:
    """The elements matching ``css`` as {text, and each data-/id attribute}, read in one script call: the
    page swaps its <main> every second, so an element found by one call may be gone by the next."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => "
        "Object.assign({text: e.innerText}, Object.fromEntries(Array.from(e.attributes).map(a => [a.name, a.value]))))",
        css)


def shot(driver, tmp_path: Path, name: str, height: int) -> None:
    driver.set_window_size(1366, height)
    path = tmp_path / name
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    if os.environ.get("CODDL_SCREENSHOTS"):
        shutil.copy(path, Path(os.environ["CODDL_SCREENSHOTS"]) / name)
    driver.set_window_size(1366, 900)


def test_metrics_follow_real_jobs_as_they_start_resize_and_finish(srv):
    made = coddl("metrics", "token", "--state-dir", str(srv.state_dir))  # what an operator gives Prometheus
    assert made.returncode == 0, made.stderr
    with srv.client(made.stdout.strip()) as prometheus:
        def scrape() -> dict:
            r = prometheus.get("/metrics")
            assert r.status_code == 200, r.text
            return samples(r.text)

        def until(ok, what: str) -> dict:
            def probe() -> dict | None:
                m = scrape()
                return m if ok(m) else None

            return wait_for(probe, 120, f"{what} on /metrics")

        m = scrape()
        assert value(m, "coddl_gpus") == 4 and value(m, "coddl_gpus_idle") == 4
        with srv.client(srv.token("carol")) as carol:
            assert carol.get("/metrics").status_code == 403  # a user's own token does not open it
            first = srv.submit(tiny_job("metered", steps=5000, max_gpus=4, step_s=0.02), client=carol)
        key = ("coddl_job_steps_per_second", (("job", str(first)), ("name", "metered"), ("user", "carol")))
        m = until(lambda m: m.get(key, 0) > 0 and value(m, "coddl_gpus_idle") == 0, "the first job's throughput")
        assert value(m, "coddl_gpus_allocated", user="carol", queue="default") == 4
        assert value(m, "coddl_jobs", state="running") == 1
        assert value(m, "coddl_queue_wait_seconds_count") == 1 and value(m, "coddl_start_seconds_count") == 1
        assert value(m, "coddl_scheduler_decision_seconds_count") >= 1
        assert value(m, "coddl_resize_seconds_count", action="shrink") == 0

        with srv.client(srv.token("dave")) as dave:
            second = srv.submit(tiny_job("second", steps=5000, max_gpus=4, step_s=0.02), client=dave)
        m = until(lambda m: value(m, "coddl_resize_seconds_count", action="shrink") >= 1
                  and ("coddl_gpus_allocated", (("queue", "default"), ("user", "dave"))) in m, "the first job's shrink")
        assert value(m, "coddl_resize_seconds_sum", action="shrink") > 0
        # how the 4 GPUs are divided is the policy's business (on profiles measured on a loaded machine,
        # 2 / 2 or 3 / 1); the metrics must show each user's part of it, and all of it
        dave_gpus = value(m, "coddl_gpus_allocated", user="dave", queue="default")
        carol_gpus = value(m, "coddl_gpus_allocated", user="carol", queue="default")
        assert dave_gpus >= 1 and carol_gpus >= 1 and dave_gpus + carol_gpus == 4 - value(m, "coddl_gpus_idle")

        for job in (first, second):
            assert srv.admin.delete(f"/jobs/{job}").status_code == 202
        m = until(lambda m: value(m, "coddl_jobs_ended_total", state="cancelled") == 2, "both ends")
        assert value(m, "coddl_gpus_idle") == 4 and value(m, "coddl_queue_wait_seconds_count") == 2
        assert not any(k[0] == "coddl_job_steps_per_second" for k in m)


def test_jobs_appear_live_resize_and_stay_private(srv, browser, tmp_path):
    d = browser
    alice, bob = srv.token("alice"), srv.token("bob")
    d.get(f"{srv.url}/ui/")
    assert d.current_url.endswith("/ui/login")  # no token, no dashboard
    login(d, srv, "not-a-token")
    assert found(d, "#login-error") and "not valid" in found(d, "#login-error")[0]["text"]
    assert not d.get_cookies()

    login(d, srv, alice)
    assert d.current_url.endswith("/ui/") and found(d, "#whoami")[0]["text"] == "alice"
    assert [c["httpOnly"] for c in d.get_cookies()] == [True]
    assert d.execute_script("return document.cookie") == ""  # the token is out of scripts' reach
    d.get(f"{srv.url}/ui/?refresh=1")
    assert found(d, "#no-jobs")

    with srv.client(alice) as api:
        a = srv.submit(tiny_job("alpha", steps=3000, max_gpus=4, step_s=0.05), client=api)
    # the page refreshes itself: no reload from here on
    wait_for(lambda: [r for r in found(d, f"#job-{a}") if r["data-gpus"] == "4"
                      and r["data-status"] == "running"], 120, "job alpha running on 4 GPUs on the page")
    assert len(found(d, f'#gpus a.gpu[data-job="{a}"]')) == 4

    with srv.client(bob) as api:
        b = srv.submit(tiny_job("bravo", steps=3000, max_gpus=4, step_s=0.05), client=api)
    wait_for(lambda: [r for r in found(d, f"#job-{a}") if r["data-gpus"] == "2"], 120,
             "alpha shrunk to 2 GPUs on the page")
    wait_for(lambda: len(found(d, "#gpus .gpu.other")) == 2, 60, "bob's two GPUs shown as busy")
    assert len(found(d, f'#gpus a.gpu[data-job="{a}"]')) == 2 and not found(d, f'[data-job="{b}"]')
    assert "bravo" not in d.page_source and not found(d, f"#job-{b}")

    d.get(f"{srv.url}/ui/jobs/{a}?refresh=1")
    assert found(d, "#job-title") and "alpha" in found(d, "#job-title")[0]["text"]
    assert found(d, "#job-gpus")[0]["data-gpus"] == "2"
    actions = [c["text"] for c in found(d, "#events td.action") if c["text"]]
    # the start planned and applied, and the resize after it (on a loaded machine bob's arrival can
    # plan the shrink before alpha's start is applied, so the two starts need not be adjacent)
    assert actions[0] == "start" and actions.count("start") >= 2 and "shrink" in actions[1:]
    assert len(found(d, "svg.chart")) >= 2
    wait_for(lambda: "[w0] step" in found(d, "#logs")[0]["text"], 60, "the job's log on its page")

    d.get(f"{srv.url}/ui/jobs/{b}")
    assert "belongs to another user" in found(d, "#error")[0]["text"] and "bravo" not in d.page_source
    d.get(f"{srv.url}/ui/jobs/999999")
    assert "no such job" in found(d, "#error")[0]["text"]

    login(d, srv, bob)
    assert found(d, f"#job-{b}") and not found(d, f"#job-{a}") and "alpha" not in d.page_source
    d.execute_script("document.querySelector('.logout button').click()")
    wait_for(lambda: d.current_url.endswith("/ui/login"), 30, "the logout's answer")
    d.get(f"{srv.url}/ui/")
    assert d.current_url.endswith("/ui/login")

    login(d, srv, srv.admin_token)
    assert found(d, f"#job-{a}") and found(d, f"#job-{b}") and not found(d, "#gpus .gpu.other")
    shot(d, tmp_path, "dashboard-overview.png", 1000)
    d.get(f"{srv.url}/ui/jobs/{a}")
    assert "alpha" in found(d, "#job-title")[0]["text"]  # an admin sees every job's page
    shot(d, tmp_path, "dashboard-job.png", 1450)
    for job in (a, b):
        assert srv.admin.delete(f"/jobs/{job}").status_code == 202


def test_the_queues_table_shows_each_teams_quota_and_use(browser, tmp_path, tmp_path_factory):
    """A server started with a queue file (4 GPUs): erin's team holds 3 by quota, frank's 1. erin's job
    (a restartable command, up to 4 GPUs) borrows frank's idle one. Everyone sees every queue's quota and use; a user sees the
    members of their own queue only, marked as theirs; an admin sees every queue's members."""
    qfile = tmp_path / "queues.yaml"
    qfile.write_text("queues:\n  - {name: vision, cohort: lab, nominal_gpus: 3, users: [erin]}\n"
                     "  - {name: nlp, cohort: lab, nominal_gpus: 1, users: [frank]}\n")
    srv = Server(tmp_path_factory.mktemp("queues-ui") / "state", gpus=4, policy="max-min", extra=("--queues", str(qfile)))
    d = browser
    try:
        erin, frank = (srv.admin.post("/tokens", json={"user": u}).json()["token"] for u in ("erin", "frank"))
        with srv.client(erin) as api:  # a program that starts at once: only its GPUs matter here
            job = srv.submit({"name": "borrower", "kind": "command", "command": ["bash", "-c", "sleep 600"],
                              "steps": 1000, "restartable": True, "max_gpus": 4, "grace_s": 1.0}, client=api)
        login(d, srv, erin)
        rows = wait_for(lambda: (r := {q["id"]: q for q in found(d, "#queues tbody tr")}).get("queue-vision", {})
                        .get("data-gpus") == "4" and r, 120, "erin's job on 4 GPUs in the queues table")
        vision, nlp = rows["queue-vision"], rows["queue-nlp"]
        assert (vision["data-quota"], vision["data-gpus"], vision["data-borrowed"]) == ("3", "4", "1")
        assert (nlp["data-quota"], nlp["data-gpus"], nlp["data-borrowed"]) == ("1", "0", "0")
        assert "mine" in vision["class"] and "(yours)" in vision["text"] and "erin" in vision["text"]
        assert "mine" not in nlp["class"] and "(yours)" not in nlp["text"] and "frank" not in nlp["text"]
        cells = [c["text"] for c in found(d, "#queue-vision td")]
        assert cells[:4] == ["vision (yours)", "lab", "3", "4"] and cells[5] == "1", cells

        login(d, srv, frank)
        rows = {q["id"]: q for q in found(d, "#queues tbody tr")}
        assert "(yours)" in rows["queue-nlp"]["text"] and "frank" in rows["queue-nlp"]["text"]
        assert rows["queue-vision"]["data-gpus"] == "4" and "erin" not in rows["queue-vision"]["text"]
        assert "borrower" not in d.page_source  # the use of a queue, not whose job it is

        login(d, srv, srv.admin_token)
        rows = {q["id"]: q for q in found(d, "#queues tbody tr")}
        assert "erin" in rows["queue-vision"]["text"] and "frank" in rows["queue-nlp"]["text"]
        assert [k for k, r in rows.items() if "(yours)" in r["text"]] == ["queue-default"]  # where admins are
        shot(d, tmp_path, "dashboard-queues.png", 1000)
        assert srv.admin.delete(f"/jobs/{job}").status_code == 202
    finally:
        srv.cleanup()
