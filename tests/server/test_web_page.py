#!/usr/bin/env python3
"""lio-server's chat page (GET /, chapters/09_server/web/index.html) in a real browser.

Debian's `chromium` (/usr/bin/chromium), driven headless by Playwright from the venv; both are
installed by scripts/setup.sh, and no browser is downloaded (`playwright install` is never run).
A scripted exchange is checked in the page's DOM: the greedy answer streamed into the page equals
what the API answers for the very request the page sent, TTFT and tok/s show as positive numbers,
a value the server refuses shows the server's own error message, Stop ends the request on the
server too, and text goes in as text, never as HTML. A screenshot of the exchange is saved
(--screenshot PATH; ctest writes build/tests/server/web_page.png) and its path printed.
Run by ctest as `server_web_page` (label `server`).

Without chromium or the playwright package the test reports SKIP (exit 77) with the reason, as
the other tests do for a missing venv or model. scripts/test.sh (and so CI) runs scripts/setup.sh
first, which installs both, and sets LIO_REQUIRE_BROWSER=1: there a missing browser is a FAIL.
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import unittest

import server_harness as h

CHROMIUM = "/usr/bin/chromium"  # Debian's package; Playwright's own downloads are not used
QUESTION = "What is the capital of France?"
# Greedy, 24 tokens: long enough that the decode rate is measured over many SSE reads, never
# one read that happened to bring every token at once.
STORY = "Tell me a short story about a cat."
GREEDY_MAX_TOKENS = 24


def missing_browser():
    """Why the browser test cannot run here, or "" when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed in the venv (run scripts/setup.sh)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no {CHROMIUM} (scripts/setup.sh installs Debian's chromium package)"
    return ""


why = missing_browser()
if why:
    if os.environ.get("LIO_REQUIRE_BROWSER") == "1":
        print(f"FAIL: {why}; LIO_REQUIRE_BROWSER=1 (scripts/test.sh) says it must be here")
        sys.exit(1)
    print(f"SKIP: {why}")
    sys.exit(77)

from playwright.sync_api import sync_playwright  # noqa: E402  (after the check above)

# --screenshot is this file's own flag; the rest goes to the harness.
_ap = argparse.ArgumentParser(add_help=False)
_ap.add_argument("--screenshot", default=os.path.join(tempfile.gettempdir(), "lio_web_page.png"))
_args, _rest = _ap.parse_known_args()
SCREENSHOT = os.path.abspath(_args.screenshot)
sys.argv = [sys.argv[0]] + _rest


def timeout_ms(seconds):
    return int(seconds * 1000 * h.Config.slow_factor)


class ChatPage(h.ServerTestCase):
    """One Chromium for the module, a fresh page (a new chat) per test."""

    @classmethod
    def setUpClass(cls):
        cls.pw = sync_playwright().start()
        # Chromium's sandbox cannot start as root (containers, CI); it is only a second wall
        # around a page we wrote ourselves and load from 127.0.0.1.
        # --disable-dev-shm-usage: containers often give /dev/shm 64 MB, too little for Chromium.
        args = ["--disable-dev-shm-usage"] + (["--no-sandbox"] if os.geteuid() == 0 else [])
        cls.browser = cls.pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        cls.pw.stop()

    def setUp(self):
        self.page = self.browser.new_page(viewport={"width": 1100, "height": 760})
        self.page.set_default_timeout(timeout_ms(60))
        self.js_errors = []
        self.page.on("pageerror", lambda e: self.js_errors.append(str(e)))
        self.page.goto(f"http://127.0.0.1:{self.server.port}/")
        # The model's name comes from GET /v1/models once the script runs.
        self.page.wait_for_function(
            "document.getElementById('model-name').textContent !== '(loading)'")

    def tearDown(self):
        self.page.close()
        self.assertEqual(self.js_errors, [], "the page's script threw")
        super().tearDown()

    # ---- helpers --------------------------------------------------------------------------

    def set_fields(self, **values):
        """Fills settings by data-testid (underscores become dashes: max_tokens -> max-tokens)."""
        for name, value in values.items():
            self.page.get_by_test_id(name.replace("_", "-")).fill(str(value))

    def send(self, text):
        """Types `text`, presses Send, returns the JSON body the page POSTed."""
        self.page.get_by_test_id("message-input").fill(text)
        with self.page.expect_request(lambda r: r.url.endswith("/v1/chat/completions")) as req:
            self.page.get_by_test_id("send").click()
        return req.value.post_data_json

    def last_answer(self):
        return self.page.locator('[data-role="assistant"]').last

    def wait_answer_over(self, seconds=120):
        """Waits until the last answer is no longer streaming; returns its data-state."""
        self.page.wait_for_selector('[data-role="assistant"]:not([data-state="streaming"])',
                                    timeout=timeout_ms(seconds))
        return self.last_answer().get_attribute("data-state")

    def shown_number(self, testid):
        text = self.last_answer().get_by_test_id(testid).text_content()
        try:
            return float(text)
        except ValueError:
            self.fail(f"{testid} shows {text!r}, not a number")

    def api(self, body):
        """The page's request replayed through the API, whole (not streamed)."""
        body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        return h.post_json(self.server, "/v1/chat/completions", body)

    # ---- tests ----------------------------------------------------------------------------

    def test_page_served_self_contained(self):
        status, headers, data = h.request("GET", self.server.port, "/")
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("content-type"), "text/html; charset=utf-8")
        html = data.decode("utf-8")
        self.assertIn('data-testid="message-input"', html)
        # Offline: nothing fetched from elsewhere (no CDN script, stylesheet, font or image).
        self.assertIsNone(re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//""",
                                    html), "the page loads an external resource")
        self.assertEqual(self.page.get_by_test_id("model-name").text_content(), h.SERVED_MODEL)

    def test_greedy_answer_equals_api_and_shows_speed(self):
        self.set_fields(temperature=0, max_tokens=GREEDY_MAX_TOKENS)
        body = self.send(STORY)
        state = self.wait_answer_over()
        self.page.screenshot(path=SCREENSHOT, full_page=True)
        print(f"screenshot: {SCREENSHOT}", flush=True)
        self.assertEqual(state, "done", self.page.get_by_test_id("error").text_content())
        self.assertEqual(body["temperature"], 0)
        self.assertEqual(body["max_tokens"], GREEDY_MAX_TOKENS)
        self.assertTrue(body["stream"])
        self.assertEqual(body["messages"], [{"role": "user", "content": STORY}])

        # Greedy decoding must be deterministic for the comparison to mean anything.
        s1, first, _ = self.api(body)
        s2, second, _ = self.api(body)
        self.assertEqual((s1, s2), (200, 200))
        expected = first["choices"][0]["message"]["content"]
        self.assertEqual(expected, second["choices"][0]["message"]["content"],
                         "the server is not deterministic at temperature 0")

        answer = self.last_answer().get_by_test_id("answer-text").text_content()
        self.assertNotEqual(answer, "")
        self.assertEqual(answer, expected)
        n_tokens = first["usage"]["completion_tokens"]
        self.assertGreater(n_tokens, 1, "too short an answer to have a decode rate")
        self.assertEqual(self.shown_number("tokens"), n_tokens)  # from the stream's usage chunk
        self.assertGreater(self.shown_number("ttft"), 0)
        self.assertGreater(self.shown_number("tok-s"), 0)
        self.assertEqual(self.last_answer().get_by_test_id("finish-reason").text_content(),
                         first["choices"][0]["finish_reason"])

    def test_json_schema_mode_answers_in_the_schema(self):
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                   "country": {"type": "string", "maxLength": 20}},
                  "required": ["city", "country"], "additionalProperties": False}
        self.set_fields(temperature=0, max_tokens=60)
        self.page.get_by_test_id("response-format").select_option("json_schema")
        self.page.get_by_test_id("json-schema").fill(json.dumps(schema))
        body = self.send("Name a city and its country.")
        self.assertEqual(body["response_format"], {"type": "json_schema", "json_schema": {"name": "schema",
                                                                                         "schema": schema}})
        state = self.wait_answer_over()
        self.assertEqual(state, "done", self.page.get_by_test_id("error").text_content())
        answer = json.loads(self.last_answer().get_by_test_id("answer-text").text_content())
        self.assertEqual(set(answer), {"city", "country"})
        self.assertEqual(self.last_answer().get_by_test_id("finish-reason").text_content(), "stop")
        # A schema box that does not hold JSON is refused on the page, before anything is sent.
        self.page.get_by_test_id("json-schema").fill("{not json")
        self.page.get_by_test_id("message-input").fill("again")
        self.page.get_by_test_id("send").click()
        self.assertIn("not valid JSON", self.page.get_by_test_id("error").text_content())
        self.assertEqual(self.page.get_by_test_id("message-input").input_value(), "again")
        self.page.get_by_test_id("response-format").select_option("text")

    def test_refused_setting_shows_server_error(self):
        self.set_fields(max_tokens=0)
        body = self.send(QUESTION)
        error = self.page.get_by_test_id("error")
        error.wait_for(state="visible")
        status, reply, _ = self.api(body)
        self.assertEqual(status, 400)
        message = reply["error"]["message"]
        self.assertIn("max_tokens", message)
        self.assertIn(message, error.text_content())
        # The failed turn is taken back and its text returned to the box for a retry.
        self.assertEqual(self.page.locator('[data-testid="message"]').count(), 0)
        self.assertEqual(self.page.get_by_test_id("message-input").input_value(), QUESTION)

    def test_stop_aborts_request_on_server(self):
        self.set_fields(max_tokens=4000)
        self.send("Write a very long story about a lighthouse keeper.")
        self.page.wait_for_function(
            "[...document.querySelectorAll('[data-testid=answer-text]')].some(e => e.textContent)")
        self.page.get_by_test_id("stop-button").click()
        self.assertEqual(self.wait_answer_over(), "stopped")
        idle, took, last = h.wait_idle(self.server, within_s=2)
        self.assertTrue(idle, f"the server still works on the stopped request after {took:.1f} s: {last}")
        self.assertTrue(self.page.get_by_test_id("send").is_enabled())

    def test_text_inserted_as_text(self):
        self.set_fields(max_tokens=1)
        self.send("<b id='injected'>bold?</b>")
        self.wait_answer_over()
        user = self.page.locator('[data-role="user"]').last.get_by_test_id("message-text")
        self.assertEqual(user.text_content(), "<b id='injected'>bold?</b>")
        self.assertEqual(self.page.locator("#injected").count(), 0)


if __name__ == "__main__":
    sys.exit(h.main({"server": h.Server([], name="web")}))
