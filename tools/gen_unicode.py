#!/usr/bin/env python3
"""Writes tok_unicode.h: the character classes of the pre-tokenizer regexes.

The regex (\\p{L}, \\p{N}, \\s) runs in Hugging Face `tokenizers` through the
Oniguruma engine (crate onig 6.5, bundled Oniguruma 6.9.10), whose tables are
Unicode 16.0.0. Measured with tokenizers 0.23.3 over every code point:
\\p{L} has 141,028 members (it includes Todhri U+105C0..U+105F3, new in 16.0),
\\p{N} 1,911, \\s 25. So the tables target Unicode 16.0.0:

  L  general category L*  (Lu Ll Lt Lm Lo)
  N  general category N*  (Nd Nl No)
  S  Oniguruma's \\s for Unicode: U+0009..U+000D, U+0085 and categories
     Zs Zl Zp (the White_Space property; note Python's str.isspace() also
     counts U+001C..U+001F, the regex does not)

A second table serves DeepSeek-V3's regex: M (\\p{M}, Mn Mc Me), P (\\p{P}, Pc Pd Ps Pe
Pi Pf Po), SYM (\\p{S}, Sm Sc Sk So), all of them OTHER in the first table; test_tok.c
compares it with tokenizers' own dump the same way.

A third table serves Kimi K2's regex (tiktoken): the letter kinds its classes
intersect, UPPER ([\p{Lu}\p{Lt}]), LOWER (\p{Ll}), OTHERL ([\p{Lm}\p{Lo}]); and a
range list of \p{Han}, the Han *script* (Script=Han, not Script_Extensions: U+3001
is Common and not in it; U+2E80 radicals, U+3007 and U+3021 numerals, U+3005 are).
tiktoken 0.14 splits with Rust's fancy-regex over regex-syntax, whose tables are
Unicode 16.0.0 as well (measured over every code point; \p{L} 141,028 as above).
Python's unicodedata has no script property, so Han comes from the `regex`
module (pinned in tools/requirements-oracle.txt; 2026.11.19 carries Unicode
17.0.0), cut to the code points Unicode 16.0.0 assigns: a code point new in 17.0
had Script=Unknown in 16.0. tests/test_tok.c compares these with tiktoken's own
dump (tests/fixtures/tokenizer-kimi/vectors.json, "classes").

Data source: the standard `unicodedata` module. Its Unicode version follows
the Python release (3.11: 14.0.0, 3.13: 15.1.0, 3.14: 16.0.0), so this script
refuses any version other than 16.0.0. On an older Python, the PyPI backport
`unicodedata2==16.0.0` (the same module, newer data) is used when importable;
nothing else is needed. tests/test_tok.c compares the generated table with a
per-code-point dump taken from tokenizers itself (tests/fixtures/tokenizer/
vectors.json, "unicode"), so any disagreement fails the parity test.

Output format: TOK_UNI_N_BREAKS breakpoints, each (first code point << 2 |
class); a code point has the class of the last breakpoint at or below it.
Lookups below U+10000 use a two-stage copy instead: tok_uni_bmp1[cp >> 8]
picks one of the distinct 256-code-point blocks in tok_uni_bmp2 (2 bits per
code point); tok_uni_latin1 repeats U+0000..U+00FF one byte each.

Usage: tools/gen_unicode.py [--out tok_unicode.h] [--check]
"""
import argparse
import os
import sys

TARGET = "16.0.0"


def unicode_db():
    import unicodedata
    if unicodedata.unidata_version == TARGET:
        return unicodedata
    try:
        import unicodedata2
    except ImportError:
        unicodedata2 = None
    if unicodedata2 is not None and unicodedata2.unidata_version == TARGET:
        return unicodedata2
    sys.exit("gen_unicode.py: need Unicode %s data: this Python's unicodedata is %s; "
             "run with Python 3.14 or install unicodedata2==%s" % (TARGET, unicodedata.unidata_version, TARGET))


OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3


def classify(ud, cp):
    cat = ud.category(chr(cp))
    if cat[0] == "L":
        return LETTER
    if cat[0] == "N":
        return NUMBER
    if cat in ("Zs", "Zl", "Zp") or 0x09 <= cp <= 0x0D or cp == 0x85:
        return SPACE
    return OTHER


# The second table: what DeepSeek-V3's pre-tokenizer regex adds (\p{M},
# \p{P}, \p{S}); every such code point is OTHER in the first table.
NONE2, MARK, PUNCT, SYMBOL = 0, 1, 2, 3


def classify2(ud, cp):
    cat = ud.category(chr(cp))
    return {"M": MARK, "P": PUNCT, "S": SYMBOL}.get(cat[0], NONE2)


# The third table: Kimi's letter kinds (every such code point is L in the first table).
NOTL, UPPER, LOWER, OTHERL = 0, 1, 2, 3


def classify3(ud, cp):
    cat = ud.category(chr(cp))
    return {"Lu": UPPER, "Lt": UPPER, "Ll": LOWER, "Lm": OTHERL, "Lo": OTHERL}.get(cat, NOTL)


def han_ranges(ud):
    """[first, last] ranges of Script=Han among the code points Unicode 16.0 assigns."""
    try:
        import regex
    except ImportError:
        sys.exit("gen_unicode.py: the Han table needs the `regex` module (tools/requirements-oracle.txt)")
    han = regex.compile(r"\p{Han}")
    out = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or ud.category(chr(cp)) == "Cn" or not han.match(chr(cp)):
            continue
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def han_table(rs):
    lines = ["#define TOK_HAN_N_RANGES %d" % len(rs), "",
             "/* \\p{Han} (the Han script) as [first, last] ranges, ascending. */",
             "static const uint32_t tok_han_ranges[TOK_HAN_N_RANGES][2] = {"]
    for i in range(0, len(rs), 4):
        lines.append("    " + " ".join("{0x%x, 0x%x}," % (a, b) for a, b in rs[i:i + 4]))
    lines += [
        "};",
        "",
        "/* 1 if cp is in \\p{Han}, else 0: the CJK block directly, else a binary search. */",
        "static inline int tok_uni_han(uint32_t cp) {",
        "    if (cp >= 0x4e00 && cp <= 0x9fff) return 1;",
        "    if (cp < 0x%x) return 0;" % rs[0][0],
        "    int lo = 0, hi = TOK_HAN_N_RANGES - 1;",
        "    while (lo < hi) {",
        "        int mid = (lo + hi + 1) >> 1;",
        "        if (tok_han_ranges[mid][0] <= cp) lo = mid;",
        "        else hi = mid - 1;",
        "    }",
        "    return cp >= tok_han_ranges[lo][0] && cp <= tok_han_ranges[lo][1];",
        "}",
        "",
    ]
    return lines


def breakpoints(ud, cls):
    out, prev = [], None
    for cp in range(0x110000):
        c = 0 if 0xD800 <= cp <= 0xDFFF else cls(ud, cp)
        if c != prev:
            out.append((cp, c))
            prev = c
    return out


def table(ud, cls, name, nbreaks):
    """The C tables and lookup function `name` of a 2-bit classification."""
    br = breakpoints(ud, cls)
    lines = ["#define %s %d" % (nbreaks, len(br)), ""]
    lines.append("/* Class of every code point below 256 (the fast path). */")
    lines.append("static const uint8_t %s_latin1[256] = {" % name)
    lat = [str(cls(ud, cp)) for cp in range(256)]
    for i in range(0, 256, 32):
        lines.append("    " + ", ".join(lat[i:i + 32]) + ",")
    lines += ["};", "", "static const uint32_t %s_breaks[%s] = {" % (name, nbreaks)]
    vals = ["0x%x" % (cp << 2 | c) for cp, c in br]
    for i in range(0, len(vals), 8):
        lines.append("    " + ", ".join(vals[i:i + 8]) + ",")
    lines += ["};", ""]
    blocks, stage1 = {}, []
    for b in range(256):
        cl = [0 if 0xD800 <= cp <= 0xDFFF else cls(ud, cp) for cp in range(b * 256, b * 256 + 256)]
        packed = bytes(cl[i] | cl[i + 1] << 2 | cl[i + 2] << 4 | cl[i + 3] << 6 for i in range(0, 256, 4))
        stage1.append(blocks.setdefault(packed, len(blocks)))
    lines.append("/* Block index of each 256-code-point block of the BMP. */")
    lines.append("static const uint8_t %s_bmp1[256] = {" % name)
    for i in range(0, 256, 32):
        lines.append("    " + ", ".join(str(x) for x in stage1[i:i + 32]) + ",")
    lines += ["};", "", "/* %d distinct blocks, 64 bytes each, 4 code points a byte (low bits first). */" % len(blocks),
              "static const uint8_t %s_bmp2[%d] = {" % (name, 64 * len(blocks))]
    flat = b"".join(sorted(blocks, key=blocks.get))
    for i in range(0, len(flat), 16):
        lines.append("    " + ", ".join("0x%02x" % x for x in flat[i:i + 16]) + ",")
    lines += [
        "};",
        "",
        "/* Class of code point cp (0..0x10FFFF): a table below U+10000, else a",
        " * binary search over the breakpoints. */",
        "static inline int %s(uint32_t cp) {" % ("tok_uni_class" if name == "tok_uni" else name + "_class"),
        "    if (cp < 0x10000) return (%s_bmp2[%s_bmp1[cp >> 8] * 64 + ((cp & 255) >> 2)] >> ((cp & 3) * 2)) & 3;" % (name, name),
        "    uint32_t key = cp << 2 | 3;",
        "    int lo = 0, hi = %s - 1;" % nbreaks,
        "    while (lo < hi) {",
        "        int mid = (lo + hi + 1) >> 1;",
        "        if (%s_breaks[mid] <= key) lo = mid;" % name,
        "        else hi = mid - 1;",
        "    }",
        "    return (int)(%s_breaks[lo] & 3);" % name,
        "}",
        "",
    ]
    return lines, br


def counts_of(br, n=4):
    counts = [0] * n
    for i, (cp, c) in enumerate(br):
        end = br[i + 1][0] if i + 1 < len(br) else 0x110000
        counts[c] += end - cp
    return counts


def render(ud):
    t1, br1 = table(ud, classify, "tok_uni", "TOK_UNI_N_BREAKS")
    t2, br2 = table(ud, classify2, "tok_uni2", "TOK_UNI2_N_BREAKS")
    t3, br3 = table(ud, classify3, "tok_uni3", "TOK_UNI3_N_BREAKS")
    hr = han_ranges(ud)
    c1, c2, c3 = counts_of(br1), counts_of(br2), counts_of(br3)
    lines = [
        "/* tok_unicode.h — generated by tools/gen_unicode.py; do not edit.",
        " * Character classes of the pre-tokenizer regexes (GLM-5's, DeepSeek-V3's,",
        " * Kimi K2's) as Oniguruma (inside Hugging Face tokenizers) and regex-syntax",
        " * (inside tiktoken) define them, Unicode %s:" % ud.unidata_version,
        " * tok_uni_class: L = \\p{L} (%d code points), N = \\p{N} (%d), S = \\s (%d);" % (c1[1], c1[2], c1[3]),
        " * tok_uni2_class: M = \\p{M} (%d), P = \\p{P} (%d), SYM = \\p{S} (%d), each" % (c2[1], c2[2], c2[3]),
        " * OTHER in the first; tok_uni3_class: UPPER = [\\p{Lu}\\p{Lt}] (%d)," % c3[1],
        " * LOWER = \\p{Ll} (%d), OTHERL = [\\p{Lm}\\p{Lo}] (%d), each L in the first;" % (c3[2], c3[3]),
        " * tok_uni_han: \\p{Han}, the Han script (%d). *_breaks[i] = first code" % sum(b - a + 1 for a, b in hr),
        " * point << 2 | class; a code point has the class of the last breakpoint at",
        " * or below it. */",
        "#ifndef COLI_TOK_UNICODE_H",
        "#define COLI_TOK_UNICODE_H",
        "",
        "#include <stdint.h>",
        "",
        '#define TOK_UNICODE_VERSION "%s"' % ud.unidata_version,
        "enum { TOK_UNI_OTHER = 0, TOK_UNI_L = 1, TOK_UNI_N = 2, TOK_UNI_S = 3 };",
        "enum { TOK_UNI2_NONE = 0, TOK_UNI2_M = 1, TOK_UNI2_P = 2, TOK_UNI2_SYM = 3 };",
        "enum { TOK_UNI3_NOTL = 0, TOK_UNI3_UPPER = 1, TOK_UNI3_LOWER = 2, TOK_UNI3_OTHERL = 3 };",
    ]
    lines += t1 + t2 + t3 + han_table(hr) + ["#endif", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tok_unicode.h"))
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    a = ap.parse_args()
    text = render(unicode_db())
    if a.check:
        with open(a.out, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit("%s differs from what gen_unicode.py generates" % a.out)
        print("%s is up to date" % a.out)
        return
    with open(a.out, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
