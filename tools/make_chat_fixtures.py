#!/usr/bin/env python3
"""Writes tests/fixtures/chat_templates.json: conversations rendered by real chat templates.

    /work/venv/bin/python tools/make_chat_fixtures.py FORMAT=TEMPLATE.jinja ... [-o OUT]

FORMAT is the colibri chat format a template belongs to (deepseek3, deepseek-r1,
deepseek-v3.1, kimi-k2, deepseek-r1-jan); TEMPLATE is the template text as shipped with the model (the
chat_template of tokenizer_config.json, or chat_template.jinja), kept outside the
repository: the fixture records its file name and sha256, never its text.

Every conversation is rendered with transformers' own renderer
(transformers.utils.chat_template_utils.render_jinja_template: the sandboxed jinja2
environment with trim_blocks and lstrip_blocks, raise_exception, tojson and
strftime_now, exactly what apply_chat_template(tokenize=False) runs), with the
special tokens the models' tokenizer_config.json name as bos_token / eos_token.
A conversation the template refuses (raises) is left out for that template.

The committed fixture was written from these public copies (saved outside the
repository; their sha256 is in the fixture):
  deepseek3     deepseek-ai-DeepSeek-V3.jinja: deepseek-ai/DeepSeek-V3's template (no
                </think> anywhere; calls only for a null content; V3-0324 ships the
                same), as huggingface.js's inference-provider table carries it
  deepseek-r1-jan deepseek-ai-DeepSeek-R1-2501.jinja: deepseek-ai/DeepSeek-R1's first
                template (January 2025; V3's structure, earlier replies cut at
                </think>, generation prompt <｜Assistant｜>), as huggingface.js's
                jinja tests carry it
  deepseek-r1   ggml-org/llama.cpp models/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja
                (generation prompt <｜Assistant｜><think>\n)
  deepseek-v3.1 ggml-org/llama.cpp models/templates/deepseek-ai-DeepSeek-V3.1.jinja
  kimi-k2       ggml-org/llama.cpp models/templates/moonshotai-Kimi-K2.jinja

Three kinds of case:
  render  whole OpenAI message lists (system or not, several turns, assistant
          history with reasoning, tool calls, tool results, unicode), with tools
          and thinking on or off: the text serve mode must render;
  prompt  one optional system turn and one user turn (PROMPT / SYSTEM): the text,
          and for the DeepSeek formats the token ids that the committed DeepSeek
          tokenizer fixture gives it (tokenizers, add_special_tokens=False, which
          is what apply_chat_template(tokenize=True) encodes);
  turn    a follow-up user turn of --chat mode: the conversation after turn one
          is the first prompt plus the generated reply; the text to append is the
          template's rendering of the two-turn conversation minus the rendering of
          the first exchange, minus the end-of-turn token generation stopped at
          (not kept in the KV cache) — so it starts with that token.
"""
import argparse
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FORMATS = {  # the special tokens each family's tokenizer_config.json names; the end-of-turn token
    "deepseek3": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-r1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-v3.1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "kimi-k2": ("[BOS]", "[EOS]", "<|im_end|>"),
    "deepseek-r1-jan": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city, now",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                                                     "days": {"type": "integer"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "síntesis", "parameters": {"type": "object", "properties": {}}}},
]


def call(i, name, args):
    return {"id": "call_%d" % i, "type": "function", "function": {"name": name, "arguments": args}}


def conversations():
    """(name, messages, tools, think) for the render cases."""
    U = {"role": "user", "content": "What is 2+2?"}
    S = {"role": "system", "content": "You are terse."}
    A = {"role": "assistant", "content": "4"}
    C = []
    for think in (False, True):
        t = "-think" if think else ""
        C.append(("user" + t, [U], None, think))
        C.append(("system-user" + t, [S, U], None, think))
        C.append(("multi-turn" + t, [S, U, A, {"role": "user", "content": "And 3+3?"}], None, think))
        C.append(("reasoning-history" + t,
                  [U, {"role": "assistant", "content": "<think>add them</think>4", "reasoning_content": "add them"},
                   {"role": "user", "content": "Sure?"}], None, think))
        calls = [call(0, "get_weather", '{"city": "Paris", "days": 2}'), call(1, "get_weather", '{"city": "Köln"}')]
        C.append(("tool-call-and-results" + t,
                  [S, {"role": "user", "content": "Weather in Paris and Köln?"},
                   {"role": "assistant", "content": None, "tool_calls": calls},
                   {"role": "tool", "tool_call_id": "call_0", "content": "18C sunny"},
                   {"role": "tool", "tool_call_id": "call_1", "content": "12C rain"}], TOOLS, think))
        C.append(("tool-round-trip" + t,
                  [{"role": "user", "content": "Paris?"},
                   {"role": "assistant", "content": "Checking.", "tool_calls": [call(0, "get_weather", '{"city": "Paris"}')]},
                   {"role": "tool", "tool_call_id": "call_0", "content": "18C"},
                   {"role": "assistant", "content": "It is 18C."},
                   {"role": "user", "content": "Thanks! 谢谢 🙂"}], TOOLS, think))
    C.append(("two-systems", [S, {"role": "system", "content": "Answer in French."}, U], None, False))
    C.append(("unicode", [{"role": "system", "content": "Réponds en français — s'il te plaît."},
                          {"role": "user", "content": "日本語とEnglish, emoji 🧪, tabs\tand\nnewlines"}], None, False))
    C.append(("empty-user", [{"role": "user", "content": ""}], None, False))
    C.append(("text-parts", [{"role": "user", "content": [{"type": "text", "text": "part one, "},
                                                          {"type": "text", "text": "part two"}]}], None, False))
    C.append(("tools-no-calls", [U], TOOLS, False))
    return C


PROMPTS = [  # (system, user, think) for PROMPT / SYSTEM
    (None, "Hello", False), ("Be brief.", "Hello", False), (None, "Hello", True), ("Be brief.", "Hello", True),
    ("", "", False), ("Système: réponds 日本語", "Unicode ✓ 🙂 tab\tend\n", False),
]

TURNS = [  # (system, user1, reply, user2, think)
    (None, "Hi", "Hello! How can I help?", "Tell me a joke.", False),
    ("Be brief.", "Hi", "Hi.", "Ünïcode 🙂?", False),
    (None, "Hi", "Hello!", "Again", True),
]


def detect(t):
    """chat.h chat_fmt_of_template, restated: the markers colibri recognises a
    template by, outside Jinja comments (found by jinja2's own lexer)."""
    import jinja2
    t = "".join(v for _, kind, v in jinja2.Environment().lex(t) if not kind.startswith("comment"))
    if "<|im_user|>" in t and "<|im_assistant|>" in t:
        return "kimi-k2"
    if "<｜User｜>" in t and "<｜Assistant｜>" in t:
        if "<｜Assistant｜></think>" in t:
            return "deepseek-v3.1"
        return "deepseek-r1" if "<｜Assistant｜><think>" in t else "deepseek-r1-jan" if "</think>" in t else "deepseek3"
    return "glm5" if "[gMASK]" in t and "<|assistant|>" in t else None


def render(template, fmt, messages, tools, think, gen=True):
    from transformers.utils.chat_template_utils import render_jinja_template
    bos, eos, _ = FORMATS[fmt]
    out, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=template,
                                   add_generation_prompt=gen, bos_token=bos, eos_token=eos,
                                   enable_thinking=think)
    return out[0]


def try_render(*a, **k):
    try:
        return render(*a, **k)
    except Exception as e:  # the template refuses this conversation
        return e


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("templates", nargs="+", metavar="FORMAT=TEMPLATE")
    ap.add_argument("-o", "--out", default=os.path.join(ROOT, "tests", "fixtures", "chat_templates.json"))
    a = ap.parse_args()
    import jinja2
    import tokenizers
    import transformers
    ds_tok = tokenizers.Tokenizer.from_file(os.path.join(ROOT, "tests", "fixtures", "tokenizer", "deepseek.json"))
    doc = {"generator": "tools/make_chat_fixtures.py",
           "versions": {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
                        "tokenizers": tokenizers.__version__},
           "ids_tokenizer": "tests/fixtures/tokenizer/deepseek.json",
           "templates": [], "render": [], "prompt": [], "turn": []}
    for spec in a.templates:
        fmt, _, path = spec.partition("=")
        if fmt not in FORMATS or not path:
            sys.exit("%s: expected FORMAT=TEMPLATE with FORMAT one of %s" % (spec, ", ".join(FORMATS)))
        raw = open(path, "rb").read()
        template = raw.decode("utf-8")
        if detect(template) != fmt:
            sys.exit("%s: chat.h's markers would take this template for %s, not %s" % (path, detect(template), fmt))
        doc["templates"].append({"format": fmt, "file": os.path.basename(path),
                                 "sha256": hashlib.sha256(raw).hexdigest()})
        for name, msgs, tools, think in conversations():
            text = try_render(template, fmt, msgs, tools, think)
            if isinstance(text, Exception):
                print("%s: %s: refused by the template (%s), left out" % (fmt, name, text), file=sys.stderr)
                continue
            case = {"format": fmt, "name": name, "messages": msgs, "think": think, "text": text}
            if tools:
                case["tools"] = tools
            doc["render"].append(case)
        for system, user, think in PROMPTS:
            msgs = ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": user}]
            text = render(template, fmt, msgs, None, think)
            case = {"format": fmt, "system": system, "user": user, "think": think, "text": text}
            if fmt.startswith("deepseek"):
                case["ids"] = ds_tok.encode(text, add_special_tokens=False).ids
            doc["prompt"].append(case)
        end = FORMATS[fmt][2]
        for system, u1, reply, u2, think in TURNS:
            head = [{"role": "system", "content": system}] if system is not None else []
            first = head + [{"role": "user", "content": u1}, {"role": "assistant", "content": reply}]
            done = render(template, fmt, first, None, think, gen=False)
            full = render(template, fmt, first + [{"role": "user", "content": u2}], None, think)
            if not done.endswith(end) or not full.startswith(done):
                sys.exit("%s: the two-turn rendering does not extend the first exchange" % fmt)
            case = {"format": fmt, "user": u2, "think": think, "text": full[len(done) - len(end):]}
            if fmt.startswith("deepseek"):
                case["ids"] = ds_tok.encode(case["text"], add_special_tokens=False).ids
            doc["turn"].append(case)
    with open(a.out, "w", encoding="utf-8", newline="\n") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("%s: %d render, %d prompt, %d turn cases" % (a.out, len(doc["render"]), len(doc["prompt"]), len(doc["turn"])))


if __name__ == "__main__":
    main()
