#!/usr/bin/env python3
"""Grammar-constrained generation end to end (GRAMMAR, JSON_SCHEMA): on the
random-weight fixtures, many seeds and temperatures, every answer is
checked by recognizers written here, independent of grammar.h: Python's
json module plus a validator for the schema subset, and regular
expressions for GBNF grammars whose languages are regular. Forced-token
batching gives the same tokens as one forward per token. Bad grammar
files are refused with their line and column."""
import json
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import FIXTURES, run  # noqa: E402

MODELS = [os.path.join(FIXTURES, m) for m in ("tiny-glm5", "tiny-q4")]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 6},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3},
        "ok": {"type": "boolean"},
        "kind": {"const": "user"},
        "note": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def validate(v, s):
    """The schema subset's meaning, written independently of grammar.h."""
    if "const" in s:
        return v == s["const"]
    if "enum" in s:
        return v in s["enum"]
    if "anyOf" in s:
        return any(validate(v, x) for x in s["anyOf"])
    t = s.get("type")
    if t == "object":
        if not isinstance(v, dict):
            return False
        props = s.get("properties", {})
        if any(k not in props for k in v) or any(k not in v for k in s.get("required", [])):
            return False
        keys = [k for k in props if k in v]
        return list(v) == keys and all(validate(v[k], props[k]) for k in v)
    if t == "array":
        return isinstance(v, list) and s.get("minItems", 0) <= len(v) <= s.get("maxItems", 1 << 30) and all(validate(x, s["items"]) for x in v)
    if t == "string":
        return isinstance(v, str) and s.get("minLength", 0) <= len(v) <= s.get("maxLength", 1 << 30)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "null":
        return v is None
    return False


GBNF = [
    ('root ::= "The answer is " [0-9]{1,3} ("." | "!")\n', r"The answer is [0-9]{1,3}[.!]"),
    ('root ::= item{2,4}\nitem ::= "- " [a-z]+ "\\n"\n', r"(- [a-z]+\n){2,4}"),
    ('root ::= "(" [A-Z] ("," " "? [A-Z]){0,5} ")"  # a tuple\n', r"\([A-Z](, ?[A-Z]){0,5}\)"),
    ('root ::= ([^\\n"] | "\\u00e9"){3,12} "\\n"\n', r'[^\n"]{3,12}\n'),
]


class Grammar(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()

    def write(self, name, text):
        p = os.path.join(self.dir, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def gen(self, model, env):
        e = {"PROMPT": "Answer:", "NGEN": "200", "USAGE_SAVE": "0"}
        e.update(env)
        rc, out, err = run(model, e)
        self.assertEqual(rc, 0, err)
        return out, err

    def test_json_schema_outputs_validate(self):
        p = self.write("schema.json", json.dumps(SCHEMA))
        n = 0
        for model in MODELS:
            for seed in range(8):
                for temp in ("0", "0.7", "1.5"):
                    out, err = self.gen(model, {"JSON_SCHEMA": p, "SEED": str(seed), "TEMP": temp, "NGEN": "160"})
                    if "stopped: NGEN" in err:
                        continue  # cut by the token limit: not a whole answer
                    v = json.loads(out)
                    self.assertTrue(validate(v, SCHEMA), (out, model, seed, temp))
                    self.assertRegex(err, r"stopped: (stop token|grammar)\n")
                    n += 1
        self.assertGreater(n, 30)

    def test_gbnf_outputs_match(self):
        for k, (g, rx) in enumerate(GBNF):
            p = self.write("g%d.gbnf" % k, g)
            for model in MODELS:
                for seed in range(6):
                    out, err = self.gen(model, {"GRAMMAR": p, "SEED": str(seed), "TEMP": "1.0"})
                    if "stopped: NGEN" in err:
                        continue
                    self.assertTrue(re.fullmatch(rx, out, re.S), (g, out))
                    self.assertIn("colibri: grammar: ", err)

    def test_forced_batches_change_nothing(self):
        p = self.write("schema2.json", json.dumps(SCHEMA))
        for seed in range(4):
            for temp in ("0", "0.9"):
                runs = [self.gen(MODELS[0], {"JSON_SCHEMA": p, "SEED": str(seed), "TEMP": temp, "TOKENS": "1", "GRAMMAR_BATCH": b})
                        for b in ("0", "1")]
                ids = [[l for l in err.splitlines() if l.startswith("colibri: generated tokens:")] for _, err in runs]
                self.assertEqual(ids[0], ids[1])
                self.assertEqual(runs[0][0], runs[1][0])
                saved = re.search(r"(\d+) forwards saved", runs[1][1])
                self.assertIsNotNone(saved)
        self.assertIn(" 0 forwards saved", runs[0][1])

    def test_refusals(self):
        bad = self.write("bad.gbnf", 'root ::= "a" b\n')
        rc, out, err = run(MODELS[0], {"PROMPT": "x", "GRAMMAR": bad})
        self.assertEqual(rc, 2)
        self.assertIn("GRAMMAR=%s: line 1, column 14: rule b is used but not defined" % bad, err)
        sch = self.write("bad.json", '{"type": "string", "pattern": "a(?=b)"}')
        rc, out, err = run(MODELS[0], {"PROMPT": "x", "JSON_SCHEMA": sch})
        self.assertEqual(rc, 2)
        self.assertIn('"pattern": lookaround (at character 2) is not supported', err)
        rc, out, err = run(MODELS[0], {"PROMPT": "x", "JSON_SCHEMA": sch, "GRAMMAR": bad})
        self.assertEqual(rc, 2)
        self.assertIn("exclude each other", err)
        rc, out, err = run(MODELS[0], {"PROMPT": "x", "GRAMMAR": os.path.join(self.dir, "missing.gbnf")})
        self.assertEqual(rc, 2)
        self.assertIn("missing.gbnf", err)
        # more ways to go on than the recognizer follows (4096): refused before any text (gr_check), saying where, at the start or in a rule
        for lead, where in (("", "at its start"), ('"b" ', 'in its rule "root"')):
            amb = self.write("amb.gbnf", "root ::= %s%s\nx ::= \"a\" | \"\"\n" % (lead, "x " * 4100))
            rc, out, err = run(MODELS[0], {"PROMPT": "x", "GRAMMAR": amb})
            self.assertEqual(rc, 2)
            self.assertIn("GRAMMAR=%s: the grammar is too ambiguous to follow: %s the text can continue in more than 4096 ways at once" % (amb, where), err)

    def test_grammar_completes(self):
        p = self.write("done.gbnf", 'root ::= "yes" | "no"\n')
        out, err = self.gen(MODELS[0], {"GRAMMAR": p, "TEMP": "0"})
        self.assertIn(out, ("yes", "no"))
        self.assertRegex(err, r"stopped: (stop token|grammar)\n")


def byte_decoder(model):
    """tokenizer.json's byte-level pieces back to bytes (GPT-2's mapping)."""
    with open(os.path.join(model, "tokenizer.json")) as f:
        tk = json.load(f)
    vocab = {i: k for k, i in tk["model"]["vocab"].items()}
    for a in tk["added_tokens"]:
        vocab[a["id"]] = a["content"]
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    dec = {chr(c): b for b, c in zip(bs, cs)}
    return lambda i: bytes(dec[ch] for ch in vocab[i])


def lit(text):
    return "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "\\u%04x" % ord(c) if ord(c) < 0x10000 else "\\U%08x" % ord(c)
                   for c in text)


class Drafts(unittest.TestCase):
    """GRAMMAR_DRAFT=1: the text a grammar forces is drafted and verified
    in one forward; the output is the unconstrained model's, token for
    token, whether the drafts are kept (a grammar spelling the model's own
    answer) or thrown away (one it does not follow)."""

    def ids(self, env):
        rc, out, err = run(MODELS[0], env)
        self.assertEqual(rc, 0, err)
        line = [l for l in err.splitlines() if l.startswith("colibri: generated tokens:")][0]
        return [int(x) for x in line.split(":", 2)[2].split()], out, err

    def test_same_tokens_kept_or_not(self):
        raw = byte_decoder(MODELS[0])
        d = tempfile.mkdtemp()
        kept = proposed = 0
        for prompt in ("Hello", "The", "a b c"):
            for temp in ("0", "1.0"):
                base = {"PROMPT": prompt, "TEMP": temp, "SEED": "3", "NGEN": "40", "TOKENS": "1", "CHAT_TEMPLATE": "0", "USAGE_SAVE": "0"}
                ids, out, _ = self.ids(base)
                b = b"".join(raw(i) for i in ids)
                own = ""
                for cut in range(len(b), 0, -1):  # the model's own answer, as far as it is text
                    try:
                        own = b[:cut].decode()
                        break
                    except UnicodeDecodeError:
                        pass
                first = raw(ids[0]).decode("utf-8", "replace")
                for k, g in enumerate(('root ::= "%s" .*\n' % lit(own), 'root ::= "%s" "the quick brown fox jumps" .*\n' % lit(first))):
                    p = os.path.join(d, "g%d.gbnf" % k)
                    with open(p, "w") as f:
                        f.write(g)
                    ids2, out2, err2 = self.ids(dict(base, GRAMMAR=p, GRAMMAR_DRAFT="1"))
                    self.assertEqual(ids2, ids, (prompt, temp, g))
                    self.assertEqual(out2, out)
                    m = re.search(r"grammar drafts: (\d+) proposed, (\d+) accepted", err2)
                    self.assertIsNotNone(m, err2)
                    proposed += int(m.group(1))
                    kept += int(m.group(2))
        self.assertGreater(proposed, kept)  # drafts thrown away
        self.assertGreater(kept, 0)         # and drafts kept


if __name__ == "__main__":
    unittest.main()
