"""The web UI's shell against a real API server: signing in and out, the session cookie,
CSRF, a page read through the REST API as the signed-in principal, its live fragment, the
live stream, and a session that expires."""

from __future__ import annotations

import re
import secrets
import time
from typing import Any

import httpx
import psycopg
import pytest

from app.core.kinds import API_VERSION

API = f"/apis/{API_VERSION}"


@pytest.fixture
def browser(api_server: Any) -> httpx.Client:
    return httpx.Client(base_url=api_server.url, timeout=30, follow_redirects=False)


def sign_in(c: httpx.Client, token: str, next_path: str = "/ui/pods") -> httpx.Response:
    return c.post("/ui/signin", data={"token": token, "next": next_path})


def csrf_of(page: str) -> str:
    m = re.search(r'<meta name="csrf" content="([0-9a-f]+)">', page)
    assert m, page[:500]
    return m.group(1)


def test_a_page_without_a_session_sends_to_the_sign_in_form(browser: httpx.Client) -> None:
    r = browser.get("/ui/pods?ns=default")
    assert r.status_code == 303
    assert r.headers["location"] == "/ui/signin?next=/ui/pods%3Fns%3Ddefault"
    form = browser.get(r.headers["location"])
    assert form.status_code == 200 and 'name="token"' in form.text
    assert browser.get("/ui/pods", headers={"X-QM-Fragment": "main"}).status_code == 401


def test_signing_in_sets_a_strict_http_only_cookie_and_a_bad_token_is_refused(
    browser: httpx.Client, api_server: Any
) -> None:
    bad = sign_in(browser, "not-a-token")
    assert bad.status_code == 401 and "not accepted" in bad.text
    assert "set-cookie" not in bad.headers
    assert sign_in(browser, "x" * 5000).status_code == 422
    ok = sign_in(browser, api_server.token, "https://evil.example/")
    assert ok.status_code == 303 and ok.headers["location"] == "/ui/"  # no open redirect
    cookie = ok.headers["set-cookie"]
    for part in ("qm_session=", "HttpOnly", "SameSite=Strict", "Path=/ui", "Max-Age="):
        assert part in cookie, cookie
    assert api_server.token not in cookie  # a session token of its own, not the one typed


def test_the_pods_page_lists_through_the_api_and_a_fragment_is_the_main_block(
    browser: httpx.Client, api_server: Any
) -> None:
    admin = {"Authorization": f"Bearer {api_server.token}"}
    ns = f"ui-{secrets.token_hex(3)}"
    with httpx.Client(base_url=api_server.url, headers=admin, timeout=30) as c:
        assert c.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
        pod = {"metadata": {"name": "web-1", "labels": {"app": "web"}},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
        assert c.post(f"{API}/namespaces/{ns}/pods", json=pod).status_code == 201
    sign_in(browser, api_server.token)
    page = browser.get(f"/ui/pods?ns={ns}&selector=app%3Dweb")
    assert page.status_code == 200, page.text
    assert f'href="/ui/pods/{ns}/web-1"' in page.text and "<html" in page.text
    assert 'data-live-kinds="Pod"' in page.text
    assert "total;dur=" in page.headers["server-timing"]
    assert "default-src 'self'" in page.headers["content-security-policy"]
    frag = browser.get(f"/ui/pods?ns={ns}", headers={"X-QM-Fragment": "main"})
    assert frag.status_code == 200 and "<html" not in frag.text and "web-1" in frag.text
    none = browser.get(f"/ui/pods?ns={ns}&selector=app%3Ddb")
    assert "No pods match." in none.text
    bad = browser.get(f"/ui/pods?ns={ns}&selector=%3D%3D%3D")
    assert bad.status_code == 200 and 'role="alert"' in bad.text


def test_an_action_without_the_csrf_value_or_from_another_site_is_refused(
    browser: httpx.Client, api_server: Any
) -> None:
    sign_in(browser, api_server.token)
    csrf = csrf_of(browser.get("/ui/pods").text)
    assert browser.post("/ui/signout", data={}).status_code == 403
    assert browser.post("/ui/signout", data={"csrf": "0" * 64}).status_code == 403
    other = browser.post("/ui/signout", data={"csrf": csrf},
                         headers={"Origin": "http://evil.example"})  # fmt: skip
    assert other.status_code == 403
    assert browser.get("/ui/pods").status_code == 200  # still signed in


def test_signing_out_revokes_the_session(browser: httpx.Client, api_server: Any) -> None:
    sign_in(browser, api_server.token)
    session = browser.cookies["qm_session"]
    csrf = csrf_of(browser.get("/ui/pods").text)
    out = browser.post("/ui/signout", data={"csrf": csrf})
    assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]
    # The token itself no longer works, here or against the REST API.
    browser.cookies.set("qm_session", session, path="/ui")
    assert browser.get("/ui/pods").status_code == 303
    api = httpx.get(f"{api_server.url}{API}/namespaces",
                    headers={"Authorization": f"Bearer {session}"})  # fmt: skip
    assert api.status_code == 401


def test_revoking_the_token_signed_in_with_ends_its_sessions(
    browser: httpx.Client, api_server: Any
) -> None:
    admin = {"Authorization": f"Bearer {api_server.token}"}
    tokens = f"{api_server.url}/apis/authentication.quaymaster.io/v1/tokens"
    spec = {"user": f"uma-{secrets.token_hex(3)}", "expirationSeconds": 3600}
    made = httpx.post(tokens, headers=admin, json={"spec": spec})
    assert made.status_code == 201, made.text
    sign_in(browser, made.json()["status"]["token"])
    assert browser.get("/ui/pods").status_code == 200
    gone = httpx.delete(f"{tokens}/{made.json()['metadata']['name']}", headers=admin)
    assert gone.status_code == 200, gone.text
    deadline = time.monotonic() + 5
    while browser.get("/ui/pods").status_code != 303:  # the session went with its parent
        assert time.monotonic() < deadline, "the session outlived the token it was made from"
        time.sleep(0.1)


def test_an_expired_session_signs_out(browser: httpx.Client, api_server: Any, pg_url: str) -> None:
    sign_in(browser, api_server.token)
    assert browser.get("/ui/pods").status_code == 200
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            "UPDATE qm_tokens SET expires_at = now() - interval '1 second'"
            " WHERE token_sha256 = encode(sha256(%s::bytea), 'hex')",
            (browser.cookies["qm_session"].encode(),),
        )
    deadline = time.monotonic() + 30
    while browser.get("/ui/pods").status_code != 303:  # the server's token cache follows
        assert time.monotonic() < deadline, "the expired session still served pages"
        time.sleep(0.2)


def test_the_live_stream_reports_a_change(browser: httpx.Client, api_server: Any) -> None:
    admin = {"Authorization": f"Bearer {api_server.token}"}
    ns = f"live-{secrets.token_hex(3)}"
    with httpx.Client(base_url=api_server.url, headers=admin, timeout=30) as c:
        assert c.post(f"{API}/namespaces", json={"metadata": {"name": ns}}).status_code == 201
        sign_in(browser, api_server.token)
        page = browser.get(f"/ui/pods?ns={ns}")
        rv = re.search(r'data-live-rv="(\d+)"', page.text)
        assert rv, page.text[:400]
        with browser.stream("GET", f"/ui/live?kinds=Pod&ns={ns}&rv={rv.group(1)}") as s:
            assert s.headers["content-type"].startswith("text/event-stream")
            lines = s.iter_lines()
            pod = {"metadata": {"name": "p"},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
            created = False
            for line in lines:
                if line.startswith("event: open") and not created:
                    assert c.post(f"{API}/namespaces/{ns}/pods", json=pod).status_code == 201
                    created = True
                if line.startswith("event: change"):
                    break
            nxt = next(lines)
            assert nxt.startswith("id: ") and int(nxt[4:]) > int(rv.group(1)), nxt
