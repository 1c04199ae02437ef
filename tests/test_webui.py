#!/usr/bin/env python3
"""The chat page at GET / (webui/index.html, compiled in as webui.h).

Embedded: webui.h is what tools/gen_webui.py writes from the page, the C
literal holds the page's bytes exactly, and the page asks for nothing from
the network. Served: GET / and /index.html answer the page with its type and
policy headers, other methods 405 ("SKIP mhd" on a build without
libmicrohttpd). Browser: Debian's chromium driven by chromedriver over the
W3C WebDriver protocol (plain JSON over HTTP, http.client) against a colibri
--serve on a synthetic GLM-5-shaped model with a 4096-token context
(tests/test_serve.py's synth_model; the tiny fixture's context is 256 and
its greedy replies end after a few tokens, too soon to press stop): a clean
load, a streamed reply equal to the API's greedy answer, stop, reasoning,
safe rendering, conversations, the API key and error display against a stub
server, a narrow window; screenshots in build/webui/. Without chromium and
chromedriver: "SKIP browser". Every wait is bounded; the browser, its driver
and the servers are ended in cleanups that run even when setup fails.
Standard library only."""
import base64
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
from test_serve import MhdCase, Server, mhd_missing, synth_model  # noqa: E402
import gen_webui  # noqa: E402

PAGE = os.path.join(ROOT, "webui", "index.html")
SHOTS = os.path.join("build", "webui")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # Debian's packages chromium and chromium-driver
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CSP = ("default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; base-uri 'none'; "
       "form-action 'none'; frame-ancestors 'none'")
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C element reference key
ENTER, SHIFT, RELEASE = "\ue007", "\ue008", "\ue000"


def page_bytes():
    with open(PAGE, "rb") as f:
        return f.read()


def c_literal_bytes(text):
    """The bytes of webui.h's string literal, decoded as a C compiler would
    (the escapes gen_webui writes: \\\\ \\" \\? \\t \\n and octal)."""
    body = text.split("coli_webui_html[] =", 1)[1].split(";\n", 1)[0]
    out = bytearray()
    for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', body):
        i = 0
        while i < len(lit):
            ch = lit[i]
            if ch != "\\":
                out += ch.encode("ascii")
                i += 1
                continue
            nxt = lit[i + 1]
            if nxt in "01234567":
                out.append(int(lit[i + 1:i + 4], 8))
                i += 4
            else:
                out += {"\\": b"\\", '"': b'"', "?": b"?", "t": b"\t", "n": b"\n"}[nxt]
                i += 2
    return bytes(out)


class Embedded(unittest.TestCase):
    def test_webui_h_is_generated_from_the_page(self):
        with open(os.path.join(ROOT, "webui.h"), encoding="utf-8") as f:
            have = f.read()
        self.assertEqual(have, gen_webui.render(page_bytes()),
                         "webui.h is stale: run tools/gen_webui.py after editing webui/index.html")

    def test_the_literal_holds_the_page(self):
        with open(os.path.join(ROOT, "webui.h"), encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(c_literal_bytes(text), page_bytes())
        self.assertNotIn("??", re.sub(r"/\*.*?\*/", "", text, flags=re.S).replace('\\"', ""))

    def test_the_escapes_round_trip(self):
        sample = b'a\\b"c??=d???e\tf\x01g\x7fh\xc3\xa9' + b"x" * 250 + b"\n\n?"
        self.assertEqual(c_literal_bytes(gen_webui.render(sample)), sample)
        cc = os.environ.get("CC", "cc")
        if shutil.which(cc):  # what a C compiler makes of it
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "webui.h"), "w") as f:
                    f.write(gen_webui.render(sample))
                src = os.path.join(d, "t.c")
                with open(src, "w") as f:
                    f.write('#include <stdio.h>\n#include "webui.h"\nint main(void) { fwrite(coli_webui_html, 1, COLI_WEBUI_LEN, stdout); return 0; }\n')
                exe = os.path.join(d, "t")
                p = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", d, src, "-o", exe], capture_output=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stderr.decode())
                self.assertEqual(subprocess.run([exe], capture_output=True, timeout=10).stdout, sample)

    def test_the_page_is_self_contained(self):
        page = page_bytes()
        self.assertLess(len(page), 40 * 1024)
        self.assertTrue(all(b < 0x80 for b in page), "keep webui/index.html ASCII (entities, \\u escapes)")
        text = page.decode("ascii")
        self.assertIsNone(re.search(r"""(?:src|href|action)\s*=\s*["']?(?!#|data:)[a-z]*:?//""", text, re.I), "an external reference")
        self.assertNotRegex(text, r"https?://(?!www\.w3\.org/2000/svg)", "a network address other than the SVG namespace")
        self.assertNotIn("innerHTML", text)
        self.assertNotIn("insertAdjacentHTML", text)


class Served(MhdCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.srv = Server()
        cls.addClassCleanup(cls.srv.stop)
        assert cls.srv.port, cls.srv.log()

    def get(self, method, path):
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=10)
        c.request(method, path, body=b"{}" if method == "POST" else None)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r, body

    def test_get_slash_is_the_page(self):
        for path in ("/", "/index.html", "/?x=1"):
            r, body = self.get("GET", path)
            self.assertEqual(r.status, 200, path)
            self.assertEqual(body, page_bytes())
            self.assertEqual(r.getheader("Content-Type"), "text/html; charset=utf-8")
            self.assertEqual(r.getheader("Content-Security-Policy"), CSP)
            self.assertEqual(r.getheader("X-Content-Type-Options"), "nosniff")

    def test_other_methods_405(self):
        for method in ("POST", "PUT", "DELETE"):
            r, body = self.get(method, "/")
            self.assertEqual(r.status, 405, method)
            self.assertEqual(json.loads(body)["error"]["message"], "use GET")
        self.assertEqual(self.get("GET", "/index.htm")[0].status, 404)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait(fn, what, timeout=10.0):
    """fn()'s first true value within timeout seconds, else a failure."""
    t0 = time.time()
    while True:
        v = fn()
        if v:
            return v
        if time.time() - t0 > timeout:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(0.05)


class WebDriver:
    """A chromium session through chromedriver, W3C WebDriver over HTTP."""

    def __init__(self):
        self.port, self.sid = free_port(), None
        self.log = tempfile.TemporaryFile()
        self.tmp = tempfile.mkdtemp(prefix="colibri-webui-")  # the profile and chromium's scratch files, removed by quit()
        self.proc = subprocess.Popen([CHROMEDRIVER, "--port=%d" % self.port], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, TMPDIR=self.tmp),
                                     start_new_session=True)  # its own process group: chromium goes with it
        wait(self._ready, "chromedriver to listen", 20)
        caps = {"browserName": "chrome", "goog:loggingPrefs": {"browser": "ALL"},
                "goog:chromeOptions": {"binary": CHROMIUM, "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,800",
                                                                    "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                                                                    "--user-data-dir=" + os.path.join(self.tmp, "profile")]}}
        self.sid = self.call("POST", "/session", {"capabilities": {"alwaysMatch": caps}}, timeout=60)["sessionId"]
        self.s("POST", "/timeouts", {"script": 10000, "pageLoad": 15000, "implicit": 0})

    def _ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("chromedriver exited: %s" % self.output())
        try:
            return self.call("GET", "/status", timeout=2).get("ready")
        except (OSError, http.client.HTTPException):
            return False

    def output(self):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-2000:]

    def call(self, method, path, body=None, timeout=15):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = json.loads(r.read() or b"{}")
        finally:
            c.close()
        v = data.get("value")
        if r.status != 200:
            raise AssertionError("webdriver %s %s: %s" % (method, path, v.get("message", v) if isinstance(v, dict) else v))
        return v

    def s(self, method, path, body=None, timeout=15):
        return self.call(method, "/session/%s%s" % (self.sid, path), body, timeout)

    def go(self, url):
        self.s("POST", "/url", {"url": url}, timeout=30)

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css):
        return self.s("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def click(self, css):
        self.s("POST", "/element/%s/click" % self.find(css), {})

    def type(self, css, text, clear=False):
        el = self.find(css)
        if clear:
            self.s("POST", "/element/%s/clear" % el, {})
        self.s("POST", "/element/%s/value" % el, {"text": text})

    def text(self, css):
        return self.js("const e = document.querySelector(arguments[0]); return e ? e.textContent : null;", css)

    def visible(self, css):
        return self.js("const e = document.querySelector(arguments[0]);"
                       "return !!e && e.checkVisibility({contentVisibilityAuto: true, visibilityProperty: true});", css)

    def console(self):
        return self.s("POST", "/se/log", {"type": "browser"})

    def screenshot(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.s("GET", "/screenshot", timeout=30)))
        print("screenshot: %s" % os.path.abspath(path), flush=True)

    def resize(self, w, h):
        self.s("POST", "/window/rect", {"width": w, "height": h})

    def quit(self):
        try:
            if self.sid:
                self.call("DELETE", "/session/%s" % self.sid, timeout=10)
        except Exception:
            pass
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=5)
                    break
                except subprocess.TimeoutExpired:
                    continue
            self.log.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


class Stub:
    """A stand-in server on another port for what colibri does not do (yet)
    or does not do on demand: it serves the page colibri serves, wants the
    key "sekrit" (401 otherwise), answers a prompt "bad" with a 400, and
    streams a fixed reply that ends in an error event. Records requests."""
    MODEL = "stub-model"

    def __init__(self, page):
        stub = self
        self.requests = []

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def send(self, status, ctype, body, extra=()):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def authorized(self):
                if self.headers.get("Authorization") == "Bearer sekrit":
                    return True
                err = {"error": {"message": "a valid API key is required", "type": "invalid_request_error", "param": None, "code": None}}
                self.send(401, "application/json", json.dumps(err).encode(), [("WWW-Authenticate", "Bearer")])
                return False

            def do_GET(self):
                stub.requests.append(("GET", self.path, dict(self.headers), None))
                if self.path == "/":
                    self.send(200, "text/html; charset=utf-8", page, [("Content-Security-Policy", CSP)])
                elif self.path == "/v1/models" and self.authorized():
                    self.send(200, "application/json", json.dumps({"object": "list", "data": [{"id": stub.MODEL, "object": "model"}]}).encode())
                elif self.path != "/v1/models":
                    self.send(404, "application/json", b"{}")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                stub.requests.append(("POST", self.path, dict(self.headers), body))
                if not self.authorized():
                    return
                if body["messages"][-1]["content"] == "bad":
                    err = {"error": {"message": "temperature is out of range", "type": "invalid_request_error", "param": None, "code": None}}
                    return self.send(400, "application/json", json.dumps(err).encode())
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                chunk = lambda d: {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
                for ev in (chunk({"role": "assistant"}), chunk({"reasoning_content": "Let me "}), chunk({"reasoning_content": "think."}),
                           chunk({"content": "Partial "}), chunk({"content": "answer"}),
                           {"error": {"message": "the server is shutting down", "type": "server_error", "param": None, "code": None}}):
                    self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                    self.wfile.flush()
                    time.sleep(0.02)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# A showcase conversation injected into localStorage: rendering is tested on
# known text (the model's is noise), and the screenshot shows the page as
# people will see it.
SHOWCASE = [
    {"role": "user", "content": "How do I read a file line by line in Python? <script>window.pwned = 1</script>"},
    {"role": "assistant",
     "reasoning": "The user wants line-by-line reading. A with-block and iterating over the file object is idiomatic.",
     "thinkSecs": 1.4, "genSecs": 2.5, "finish": "stop", "usage": {"prompt_tokens": 31, "completion_tokens": 96, "total_tokens": 127},
     "content": "Iterate over the file object: it yields one line at a time, so even **large files** stay cheap.\n\n"
                "```python\nwith open(\"data.txt\", encoding=\"utf-8\") as f:\n    for line in f:\n        print(line.rstrip(\"\\n\"))\n```\n\n"
                "Use `f.readlines()` only when you need every line in a list.\n"
                "Text such as <script>window.pwned = 2</script> and <img src=x onerror=\"window.pwned = 3\"> stays text."},
]
CODE = 'with open("data.txt", encoding="utf-8") as f:\n    for line in f:\n        print(line.rstrip("\\n"))'
MARKUP = re.compile(r"[`*#]")


class Browser(unittest.TestCase):
    MODEL = "tiny-synth"
    LONG = "Write a long essay"  # greedy on this model runs to max_tokens (no stop token)

    @classmethod
    def setUpClass(cls):
        if mhd_missing():
            raise unittest.SkipTest("mhd: this colibri was built without libmicrohttpd")
        if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
            raise unittest.SkipTest("browser: chromium and chromedriver not installed (apt-get install chromium chromium-driver)")
        cls.srv = Server({"SERVE_MODEL": cls.MODEL}, model=synth_model())
        cls.addClassCleanup(cls.srv.stop)
        assert cls.srv.port, cls.srv.log()
        cls.url = "http://127.0.0.1:%d/" % cls.srv.port
        cls.wd = WebDriver()
        cls.addClassCleanup(cls.wd.quit)

    def fresh(self, settings=None, convs=None, url=None):
        """The page with empty storage (or the given settings and
        conversations), loaded and connected."""
        url = url or self.url
        self.wd.go(url)
        self.wd.js("localStorage.clear();"
                   "if (arguments[0]) localStorage.setItem('colibri.settings', JSON.stringify(arguments[0]));"
                   "if (arguments[1]) { localStorage.setItem('colibri.convs', JSON.stringify(arguments[1]));"
                   "  localStorage.setItem('colibri.current', JSON.stringify(arguments[1][0].id)); }", settings, convs)
        self.wd.go(url)
        wait(lambda: "connecting" not in self.wd.text("#model"), "the model name")
        self.wd.console()  # start each test with an empty console log

    def convs(self):
        return json.loads(self.wd.js("return localStorage.getItem('colibri.convs')") or "[]")

    def idle(self, timeout=10.0):
        wait(lambda: self.wd.visible("#send") and not self.wd.visible("#stop"), "the reply to end", timeout)

    def send(self, text):
        self.wd.type("#input", text)
        self.wd.type("#input", ENTER)

    def assert_clean_console(self):
        bad = [e for e in self.wd.console() if e.get("level") in ("SEVERE", "WARNING")]
        self.assertEqual(bad, [])

    def test_1_loads_clean_with_the_model_name(self):
        self.fresh()
        st, models = self.srv.request("GET", "/v1/models")
        self.assertEqual(self.wd.text("#model"), models["data"][0]["id"])
        self.assertEqual(self.wd.text("#model"), self.MODEL)
        self.assertIn(self.MODEL, self.wd.js("return document.title"))
        self.assertIn(self.MODEL, self.wd.text("#empty"))
        self.wd.go(self.url)  # a load with the console watched from the start
        wait(lambda: self.wd.text("#model") == self.MODEL, "the model name")
        self.assert_clean_console()
        res = self.wd.js("return performance.getEntriesByType('resource').map(e => e.name)")
        self.assertIn(self.url + "v1/models", res)
        self.assertEqual([r for r in res if not r.startswith(self.url)], [])
        self.assertEqual(self.wd.js("return location.href"), self.url)

    def test_2_streamed_reply_equals_the_api(self):
        self.fresh()
        # settings through the dialog
        self.wd.click("#open-settings")
        wait(lambda: self.wd.js("return document.querySelector('#settings').open"), "the settings dialog")
        self.wd.type("#s-temperature", "0", clear=True)
        self.wd.type("#s-max_tokens", "48", clear=True)
        self.wd.screenshot(os.path.join(SHOTS, "settings.png"))
        self.wd.click("#s-save")
        wait(lambda: not self.wd.js("return document.querySelector('#settings').open"), "the dialog to close")
        self.assertEqual(json.loads(self.wd.js("return localStorage.getItem('colibri.settings')"))["temperature"], 0)
        # Shift+Enter is a new line, not a send
        self.wd.type("#input", "line one" + SHIFT + ENTER + RELEASE + "line two")
        self.assertEqual(self.wd.js("return document.querySelector('#input').value"), "line one\nline two")
        self.assertEqual(self.convs(), [])
        self.wd.js("const i = document.querySelector('#input'); i.value = ''; i.dispatchEvent(new Event('input'));")
        self.send("Hello")
        wait(lambda: self.wd.text(".msg.assistant .body"), "streamed text")
        self.idle()
        conv = self.convs()
        self.assertEqual(len(conv), 1)
        self.assertEqual(conv[0]["title"], "Hello")
        self.assertEqual([m["role"] for m in conv[0]["messages"]], ["user", "assistant"])
        shown = conv[0]["messages"][1]
        st, api = self.srv.chat([{"role": "user", "content": "Hello"}], max_tokens=48, temperature=0,
                                chat_template_kwargs={"enable_thinking": False})
        self.assertEqual(st, 200, api)
        want = api["choices"][0]["message"]["content"]
        self.assertTrue(want)
        self.assertEqual(shown["content"], want)
        self.assertEqual(shown["usage"]["completion_tokens"], api["usage"]["completion_tokens"])
        body = self.wd.text(".msg.assistant .body")
        if not MARKUP.search(want):  # plain text: what is shown is the text, whitespace aside
            self.assertEqual("".join(body.split()), "".join(want.split()))
        self.assertEqual(self.wd.text(".msg.user .body"), "Hello")
        self.assertEqual(self.wd.text("#title"), "Hello")
        self.assertEqual(self.wd.text("#convs .item.on span"), "Hello")
        self.assertIn("48 tokens", self.wd.text(".msg.assistant .meta"))
        self.assertFalse(self.wd.visible(".msg.assistant .err"))
        self.assert_clean_console()

    def test_3_stop_ends_the_generation(self):
        self.fresh({"temperature": 0, "max_tokens": 3800})
        n0 = self.srv.log().count("colibri: stopped: interrupted")
        self.send(self.LONG)
        wait(lambda: self.wd.visible("#stop"), "the stop button")
        wait(lambda: len(self.wd.text(".msg.assistant .body") or "") > 0, "streamed text")
        self.wd.click("#stop")
        self.idle(5)
        self.assertEqual(self.wd.text(".msg.assistant .note.stopped"), "Stopped")
        wait(lambda: self.srv.log().count("colibri: stopped: interrupted") > n0, "the server to log the interrupted generation", 5)
        m = self.convs()[0]["messages"][1]
        self.assertTrue(m["stopped"])
        self.assertTrue(m["content"])
        self.assertNotIn("usage", m)  # the stream ended before its last chunk
        self.assert_clean_console()
        # the server is free again: the next message is answered
        self.wd.js("localStorage.setItem('colibri.settings', JSON.stringify({temperature: 0, max_tokens: 8}))")
        self.wd.go(self.url)
        wait(lambda: self.wd.text("#model") == self.MODEL, "the reload")
        self.send("again")
        wait(lambda: len(self.wd.js("return document.querySelectorAll('.msg.assistant')")) == 2, "a second reply")
        self.idle()
        self.assertIn("8 tokens", self.wd.js("return [...document.querySelectorAll('.msg.assistant .meta')].pop().textContent"))

    def test_4_reasoning_is_folded(self):
        self.fresh({"temperature": 0, "max_tokens": 32})
        self.assertFalse(self.wd.js("return document.querySelector('#think').checked"))
        self.wd.click(".chip")  # the Thinking toggle
        self.assertTrue(json.loads(self.wd.js("return localStorage.getItem('colibri.settings')"))["think"])
        self.send("Think")
        self.idle()
        st, api = self.srv.chat([{"role": "user", "content": "Think"}], max_tokens=32, temperature=0,
                                chat_template_kwargs={"enable_thinking": True})
        want = api["choices"][0]["message"]
        self.assertTrue(want.get("reasoning_content"))
        m = self.convs()[0]["messages"][1]
        self.assertEqual(m["reasoning"], want["reasoning_content"])
        self.assertEqual(m["content"], want["content"])
        self.assertTrue(self.wd.visible(".msg.assistant details.think"))
        self.assertFalse(self.wd.js("return document.querySelector('.msg.assistant details.think').open"))
        self.assertEqual(self.wd.text(".msg.assistant details.think .text"), want["reasoning_content"])
        self.assertRegex(self.wd.text(".msg.assistant details.think summary"), r"^Thought for \d+\.\d s$")
        self.assertFalse(self.wd.visible(".msg.assistant details.think .text"))  # folded
        self.wd.click(".msg.assistant details.think summary")
        self.assertTrue(self.wd.visible(".msg.assistant details.think .text"))
        self.assert_clean_console()

    def test_5_rendering_is_safe_and_screenshot(self):
        convs = [{"id": "c1", "title": "Read a file line by line", "updated": 3, "messages": SHOWCASE},
                 {"id": "c2", "title": "Explain mixture-of-experts routing", "updated": 2,
                  "messages": [{"role": "user", "content": "Explain mixture-of-experts routing"}, {"role": "assistant", "content": "Each token..."}]},
                 {"id": "c3", "title": "Shell one-liner to count lines", "updated": 1, "messages": []}]
        self.fresh({"temperature": 0.7, "think": True}, convs)
        self.assertIsNone(self.wd.js("return window.pwned === undefined ? null : window.pwned"))
        self.assertEqual(self.wd.js("return document.querySelectorAll('#log script, #log img').length"), 0)
        self.assertEqual(self.wd.text(".msg.user .body"), SHOWCASE[0]["content"])
        self.assertEqual(self.wd.text(".msg.assistant .code pre code"), CODE)
        self.assertEqual(self.wd.text(".msg.assistant .code .bar span"), "python")
        self.assertEqual(self.wd.js("return [...document.querySelectorAll('.msg.assistant .body > p > code')].map(e => e.textContent)"), ["f.readlines()"])
        self.assertEqual(self.wd.text(".msg.assistant .body strong"), "large files")
        paras = self.wd.js("return [...document.querySelectorAll('.msg.assistant .body > p')].map(p => [p.textContent, p.querySelectorAll('br').length])")
        self.assertEqual(len(paras), 2)
        self.assertEqual(paras[1][1], 1)  # a single line break inside a paragraph
        self.assertIn('<script>window.pwned = 2</script> and <img src=x onerror="window.pwned = 3"> stays text.', paras[1][0])
        self.assertFalse(self.wd.js("return document.querySelector('.msg.assistant details.think').open"))
        self.assertEqual(self.wd.text(".msg.assistant details.think summary"), "Thought for 1.4 s")
        self.assertEqual(self.wd.text(".msg.assistant .stats"), "96 tokens \u00b7 38.4 tok/s")
        self.assertEqual(self.wd.js("return [...document.querySelectorAll('#convs .item span')].map(e => e.textContent)"),
                         [c["title"] for c in convs])
        # the code block's copy button copies the code
        self.wd.js("window.copied = null; navigator.clipboard.writeText = (t) => { window.copied = t; return Promise.resolve(); };")
        self.wd.click(".msg.assistant .code .bar button")
        wait(lambda: self.wd.js("return window.copied"), "the copy")
        self.assertEqual(self.wd.js("return window.copied"), CODE)
        wait(lambda: "Copied" in self.wd.text(".msg.assistant .code .bar button"), "the copied mark", 2)
        self.assert_clean_console()
        self.wd.js("window.copied = null")
        time.sleep(1.6)  # the mark goes back before the picture
        self.wd.js("document.activeElement.blur()")
        self.wd.screenshot(os.path.join(SHOTS, "chat.png"))
        # a narrow window: the list folds away behind a menu button, nothing overflows
        try:
            self.wd.resize(400, 760)
            wait(lambda: self.wd.js("return innerWidth") <= 420, "the narrow window")
            wait(lambda: self.wd.js("return document.querySelector('#side').getBoundingClientRect().right <= 0"), "the list to fold away", 3)
            self.assertTrue(self.wd.visible("#menu"))
            self.assertLessEqual(self.wd.js("return document.documentElement.scrollWidth"), self.wd.js("return innerWidth"))
            self.assertLessEqual(self.wd.js("return document.querySelector('#log').scrollWidth"),
                                 self.wd.js("return document.querySelector('#log').clientWidth"))
            self.wd.screenshot(os.path.join(SHOTS, "narrow.png"))
            self.wd.click("#menu")
            wait(lambda: self.wd.js("return document.querySelector('#side').getBoundingClientRect().left") >= 0, "the list to slide in", 3)
            self.wd.click("#convs .item[data-id=c2]")
            wait(lambda: self.wd.text("#title") == "Explain mixture-of-experts routing", "the switch")
            self.assertFalse(self.wd.js("return document.body.classList.contains('side')"))
        finally:
            self.wd.resize(1200, 800)

    def test_6_conversations_new_switch_delete(self):
        convs = [{"id": "a", "title": "First", "updated": 2, "messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "uno"}]},
                 {"id": "b", "title": "Second", "updated": 1, "messages": [{"role": "user", "content": "two"}, {"role": "assistant", "content": "dos"}]}]
        self.fresh(None, convs)
        self.assertEqual(self.wd.text("#title"), "First")
        self.wd.click("#convs .item[data-id=b]")
        self.assertEqual(self.wd.text("#title"), "Second")
        self.assertEqual(self.wd.text(".msg.assistant .body"), "dos")
        self.assertEqual(json.loads(self.wd.js("return localStorage.getItem('colibri.current')")), "b")
        self.wd.click("#convs .item[data-id=b] button")
        self.assertEqual([c["id"] for c in self.convs()], ["a"])
        self.assertEqual(self.wd.text("#title"), "New chat")
        self.assertTrue(self.wd.visible("#empty"))
        self.wd.click("#convs .item[data-id=a]")
        self.assertEqual(self.wd.text(".msg.assistant .body"), "uno")
        self.wd.click("#new")
        self.assertTrue(self.wd.visible("#empty"))
        self.assertEqual(self.wd.js("return document.querySelectorAll('#convs .item').length"), 1)  # a new chat is stored once it has a message
        self.wd.go(self.url)
        wait(lambda: self.wd.text("#model") == self.MODEL, "the reload")
        self.assertEqual(self.wd.text("#title"), "New chat")
        self.assert_clean_console()

    def test_7_api_key_and_errors(self):
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=10)
        c.request("GET", "/")
        page = c.getresponse().read()  # the page as the binary serves it
        c.close()
        stub = Stub(page)
        self.addCleanup(stub.stop)
        url = "http://127.0.0.1:%d/" % stub.port
        self.wd.go(url)
        self.wd.js("localStorage.clear(); localStorage.setItem('colibri.settings', JSON.stringify({temperature: 0.5, top_p: 0.9, max_tokens: 64}))")
        self.wd.go(url)
        wait(lambda: self.wd.text("#model") == "API key needed", "the 401 on /v1/models")
        self.send("hi")
        wait(lambda: self.wd.js("return document.querySelector('#settings').open"), "the settings dialog asking for the key")
        self.assertEqual(self.wd.js("return document.activeElement.id"), "s-key")
        wait(lambda: self.wd.text(".msg.assistant .err"), "the 401 shown")
        self.assertIn("API key", self.wd.text(".msg.assistant .err"))
        self.assertNotIn("Authorization", stub.requests[-1][2])
        self.wd.type("#s-key", "sekrit")
        self.wd.click("#s-save")
        wait(lambda: self.wd.text("#model") == Stub.MODEL, "the model once the key is set")
        self.assertEqual(json.loads(self.wd.js("return localStorage.getItem('colibri.settings')"))["key"], "sekrit")
        # the reply streams, then an error event arrives: both are shown
        self.wd.click(".msg.assistant .meta button:last-child")  # Regenerate
        wait(lambda: "shutting down" in (self.wd.text(".msg.assistant .err") or ""), "the error event")
        self.idle()
        self.assertEqual(self.wd.js("return document.querySelectorAll('.msg.assistant').length"), 1)
        self.assertEqual(self.wd.text(".msg.assistant .body"), "Partial answer")
        self.assertEqual(self.wd.text(".msg.assistant details.think .text"), "Let me think.")
        method, path, hdrs, body = stub.requests[-1]
        self.assertEqual((method, path), ("POST", "/v1/chat/completions"))
        self.assertEqual(hdrs.get("Authorization"), "Bearer sekrit")
        self.assertEqual(body, {"messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": {"include_usage": True},
                                "model": Stub.MODEL, "temperature": 0.5, "top_p": 0.9, "max_tokens": 64,
                                "chat_template_kwargs": {"enable_thinking": False}})
        # an HTTP error's message is shown as the server wrote it
        self.send("bad")
        wait(lambda: len(self.wd.js("return document.querySelectorAll('.msg.assistant .err:not([hidden])')")) == 2, "the 400 shown")
        self.assertEqual(self.wd.js("return [...document.querySelectorAll('.msg.assistant .err')].pop().textContent"),
                         "HTTP 400: temperature is out of range")
        # the history sent back leaves out replies without text
        self.assertEqual(stub.requests[-1][3]["messages"], [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Partial answer"},
                                                            {"role": "user", "content": "bad"}])


if __name__ == "__main__":
    unittest.main()
