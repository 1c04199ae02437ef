#!/usr/bin/env python3
"""Serve mode end to end: the OpenAI-compatible HTTP API of `colibri
--serve` on the tiny fixture, over 127.0.0.1 with a server each test class
starts and stops itself. Raw HTTP (http.client, sockets) for the protocol
and the hostile clients; the real `openai` Python client when it is
installed (skipped visibly, "SKIP openai", without it). A build without
libmicrohttpd skips everything ("SKIP mhd")."""
import atexit
import hashlib
import http.client
import json
import math
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import BIN, env_base, run, serve_port  # noqa: E402

MODEL = "tests/fixtures/tiny-glm5"
SYSTEM = "You are terse."
_SYNTH = []


def synth_model():
    """A synthetic GLM-5-shaped model with a 4096-token context (the tiny
    fixture has 256): long generations and the tools block fit. Made once."""
    if not _SYNTH:
        d = tempfile.mkdtemp()
        atexit.register(shutil.rmtree, d, True)
        synth = os.path.join(os.path.dirname(BIN) or ".", "colibri-synth")
        p = subprocess.run([synth, d, "--layers", "2", "--dense-layers", "1", "--experts", "8", "--topk", "2", "--hidden", "256",
                            "--moe-inter", "128", "--heads", "4", "--vocab", "352", "--ctx", "4096", "--group-size", "32",
                            "--tokenizer", os.path.join(MODEL, "tokenizer.json")], capture_output=True, timeout=120)
        if p.returncode:
            raise AssertionError(p.stderr.decode())
        _SYNTH.append(d)
    return _SYNTH[0]


class Server:
    """A colibri --serve process on a free port; .log holds its stderr."""

    def __init__(self, env=None, model=MODEL):
        self.logf = tempfile.TemporaryFile()
        e = {"COLI_PORT": "0", "CTX": "4096", "SERVE_TIMEOUT": "2"}
        e.update(env or {})
        self.p = subprocess.Popen([BIN, "--serve", model], env=env_base(e), stdout=subprocess.DEVNULL, stderr=self.logf)
        self.port = serve_port(self.p, self.log)

    def log(self):
        if self.logf.closed:
            return self.final_log
        self.logf.seek(0)
        return self.logf.read().decode("utf-8", "replace")

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            rc = self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        if not self.logf.closed:
            self.final_log = self.log()
            self.logf.close()
        return rc

    def request(self, method, path, body=None, raw=None, timeout=60):
        """(status, parsed JSON or text) of one request."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode("utf-8")
        c.close()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text

    def chat(self, messages, **kw):
        body = {"model": "tiny", "messages": messages}
        body.update(kw)
        return self.request("POST", "/v1/chat/completions", body)

    def stream(self, path, body):
        """The events of a streaming request, parsed; the last is "[DONE]"."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("POST", path, body=json.dumps(dict(body, stream=True)), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, r.status
        assert r.getheader("Content-Type") == "text/event-stream"
        text = r.read().decode("utf-8")
        c.close()
        events = []
        for block in text.split("\n\n"):
            if not block:
                continue
            assert block.startswith("data: "), block
            payload = block[6:]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
        return events


def mhd_missing():
    e, _, err = run(MODEL, env={"COLI_PORT": "0", "SERVE": "1", "COLI_HOST": "256.0.0.1"}, args=["--serve", MODEL])
    return "without libmicrohttpd" in err


def one_shot(prompt, ngen, system=SYSTEM, extra=None, model=MODEL):
    env = {"PROMPT": prompt, "SYSTEM": system, "TEMP": "0", "NGEN": str(ngen), "CTX": "4096"}
    env.update(extra or {})
    rc, out, err = run(model, env=env)
    assert rc == 0, err
    return out, err


class MhdCase(unittest.TestCase):
    """Skips visibly on a build without libmicrohttpd."""

    @classmethod
    def setUpClass(cls):
        if mhd_missing():
            raise unittest.SkipTest("mhd: this colibri was built without libmicrohttpd")


class ServeBase(MhdCase):
    """One server (with env) for the class's tests."""
    env = None

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.srv = Server(cls.env)
        assert cls.srv.port, cls.srv.log()

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        assert rc == 0, (rc, cls.srv.log())

    def msgs(self, user, system=SYSTEM):
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class Protocol(ServeBase):
    def test_health_and_models(self):
        self.assertEqual(self.srv.request("GET", "/health"), (200, {"status": "ok"}))
        st, body = self.srv.request("GET", "/v1/models")
        self.assertEqual(st, 200)
        self.assertEqual(body["object"], "list")
        self.assertEqual(body["data"][0]["id"], "tiny-glm5")

    def test_greedy_chat_equals_one_shot(self):
        """The API's greedy answer is PROMPT/SYSTEM's one-shot output."""
        for prompt in ("Hello", "What is 2+2?"):
            want, _ = one_shot(prompt, 12)
            st, body = self.srv.chat(self.msgs(prompt), max_tokens=12, temperature=0)
            self.assertEqual(st, 200, body)
            ch = body["choices"][0]
            self.assertEqual(ch["message"]["content"], want)
            self.assertEqual(ch["message"]["role"], "assistant")
            self.assertEqual(body["object"], "chat.completion")
            u = body["usage"]
            self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
            self.assertLessEqual(u["completion_tokens"], 12)
            self.assertEqual(ch["finish_reason"], "length" if u["completion_tokens"] == 12 else "stop")

    def test_stream_equals_non_stream(self):
        req = {"messages": self.msgs("Tell me a story"), "max_tokens": 16, "temperature": 0}
        st, whole = self.srv.request("POST", "/v1/chat/completions", req)
        self.assertEqual(st, 200)
        ev = self.srv.stream("/v1/chat/completions", dict(req, stream_options={"include_usage": True}))
        self.assertEqual(ev[-1], "[DONE]")
        chunks = ev[:-1]
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        self.assertEqual(text, whole["choices"][0]["message"]["content"])
        fins = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        self.assertEqual(fins[-1], whole["choices"][0]["finish_reason"])
        self.assertTrue(all(f is None for f in fins[:-1]))
        usage = chunks[-1]
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"]["completion_tokens"], whole["usage"]["completion_tokens"])
        self.assertEqual(len({c["id"] for c in chunks}), 1)

    def test_completions(self):
        want, _ = one_shot("Once upon a time", 10, extra={"CHAT_TEMPLATE": "0", "SYSTEM": ""})
        st, body = self.srv.request("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["object"], "text_completion")
        self.assertEqual(body["choices"][0]["text"], want)
        ev = self.srv.stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0})
        self.assertEqual("".join(c["choices"][0]["text"] for c in ev[:-1] if c["choices"]), want)

    def test_seed_reproducible(self):
        a = [self.srv.chat(self.msgs("Pick a word"), max_tokens=12, temperature=1.0, seed=s)[1]["choices"][0]["message"]["content"]
             for s in (7, 7, 8)]
        self.assertEqual(a[0], a[1])
        self.assertNotEqual(a[0], a[2])

    def test_stop_sequence(self):
        st, body = self.srv.chat(self.msgs("Count"), max_tokens=24, temperature=0)
        full = body["choices"][0]["message"]["content"]
        cut = full[len(full) // 2:len(full) // 2 + 2]
        if len(cut) < 2:
            self.skipTest("stop: the greedy answer is too short to cut")
        want = full[:full.index(cut)]
        st, body = self.srv.chat(self.msgs("Count"), max_tokens=24, temperature=0, stop=[cut, "zzzz-never"])
        self.assertEqual(st, 200)
        self.assertEqual(body["choices"][0]["message"]["content"], want)
        self.assertEqual(body["choices"][0]["finish_reason"], "stop")
        ev = self.srv.stream("/v1/chat/completions", {"messages": self.msgs("Count"), "max_tokens": 24, "temperature": 0, "stop": cut})
        self.assertEqual("".join(c["choices"][0]["delta"].get("content", "") for c in ev[:-1] if c["choices"]), want)

    def test_prefix_reuse_is_exact(self):
        """A second turn reuses the first turn's cache and answers as a
        server that computes it from nothing."""
        first = self.msgs("Hello there")
        st, a = self.srv.chat(first, max_tokens=8, temperature=0)
        turn2 = first + [{"role": "assistant", "content": a["choices"][0]["message"]["content"]}, {"role": "user", "content": "And then?"}]
        st, b = self.srv.chat(turn2, max_tokens=8, temperature=0)
        self.assertEqual(st, 200)
        self.assertGreater(b["usage"]["prompt_tokens_details"]["cached_tokens"], a["usage"]["prompt_tokens"] - 1)
        fresh = Server({"KV_CACHE_GB": "0"})
        try:
            st, c = fresh.chat(turn2, max_tokens=8, temperature=0)
        finally:
            fresh.stop()
        self.assertEqual(c["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertEqual(b["choices"][0]["message"]["content"], c["choices"][0]["message"]["content"])

    def test_two_conversations_kept(self):
        """Alternating conversations each find their own cache again."""
        a1 = self.msgs("Conversation A", system="alpha")
        b1 = self.msgs("Conversation B", system="beta")
        self.srv.chat(a1, max_tokens=4, temperature=0)
        self.srv.chat(b1, max_tokens=4, temperature=0)
        st, again = self.srv.chat(a1 + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "more"}], max_tokens=4, temperature=0)
        self.assertEqual(st, 200)
        self.assertGreaterEqual(again["usage"]["prompt_tokens_details"]["cached_tokens"], 5)

    def test_tools_rendered_and_accepted(self):
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}]
        msgs = self.msgs("Weather in Paris?") + [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18C"}]
        srv = Server(model=synth_model())
        try:
            st, body = srv.chat(msgs, tools=tools, max_tokens=4, temperature=0)
        finally:
            srv.stop()
        self.assertEqual(st, 200, body)
        self.assertIn(body["choices"][0]["finish_reason"], ("stop", "length", "tool_calls"))

    def test_response_format(self):
        """json_object and json_schema answers parse, and follow the schema."""
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
                  "required": ["city", "n"], "additionalProperties": False}
        done = 0
        for seed in range(6):
            st, body = self.srv.chat(self.msgs("JSON please"), max_tokens=200, temperature=1.0, seed=seed,
                                     response_format={"type": "json_object"})
            self.assertEqual(st, 200, body)
            if body["choices"][0]["finish_reason"] == "stop":  # else cut by max_tokens
                self.assertIsInstance(json.loads(body["choices"][0]["message"]["content"]), dict)
                done += 1
            st, body = self.srv.chat(self.msgs("JSON please"), max_tokens=200, temperature=1.0, seed=seed,
                                     response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": True}})
            self.assertEqual(st, 200, body)
            if body["choices"][0]["finish_reason"] == "stop":
                v = json.loads(body["choices"][0]["message"]["content"])
                self.assertEqual(sorted(v), ["city", "n"])
                self.assertIsInstance(v["n"], int)
                self.assertLessEqual(len(v["city"]), 8)
                done += 1
        self.assertGreaterEqual(done, 3)

    def test_thinking_split(self):
        st, body = self.srv.chat(self.msgs("Think"), max_tokens=16, temperature=0, chat_template_kwargs={"enable_thinking": True})
        self.assertEqual(st, 200)
        m = body["choices"][0]["message"]
        # the generation prompt opened <think>: whatever came before a </think> is reasoning
        self.assertNotIn("</think>", m.get("content") or "")


class ToolChoice(MhdCase):
    """Forced tool calls on the synthetic model (not in the TSan run: it
    adds no thread interplay, only long prompts)."""

    def msgs(self, user, system=SYSTEM):
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def test_tool_choice_forces_valid_calls(self):
        """tool_choice "required" / named: every answer is a tool call to a
        listed function whose arguments parse and follow its schema, at
        several seeds and temperatures, with and without thinking."""
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
                     "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"},
                                                      "unit": {"type": "string", "enum": ["C", "F"]}},
                     "required": ["city", "days"]}}},
                 {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}]
        srv = Server(model=synth_model())
        try:
            # one call (parallel_tool_calls false, or a named function) is bounded (city at most 8
            # characters, days at most 16 digits): the answer must be that call; several calls, or a
            # reasoning block first, may run into max_tokens on a random-weight model
            cases = [("required", False, False, 3, 300), ("required", False, True, 2, 80), ("required", True, False, 2, 80),
                     ({"type": "function", "function": {"name": "get_weather"}}, False, True, 2, 300)]
            def check_calls(calls, choice):
                for c in calls:
                    args = json.loads(c["function"]["arguments"])
                    if isinstance(choice, dict):
                        self.assertEqual(c["function"]["name"], "get_weather")
                    if c["function"]["name"] == "now":
                        self.assertEqual(args, {})
                        continue
                    self.assertEqual(c["function"]["name"], "get_weather")
                    self.assertTrue({"city", "days"} <= set(args) <= {"city", "days", "unit"}, args)
                    self.assertIsInstance(args["city"], str)
                    self.assertLessEqual(len(args["city"]), 8)
                    self.assertIsInstance(args["days"], int)
                    self.assertIn(args.get("unit", "C"), ("C", "F"))

            for i, (choice, think, ptc, seeds, limit) in enumerate(cases):
                for seed in range(seeds):
                    kw = dict(tools=tools, tool_choice=choice, max_tokens=limit, temperature=0.4 + 0.4 * seed, seed=seed,
                              chat_template_kwargs={"enable_thinking": think}, parallel_tool_calls=ptc)
                    st, body = srv.chat(self.msgs("Weather in Paris for 3 days?"), **kw)
                    self.assertEqual(st, 200, body)
                    ch = body["choices"][0]
                    # a cut answer keeps the calls it completed and never returns call markup as text
                    self.assertNotIn("<tool_call>", ch["message"]["content"] or "")
                    self.assertNotIn("<arg_key>", ch["message"]["content"] or "")
                    if (think or (ptc and choice == "required")) and ch["finish_reason"] == "length":
                        check_calls(ch["message"].get("tool_calls") or [], choice)
                        continue
                    self.assertEqual(ch["finish_reason"], "tool_calls", (i, seed, ch))
                    calls = ch["message"]["tool_calls"]
                    self.assertTrue(calls)
                    if not ptc or isinstance(choice, dict):
                        self.assertEqual(len(calls), 1)
                    check_calls(calls, choice)
                    if think:
                        self.assertIn("reasoning_content", ch["message"])
            # parallel calls allowed: the forced turn is still finite (at most 16 calls, then the
            # end of the turn), so with room enough every seed ends in tool_calls, none in length
            for seed in range(2):
                st, body = srv.chat(self.msgs("Weather in Paris for 3 days?"), tools=tools, tool_choice="required", max_tokens=3000,
                                    temperature=1.0, seed=100 + seed, parallel_tool_calls=True)
                self.assertEqual(st, 200, body)
                ch = body["choices"][0]
                self.assertEqual(ch["finish_reason"], "tool_calls", (seed, ch))
                self.assertTrue(1 <= len(ch["message"]["tool_calls"]) <= 16)
                check_calls(ch["message"]["tool_calls"], "required")
            # cut inside a call: the calls completed before the cut come back as tool_calls (the same
            # calls the uncut answer of that seed begins with), finish_reason length, no markup as text
            cut_seen = 0
            for seed in range(40):
                kw = dict(tools=tools, tool_choice="required", temperature=1.0, seed=200 + seed, parallel_tool_calls=True)
                st, full = srv.chat(self.msgs("Weather in Paris for 3 days?"), max_tokens=3000, logprobs=True, **kw)
                calls = full["choices"][0]["message"]["tool_calls"]
                if len(calls) < 2:
                    continue
                toks = [t["token"] for t in full["choices"][0]["logprobs"]["content"]]
                self.assertEqual(len(toks), full["usage"]["completion_tokens"])
                last_close = len(toks) - 1 - toks[::-1].index("</tool_call>")  # the last call ends with this token
                st, cut = srv.chat(self.msgs("Weather in Paris for 3 days?"), max_tokens=last_close, **kw)
                ch = cut["choices"][0]
                self.assertEqual(ch["finish_reason"], "length", ch)
                self.assertNotIn("<tool_call>", ch["message"]["content"] or "")
                self.assertEqual([(c["function"]["name"], c["function"]["arguments"]) for c in ch["message"]["tool_calls"]],
                                 [(c["function"]["name"], c["function"]["arguments"]) for c in calls[:-1]])
                cut_seen += 1
                break
            self.assertGreater(cut_seen, 0)
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_openai_client_reads_a_forced_call(self):
        try:
            import openai
        except ImportError:
            self.skipTest("openai: the openai Python package is not installed (.ci/run installs it)")
        tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}]
        srv = Server(model=synth_model())
        try:
            c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % srv.port, api_key="none", max_retries=0)
            r = c.chat.completions.create(model="m", messages=self.msgs("What time is it?"), max_tokens=40, temperature=0,
                                          tools=tools, tool_choice={"type": "function", "function": {"name": "now"}})
            self.assertEqual(r.choices[0].finish_reason, "tool_calls")
            self.assertEqual([(t.function.name, json.loads(t.function.arguments)) for t in r.choices[0].message.tool_calls], [("now", {})])
        finally:
            self.assertEqual(srv.stop(), 0)



class DeepSeekFormats(MhdCase):
    """Serve mode on a synthetic model with DeepSeek's tokenizer: the
    DeepSeek-V3 format (chosen by its special tokens) renders a system +
    user request as PROMPT/SYSTEM do, so greedy output matches; a named
    tool_choice yields a schema-valid call in DeepSeek's syntax, parsed back;
    a conversation with tool results renders; with a V3.1 template the
    thinking request's text is reasoning_content."""

    def test_deepseek_serve(self):
        d = tempfile.mkdtemp()
        try:
            synth = os.path.join(os.path.dirname(BIN) or ".", "colibri-synth")
            p = subprocess.run([synth, d, "--layers", "2", "--dense-layers", "1", "--experts", "8", "--topk", "2", "--hidden", "128",
                                "--moe-inter", "64", "--heads", "2", "--vocab", "4000", "--ctx", "4096", "--group-size", "32",
                                "--tokenizer", os.path.join("tests", "fixtures", "tokenizer", "deepseek.json")], capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            want, _ = one_shot("Hello there", 12, model=d, extra={"USAGE_SAVE": "0"})
            tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"}},
                "required": ["city", "days"]}}}]
            srv = Server(model=d, env={"USAGE_SAVE": "0"})
            try:
                self.assertTrue(srv.port, srv.log())
                st, body = srv.chat(self.msgs("Hello there"), max_tokens=12, temperature=0)
                self.assertEqual(st, 200, body)
                self.assertEqual(body["choices"][0]["message"]["content"], want)
                for seed in range(2):
                    st, body = srv.chat(self.msgs("Weather in Paris for 3 days?"), tools=tools, max_tokens=300, seed=seed,
                                        temperature=0.5, tool_choice={"type": "function", "function": {"name": "get_weather"}})
                    self.assertEqual(st, 200, body)
                    ch = body["choices"][0]
                    self.assertEqual(ch["finish_reason"], "tool_calls", ch)
                    (call,) = ch["message"]["tool_calls"]
                    self.assertEqual(call["function"]["name"], "get_weather")
                    args = json.loads(call["function"]["arguments"])
                    self.assertEqual(set(args), {"city", "days"})
                    self.assertLessEqual(len(args["city"]), 8)
                    self.assertIsInstance(args["days"], int)
                msgs = self.msgs("Weather?") + [
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 1}"}}]},
                    {"role": "tool", "tool_call_id": "c0", "content": "18C"}]
                st, body = srv.chat(msgs, tools=tools, max_tokens=4)
                self.assertEqual(st, 200, body)
            finally:
                self.assertEqual(srv.stop(), 0)
            with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:  # markers of V3.1's template
                json.dump({"chat_template": "{{ bos_token }}{{'<\uff5cUser\uff5c>' + m}}{{'<\uff5cAssistant\uff5c></think>'}}"}, f)
            srv = Server(model=d, env={"USAGE_SAVE": "0"})
            try:
                self.assertTrue(srv.port, srv.log())
                st, body = srv.chat(self.msgs("Think first."), max_tokens=6, temperature=0, chat_template_kwargs={"enable_thinking": True})
                self.assertEqual(st, 200, body)
                msg = body["choices"][0]["message"]
                self.assertTrue(msg.get("reasoning_content"), msg)  # the prompt opened <think>: greedy text up to </think>
            finally:
                self.assertEqual(srv.stop(), 0)
        finally:
            shutil.rmtree(d)

    def msgs(self, user, system=SYSTEM):
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class Refusals(ServeBase):
    env = {"SERVE_MAX_BODY": "4096", "SERVE_MAX_MESSAGES": "4", "CTX": "64"}

    def assertError(self, resp, status, needle):
        st, body = resp
        self.assertEqual(st, status, body)
        self.assertIsInstance(body, dict, body)
        self.assertIn(needle, body["error"]["message"])
        self.assertIn("type", body["error"])

    def test_malformed(self):
        s = self.srv
        self.assertError(s.request("POST", "/v1/chat/completions", raw=b"{\"messages\": ["), 400, "not valid JSON")
        self.assertError(s.request("POST", "/v1/chat/completions", raw=b"[1,2]"), 400, "JSON object")
        self.assertError(s.chat([{"role": "user", "content": "x"}], bogus=1), 400, "unknown field \"bogus\"")
        self.assertError(s.chat([]), 400, "messages")
        self.assertError(s.chat([{"role": "wizard", "content": "x"}]), 400, "wizard")
        self.assertError(s.chat([{"role": "user", "content": 5}]), 400, "content")
        self.assertError(s.chat([{"role": "user", "content": "x"}] * 5), 400, "at most 4")
        self.assertError(s.chat([{"role": "user", "content": "x"}], max_tokens=2 ** 31), 400, "max_tokens")
        self.assertError(s.chat([{"role": "user", "content": "x"}], temperature="hot"), 400, "temperature")
        self.assertError(s.chat([{"role": "user", "content": "x"}], n=2), 400, "n = 2")
        self.assertError(s.chat([{"role": "user", "content": "x"}], response_format={"type": "regex"}), 400, "not one of text, json_object")
        self.assertError(s.chat([{"role": "user", "content": "x"}], response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "pattern": "(?!a)"}}}), 400, "\"pattern\": lookaround (at character 1) is not supported")
        self.assertError(s.chat([{"role": "user", "content": "x"}], tool_choice="required"), 400, "needs tools")
        self.assertError(s.chat([{"role": "user", "content": "word " * 200}]), 400, "context")
        self.assertError(s.request("GET", "/v1/chat/completions"), 405, "POST")
        self.assertError(s.request("GET", "/nope"), 404, "no such endpoint")
        self.assertError(s.request("POST", "/v1/chat/completions", raw=b"{" + b" " * 10000 + b"}"), 413, "larger")
        self.assertEqual(s.request("GET", "/health")[0], 200)

    def test_invalid_utf8_in_body(self):
        st, body = self.srv.request("POST", "/v1/chat/completions", raw=b'{"messages":[{"role":"user","content":"\xff"}]}')
        self.assertEqual(st, 400)

    def test_huge_headers(self):
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
        try:
            reply = s.recv(4096)
        except ConnectionResetError:
            reply = b""
        s.close()
        self.assertFalse(reply.startswith(b"HTTP/1.1 200"), reply[:100])
        self.assertEqual(self.srv.request("GET", "/health")[0], 200)

    def test_slowloris_dropped(self):
        """A client that sends half a request is dropped after SERVE_TIMEOUT
        (2 s here) and others are served meanwhile."""
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Len")
        self.assertEqual(self.srv.request("GET", "/health")[0], 200)
        t0 = time.time()
        got = s.recv(100)
        self.assertEqual(got, b"")
        self.assertLess(time.time() - t0, 8)
        s.close()


class Lifecycle(MhdCase):

    def test_disconnect_mid_stream_ends_that_generation(self):
        srv = Server(model=synth_model())
        try:
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            body = json.dumps({"messages": [{"role": "user", "content": "go"}], "max_tokens": 4000, "temperature": 1.0, "seed": 4,
                               "stream": True}).encode()  # seed 4: no stop token in the first 600
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                      + body)
            self.assertIn(b"200", s.recv(200))
            s.close()
            st, b = srv.chat([{"role": "user", "content": "next"}], max_tokens=4, temperature=0)
            self.assertEqual(st, 200)
            log = srv.log()
        finally:
            self.assertEqual(srv.stop(), 0)
        self.assertIn("stopped: interrupted", log)

    def test_queue_full_gives_429_and_nothing_mixed(self):
        """One slot, a queue of one: while a long answer decodes and a second
        request waits, every further request gets 429 at once; the two
        answered requests (the same greedy question) answer alike. The
        first is held long by a schema whose string must outgrow
        max_tokens, and the others go only once /metrics shows it running
        and the second queued, so no scheduling makes the queue drain early."""
        model = synth_model()
        srv = Server({"SERVE_QUEUE": "1", "SERVE_SLOTS": "1"}, model=model)
        long_fmt = {"type": "json_schema", "json_schema": {"name": "long", "schema": {"type": "string", "minLength": 10000}}}
        kept = []

        def client():  # the second waits for the first: minutes under ThreadSanitizer
            body = {"model": "tiny", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "same question"}],
                    "max_tokens": 600, "temperature": 0, "response_format": long_fmt}
            kept.append(srv.request("POST", "/v1/chat/completions", body, timeout=600))

        def metric(name):
            _, text = srv.request("GET", "/metrics")
            return next(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(name + " "))

        def until(cond, what):
            t0 = time.time()
            while not cond():
                self.assertLess(time.time() - t0, 60, what)
                time.sleep(0.005)
        try:
            ts = [threading.Thread(target=client) for _ in range(2)]
            ts[0].start()
            until(lambda: metric("colibri_requests_running") == 1, "the first request decoding")
            ts[1].start()
            until(lambda: metric("colibri_queue_length") == 1, "the second request queued")
            refused = []
            more = [threading.Thread(target=lambda: refused.append(srv.chat([{"role": "user", "content": "x"}], max_tokens=4))) for _ in range(6)]
            for t in more:
                t.start()
            for t in more:
                t.join()
            self.assertEqual(metric("colibri_requests_running") + metric("colibri_queue_length"), 2)  # still busy: the 429s were the queue's
            for t in ts:
                t.join()
        finally:
            self.assertEqual(srv.stop(), 0)
        self.assertEqual([st for st, _ in refused], [429] * 6)
        for _, body in refused:
            self.assertEqual(body["error"]["type"], "rate_limit_error")
        self.assertEqual([st for st, _ in kept], [200, 200])
        a, b = (body["choices"][0]["message"]["content"] for _, body in kept)
        self.assertEqual(a, b)
        self.assertGreater(len(a), 100)

    def test_sigterm_during_generation(self):
        """The answer being generated is cut short and still sent: the
        client gets its 200 (or a 503 had it not been taken yet), never a
        dropped connection."""
        for stream in (False, True):
            srv = Server(model=synth_model())
            out = []
            body = {"model": "tiny", "messages": [{"role": "user", "content": "long"}], "max_tokens": 4000, "temperature": 1.0}

            def ask():
                try:
                    if stream:
                        out.append(srv.stream("/v1/chat/completions", dict(body, stream=True)))
                    else:
                        out.append(srv.request("POST", "/v1/chat/completions", body))
                except Exception as e:  # noqa: BLE001 - reported below
                    out.append(e)

            t = threading.Thread(target=ask)
            t.start()
            time.sleep(0.3)
            rc = srv.stop()
            t.join()
            self.assertEqual(rc, 0, srv.log())
            self.assertIn("server stopped", srv.log())
            self.assertEqual(len(out), 1)
            self.assertNotIsInstance(out[0], Exception, "the client got no answer: %r" % (out[0],))
            if stream:
                self.assertEqual(out[0][-1], "[DONE]")
            else:
                self.assertIn(out[0][0], (200, 503), out[0])

    def test_conversation_continues_across_restart(self):
        """KV_CACHE_DIR: a restarted server resumes the conversation's cache
        and answers as one that computed it from nothing."""
        d = tempfile.mkdtemp()
        try:
            first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Remember me"}]
            a = Server({"KV_CACHE_DIR": d})
            st, r1 = a.chat(first, max_tokens=6, temperature=0)
            self.assertEqual(a.stop(), 0)
            files = [f for f in os.listdir(d) if f.endswith(".coli_kv")]
            self.assertEqual(len(files), 1, os.listdir(d))
            turn2 = first + [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]}, {"role": "user", "content": "Who?"}]
            b = Server({"KV_CACHE_DIR": d})
            st, r2 = b.chat(turn2, max_tokens=6, temperature=0)
            self.assertEqual(b.stop(), 0)
            self.assertIn("conversations resumed", b.log())
            self.assertGreater(r2["usage"]["prompt_tokens_details"]["cached_tokens"], r1["usage"]["prompt_tokens"] - 1)
            c = Server()
            st, r3 = c.chat(turn2, max_tokens=6, temperature=0)
            c.stop()
            self.assertEqual(r2["choices"][0]["message"]["content"], r3["choices"][0]["message"]["content"])
            # a damaged file is named and left alone (every file: the fixture's
            # noise reply does not re-tokenize as generated, so turn 2 does not
            # continue the first conversation and was saved in a file of its own)
            for name in os.listdir(d):
                with open(os.path.join(d, name), "r+b") as f:
                    f.seek(100)
                    f.write(b"\xff\xff\xff\xff")
            e = Server({"KV_CACHE_DIR": d})
            st, r4 = e.chat(turn2, max_tokens=6, temperature=0)
            e.stop()
            self.assertIn("checksum mismatch", e.log())
            self.assertEqual(r4["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
            self.assertEqual(r4["choices"][0]["message"]["content"], r3["choices"][0]["message"]["content"])
        finally:
            shutil.rmtree(d)


class Budget(MhdCase):

    def test_kept_conversations_evicted_within_budget(self):
        """KV_CACHE_GB of about 12 KB keeps one tiny conversation aside:
        the least recently used is evicted, answers stay exact, and a shared
        system prompt is reused by a new conversation."""
        srv = Server({"KV_CACHE_GB": "0.000012"})
        fresh = Server({"KV_CACHE_GB": "0"})
        try:
            convs = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "topic %s, tell me more" % c}] for c in "ABC"]
            for m in convs:
                st, r = srv.chat(m, max_tokens=6, temperature=0)
                self.assertEqual(st, 200)
                # the system prompt is shared: reused even by a new conversation
                self.assertGreaterEqual(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0 if m is convs[0] else 5)
            for m in convs:
                st, r = srv.chat(m + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"}], max_tokens=6, temperature=0)
                st2, r2 = fresh.chat(m + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"}], max_tokens=6, temperature=0)
                self.assertEqual(r["choices"][0]["message"]["content"], r2["choices"][0]["message"]["content"])
        finally:
            srv.stop()
            fresh.stop()
        self.assertIn("evicted a kept conversation", srv.log())

    def test_connection_limit(self):
        """Beyond SERVE_CONNS open connections a new one is closed at once;
        the server goes on."""
        srv = Server({"SERVE_CONNS": "2", "SERVE_TIMEOUT": "5"})
        try:
            held = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(2)]
            time.sleep(0.2)
            extra = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            try:
                extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                got = extra.recv(100)
            except (ConnectionResetError, BrokenPipeError):
                got = b""
            extra.close()
            self.assertEqual(got, b"")
            for h in held:
                h.close()
            time.sleep(0.3)
            self.assertEqual(srv.request("GET", "/health")[0], 200)
        finally:
            self.assertEqual(srv.stop(), 0)


class OpenAIClient(ServeBase):
    """The real openai Python client against the server."""

    @classmethod
    def setUpClass(cls):
        try:
            import openai  # noqa: F401
        except ImportError:
            raise unittest.SkipTest("openai: the openai Python package is not installed (.ci/run installs it)")
        super().setUpClass()

    def client(self):
        import openai
        return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.srv.port, api_key="none", max_retries=0)

    def test_chat_stream_and_usage(self):
        c = self.client()
        r = c.chat.completions.create(model="tiny-glm5", messages=self.msgs("Hello"), max_tokens=10, temperature=0)
        want, _ = one_shot("Hello", 10)
        self.assertEqual(r.choices[0].message.content, want)
        self.assertEqual(r.usage.completion_tokens + r.usage.prompt_tokens, r.usage.total_tokens)
        s = c.chat.completions.create(model="tiny-glm5", messages=self.msgs("Hello"), max_tokens=10, temperature=0, stream=True,
                                      stream_options={"include_usage": True})
        parts, usage = [], None
        for ch in s:
            if ch.choices and ch.choices[0].delta.content:
                parts.append(ch.choices[0].delta.content)
            if ch.usage:
                usage = ch.usage
        self.assertEqual("".join(parts), want)
        self.assertEqual(usage.completion_tokens, r.usage.completion_tokens)
        self.assertEqual(c.models.list().data[0].id, "tiny-glm5")

    def test_seed_stop_tools_and_errors(self):
        import openai
        c = self.client()
        a = c.chat.completions.create(model="m", messages=self.msgs("x"), max_tokens=8, temperature=1, seed=3).choices[0].message.content
        b = c.chat.completions.create(model="m", messages=self.msgs("x"), max_tokens=8, temperature=1, seed=3).choices[0].message.content
        self.assertEqual(a, b)
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
        r = c.chat.completions.create(model="m", messages=self.msgs("x"), max_tokens=4, temperature=0, tool_choice="none", stop=["\n"])
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertNotIn("\n", r.choices[0].message.content or "")
        with self.assertRaises(openai.BadRequestError):
            c.chat.completions.create(model="m", messages=self.msgs("x"), max_tokens=4, tool_choice="required")
        with self.assertRaises(openai.BadRequestError):  # a function tools does not list
            c.chat.completions.create(model="m", messages=self.msgs("x"), max_tokens=4, tools=tools,
                                      tool_choice={"type": "function", "function": {"name": "g"}})
        comp = c.completions.create(model="m", prompt="Once", max_tokens=5, temperature=0)
        self.assertEqual(comp.choices[0].text, one_shot("Once", 5, extra={"CHAT_TEMPLATE": "0", "SYSTEM": ""})[0])


def raw_request(port, method, path, body=None, headers=None, timeout=60):
    """(status, headers, parsed JSON or text) of one request with headers."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    text = r.read().decode("utf-8", "replace")
    c.close()
    try:
        return r.status, dict(r.getheaders()), json.loads(text)
    except ValueError:
        return r.status, dict(r.getheaders()), text


class Hostile(MhdCase):
    """No client input stops the server (issue #32's hostile probe): each
    hostile request gets its error and is followed by a normal request
    that must succeed; the server exits 0 at SIGTERM."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.srv = Server({"SERVE_TIMEOUT": "2", "SERVE_CONNS": "8", "SERVE_CONNS_PER_IP": "8"}, model=synth_model())
        assert cls.srv.port, cls.srv.log()

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        assert rc == 0, (rc, cls.srv.log())

    def req(self, method, path, body=None, headers=None):
        return raw_request(self.srv.port, method, path, body, headers)

    def still_serving(self):
        st, _, body = self.req("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        self.assertEqual(st, 200, body)
        self.assertIsNone(self.srv.p.poll(), self.srv.log()[-2000:])

    def schema_req(self, schema, stream=False):
        return {"messages": [{"role": "user", "content": "x"}], "max_tokens": 40, "stream": stream, "temperature": 0.8, "seed": 1,
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}

    def test_enum_overflow_refused_at_check_time(self):
        """An enum of any size is written as a trie (one way per next
        character): 4,096 and 100,000 values, as the answer or as a
        property, give one of the values. Alternatives that are not merged
        (anyOf of 4,097 constants) take more than 4,095 ways and are
        refused with 400 naming response_format, before any compute."""
        for n in (4096, 100000):
            for schema in ({"enum": list(range(n))}, {"type": "object", "properties": {"a": {"enum": list(range(n))}}, "required": ["a"]}):
                st, _, body = self.req("POST", "/v1/chat/completions", self.schema_req(schema))
                self.assertEqual(st, 200, body)
                content = body["choices"][0]["message"]["content"]
                if body["choices"][0]["finish_reason"] == "stop":
                    value = json.loads(content)
                    self.assertIn(value if "properties" not in schema else value["a"], range(n))
                self.still_serving()
        for schema in ({"anyOf": [{"const": i} for i in range(4097)]}, {"type": "object", "properties": {"a": {"anyOf": [{"const": i} for i in range(5000)]}}}):
            st, _, body = self.req("POST", "/v1/chat/completions", self.schema_req(schema))
            self.assertEqual(st, 400, body)
            self.assertEqual(body["error"]["param"], "response_format")
            self.assertIn("too ambiguous to follow", body["error"]["message"])
            self.still_serving()

    def test_overflow_mid_generation(self):
        """Ways that add up only once the text reaches them (two
        alternatives sharing a prefix, each an anyOf of 3,000 constants) end
        that request, not the server: 400 before anything was sent, an
        error event and [DONE] in a stream."""
        branch = {"type": "object", "properties": {"a": {"anyOf": [{"const": i} for i in range(3000)]}}, "required": ["a"]}
        schema = {"anyOf": [branch, dict(branch, properties={"a": {"anyOf": [{"const": i} for i in range(3000, 6000)]}})]}
        st, _, body = self.req("POST", "/v1/chat/completions", self.schema_req(schema))
        self.assertEqual(st, 400, body)
        self.assertIn("too ambiguous", body["error"]["message"])
        self.assertEqual(body["error"]["param"], "response_format")
        self.still_serving()
        events = self.srv.stream("/v1/chat/completions", self.schema_req(schema))
        self.assertEqual(events[-1], "[DONE]")
        self.assertIn("too ambiguous", events[-2]["error"]["message"])
        self.still_serving()
        self.assertNotIn("stopping the server", self.srv.log())

    def test_slow_senders_are_cut_off(self):
        """A request trickled in (headers or body, a byte at a time) gets
        408 and its connection closed within SERVE_TIMEOUT (2 s) + 2 s;
        8 of them (SERVE_CONNS) no longer lock everyone else out."""
        def trickle(first, rest):
            s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
            s.sendall(first)
            t0 = time.time()
            got = b""
            try:
                for b in rest:
                    s.sendall(bytes([b]))
                    r, _, _ = select.select([s], [], [], 0.3)
                    if r:
                        break
                while True:  # the answer, to the close
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except (BrokenPipeError, ConnectionResetError):
                pass
            s.close()
            return time.time() - t0, got
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n"
        for first, rest in ((b"GET /health HTTP/1.1\r\n", b"X-Slow: " + b"a" * 100), (head, b"{" + b" " * 48 + b"}")):
            took, got = trickle(first, rest)
            self.assertLess(took, 2 + 2, got)
            self.assertTrue(got.startswith(b"HTTP/1.1 408"), got[:100])
            self.assertIn(b'"request_timeout"', got)
        self.still_serving()
        held = [socket.create_connection(("127.0.0.1", self.srv.port), timeout=10) for _ in range(8)]
        for h in held:
            h.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{")
        t0 = time.time()
        while time.time() - t0 < 8:
            try:
                if self.req("GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        self.assertLess(time.time() - t0, 2 + 2)
        for h in held:
            h.close()
        # the server tears closed connections down on their own threads: a
        # connection arriving before that finishes may find all 8 slots
        # still held (reset); within 2 s it is served
        t0 = time.time()
        while True:
            try:
                st, _, body = self.req("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
                break
            except (ConnectionResetError, BrokenPipeError):  # the reset shows as one or the other, by when it lands
                self.assertLess(time.time() - t0, 2)
                time.sleep(0.1)
        self.assertEqual(st, 200, body)

    def test_connections_per_address(self):
        """Past SERVE_CONNS_PER_IP connections from one address, a request
        is answered 429 in JSON naming the knob (not reset), and the
        connection closed; the address's other connections are unaffected."""
        srv = Server({"SERVE_CONNS": "8", "SERVE_CONNS_PER_IP": "2"}, model=synth_model())
        try:
            held = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(2)]
            time.sleep(0.3)  # both are the server's before the third arrives
            for path, shape in (("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")):
                st, h, body = raw_request(srv.port, "POST", path, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
                self.assertEqual(st, 429, body)
                self.assertEqual(h.get("Connection"), "close")
                self.assertIn("SERVE_CONNS_PER_IP", json.dumps(body))
                if shape == "openai":
                    self.assertEqual(body["error"]["code"], "too_many_connections")
                else:
                    self.assertEqual(body["error"]["type"], "rate_limit_error")
            held[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertTrue(held[0].recv(4096).startswith(b"HTTP/1.1 200"))
            for k in held:
                k.close()
            t0 = time.time()
            while raw_request(srv.port, "GET", "/health")[0] != 200:
                self.assertLess(time.time() - t0, 2)
                time.sleep(0.1)
        finally:
            self.assertEqual(srv.stop(), 0, srv.log())

    def test_fields_clients_send(self):
        """What the openai, langchain-openai and litellm clients send is
        accepted; paths without /v1 work; max_tokens beyond the context is
        clamped to the room left; errors name the field (param) and every
        error body is JSON, 431 included."""
        msgs = [{"role": "user", "content": "hi"}]
        st, _, body = self.req("POST", "/v1/chat/completions", {
            "messages": msgs, "max_tokens": 3, "store": False, "metadata": {"k": "v"}, "reasoning_effort": "low", "service_tier": "auto",
            "user": "u1", "parallel_tool_calls": True, "top_logprobs": 0, "logprobs": False, "stream_options": None, "n": 1,
            "frequency_penalty": 0, "presence_penalty": 0, "seed": 5, "prompt_cache_key": "c", "safety_identifier": "s"})
        self.assertEqual(st, 200, body)
        for method, path, b in (("POST", "/chat/completions", {"messages": msgs, "max_tokens": 2}), ("POST", "/completions", {"prompt": "x", "max_tokens": 2}),
                                ("GET", "/models", None), ("GET", "/v1/models/", None)):
            st, _, body = self.req(method, path, b)
            self.assertEqual(st, 200, (path, body))
        # max_tokens past the context: clamped to what the prompt leaves (tiny-glm5: 256 positions)
        tiny = Server(model=MODEL, env={"CTX": "256"})
        try:
            ids = list(range(100, 140))
            st, _, body = raw_request(tiny.port, "POST", "/v1/completions", {"prompt": ids, "max_tokens": 10 ** 9, "temperature": 1, "seed": 3})
            self.assertEqual(st, 200, body)
            u = body["usage"]
            self.assertTrue(u["completion_tokens"] == 256 - 40 or body["choices"][0]["finish_reason"] == "stop", body)
            self.assertLessEqual(u["prompt_tokens"] + u["completion_tokens"], 256)
        finally:
            self.assertEqual(tiny.stop(), 0)
        st, _, body = self.req("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 5000}]})
        self.assertEqual((st, body["error"]["code"], body["error"]["param"]), (400, "context_length_exceeded", "messages"))
        st, _, body = self.req("POST", "/v1/chat/completions", {"messages": msgs, "temperature": "hot"})
        self.assertEqual((st, body["error"]["param"]), (400, "temperature"))
        st, _, body = self.req("POST", "/v1/chat/completions", {"messages": msgs + [{"role": "user", "content": 5}]})
        self.assertEqual((st, body["error"]["param"]), (400, "messages[1].content"))
        st, _, body = self.req("GET", "/v1/models/other")
        self.assertEqual((st, body["error"]["code"]), (404, "model_not_found"))
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.endswith(b"}}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        s.close()
        self.assertTrue(reply.startswith(b"HTTP/1.1 431"), reply[:100])
        self.assertIn(b"application/json", reply)
        self.assertEqual(json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["type"], "invalid_request_error")
        self.still_serving()

    def test_logprobs_equal_the_reference(self):
        """Token ids as a completions prompt (tiny-glm5's ref.json prompt),
        greedy with logprobs: the tokens are transformers' greedy
        continuation and each logprob is log_softmax of transformers'
        logits (within the oracle's 1e-3), the top 5 its most likely; the
        stream's logprobs are the same entries."""
        ref = json.load(open(os.path.join(MODEL, "ref.json")))
        srv = Server(model=MODEL, env={"CTX": "256"})
        try:
            body = {"prompt": ref["prompt_ids"], "max_tokens": len(ref["greedy_ids"]), "temperature": 0, "logprobs": 5}
            st, _, r = raw_request(srv.port, "POST", "/v1/completions", body)
            self.assertEqual(st, 200, r)
            lp = r["choices"][0]["logprobs"]
            n = r["usage"]["completion_tokens"]
            eos = json.load(open(os.path.join(MODEL, "generation_config.json")))["eos_token_id"]
            self.assertTrue(n == len(ref["greedy_ids"]) or ref["greedy_ids"][n] in eos, (n, ref["greedy_ids"]))  # the reference ran past its stop token
            self.assertGreater(n, 5)
            self.assertEqual(len(lp["token_logprobs"]), n)
            st, _, det = raw_request(srv.port, "POST", "/detokenize", {"tokens": ref["greedy_ids"][:n]})
            self.assertEqual(r["choices"][0]["text"], det["content"])  # transformers' greedy tokens
            for i, (g, row) in enumerate(zip(ref["greedy_ids"][:n], ref["greedy_logits"])):
                mx = max(row)
                lse = mx + math.log(sum(math.exp(x - mx) for x in row))
                self.assertLess(abs(lp["token_logprobs"][i] - (row[g] - lse)), 1e-3, i)
                best5 = sorted(range(len(row)), key=lambda k: -row[k])[:5]
                got5 = sorted(lp["top_logprobs"][i].values(), reverse=True)
                self.assertEqual(len(got5), 5)
                for a, k in zip(got5, best5):
                    self.assertLess(abs(a - (row[k] - lse)), 1e-3, (i, got5))
            # chat: the same per-token entries in the stream as in the whole answer
            chat = {"messages": [{"role": "user", "content": "Name three prime numbers."}], "max_tokens": 12, "temperature": 0,
                    "logprobs": True, "top_logprobs": 3}
            st, _, whole = raw_request(srv.port, "POST", "/v1/chat/completions", chat)
            events = srv.stream("/v1/chat/completions", chat)
            streamed = [e2 for ev in events[:-1] if ev.get("choices") and ev["choices"][0].get("logprobs")
                        for e2 in ev["choices"][0]["logprobs"]["content"]]
            self.assertEqual(streamed, whole["choices"][0]["logprobs"]["content"])
            self.assertEqual(len(streamed), whole["usage"]["completion_tokens"])
            for e2 in streamed:  # greedy: the chosen token is the most likely one
                self.assertEqual(e2["top_logprobs"][0]["token"], e2["token"])
                self.assertEqual(bytes(e2["bytes"]).decode("utf-8", "replace"), e2["token"])
        finally:
            self.assertEqual(srv.stop(), 0)


class KeysAndOrigins(MhdCase):
    """API keys (COLI_API_KEY, COLI_API_KEY_FILE), CORS (COLI_CORS), the
    listening knobs' names, and the introspection endpoints."""

    def test_keys(self):
        d = tempfile.mkdtemp()
        try:
            kf = os.path.join(d, "keys")
            with open(kf, "w") as f:
                f.write("# team keys\n\nfile-key-1\n  file-key-2  \n")
            srv = Server({"COLI_API_KEY": "env-key", "COLI_API_KEY_FILE": kf})
            try:
                msgs = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
                for headers, want in (({}, 401), ({"Authorization": "Bearer wrong"}, 401), ({"Authorization": "Bearer env-key"}, 200),
                                      ({"Authorization": "bearer file-key-2"}, 200), ({"x-api-key": "file-key-1"}, 200),
                                      ({"x-api-key": "env-ke"}, 401), ({"Authorization": "Basic env-key"}, 401)):
                    st, _, body = raw_request(srv.port, "POST", "/v1/chat/completions", msgs, headers)
                    self.assertEqual(st, want, (headers, body))
                    if st == 401:
                        self.assertEqual((body["error"]["type"], body["error"]["code"]), ("authentication_error", "invalid_api_key"))
                for path in ("/v1/models", "/metrics", "/props"):
                    self.assertEqual(raw_request(srv.port, "GET", path)[0], 401, path)
                    self.assertEqual(raw_request(srv.port, "GET", path, headers={"x-api-key": "env-key"})[0], 200, path)
                self.assertEqual(raw_request(srv.port, "GET", "/health")[0], 200)
                self.assertIn("API key required", srv.log())
            finally:
                self.assertEqual(srv.stop(), 0)
            for env, why in (({"COLI_API_KEY": "a b"}, "printable ASCII"), ({"COLI_API_KEY_FILE": os.path.join(d, "none")}, "COLI_API_KEY_FILE"),
                             ({"COLI_API_KEY_FILE": d}, "not a regular file")):
                rc, _, err = run(MODEL, env=dict(env, COLI_PORT="0"), args=["--serve", MODEL])
                self.assertEqual(rc, 2, err)
                self.assertIn(why, err)
            with open(kf, "w") as f:
                f.write("# only comments\n")
            rc, _, err = run(MODEL, env={"COLI_PORT": "0", "COLI_API_KEY_FILE": kf}, args=["--serve", MODEL])
            self.assertEqual(rc, 2, err)
            self.assertIn("holds no API key", err)
        finally:
            shutil.rmtree(d)

    def test_cors(self):
        pre = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
        srv = Server()
        try:  # off by default: no CORS header for anyone
            st, h, _ = raw_request(srv.port, "OPTIONS", "/v1/chat/completions", headers=pre)
            self.assertEqual(st, 204)
            self.assertNotIn("Access-Control-Allow-Origin", h)
            st, h, _ = raw_request(srv.port, "GET", "/v1/models", headers={"Origin": "http://app.example"})
            self.assertNotIn("Access-Control-Allow-Origin", h)
        finally:
            self.assertEqual(srv.stop(), 0)
        srv = Server({"COLI_CORS": "http://app.example, http://other.example", "COLI_API_KEY": "k"})
        try:
            st, h, _ = raw_request(srv.port, "OPTIONS", "/v1/chat/completions", headers=pre)  # preflights carry no key
            self.assertEqual((st, h.get("Access-Control-Allow-Origin")), (204, "http://app.example"))
            self.assertIn("POST", h["Access-Control-Allow-Methods"])
            self.assertIn("authorization", h["Access-Control-Allow-Headers"])
            st, h, _ = raw_request(srv.port, "GET", "/v1/models", headers={"Origin": "http://other.example", "Authorization": "Bearer k"})
            self.assertEqual((st, h.get("Access-Control-Allow-Origin")), (200, "http://other.example"))
            st, h, _ = raw_request(srv.port, "GET", "/v1/models", headers={"Origin": "http://evil.example", "Authorization": "Bearer k"})
            self.assertNotIn("Access-Control-Allow-Origin", h)
            st, h, body = raw_request(srv.port, "GET", "/v1/models", headers={"Origin": "http://app.example"})
            self.assertEqual((st, h.get("Access-Control-Allow-Origin")), (401, "http://app.example"))  # the page can read why
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_listening_names(self):
        """HOST and PORT (a shell's machine name, a platform's port) never
        move the server; COLI_HOST beyond loopback without a key warns."""
        srv = Server({"HOST": "0.0.0.0", "PORT": "1"})
        try:
            self.assertIn("on http://127.0.0.1:", srv.log())
            self.assertIn("HOST=0.0.0.0 is not read", srv.log())
        finally:
            self.assertEqual(srv.stop(), 0)
        rc, _, err = run(MODEL, env={"PORT": "1", "COLI_HOST": "256.0.0.1"}, args=["--serve", MODEL])  # fails fast after the notes
        self.assertIn("PORT=1 is not read: serve mode listens on COLI_PORT (8080)", err)
        srv = Server({"COLI_HOST": "0.0.0.0"})
        try:
            self.assertIn("listens beyond this machine and no API key is set", srv.log())
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_introspection(self):
        """/tokenize gives --tokenize's ids (the tokenizer checked against
        HF tokenizers), /detokenize inverts it, /props and /v1/models/{id}
        describe the model, /metrics counts what was answered."""
        text = "Hello, world! Ünïcödé and\ttabs."
        p = subprocess.run([BIN, "--tokenize", MODEL], input=text.encode(), capture_output=True, env=env_base(), timeout=60)
        want = [int(x) for x in p.stdout.split()]
        srv = Server({"SERVE_MODEL": "tiny"})
        try:
            st, _, body = raw_request(srv.port, "POST", "/tokenize", {"content": text})
            self.assertEqual((st, body["tokens"]), (200, want))
            st, _, body = raw_request(srv.port, "POST", "/tokenize", {"content": text, "with_pieces": True})
            self.assertEqual([t["id"] for t in body["tokens"]], want)
            st, _, body = raw_request(srv.port, "POST", "/detokenize", {"tokens": want})
            self.assertEqual((st, body["content"]), (200, text))
            self.assertEqual(raw_request(srv.port, "POST", "/detokenize", {"tokens": [10 ** 6]})[0], 400)
            self.assertEqual(raw_request(srv.port, "POST", "/tokenize", {"text": "x"})[0], 400)
            st, _, props = raw_request(srv.port, "GET", "/props")
            self.assertEqual((props["model_alias"], props["n_ctx"], props["chat_format"]), ("tiny", 256, "GLM-5"))
            st, _, m = raw_request(srv.port, "GET", "/v1/models/tiny")
            self.assertEqual((st, m["id"]), (200, "tiny"))
            usage = []
            for i in range(3):
                st, _, r = raw_request(srv.port, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi %d" % i}], "max_tokens": 4})
                usage.append(r["usage"])
            raw_request(srv.port, "POST", "/v1/chat/completions", {"bogus": 1})
            st, h, met = raw_request(srv.port, "GET", "/metrics")
            self.assertTrue(h["Content-Type"].startswith("text/plain"))
            vals = {}
            for line in met.splitlines():
                if line and not line.startswith("#"):
                    k, v = line.rsplit(" ", 1)
                    vals[k] = float(v)
            self.assertEqual(vals['colibri_requests_total{endpoint="/v1/chat/completions",status="200"}'], 3)
            self.assertEqual(vals['colibri_requests_total{endpoint="/v1/chat/completions",status="400"}'], 1)
            self.assertEqual(vals["colibri_prompt_tokens_total"], sum(u["prompt_tokens"] for u in usage))
            self.assertEqual(vals["colibri_generated_tokens_total"], sum(u["completion_tokens"] for u in usage))
            self.assertEqual(vals["colibri_prompt_tokens_cached_total"], sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage))
            self.assertEqual(vals['colibri_time_to_first_token_seconds_count'], 3)
            self.assertEqual(vals["colibri_decode_sequences_total"], vals["colibri_decode_forwards_total"])  # one conversation a forward
            self.assertGreaterEqual(vals["colibri_decode_forwards_total"], sum(u["completion_tokens"] for u in usage) - 3)
            self.assertEqual(vals["colibri_queue_length"], 0)
        finally:
            self.assertEqual(srv.stop(), 0)


class Clients(MhdCase):
    """The real clients as agents use them (installed by .ci/run; each
    skips visibly without its package): the openai SDK (logprobs,
    .parse() into a pydantic model, a base URL without /v1, a key and none)
    and langchain-openai, each against a server that requires a key and
    one that does not."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.open = Server({"SERVE_MODEL": "tiny-glm5"})
        cls.keyed = Server({"SERVE_MODEL": "tiny-glm5", "COLI_API_KEY": "sk-test-key"})
        assert cls.open.port and cls.keyed.port, (cls.open.log(), cls.keyed.log())

    @classmethod
    def tearDownClass(cls):
        assert cls.open.stop() == 0 and cls.keyed.stop() == 0

    def need(self, mod):
        try:
            return __import__(mod)
        except ImportError:
            self.skipTest("%s: the %s Python package is not installed (.ci/run installs it)" % (mod.split(".")[0], mod))

    def msgs(self, user):
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def test_openai_sdk(self):
        openai = self.need("openai")
        want, _ = one_shot("Hello", 8)
        for srv, key in ((self.open, "none"), (self.keyed, "sk-test-key")):
            for base in ("/v1", ""):
                c = openai.OpenAI(base_url="http://127.0.0.1:%d%s" % (srv.port, base), api_key=key, max_retries=0)
                r = c.chat.completions.create(model="tiny-glm5", messages=self.msgs("Hello"), max_tokens=8, temperature=0, logprobs=True,
                                              top_logprobs=2, store=False, metadata={"run": "t"}, service_tier="auto", user="u",
                                              reasoning_effort="none", parallel_tool_calls=False)
                self.assertEqual(r.choices[0].message.content, want)
                lp = r.choices[0].logprobs.content
                self.assertEqual(len(lp), r.usage.completion_tokens)
                self.assertTrue(all(t.top_logprobs[0].token == t.token and t.logprob <= 0 for t in lp))
        bad = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.keyed.port, api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            bad.models.list()

    def test_openai_parse(self):
        openai = self.need("openai")
        pydantic = self.need("pydantic")

        class Answer(pydantic.BaseModel):
            n: int
            ok: bool

        c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.keyed.port, api_key="sk-test-key", max_retries=0)
        r = c.chat.completions.parse(model="tiny-glm5", messages=self.msgs("Give me a number"), response_format=Answer, max_tokens=60,
                                     temperature=0.7, seed=3)
        p = r.choices[0].message.parsed
        self.assertIsInstance(p, Answer)
        self.assertEqual(Answer.model_validate_json(r.choices[0].message.content), p)

    def test_langchain_openai(self):
        lc = self.need("langchain_openai")
        want, _ = one_shot("Hello", 8)
        for srv, key in ((self.open, "none"), (self.keyed, "sk-test-key")):
            llm = lc.ChatOpenAI(base_url="http://127.0.0.1:%d/v1" % srv.port, api_key=key, model="tiny-glm5", temperature=0, max_tokens=8,
                                max_retries=0)
            out = llm.invoke([("system", SYSTEM), ("human", "Hello")])
            self.assertEqual(out.content, want)

def coli_kv_ids(path):
    """The token ids a .coli_kv file holds (docs/container.md section 8)."""
    with open(path, "rb") as f:
        raw = f.read()
    n_tok = struct.unpack("<I", raw[24:28])[0]
    return list(struct.unpack("<%di" % n_tok, raw[72:72 + 4 * n_tok]))


def tokenize(text, model=MODEL):
    p = subprocess.run([BIN, "--tokenize", "--jsonl", model], input=(json.dumps(text) + "\n").encode(), env=env_base(), capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [int(x) for x in p.stdout.split()]


class KeptFiles(MhdCase):
    """Issue #32: saved conversations in KV_CACHE_DIR are the users' data. A
    server with a smaller KV_CACHE_GB deleted them at startup, evictions
    deleted them, and a request sharing a prefix with a saved conversation
    took it over and overwrote its file. Now memory is what the budget
    bounds: files are never deleted; only a request that continues a
    conversation (its ids begin with all of the file's) writes its file;
    one that diverges gets a file of its own and the conversation stays
    kept, in memory and on disk. Completions (raw prompts) so the token ids
    are the test's to choose; each server is stopped before the directory
    is read (a file is written after the response)."""

    def setUp(self):
        self.d = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.d)

    def snapshot(self):
        """{file name: SHA-256 of its bytes} of the directory."""
        out = {}
        for name in os.listdir(self.d):
            with open(os.path.join(self.d, name), "rb") as f:
                out[name] = hashlib.sha256(f.read()).hexdigest()
        return out

    def complete(self, srv, prompt, n=3):
        st, r = srv.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
        self.assertEqual(st, 200, r)
        return r

    def serve(self, prompts, env=None):
        """A server on the directory answering prompts (each a string, 3
        tokens, or (string, tokens)); (log, responses)."""
        srv = Server(dict({"KV_CACHE_DIR": self.d}, **(env or {})))
        try:
            rs = [self.complete(srv, *(p if isinstance(p, tuple) else (p,))) for p in prompts]
        finally:
            self.assertEqual(srv.stop(), 0, srv.log())
        return srv.log(), rs

    def test_a_smaller_budget_deletes_nothing(self):
        self.serve(["Alpha story", "Beta story", "Gamma story"])
        saved = self.snapshot()
        self.assertEqual(len(saved), 3, list(saved))
        for budget in ("0.000012", "0"):  # room for one tiny conversation; none
            log, _ = self.serve([], {"KV_CACHE_GB": budget})
            self.assertEqual(self.snapshot(), saved, budget)
            self.assertRegex(log, r"KV_CACHE_DIR: [1-3] older conversations \(.* MB\) beyond KV_CACHE_GB left on disk", budget)
        # evictions while serving free memory only (one slot: each new
        # conversation sets the one before it aside, into the kept store)
        log, _ = self.serve(["Delta story", "Epsilon story", "Zeta story"], {"KV_CACHE_GB": "0.000012", "SERVE_SLOTS": "1"})
        self.assertIn("evicted a kept conversation", log)
        now = self.snapshot()
        self.assertEqual(len(now), 6, list(now))
        self.assertEqual({k: now[k] for k in saved}, saved)

    def test_a_diverging_request_keeps_the_conversation_and_its_file(self):
        base = "Once upon a time"
        _, (x,) = self.serve([(base, 2)])  # two tokens its text gives back as they were (the fixture's replies are noise)
        (name, before), = self.snapshot().items()
        ids = coli_kv_ids(os.path.join(self.d, name))
        # a request sharing a prefix, then the conversation's own prompt again
        # (a prefix of it: it does not continue it either; one token, so its
        # own conversation never shares more with what follows than this one)
        log, (y, again) = self.serve([base + " there was a hill", (base, 1)])
        self.assertGreater(y["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertEqual(again["usage"]["prompt_tokens_details"]["cached_tokens"], again["usage"]["prompt_tokens"] - 1)  # still kept in memory
        files = self.snapshot()
        self.assertEqual(files[name], before)  # never overwritten
        self.assertEqual(len(files), 3, list(files))  # each diverging request in a file of its own
        # a request that continues it (begins with all of its ids) takes the file over
        more = base + x["choices"][0]["text"] + " and more"
        self.assertEqual(tokenize(more)[:len(ids)], ids, "the continuation must begin with the saved ids")
        _, (z,) = self.serve([more])
        self.assertGreaterEqual(z["usage"]["prompt_tokens_details"]["cached_tokens"], len(ids) - 1)
        after = self.snapshot()
        self.assertEqual(set(after), set(files))  # no new file
        grown = coli_kv_ids(os.path.join(self.d, name))
        self.assertEqual(grown[:len(ids)], ids)
        self.assertGreater(len(grown), len(ids))
        self.assertEqual({k: v for k, v in after.items() if k != name}, {k: v for k, v in files.items() if k != name})


class Fronts(MhdCase):
    """Anthropic's Messages API and OpenAI's Responses API map onto the same
    rendering as chat completions: greedy answers through /v1/messages and
    /v1/responses (whole and streamed) equal /v1/chat/completions and the
    one-shot PROMPT output; the real anthropic and openai clients read them,
    with tools, count_tokens, previous_response_id and errors."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.srv = Server({"SERVE_MODEL": "tiny-glm5", "TEMP": "0", "COLI_API_KEY": "sk-k"})
        assert cls.srv.port, cls.srv.log()

    @classmethod
    def tearDownClass(cls):
        assert cls.srv.stop() == 0, cls.srv.log()

    def post(self, path, body, key="sk-k"):
        return raw_request(self.srv.port, "POST", path, body, {"x-api-key": key})

    def sse(self, path, body):
        """The (event, data) pairs of a streamed request."""
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=60)
        c.request("POST", path, body=json.dumps(dict(body, stream=True)), headers={"Content-Type": "application/json", "x-api-key": "sk-k"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        text = r.read().decode()
        c.close()
        out = []
        for block in text.split("\n\n"):
            if not block.strip():
                continue
            ev = [l[7:] for l in block.split("\n") if l.startswith("event: ")]
            data = [l[6:] for l in block.split("\n") if l.startswith("data: ")]
            out.append((ev[0] if ev else None, json.loads(data[0])))
        return out

    def test_greedy_equal_everywhere(self):
        for user, n in (("Hello", 8), ("Name three prime numbers.", 200)):
            want, _ = one_shot(user, n)
            st, _, chat = self.post("/v1/chat/completions", {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
                                                              "max_tokens": n})
            self.assertEqual(chat["choices"][0]["message"]["content"], want)
            st, _, m = self.post("/v1/messages", {"model": "tiny-glm5", "max_tokens": n, "system": SYSTEM, "messages": [{"role": "user", "content": user}]})
            self.assertEqual(st, 200, m)
            self.assertEqual("".join(b["text"] for b in m["content"] if b["type"] == "text"), want)
            self.assertEqual((m["usage"]["input_tokens"] + m["usage"]["cache_read_input_tokens"], m["usage"]["output_tokens"]),
                             (chat["usage"]["prompt_tokens"], chat["usage"]["completion_tokens"]))
            self.assertEqual(m["stop_reason"], {"length": "max_tokens", "stop": "end_turn"}[chat["choices"][0]["finish_reason"]])
            events = self.sse("/v1/messages", {"model": "tiny-glm5", "max_tokens": n, "system": SYSTEM, "messages": [{"role": "user", "content": user}]})
            self.assertEqual([e for e, _ in events][0], "message_start")
            self.assertEqual([e for e, _ in events][-2:], ["message_delta", "message_stop"])
            self.assertEqual("".join(d["delta"]["text"] for e, d in events if e == "content_block_delta" and d["delta"]["type"] == "text_delta"), want)
            st, _, r = self.post("/v1/responses", {"model": "tiny-glm5", "instructions": SYSTEM, "input": user, "max_output_tokens": n})
            self.assertEqual(st, 200, r)
            text = "".join(c["text"] for it in r["output"] if it["type"] == "message" for c in it["content"])
            self.assertEqual(text, want)
            self.assertEqual(r["status"], "incomplete" if chat["choices"][0]["finish_reason"] == "length" else "completed")
            events = self.sse("/v1/responses", {"model": "tiny-glm5", "instructions": SYSTEM, "input": user, "max_output_tokens": n})
            self.assertEqual(events[0][0], "response.created")
            self.assertIn(events[-1][0], ("response.completed", "response.incomplete"))
            self.assertEqual([d["sequence_number"] for _, d in events], list(range(len(events))))
            self.assertEqual("".join(d["delta"] for e, d in events if e == "response.output_text.delta"), want)

    def test_errors_in_each_shape(self):
        st, _, body = self.post("/v1/messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, key="bad")
        self.assertEqual((st, body["type"], body["error"]["type"]), (401, "error", "authentication_error"))
        st, _, body = self.post("/v1/messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]})
        self.assertEqual((st, body["error"]["type"]), (400, "invalid_request_error"))
        self.assertIn("messages[0].content[0]", body["error"]["message"])
        st, _, body = self.post("/v1/responses", {"model": "m", "input": "x", "previous_response_id": "resp_nope"})
        self.assertEqual((st, body["error"]["param"]), (400, "previous_response_id"))
        st, _, body = self.post("/v1/responses", {"model": "m", "input": "x", "tools": [{"type": "web_search"}]})
        self.assertEqual(st, 400, body)
        # the schema overflow through each front: refused before compute, the server goes on
        schema = {"type": "object", "properties": {"a": {"anyOf": [{"const": i} for i in range(5000)]}}, "required": ["a"]}
        st, _, body = self.post("/v1/messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                                                 "output_config": {"format": {"type": "json_schema", "schema": schema}}})
        self.assertEqual((st, body["type"]), (400, "error"))
        st, _, body = self.post("/v1/responses", {"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "a", "schema": schema}}})
        self.assertEqual(st, 400, body)
        self.assertEqual(self.post("/v1/messages", {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]})[0], 200)

    def test_anthropic_sdk(self):
        try:
            import anthropic
        except ImportError:
            self.skipTest("anthropic: the anthropic Python package is not installed (.ci/run installs it)")
        a = anthropic.Anthropic(base_url="http://127.0.0.1:%d" % self.srv.port, api_key="sk-k", max_retries=0)
        want, _ = one_shot("Hello", 8)
        m = a.messages.create(model="tiny-glm5", max_tokens=8, system=SYSTEM, messages=[{"role": "user", "content": "Hello"}])
        self.assertEqual(m.content[0].text, want)
        with a.messages.stream(model="tiny-glm5", max_tokens=8, system=SYSTEM, messages=[{"role": "user", "content": "Hello"}]) as s:
            self.assertEqual("".join(s.text_stream), want)
            self.assertEqual(s.get_final_message().content[0].text, want)
        n = a.messages.count_tokens(model="tiny-glm5", system=SYSTEM, messages=[{"role": "user", "content": "Hello"}]).input_tokens
        self.assertEqual(n, m.usage.input_tokens + m.usage.cache_read_input_tokens)
        tools = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}]
        big = Server(model=synth_model())  # the tools block needs more than tiny-glm5's 256 positions
        try:
            b = anthropic.Anthropic(base_url="http://127.0.0.1:%d" % big.port, api_key="none", max_retries=0)
            m = b.messages.create(model="m", max_tokens=300, messages=[{"role": "user", "content": "Weather?"}], tools=tools,
                                  tool_choice={"type": "tool", "name": "get_weather"})
            uses = [c for c in m.content if c.type == "tool_use"]
            self.assertEqual((m.stop_reason, len(uses), uses[0].name), ("tool_use", 1, "get_weather"))
            self.assertLessEqual(len(uses[0].input["city"]), 8)
            # the call and its result continue the conversation
            m2 = b.messages.create(model="m", max_tokens=4, tools=tools, messages=[
                {"role": "user", "content": "Weather?"}, {"role": "assistant", "content": m.content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}]}])
            self.assertEqual(m2.type, "message")
            self.assertGreater(m2.usage.cache_read_input_tokens, 0)
        finally:
            self.assertEqual(big.stop(), 0)
        with self.assertRaises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url="http://127.0.0.1:%d" % self.srv.port, api_key="bad", max_retries=0).messages.create(
                model="m", max_tokens=2, messages=[{"role": "user", "content": "x"}])

    def test_openai_responses_sdk(self):
        try:
            import openai
        except ImportError:
            self.skipTest("openai: the openai Python package is not installed (.ci/run installs it)")
        o = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.srv.port, api_key="sk-k", max_retries=0)
        want, _ = one_shot("Name three prime numbers.", 200)
        r = o.responses.create(model="tiny-glm5", instructions=SYSTEM, input="Name three prime numbers.", max_output_tokens=200)
        self.assertEqual(r.output_text, want)
        with o.responses.stream(model="tiny-glm5", instructions=SYSTEM, input="Name three prime numbers.", max_output_tokens=200) as s:
            for _ in s:
                pass
            self.assertEqual(s.get_final_response().output_text, want)
        # previous_response_id: the stored conversation continues, its prompt reused from the KV cache
        r2 = o.responses.create(model="tiny-glm5", instructions=SYSTEM, previous_response_id=r.id, input="And two more?", max_output_tokens=4)
        self.assertGreaterEqual(r2.usage.input_tokens_details.cached_tokens, r.usage.input_tokens - 1)
        self.assertGreater(r2.usage.input_tokens, r.usage.input_tokens + r.usage.output_tokens - 1)
        tools = [{"type": "function", "name": "now", "description": "the time", "parameters": {"type": "object", "properties": {}}}]
        big = Server(model=synth_model())  # the tools block needs more than tiny-glm5's 256 positions
        try:
            b = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % big.port, api_key="none", max_retries=0)
            r3 = b.responses.create(model="m", input="Time?", tools=tools, tool_choice="required", parallel_tool_calls=False, max_output_tokens=300)
            calls = [it for it in r3.output if it.type == "function_call"]
            self.assertEqual([(c.name, json.loads(c.arguments)) for c in calls], [("now", {})])
            r4 = b.responses.create(model="m", previous_response_id=r3.id, tools=tools, max_output_tokens=3,
                                    input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "noon"}])
            self.assertIn(r4.status, ("completed", "incomplete"))
            self.assertGreater(r4.usage.input_tokens_details.cached_tokens, 0)
        finally:
            self.assertEqual(big.stop(), 0)
        with self.assertRaises(openai.BadRequestError):
            o.responses.create(model="m", input="x", previous_response_id="resp_unknown")


class Batching(MhdCase):
    """Several requests decoded together (SERVE_SLOTS): each request's
    answer, tokens and log-probabilities alike, is exactly the answer it
    gets alone, whatever else is in the batch, the slot count or the
    thread count: greedy and seeded sampling, different prompt lengths, a
    JSON schema, a forced tool call, and a client that leaves mid-answer;
    forwards then advance several sequences each (/metrics)."""

    TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}}]

    def bodies(self):
        out = []
        for i in range(7):
            b = {"messages": [{"role": "user", "content": "request %d: %s" % (i, "tell me more " * (1 + i))}], "max_tokens": 10 + 2 * i,
                 "logprobs": True, "top_logprobs": 2}
            if i % 2:
                b.update(temperature=0.9, seed=100 + i)
            else:
                b.update(temperature=0)
            if i == 3:
                b["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                    "type": "object", "properties": {"a": {"enum": [1, 22, 333]}, "b": {"type": "string", "maxLength": 4}}, "required": ["a", "b"]}}}
                b["max_tokens"] = 80
            if i == 5:
                b.update(tools=self.TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=120)
            out.append(b)
        return out

    @staticmethod
    def answer(r):
        """What must not change: the message (tool calls without their ids,
        which name the request), finish reason, log-probabilities, tokens."""
        c = r["choices"][0]
        msg = dict(c["message"])
        if msg.get("tool_calls"):
            msg["tool_calls"] = [{k: v for k, v in t.items() if k != "id"} for t in msg["tool_calls"]]
        return msg, c["finish_reason"], c["logprobs"], r["usage"]["completion_tokens"]

    def concurrently(self, srv, bodies, leave=None):
        """The answers of bodies sent at once (leave: the index of a
        streamed request whose client goes away after its first event)."""
        got, errs = {}, []

        def one(i):
            try:
                if i == leave:
                    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
                    c.request("POST", "/v1/chat/completions", body=json.dumps(dict(bodies[i], stream=True, max_tokens=200)),
                              headers={"Content-Type": "application/json"})
                    r = c.getresponse()
                    r.fp.readline()
                    c.close()
                    return
                st, r = srv.request("POST", "/v1/chat/completions", bodies[i])
                got[i] = (st, r)
            except Exception as e:  # noqa: BLE001
                errs.append(repr(e))
        ts = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errs, [])
        return got

    def test_answers_do_not_depend_on_the_batch(self):
        bodies = self.bodies()
        srv = Server({"SERVE_SLOTS": "4"}, model=synth_model())
        try:
            self.assertTrue(srv.port, srv.log())
            alone = []
            for b in bodies:
                st, r = srv.request("POST", "/v1/chat/completions", b)
                self.assertEqual(st, 200, r)
                alone.append(self.answer(r))
            self.assertIsNotNone(alone[5][0].get("tool_calls"), alone[5])
            json.loads(alone[3][0]["content"])
            _, m0 = srv.request("GET", "/metrics")
            for rnd in range(2):
                got = self.concurrently(srv, bodies + [bodies[0]], leave=7 if rnd else None)
                for i in range(len(bodies)):
                    self.assertEqual(got[i][0], 200, got[i][1])
                    self.assertEqual(self.answer(got[i][1]), alone[i], i)
            metric = lambda t, k: float(re.search(r"^%s (\S+)$" % k, t, re.M).group(1))  # noqa: E731
            t0 = time.time()
            while True:  # the client that left: its request ends at the step after the server notices (200 ms)
                _, m1 = srv.request("GET", "/metrics")
                if metric(m1, "colibri_requests_running") == 0 or time.time() - t0 > 5:
                    break
                time.sleep(0.1)
            self.assertEqual(metric(m1, "colibri_requests_running"), 0)
            fw = metric(m1, "colibri_decode_forwards_total") - metric(m0, "colibri_decode_forwards_total")
            sq = metric(m1, "colibri_decode_sequences_total") - metric(m0, "colibri_decode_sequences_total")
            self.assertGreater(sq / fw, 1.5)  # several conversations per forward
        finally:
            self.assertEqual(srv.stop(), 0, srv.log())
        for env in ({"SERVE_SLOTS": "1", "THREADS": "1"}, {"SERVE_SLOTS": "3"}):
            srv = Server(env, model=synth_model())
            try:
                got = self.concurrently(srv, bodies)
                for i in range(len(bodies)):
                    self.assertEqual(self.answer(got[i][1]), alone[i], (env, i))
            finally:
                self.assertEqual(srv.stop(), 0, srv.log())

    def test_slots_from_the_memory_plan(self):
        """SERVE_SLOTS unset: as many slots as fit, up to 8, with all their
        KV caches (and decoding states, a few vocabulary rows each here) in
        a quarter of what the budget leaves after the dense weights, the
        rest of the working set and the reserve (a twentieth); checked
        against the plan line's own figures, with a budget that leaves room
        for three and a half."""
        unit = {"KB": 1e3, "MB": 1e6, "GB": 1e9}
        size = lambda t: float(t.split()[0]) * unit[t.split()[1]]  # noqa: E731
        plan = re.compile(r"plan: budget (\S+ .B) \| resident: dense (\S+ .B), KV (\S+ .B) \((\d+) sequences\), working set (\S+ .B)")
        srv = Server({}, model=synth_model())
        try:
            self.assertTrue(srv.port, srv.log())
            self.assertEqual(srv.request("GET", "/props")[1]["total_slots"], 8)
            self.assertIn("8 slots from the memory plan", srv.log())
            m = plan.search(srv.log())
            self.assertIsNotNone(m, srv.log())
        finally:
            self.assertEqual(srv.stop(), 0, srv.log())
        dense, kv, n, work = size(m.group(2)), size(m.group(3)), int(m.group(4)), size(m.group(5))
        self.assertEqual(n, 8)
        one = kv / n
        ram = (dense + work + 4 * 3.5 * one) / 0.95  # budget - budget/20 - dense - work = 3.5 slots' KV, four times over
        srv = Server({"RAM_GB": "%.9f" % (ram / 1e9)}, model=synth_model())
        try:
            self.assertTrue(srv.port, srv.log())
            self.assertEqual(srv.request("GET", "/props")[1]["total_slots"], 3, srv.log())
            self.assertIn("3 slots from the memory plan", srv.log())
        finally:
            self.assertEqual(srv.stop(), 0, srv.log())
        srv = Server({"SERVE_SLOTS": "2"}, model=synth_model())
        try:
            self.assertEqual(srv.request("GET", "/props")[1]["total_slots"], 2)
            self.assertRegex(srv.log(), r"\(CTX \d+, 2 slots, queue")
        finally:
            self.assertEqual(srv.stop(), 0, srv.log())

    def test_mtp_drafts_in_batches(self):
        """With the MTP head drafting (trained-glm5's, which has learned),
        requests decoded together give each the answer it gets alone,
        sampled ones included; every answer is the one without drafts,
        the sampled ones too; a conversation continued and one that rewinds
        a kept one keep drafting; drafts were kept."""
        model = "tests/fixtures/trained-glm5"
        code = ["def add(a, b):\n", "for i in range(10):\n", "class Point:\n    def __init__(self", "import os\nimport sys\n"]
        bodies = []
        for i, c in enumerate(code + [code[0]]):
            b = {"messages": [{"role": "user", "content": c}], "max_tokens": 24, "logprobs": True, "top_logprobs": 2}
            b.update(temperature=0) if i % 2 == 0 else b.update(temperature=0.8, seed=300 + i)
            bodies.append(b)
        follow = dict(bodies[0], messages=bodies[0]["messages"] + [{"role": "assistant", "content": "x = 1"}, {"role": "user", "content": "y"}])
        bodies.append(follow)
        plain = Server({"SERVE_SLOTS": "1", "DRAFT": "0"}, model=model)
        try:
            nodraft = {}
            for i in range(len(bodies)):
                st, r = plain.request("POST", "/v1/chat/completions", bodies[i])
                self.assertEqual(st, 200, r)
                nodraft[i] = self.answer(r)
        finally:
            self.assertEqual(plain.stop(), 0, plain.log())
        srv = Server({"SERVE_SLOTS": "3", "DRAFT": "2"}, model=model)  # DRAFT=-1 stops drafting on this small model (spec.h)
        try:
            alone = []
            for b in bodies:
                st, r = srv.request("POST", "/v1/chat/completions", b)
                self.assertEqual(st, 200, r)
                alone.append(self.answer(r))
            for i, a in nodraft.items():
                self.assertEqual(alone[i], a, i)
            got = self.concurrently(srv, bodies)
            for i in range(len(bodies)):
                self.assertEqual(got[i][0], 200, got[i][1])
                self.assertEqual(self.answer(got[i][1]), alone[i], i)
        finally:
            self.assertEqual(srv.stop(), 0, srv.log())
        kept = [int(m) for m in re.findall(r"speculation: \d+ drafted, (\d+) accepted", srv.log())]
        self.assertEqual(len(kept), 2 * len(bodies), srv.log())
        self.assertGreater(min(kept[len(bodies):]), 0, srv.log())  # every request of the concurrent round kept drafts


if __name__ == "__main__":
    unittest.main()
