#!/usr/bin/env python3
"""The protocol fronts (anthropic.h, responses.h) against the real SDKs,
without a server: the `anthropic` and `openai` Python clients talk to an
httpx mock transport that answers with the documents and event streams
the C writers produce (`test_fronts --write`), so each SDK's own HTTP,
server-sent-event and accumulation code reads them; and the request bodies
those clients build (Claude-Code-like and Codex-like calls) are translated
and rendered by the fronts (`test_fronts --translate`). Each SDK that is
not installed is skipped visibly ("SKIP anthropic", "SKIP openai")."""
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import BIN  # noqa: E402

TEST = os.path.join(os.path.dirname(BIN) or ".", "test_fronts")
_DIR = []


def samples():
    """The directory of the writers' samples (made once)."""
    if not _DIR:
        d = tempfile.mkdtemp()
        p = subprocess.run([TEST, "--write", d], capture_output=True, timeout=60)
        if p.returncode:
            shutil.rmtree(d, True)
            raise AssertionError(p.stderr.decode())
        _DIR.append(d)
    return _DIR[0]


def sample(name):
    with open(os.path.join(samples(), name), "rb") as f:
        return f.read()


def translate(kind, body):
    """(status, output) of the front's translation and rendering of body."""
    p = subprocess.run([TEST, "--translate", kind], input=body, capture_output=True, timeout=60)
    return p.returncode, p.stdout.decode("utf-8", "replace").strip()


def need(module, tag):
    if os.environ.get("COLI_WINE") or not os.path.exists(TEST):
        raise unittest.SkipTest("fronts: %s was not built here" % TEST)
    try:
        return __import__(module)
    except ImportError:
        raise unittest.SkipTest("%s: the %s Python package is not installed (.ci/run installs it)" % (tag, module))


def http_module(sdk):
    """The httpx the SDK's client is built on (httpx, or a renamed one)."""
    base = importlib.import_module(sdk.__name__ + "._base_client")
    return getattr(base, "httpx", None) or getattr(base, "httpx2")


class Mock:
    """An httpx transport answering every request with (status, body) and
    keeping the request bodies the client sent."""

    def __init__(self, httpx, status, body, stream=False):
        self.sent = []

        def handler(request):
            self.sent.append(request.content)
            ctype = "text/event-stream" if stream else "application/json"
            return httpx.Response(status, content=body, headers={"content-type": ctype})
        self.client = httpx.Client(transport=httpx.MockTransport(handler))


CLAUDE_CODE = dict(
    model="glm-5", max_tokens=2048,
    system=[{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
    tools=[{"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                                                                          "required": ["path"]}}],
    tool_choice={"type": "auto"}, thinking={"type": "enabled", "budget_tokens": 1024}, metadata={"user_id": "u"},
    messages=[{"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}, {"type": "text", "text": "read a.c"}]},
              {"role": "assistant", "content": [{"type": "thinking", "thinking": "need the file", "signature": "s"},
                                                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.c"}}]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "int main;", "is_error": False}]}])

CODEX = dict(
    model="glm-5", instructions="You are Codex.", store=False, stream=True, parallel_tool_calls=True, tool_choice="auto",
    include=["reasoning.encrypted_content"], prompt_cache_key="k", reasoning={"effort": "medium", "summary": "auto"},
    tools=[{"type": "function", "name": "shell", "description": "Run a command", "strict": False,
            "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}}],
    input=[{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sandbox: none"}]},
           {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
           {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "run ls"}], "encrypted_content": None},
           {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"},
           {"type": "function_call_output", "call_id": "call_1", "output": "a.c\n"}])


class Anthropic(unittest.TestCase):
    def setUp(self):
        self.anthropic = need("anthropic", "anthropic")
        self.httpx = http_module(self.anthropic)

    def client(self, status, name, stream=False):
        m = Mock(self.httpx, status, sample(name), stream)
        return m, self.anthropic.Anthropic(api_key="none", base_url="http://fronts.test", http_client=m.client, max_retries=0)

    def test_message(self):
        m, c = self.client(200, "ant_message.json")
        msg = c.messages.create(**CLAUDE_CODE)
        self.assertEqual([b.type for b in msg.content], ["thinking", "text", "tool_use", "tool_use"])
        self.assertEqual((msg.stop_reason, msg.content[2].input, msg.usage.input_tokens, msg.usage.cache_read_input_tokens),
                         ("tool_use", {"city": "Paris", "days": 2}, 18, 12))
        rc, out = translate("anthropic", m.sent[0])  # what the SDK sent, through the front
        self.assertEqual(rc, 0, out)
        chat = json.loads(out)
        self.assertEqual([x["role"] for x in chat["messages"]], ["system", "user", "assistant", "tool"])
        self.assertEqual(chat["messages"][2]["tool_calls"][0]["function"]["arguments"], "{\"path\":\"a.c\"}")

    def test_stream(self):
        m, c = self.client(200, "ant_stream.txt", stream=True)
        with c.messages.stream(**CLAUDE_CODE) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        _, whole = self.client(200, "ant_message.json")
        self.assertEqual(text, "It is \"18C\".")
        self.assertEqual(final.model_dump(), whole.messages.create(**CLAUDE_CODE).model_dump())
        rc, out = translate("anthropic", m.sent[0])
        self.assertEqual(rc, 0, out)
        self.assertTrue(json.loads(out)["stream"])

    def test_stop_sequence(self):
        _, c = self.client(200, "ant_stop.json")
        msg = c.messages.create(model="m", max_tokens=5, stop_sequences=["END"], messages=[{"role": "user", "content": "x"}])
        self.assertEqual((msg.stop_reason, msg.stop_sequence), ("stop_sequence", "END"))

    def test_error_mid_stream(self):
        _, c = self.client(200, "ant_stream_error.txt", stream=True)
        with self.assertRaises(self.anthropic.APIStatusError) as e:
            for _ in c.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}], stream=True):
                pass
        self.assertIn("the model failed", str(e.exception))

    def test_error_document(self):
        _, c = self.client(400, "ant_error.json")
        with self.assertRaises(self.anthropic.BadRequestError) as e:
            c.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        self.assertEqual(e.exception.body["error"]["type"], "invalid_request_error")

    def test_count_tokens(self):
        m, c = self.client(200, "ant_count.json")
        args = {k: v for k, v in CLAUDE_CODE.items() if k not in ("max_tokens", "metadata")}
        self.assertEqual(c.messages.count_tokens(**args).input_tokens, 42)
        rc, out = translate("count_tokens", m.sent[0])
        self.assertEqual(rc, 0, out)

    def test_refusal_names_the_block(self):
        body = json.dumps({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]}).encode()
        rc, out = translate("anthropic", body)
        self.assertEqual(rc, 1)
        self.assertTrue(out.startswith("messages[0].content[0]: "), out)


class OpenAI(unittest.TestCase):
    def setUp(self):
        self.openai = need("openai", "openai")
        self.httpx = http_module(self.openai)

    def client(self, status, name, stream=False):
        m = Mock(self.httpx, status, sample(name), stream)
        return m, self.openai.OpenAI(api_key="none", base_url="http://fronts.test/v1", http_client=m.client, max_retries=0)

    def test_response(self):
        m, c = self.client(200, "resp_response.json")
        r = c.responses.create(**{k: v for k, v in CODEX.items() if k != "stream"})
        self.assertEqual([o.type for o in r.output], ["reasoning", "message", "function_call", "function_call"])
        self.assertEqual((r.status, r.output_text, r.output[2].call_id, r.usage.total_tokens), ("completed", "It is \"18C\".", "call_1_0", 39))
        rc, out = translate("responses", m.sent[0])
        self.assertEqual(rc, 0, out)
        chat = json.loads(out)
        self.assertEqual([x["role"] for x in chat["messages"]], ["system", "developer", "user", "assistant", "tool"])
        self.assertEqual(chat["messages"][3]["reasoning_content"], "run ls")

    def test_stream(self):
        m, c = self.client(200, "resp_stream.txt", stream=True)
        args = {k: v for k, v in CODEX.items() if k != "stream"}
        with c.responses.stream(**args) as s:
            deltas = "".join(e.delta for e in s if e.type == "response.output_text.delta")
            final = s.get_final_response()
        self.assertEqual((deltas, final.output_text), ("It is \"18C\".", "It is \"18C\"."))
        self.assertEqual([o.type for o in final.output], ["reasoning", "message", "function_call", "function_call"])
        rc, out = translate("responses", m.sent[0])
        self.assertEqual(rc, 0, out)

    def test_incomplete(self):
        _, c = self.client(200, "resp_incomplete.json")
        r = c.responses.create(model="m", input="x", max_output_tokens=16)
        self.assertEqual((r.status, r.incomplete_details.reason, r.output_text), ("incomplete", "max_output_tokens", "cut"))
        _, c = self.client(200, "resp_stream_incomplete.txt", stream=True)
        types = [e.type for e in c.responses.create(model="m", input="x", stream=True)]
        self.assertEqual((types[0], types[-1]), ("response.created", "response.incomplete"))

    def test_error_mid_stream(self):
        _, c = self.client(200, "resp_stream_error.txt", stream=True)
        events = list(c.responses.create(model="m", input="x", stream=True))
        self.assertEqual([e.type for e in events[-2:]], ["error", "response.failed"])
        self.assertEqual((events[-1].response.status, events[-1].response.error.message), ("failed", "the model failed"))

    def test_error_document(self):
        _, c = self.client(400, "resp_error.json")
        with self.assertRaises(self.openai.BadRequestError) as e:
            c.responses.create(model="m", input="x", previous_response_id="resp_x")
        self.assertEqual(e.exception.param, "previous_response_id")


if __name__ == "__main__":
    try:
        unittest.main()
    finally:
        for d in _DIR:
            shutil.rmtree(d, True)
