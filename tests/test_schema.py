#!/usr/bin/env python3
"""JSON Schema compiled to grammars (grammar.h's gr_json_schema), checked
against the specification's own examples and against a validator written
by others:

- the official JSON Schema Test Suite (drafts 7 and 2020-12, the required
  keyword files and the optional ones for what the engine enforces: the
  formats it knows and ECMAScript regular expressions, as the `jsonschema`
  package's source distribution ships them): for every test whose schema
  compiles, the grammar accepts the test's JSON text if and only if the
  test says it is valid. Zero disagreements; the share of schemas that
  compile is printed per file. One exception, by design: 2020-12 makes
  `format` an annotation unless a vocabulary asks for assertion, and its
  format.json says so with invalid dates and addresses that are valid
  instances; the engine asserts the formats it knows (a generator should
  write a date where the schema asks for one, as peers' structured output
  does), so there a valid value may be refused by its format. Those are
  counted and printed; an invalid value accepted is still a failure.
- random schemas from the supported keywords against random values,
  compared with the `jsonschema` validator (>= 10^4 pairs here;
  SCHEMA_PAIRS for more).

A JSON text is written as the engine writes JSON: compact, integral
numbers as integers. The grammar puts an object's named properties first,
in schema order, so each object is tried in the key orders the schema
names (each `properties` list's order and the `required` names it does
not list, then the other keys as they come)
and in its own: "accepted" means some such order is accepted. Key order
never changes validity, so an accepted invalid value or a valid value
refused in every order is a wrong answer. Values with numbers beyond the
grammar's number syntax (more than 16 digits) are counted, not compared.

Driver: build/test/test_grammar --schema (next to $COLIBRI). Both parts
say SKIP (tags schema-suite, schema-diff) where what they need is missing:
the suite is looked for in $JSON_SCHEMA_SUITE (a directory holding
draft7/ and draft2020-12/), /opt/wheels and pip's download of the sdist.
"""
import decimal
import glob
import itertools
import json
import math
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN_DIR = os.path.dirname(os.environ.get("COLIBRI", os.path.join(ROOT, "build/test/colibri")))
DRIVER = os.path.join(BIN_DIR, "test_grammar")
NUMBER = re.compile(r"^-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?([eE][-+]?[0-9]{1,3})?$")
PLAIN = re.compile(r"^-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?$")
# the suite's required files whose keywords are all outside JSON values' syntax
# (remote references need a server): not run
NOT_RUN = {"refRemote.json"}
# the optional files whose keywords the engine enforces (the formats of
# gr_formats_, and pattern's ECMAScript semantics)
OPTIONAL = ["optional/ecmascript-regex.json", "optional/non-bmp-regex.json"] + ["optional/format/%s.json" % f for f in (
    "date", "time", "date-time", "duration", "uuid", "email", "hostname", "ipv4", "ipv6", "uri", "unknown")]
# files where format is an annotation (see the docstring): a valid value refused by its format is counted, not failed
FORMAT_ANNOTATION = {"draft2020-12/format.json"}


class OutOfRange(Exception):
    pass


def num_text(v):
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
        v = int(v)
    t = repr(v) if isinstance(v, float) else str(v)
    if not NUMBER.match(t):
        raise OutOfRange(t)
    return t


def key_orders(schema):
    """The key orders the grammar writes: each schema object's properties in
    order, then the required names it does not list."""
    out = []

    def walk(x, parent_key=None):
        if isinstance(x, dict):
            if parent_key != "properties":
                props = x.get("properties") if isinstance(x.get("properties"), dict) else {}
                req = x.get("required") if isinstance(x.get("required"), list) else []
                o = list(props) + [r for r in req if isinstance(r, str) and r not in props]
                if o and o not in out:
                    out.append(o)
                groups = []
                if isinstance(x.get("allOf"), list):  # merged branches: their properties in order, then their required names
                    groups.append([x] + [b for b in x["allOf"] if isinstance(b, dict)])
                for comb in ("anyOf", "oneOf"):  # beside object keywords: x merged with each branch
                    if isinstance(x.get(comb), list):
                        groups += [[x, b] for b in x[comb] if isinstance(b, dict)]
                for bs in groups:
                    mp = []
                    for b in bs:
                        mp += [k for k in (b.get("properties") if isinstance(b.get("properties"), dict) else {}) if k not in mp]
                    mo = mp + [r for b in bs for r in (b.get("required") if isinstance(b.get("required"), list) else []) if isinstance(r, str) and r not in mp]
                    mo = [k for i, k in enumerate(mo) if k not in mo[:i]]
                    if mo and mo not in out:
                        out.append(mo)
            for k, v in x.items():
                walk(v, k)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(schema)
    return out


def texts(v, orders, cap=64):
    """The compact texts of v in each key order the schema names (capped);
    a number also as a plain decimal (how the engine writes a number that
    has bounds) when that differs and fits the number syntax."""
    if isinstance(v, bool) or v is None:
        return [json.dumps(v)]
    if isinstance(v, (int, float)):
        out = []
        try:
            out.append(num_text(v))
        except OutOfRange:
            pass
        if isinstance(v, float) and math.isfinite(v):
            plain = format(decimal.Decimal(repr(v)), "f")
            if plain not in out and PLAIN.match(plain):
                out.append(plain)
        if not out:
            raise OutOfRange(repr(v))
        return out
    if isinstance(v, str):
        json.dumps(v, ensure_ascii=False).encode("utf-8")  # lone surrogates fail here
        return [json.dumps(v, ensure_ascii=False)]
    if isinstance(v, list):
        parts = [texts(x, orders, cap) for x in v]
        out = []
        for combo in itertools.islice(itertools.product(*parts), cap):
            out.append("[" + ",".join(combo) + "]")
        return out
    keys = list(v)
    perms = [keys]
    for o in orders:
        p = [k for k in o if k in v] + [k for k in keys if k not in o]
        if p not in perms:
            perms.append(p)
    out = []
    for p in perms:
        parts = [[json.dumps(k, ensure_ascii=False) + ":" + t for t in texts(v[k], orders, cap)] for k in p]
        for combo in itertools.islice(itertools.product(*parts), cap):
            out.append("{" + ",".join(combo) + "}")
    return out[:cap * 4]


def run_driver(cases):
    """cases: [(schema, [text...])] -> per case None (refused: why) or [bool...]."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump([{"schema": s, "texts": t} for s, t in cases], f, ensure_ascii=False)
        path = f.name
    try:
        r = subprocess.run([DRIVER, "--schema", path], capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(path)
    if r.returncode != 0:
        raise AssertionError("driver failed: %s" % r.stderr[-2000:])
    lines = r.stdout.split("\n")
    out = []
    for (s, t), line in zip(cases, lines):
        if line.startswith("refused: "):
            out.append(line[len("refused: "):])
        else:
            bits = line.split(" ")[2] if line.count(" ") >= 2 else ""
            assert len(bits) == len(t), (line, len(t))
            out.append([b == "1" for b in bits])
    assert len(out) == len(cases), (len(out), len(cases), r.stderr[-2000:])
    return out


def find_suite():
    d = os.environ.get("JSON_SCHEMA_SUITE")
    if d and os.path.isdir(os.path.join(d, "draft7")):
        return d, None
    cache = os.path.join(tempfile.gettempdir(), "colibri-json-schema-suite")
    if os.path.isdir(os.path.join(cache, "draft7")):
        return cache, None
    sdists = sorted(glob.glob("/opt/wheels/jsonschema-*.tar.gz"))
    if not sdists:
        dl = tempfile.mkdtemp()
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--retries", "0", "--timeout", "10", "-d", dl, "jsonschema"],
                           capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            pass
        sdists = sorted(glob.glob(os.path.join(dl, "jsonschema-*.tar.gz")))
    if not sdists:
        return None, "no jsonschema sdist in $JSON_SCHEMA_SUITE, /opt/wheels or from pip download"
    with tarfile.open(sdists[-1]) as t:
        for m in t.getmembers():
            parts = m.name.split("/")
            if len(parts) >= 4 and parts[1:3] == ["json", "tests"] and parts[3] in ("draft7", "draft2020-12") and m.isfile():
                dest = os.path.join(cache, *parts[3:])
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with t.extractfile(m) as src, open(dest, "wb") as out:
                    out.write(src.read())
    if not os.path.isdir(os.path.join(cache, "draft7")):
        return None, "the sdist has no json/tests/draft7"
    return cache, None


def compare(cases_in):
    """cases_in: [(schema, [(value, valid)...], label)] -> (compiled, compared, disagreements, out_of_range)."""
    cases, index = [], []
    out_of_range = 0
    for schema, tests, label in cases_in:
        orders = key_orders(schema)
        flat, spans = [], []
        for value, valid in tests:
            try:
                ts = texts(value, orders)
            except (OutOfRange, UnicodeEncodeError):
                out_of_range += 1
                continue
            spans.append((len(flat), len(flat) + len(ts), valid, value))
            flat.extend(ts)
        cases.append((schema, flat))
        index.append((spans, label))
    results = run_driver(cases)
    compiled, compared, wrong = 0, 0, []
    for (schema, _), (spans, label), res in zip(cases, index, results):
        if isinstance(res, str):
            continue
        compiled += 1
        for a, b, valid, value in spans:
            got = any(res[a:b])
            compared += 1
            if got != valid:
                wrong.append("%s: schema %s, value %s: valid %s, grammar %s" % (label, json.dumps(schema)[:300], json.dumps(value)[:200], valid, got))
    return compiled, compared, wrong, out_of_range


@unittest.skipUnless(os.path.exists(DRIVER), "schema-suite: %s not built" % DRIVER)
class Suite(unittest.TestCase):
    def test_suite(self):
        d, why = find_suite()
        if not d:
            self.skipTest("schema-suite: " + why)
        total_wrong, tot, narrowed = [], [0, 0, 0], 0
        for draft, uri in (("draft7", "http://json-schema.org/draft-07/schema#"), ("draft2020-12", "https://json-schema.org/draft/2020-12/schema")):
            files = sorted(glob.glob(os.path.join(d, draft, "*.json")))
            self.assertTrue(files, draft)
            files += [os.path.join(d, draft, f) for f in OPTIONAL if os.path.exists(os.path.join(d, draft, f))]
            print("%s:" % draft)
            for path in files:
                name = os.path.relpath(path, os.path.join(d, draft))
                if name in NOT_RUN:
                    continue
                with open(path, encoding="utf-8") as f:
                    groups = json.load(f)
                cases = []
                for g in groups:
                    schema = g["schema"]
                    if isinstance(schema, dict) and "$schema" not in schema:
                        schema = dict(schema, **{"$schema": uri})
                    cases.append((schema, [(t["data"], t["valid"]) for t in g["tests"]], "%s/%s %s" % (draft, name, g["description"])))
                compiled, compared, wrong, oor = compare(cases)
                if "%s/%s" % (draft, name) in FORMAT_ANNOTATION:
                    kept = [w for w in wrong if not w.endswith("valid True, grammar False")]
                    narrowed += len(wrong) - len(kept)
                    if len(wrong) > len(kept):
                        print("  %s: %d valid values refused by their format (asserted here, an annotation in this draft)" % (name, len(wrong) - len(kept)))
                    wrong = kept
                total_wrong += wrong
                tot[0] += compiled
                tot[1] += len(cases)
                tot[2] += compared
                print("  %-36s %3d/%-3d schemas compile, %3d values compared%s%s" % (name, compiled, len(cases), compared, ", %d WRONG" % len(wrong) if wrong else "",
                                                              ", %d values beyond the number syntax" % oor if oor else ""))
        print("schema-suite: %d of %d schemas compile, %d values compared, %d wrong" % (tot[0], tot[1], tot[2], len(total_wrong)))
        for w in total_wrong[:40]:
            print("WRONG", w)
        self.assertEqual(total_wrong, [])


def rand_schema(r, depth=0):
    """A random schema of the supported keywords; at the top, sometimes
    behind a $ref to $defs, or a recursive one."""
    if depth == 0 and r.random() < 0.15:
        s = {"$defs": {"a": rand_schema(r, 1)}, "$ref": "#/$defs/a"}
        if r.random() < 0.3:  # beside $ref (2020-12): the target of those types
            s["type"] = r.choice(["string", "integer", ["array", "null"]])
        return s
    if depth == 0 and r.random() < 0.1:
        return {"$defs": {"t": {"type": ["object", "null"], "properties": {"a": {"$ref": "#/$defs/t"}, "b": rand_schema(r, 2)},
                              "additionalProperties": r.choice([True, False])}}, "$ref": "#/$defs/t"}
    kinds = ["type", "enum", "const", "anyOf", "oneOf", "object", "array", "string", "true", "false", "allOf", "integer", "number"]
    k = r.choice(kinds if depth < 3 else kinds[:3] + ["string", "true"])
    if k == "true":
        return r.choice([True, {}])
    if k == "false":
        return False
    if k == "type":
        ts = r.sample(["null", "boolean", "integer", "number", "string", "array", "object"], r.randint(1, 3))
        s = {"type": ts if len(ts) > 1 or r.random() < 0.5 else ts[0]}
        if r.random() < 0.5:
            s.update(rand_type_kw(r, depth))
        return s
    if k in ("enum", "const"):
        vals = [rand_value(r, 1) for _ in range(r.randint(1, 4))]
        s = {"enum": vals} if k == "enum" else {"const": vals[0]}
        if r.random() < 0.3:
            s["type"] = r.choice(["string", "integer", "number", "array", "null"])
        return s
    if k in ("anyOf", "oneOf"):
        if k == "oneOf" and r.random() < 0.4:
            return {"oneOf": [r.choice([{"const": rand_value(r, 2)}, {"enum": [rand_value(r, 2) for _ in range(2)]}]) for _ in range(r.randint(1, 3))]}
        if k == "oneOf" and r.random() < 0.3:  # types only, overlapping
            return {"oneOf": [r.choice([{"type": r.sample(["null", "boolean", "integer", "number", "string", "array", "object"], r.randint(1, 2))}, True, False])
                              for _ in range(r.randint(1, 3))]}
        if k == "oneOf" and r.random() < 0.3:  # objects: a discriminator, or names required here and forbidden there
            names = ["a", "b", "c"]
            br = []
            for i in range(r.randint(1, 3)):
                props = {"k": {"const": r.choice([i, "a", i + 1])}} if r.random() < 0.5 else {}
                props.update({n: rand_schema(r, depth + 2) for n in r.sample(names, r.randint(0, 2))})
                b = {"type": "object", "properties": props, "required": r.sample(list(props) or names, r.randint(0, min(2, len(props) or 1)))}
                if r.random() < 0.5:
                    b["additionalProperties"] = False
                br.append(b)
            return {"oneOf": br}
        if k == "oneOf" and r.random() < 0.3:  # constants beside typed branches
            return {"oneOf": [{"enum": [rand_value(r, 2) for _ in range(2)]}] + [dict({"type": t}, **rand_type_kw(r, depth, t if t != "integer" else None))
                                                                                 for t in r.sample(["integer", "string", "array"], r.randint(1, 2))]}
        if k == "oneOf":
            ts = r.sample(["null", "boolean", "integer", "string", "array", "object"], r.randint(1, 3))
            s = {"oneOf": [dict({"type": t}, **rand_type_kw(r, depth)) for t in ts]}
            if r.random() < 0.3:
                s["type"] = r.choice(["integer", "number", "string", ["object", "array"]])
            return s
        s = {"anyOf": [rand_schema(r, depth + 1) for _ in range(r.randint(1, 3))]}
        if r.random() < 0.3:  # beside a type: each branch of those types
            s["type"] = r.sample(["null", "boolean", "integer", "number", "string", "array", "object"], r.randint(1, 3))
        if r.random() < 0.3:  # beside object keywords: merged with each branch
            s["anyOf"] = [{"required": r.sample(["a", "b", "c"], r.randint(0, 2)), "properties": {n: rand_schema(r, depth + 2) for n in r.sample(["b", "k"], r.randint(0, 1))}}
                          for _ in range(r.randint(1, 3))]
            s["properties"] = {n: rand_schema(r, depth + 2) for n in r.sample(["a", "c"], r.randint(0, 2))}
            s["required"] = r.sample(["a", "k"], r.randint(0, 1))
        return s
    if k == "number" and r.random() < 0.3:
        return {"type": r.choice(["number", "integer", ["integer", "string"]]), "multipleOf": r.choice([1, 2, 3, 7, 12, 0.5, 0.1, 0.01, 1e-3])}
    if k == "number":
        s = {"type": "number"}
        for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if r.random() < 0.4:
                s[kw] = r.choice([r.randint(-20, 20), round(r.uniform(-20, 20), r.randint(0, 3)), r.choice([0, 2.5, -0.25, 1.0])])
        return s
    if k == "integer":
        s = {"type": "integer"}
        for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if r.random() < 0.4:
                s[kw] = r.choice([r.randint(-1200, 1200), r.uniform(-1200, 1200), r.randint(-10**15, 10**15)])
        return s
    if k == "allOf":
        if r.random() < 0.4:  # object schemas to merge
            names = ["a", "b", "c", "k"]
            br = []
            for _ in range(r.randint(2, 3)):
                b = {"properties": {n: r.choice([{}, rand_schema(r, depth + 2)]) for n in r.sample(names, r.randint(0, 2))},
                     "required": r.sample(names, r.randint(0, 2))}
                if r.random() < 0.3:
                    b["type"] = r.choice(["object", ["object", "null"], "string"])
                if r.random() < 0.2:
                    b["maxProperties"] = r.randint(1, 3)
                br.append(b)
            return {"allOf": br}
        return {"allOf": [rand_schema(r, depth + 1)] + [{"description": "x"}] * r.randint(0, 2)}
    return dict({"type": k}, **rand_type_kw(r, depth, k))


def rand_type_kw(r, depth, t=None):
    s = {}
    if t in (None, "object") and r.random() < 0.7:
        names = r.sample(["a", "b", "ab", "c", "é"], r.randint(0, 3))
        s["properties"] = {n: rand_schema(r, depth + 1) for n in names}
        s["required"] = [n for n in names + ["z"] if r.random() < 0.4]
        if r.random() < 0.6:
            s["additionalProperties"] = r.choice([False, True, rand_schema(r, depth + 1)])
        if r.random() < 0.2:
            s["propertyNames"] = r.choice([{"maxLength": 1}, {"pattern": "^[ab]"}, {"enum": ["a", "b", "k"]}, {"type": "string", "minLength": 2}, False])
            if r.random() < 0.5:
                s.pop("properties", None)
        if r.random() < 0.3:
            lo = r.randint(0, 3)
            if r.random() < 0.6:
                s["minProperties"] = lo
            if r.random() < 0.6:
                s["maxProperties"] = lo + r.randint(0, 2)
    if t in (None, "array") and r.random() < 0.7:
        if r.random() < 0.4:
            s["prefixItems"] = [rand_schema(r, depth + 1) for _ in range(r.randint(1, 2))]
        if r.random() < 0.7:
            s["items"] = rand_schema(r, depth + 1)
        lo = r.randint(0, 3)
        if r.random() < 0.5:
            s["minItems"] = lo
        if r.random() < 0.5:
            s["maxItems"] = lo + r.randint(0, 2)
    if t in (None, "string") and r.random() < 0.7:
        lo = r.randint(0, 3)
        if r.random() < 0.6:
            s["minLength"] = lo
        if r.random() < 0.6:
            s["maxLength"] = lo + r.randint(0, 2)
        if r.random() < 0.4:
            s["pattern"] = r.choice(PATTERNS + ["^[ab][a-z\u00e9]*$", "^z?[^\\n]*$", "^a[b\"]{1,}$"])
    return s


# patterns on which ECMAScript and Python's re (jsonschema's) agree for the
# random values' characters (no \w: Python's takes é; $ only at the end,
# where the validator below reads it as ECMAScript does)
PATTERNS = ["a", "^a", "^[ab]+", 'b"', "^(?:a|\u00e9)*z", "\\\\", "[^a]", "^.{2}", "\u00e9{2,}", "^(ab|z)?b", '^[a-z"]{1,3}\n',
            "a.*z", "^(?:[^\\n]|\\n)?\"", "^(?:a|b)|z", "z?b{0,2}"]


def rand_value(r, depth=0):
    k = r.randint(0, 7 if depth < 3 else 4)
    if k == 0:
        return None
    if k == 1:
        return r.choice([True, False])
    if k == 2:
        return r.choice([0, 1, -3, 12, 2.5, 1.0, -0.25, r.randint(-1300, 1300), r.randint(-10**15, 10**15), r.randint(-99, 99)])
    if k == 3 or k == 4:
        return "".join(r.choice("abé\n\"\\z") for _ in range(r.randint(0, 4)))
    if k == 5 or k == 6:
        return [rand_value(r, depth + 1) for _ in range(r.randint(0, 4))]
    return {r.choice(["a", "b", "ab", "c", "é", "z", "q", "k"]): rand_value(r, depth + 1) for _ in range(r.randint(0, 4))}


@unittest.skipUnless(os.path.exists(DRIVER), "schema-diff: %s not built" % DRIVER)
class Differential(unittest.TestCase):
    def test_random(self):
        try:
            import jsonschema
        except ImportError:
            self.skipTest("schema-diff: the jsonschema package is not installed")
        pairs = int(os.environ.get("SCHEMA_PAIRS", "12000"))
        r = random.Random(int(os.environ.get("SCHEMA_SEED", "34")))
        # pattern as ECMAScript says: a final $ matches at the end only (Python's also before a final newline)
        def ecma_pattern(validator, pattern, instance, schema):
            if validator.is_type(instance, "string") and not re.search(pattern[:-1] + "\\Z" if pattern.endswith("$") else pattern, instance):
                yield jsonschema.ValidationError("%r does not match %r" % (instance, pattern))
        Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": ecma_pattern})
        cases, n, refused = [], 0, 0
        while n < pairs:
            schema = rand_schema(r)
            v = Validator(schema)
            vals = [rand_value(r) for _ in range(20)]
            # values drawn from the schema's own constants too, so that acceptance is not rare
            vals += [x for x in (schema.get("enum", []) if isinstance(schema, dict) else [])]
            cases.append((schema, [(x, v.is_valid(x)) for x in vals], "random"))
            n += len(vals)
        compiled, compared, wrong, _ = compare(cases)
        refused = len(cases) - compiled
        print("differential: %d schemas (%d compile, %d refused), %d pairs" % (len(cases), compiled, refused, n))
        for w in wrong[:20]:
            print("WRONG", w)
        self.assertEqual(wrong, [])
        self.assertGreater(compiled, len(cases) // 2)


@unittest.skipUnless(os.path.exists(DRIVER), "schema-ints: %s not built" % DRIVER)
class IntegerBounds(unittest.TestCase):
    """minimum/maximum/exclusive* on integers become digit-range grammars:
    every integer near each bound and at each digit-count boundary, and
    random ones, against the bounds' definition (no validator needed)."""

    def test_bounds(self):
        import math
        r = random.Random(34)
        cases = []
        for _ in range(400):
            s = {"type": "integer"}
            scale = r.choice([10, 1000, 10**6, 10**15])
            for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                if r.random() < 0.5:
                    s[kw] = r.choice([r.randint(-scale, scale), round(r.uniform(-scale, scale), 2)])
            lo, hi = -(10**16 - 1), 10**16 - 1
            if "minimum" in s:
                lo = max(lo, math.ceil(s["minimum"]))
            if "exclusiveMinimum" in s:
                lo = max(lo, math.floor(s["exclusiveMinimum"]) + 1)
            if "maximum" in s:
                hi = min(hi, math.floor(s["maximum"]))
            if "exclusiveMaximum" in s:
                hi = min(hi, math.ceil(s["exclusiveMaximum"]) - 1)
            vals = set()
            for b in (lo, hi, 0, 1, -1):
                if abs(b) < 10**16:
                    vals.update(v for v in range(b - 3, b + 4) if abs(v) < 10**16)
            for p in range(1, 16):
                vals.update(v for v in (10**p - 1, 10**p, -(10**p - 1), -(10**p)))
            vals.update(r.randint(-scale * 2, scale * 2) for _ in range(30))
            vals = sorted(vals)
            cases.append((s, [(v, lo <= v <= hi) for v in vals], "integer bounds"))
        compiled, compared, wrong, _ = compare(cases)
        print("integer bounds: %d schemas (%d compile), %d values" % (len(cases), compiled, compared))
        for w in wrong[:20]:
            print("WRONG", w)
        self.assertEqual(wrong, [])
        self.assertEqual(compiled + sum(1 for s, t, _ in cases if not any(v for _, v in t)), len(cases))


if __name__ == "__main__":
    unittest.main(verbosity=2)
