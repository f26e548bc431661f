"""The dashboard's own rules over real HTTP and a real store, without a browser (the Chromium test runs
the whole server): who sees what, how the token is kept, hostile names and paths, and the charts'
geometry."""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

import httpx
import pytest

from coddl.core.allocation import Action, ActionKind
from coddl.core.cluster import Cluster
from coddl.runtime.api import ClusterInfo, create_app
from coddl.runtime.dashboard import mount_dashboard
from coddl.runtime.dashboard.charts import LEFT, RIGHT, W, Series, _x, _y, stacked_steps
from coddl.runtime.server import HttpServer
from coddl.runtime.store import Store

from postgres import BACKENDS, backend_url

HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture(scope="module", params=BACKENDS)
def ui(request, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("ui")
    store = Store(backend_url(request, request.param, tmp_path))
    info = ClusterInfo(Cluster.for_gpus(4, 4), "local", "max-min()")
    app = create_app(store, info, tmp_path / "jobs", lambda: None)
    mount_dashboard(app, store, info, tmp_path / "jobs")
    http = HttpServer(app, "127.0.0.1", 0)
    http.start()
    yield store, http.url
    http.stop()
    store.close()


@contextmanager
def session(url: str, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, follow_redirects=False) as c:
        r = c.post("/ui/login", data={"token": token})
        assert r.status_code == 303 and r.headers["location"] == "/ui/"
        yield c


def test_a_user_sees_their_own_jobs_and_others_only_as_busy_gpus(ui):
    store, url = ui
    alice, hostile = store.create_token("alice"), store.create_token(HOSTILE)
    admin = store.create_token("root", admin=True)
    a = store.add_job("alpha", "alice", {"name": "alpha"}, 100)
    b = store.add_job("bravo", HOSTILE, {"name": "bravo"}, 100)
    store.record_plan([Action(ActionKind.START, str(a.id), (), (0, 1)), Action(ActionKind.START, str(b.id), (), (2, 3))],
                      at=a.submitted_at + 1)
    with session(url, alice) as c:
        page = c.get("/ui/").text
        assert f'id="job-{a.id}"' in page and "alpha" in page
        assert "bravo" not in page and f'id="job-{b.id}"' not in page and "onerror" not in page
        assert page.count('class="gpu other"') == 2 and page.count(f'data-job="{a.id}"') == 2
        r = c.get(f"/ui/jobs/{b.id}")
        assert r.status_code == 403 and "bravo" not in r.text
        assert c.get(f"/ui/jobs/{a.id}").status_code == 200
    with session(url, hostile) as c:  # a hostile user name is shown as text, never as markup
        page = c.get("/ui/").text
        assert HOSTILE not in page and "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in page
    with session(url, admin) as c:
        page = c.get("/ui/").text
        assert "alpha" in page and "bravo" in page and 'class="gpu other"' not in page and HOSTILE not in page


def test_the_token_lives_in_an_httponly_strict_cookie_the_api_ignores(ui):
    store, url = ui
    alice = store.create_token("alice")
    c = httpx.Client(base_url=url, follow_redirects=False)
    r = c.post("/ui/login", data={"token": alice})
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and re.search(r"SameSite=strict", cookie, re.I) and "Path=/ui" in cookie
    assert "Secure" not in cookie  # plain http on loopback; set under https
    assert c.get("/jobs").status_code == 401 and c.post("/jobs", json={}).status_code == 401  # not a credential there
    r = c.get("/ui/")
    assert r.status_code == 200 and "script-src 'self'" in r.headers["content-security-policy"]
    assert "'unsafe-inline'" not in r.headers["content-security-policy"]
    assert c.post("/ui/logout").status_code == 303
    c.cookies.clear()
    assert c.get("/ui/").headers["location"] == "/ui/login"
    c.close()


@pytest.mark.parametrize("body", [b"token=forged", b"", b"token=" + b"x" * 5000, b"\xff\xfe=\x00"])
def test_a_bad_login_is_a_401_page_that_tells_nothing_about_the_cluster(ui, body):
    _, url = ui
    r = httpx.post(f"{url}/ui/login", content=body, headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 401 and "not valid" in r.text and "set-cookie" not in r.headers
    assert "max-min" not in r.text and "GPUs" not in r.text


@pytest.mark.parametrize("path", ["/ui/jobs/0", "/ui/jobs/99999999999999999999", "/ui/jobs/-1", "/ui/jobs/abc",
                                  "/ui/jobs/%3Cscript%3E"])
def test_odd_job_paths_are_404_pages(ui, path):
    store, url = ui
    with session(url, store.create_token("alice")) as c:
        r = c.get(path)
        assert r.status_code == 404 and "no such job" in r.text and "<script>" not in r.text


def test_stacked_bands_rise_and_fall_with_the_gpus_held():
    """Job a holds 2 GPUs over [0, 5), job b 1 GPU over [2, 10] on a 4-GPU chart of [0, 10]: the top
    of the stack is 2, then 3 from t=2, then 1 from t=5."""
    svg = stacked_steps([Series("a", "#111111", [(0.0, 2.0), (5.0, 0.0)]), Series("b", "#222222", [(2.0, 1.0)])],
                        0.0, 10.0, 4, "t")
    bands = re.findall(r'<polygon points="([^"]+)" fill="(#\d+)"', str(svg))
    assert [fill for _, fill in bands] == ["#111111", "#222222"]
    top_of_b = [tuple(map(float, p.split(","))) for p in bands[1][0].split()][:6]  # upper edge, left to right
    expect = [(_x(0, 0, 10), _y(2, 4)), (_x(2, 0, 10), _y(2, 4)), (_x(2, 0, 10), _y(3, 4)), (_x(5, 0, 10), _y(3, 4)),
              (_x(5, 0, 10), _y(1, 4)), (_x(10, 0, 10), _y(1, 4))]
    assert top_of_b == [pytest.approx((round(x, 1), round(y, 1)), abs=0.06) for x, y in expect]
    assert _x(10, 0, 10) == W - RIGHT and _x(0, 0, 10) == LEFT
