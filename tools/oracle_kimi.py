#!/usr/bin/env python3
"""Builds the Kimi K2 tokenizer fixture and its parity vectors with tiktoken.

Kimi K2 / K2.5 ship no tokenizer.json: a tiktoken.model (one line per token,
base64 of its bytes, a space, its rank, which is its id), tokenizer_config.json
(added_tokens_decoder: the special tokens by id) and tokenization_kimi.py, which
builds a tiktoken Encoding with Kimi's own split pattern (KIMI_PATTERN below)
and the special tokens on the 256 + 2 ids that follow the ranks (a name from
added_tokens_decoder, else "<|reserved_token_<id>|>"). Its encode() passes
allowed_special="all" (special-token text becomes the special id) after cutting
the text into chunks of at most 400,000 characters and, inside those, runs of
at most 25,000 consecutive str.isspace() or non-space characters (the
workaround for tiktoken issue 195); kimi_encode below does the same.

Writes (paths relative to the repository root):
  tests/fixtures/tokenizer-kimi/tiktoken.model         a synthetic Kimi-shaped vocabulary: the
                                                       256 bytes, BPE merges trained on the
                                                       shared training text with Kimi's split,
                                                       and a few tokens BPE cannot reach
  tests/fixtures/tokenizer-kimi/tokenizer_config.json  Kimi K2's special-token names at their
                                                       offsets after the ranks
  tests/fixtures/tokenizer-kimi/vectors.json           tiktoken's ids and decodes for the shared
                                                       corpus (tests/fixtures/tokenizer/corpus.jsonl)
                                                       plus Kimi-specific lines ("extra"), their
                                                       pre-token splits ("pretokens"), two texts past
                                                       the 400,000-character chunk ("long": id count
                                                       and hash), and the character classes as
                                                       tiktoken's regex engine sees them ("classes")

Usage: tools/oracle_kimi.py [--root DIR] [--check]
Needs tiktoken 0.14.0 and tokenizers 0.23.3 (tools/requirements-oracle.txt); no network.
"""
import argparse
import base64
import filecmp
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_tokenizer as ot  # noqa: E402

# tokenization_kimi.py's pat_str (moonshotai/Kimi-K2-Instruct; the same in K2.5).
KIMI_PATTERN = "|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
N_SPECIAL = 256 + 2  # num_reserved_special_tokens + 2 in tokenization_kimi.py
# Kimi K2's named special tokens, as offsets from the first special id (163584 in the real
# model, whose added_tokens_decoder names these ids; the other ids are reserved tokens).
KIMI_SPECIALS = {
    0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
    6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
    11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
    14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>",
    254: "[UNK]", 255: "[PAD]",
}
N_MERGED = 3700        # trained tokens after the 256 bytes
UNREACHABLE = ["zqxjv", " Zqxjv", "\u4e2d\u6587\u6d4b\u8bd5\u5b57", "\U0001f600\U0001f600"]  # whole pieces only

MAX_CHUNK = 400_000
MAX_RUN = 25_000


# ---------------------------------------------------------------- vocabulary

def train_ranks():
    """The 256 bytes (rank = byte), then tokens in the order a byte-level BPE trained with
    Kimi's split learned them, then the UNREACHABLE tokens: a list of bytes, index = rank."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(KIMI_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256 + N_MERGED, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    texts = ot.synthetic_text(4242, 2_000_000)
    with open(ot.TRAIN_TEXT, encoding="utf-8") as f:
        texts += f.read().split("\n")
    tok.train_from_iterator(texts, trainer)
    obj = json.loads(tok.to_str())
    inv = {byte_cp(b): b for b in range(256)}
    ranks = [bytes([b]) for b in range(256)]
    seen = set(ranks)
    for a, b in obj["model"]["merges"]:
        t = bytes(inv[ord(c)] for c in a + b)
        if t not in seen:
            seen.add(t)
            ranks.append(t)
    for u in UNREACHABLE:
        t = u.encode("utf-8")
        if t in seen:
            sys.exit("unreachable token %r was learned" % u)
        ranks.append(t)
    if len(ranks) != 256 + N_MERGED + len(UNREACHABLE):
        sys.exit("trained %d tokens, wanted %d" % (len(ranks), 256 + N_MERGED + len(UNREACHABLE)))
    return ranks


def byte_cp(b):
    """GPT-2's byte alphabet, which tokenizers' ByteLevel uses: printable Latin-1 bytes are
    their own code point, the others 256 + their rank among the rest."""
    keep = lambda x: 33 <= x <= 126 or 161 <= x <= 172 or x >= 174
    return b if keep(b) else 256 + sum(1 for x in range(b) if not keep(x))


def specials_of(n_base):
    """tokenization_kimi.py's special-token map: name -> id."""
    return {KIMI_SPECIALS.get(i, "<|reserved_token_%d|>" % (n_base + i)): n_base + i for i in range(N_SPECIAL)}


def write_files(directory, ranks):
    with open(os.path.join(directory, "tiktoken.model"), "w", encoding="ascii", newline="\n") as f:
        for r, t in enumerate(ranks):
            f.write("%s %d\n" % (base64.b64encode(t).decode("ascii"), r))
    n = len(ranks)
    cfg = {
        "added_tokens_decoder": {str(n + i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                               "single_word": False, "special": True}
                                 for i, c in sorted(KIMI_SPECIALS.items())},
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]",
        "eos_token": "[EOS]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "model_max_length": 1048576,
        "tokenizer_class": "TikTokenTokenizer",
    }
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
        f.write("\n")


# ---------------------------------------------------------------- reference encoding

def encoding(ranks):
    import tiktoken
    return tiktoken.Encoding("kimi-fixture", pat_str=KIMI_PATTERN, mergeable_ranks={t: r for r, t in enumerate(ranks)},
                             special_tokens=specials_of(len(ranks)))


def chunks(text):
    """The pieces tokenization_kimi.py's encode() hands to tiktoken one by one."""
    out = []
    for i in range(0, len(text), MAX_CHUNK):
        s = text[i:i + MAX_CHUNK]
        start, run, space = 0, 0, s[:1].isspace()
        for k, ch in enumerate(s):
            sp = ch.isspace()
            if sp != space:
                run, space = 1, sp
            else:
                run += 1
                if run > MAX_RUN:
                    out.append(s[start:k])
                    start, run = k, 1
        out.append(s[start:])
    return out


def kimi_encode(enc, text):
    ids = []
    for c in chunks(text):
        ids += enc.encode(c, allowed_special="all")
    return ids


def kimi_lines():
    """What Kimi's split and tiktoken do differently from the GLM corpus lines' concerns:
    case runs, Han (a script, so also radicals, 〇 and 々), marks, contractions glued to
    words, Kimi's special tokens, and runs longer than the 25,000-character cut."""
    sp = list(KIMI_SPECIALS.values())
    L = ["HELLOworld", "helloWORLD", "HeLLo WoRLD", "ABCdefGHI", "iPhone XRs", "McDONALD's", "ǅemal ǅ ǈ ǋa",
         "ΑΒΓαβγ ΔΕΖ", "ÀÉÎõü", "한A 한a A한 a한", "ᄀᄁ A", "ʰʱʲ Aʰ aʰ ʰA", "e\u0301\u0302A \u0301A \u0301a \u0301",
         "A\u0301 a\u0301 1\u0301 \u0301\u0301", "x\u20dd \u20ddA", "中文English混合Text", "中文123文字", "1〇2〇〇3",
         "〇一二", "々々 々A A々", "⺀⺁ ⺀A !⺀", "⼀⼁ 中⼀", "\u3001\u3002中\u3001", "㐀䶿 𠀀𪛟 \U000323af",
         "中's 中's A'S A'ſ x'LL x'Ll", "DON'T don't Don'T", "CAN'T'S", "I'M I'm i'M", "ABC'd abc'D", "'s's 's",
         "日本語のテキスト、カタカナ", "ひらがなカタカナ漢字", "한국어 문장입니다", "Ελληνικά ΚΕΦΑΛΑΙΑ", "ПРИВЕТ мир Привет",
         "تجربة\u064e", "हिन्दी", "ภาษาไทย", " \u00a0x \u3000中", "\u1680A", "tab\t中\ttab", "中\n\n文", "  中  ",
         "zqxjv", " Zqxjv", "zqxjvzqxjv", "\u4e2d\u6587\u6d4b\u8bd5\u5b57", "\U0001f600\U0001f600", "\U0001f600\U0001f600\U0001f600",
         "<|reserved_token_%d|>", "[BOS]", "[EOS]x[EOS]", "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|>",
         "<|im_system|>system<|im_middle|>You are Kimi.<|im_end|>", "<|im_end", "<|im_end|", "[BOS", "[[BOS]]", "<<|im_end|>>",
         " <|im_middle|> ", "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
         "<|endoftext|> <|user|>", "[UNK][PAD][EOT]"]
    L = [x.replace("%d", "4010") for x in L]  # a reserved id of this fixture (n_base + 50)
    r = ot.Rng(9090)
    pool = sp + ["A", "a", "中", "1", " ", "\n", "<|", "|>", "[", "]", "'s", "x", "\u0301", "〇", "한", "😀"]
    for _ in range(150):
        L.append("".join(r.pick(pool) for _ in range(1 + r.n(10))))
    caps = ["A", "B", "Z", "a", "b", "z", "ǅ", "ʰ", "한", "\u0301", "'", "s", "S", "ſ", "t", "l", "L", " ", "中", "1", "!", "\n", "é", "É"]
    for _ in range(300):
        L.append("".join(r.pick(caps) for _ in range(1 + r.n(14))))
    out = [x.encode("utf-8") for x in L]
    # Past the 25,000-character runs: letters, Han, spaces (str.isspace differs from \s on U+001C..1F).
    out += [("a" * 25_001).encode(), ("ab" * 13_000).encode(), ("中" * 25_010).encode(), (" " * 25_003 + "x").encode(),
            ("x" + "\x1c" * 25_002 + "y").encode(), ("<|im_end|>" * 2_600).encode(), ("1" * 25_001 + " 2").encode()]
    return out


def class_ranges():
    """The classes Kimi's split uses, as tiktoken's regex engine sees them: per class the
    [first, last] ranges of its members (surrogates left out); and str.isspace()'s set."""
    import tiktoken
    byte_ranks = {bytes([b]): b for b in range(256)}
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    text = "".join(map(chr, cps))
    out = {}
    for name, pat in (("Han", r"\p{Han}"), ("Upper", r"[\p{Lu}\p{Lt}]"), ("Lower", r"\p{Ll}"), ("OtherL", r"[\p{Lm}\p{Lo}]")):
        enc = tiktoken.Encoding("classes", pat_str=pat, mergeable_ranks=byte_ranks, special_tokens={})
        members = sorted(map(ord, bytes(enc.encode(text, disallowed_special=())).decode("utf-8")))
        out[name] = _ranges(members)
    out["isspace"] = _ranges([c for c in cps if chr(c).isspace()])
    return out


def _ranges(members):
    rs = []
    for c in members:
        if rs and rs[-1][1] == c - 1:
            rs[-1][1] = c
        else:
            rs.append([c, c])
    return rs


def kimi_pieces(texts):
    """Kimi's pre-tokens of each text (the whole text: no special tokens, no cuts), as byte
    lengths. tiktoken does not expose its split, so the `regex` module makes it (with each
    class intersection [X&&[^\\p{Han}]] spelled (?:(?!\\p{Han})[X]), which its default mode
    needs) and tiktoken then confirms it: given a vocabulary of the 256 bytes and every
    piece, encode_ordinary must return exactly one token per piece (a piece it cut
    differently would not be a token, and its bytes would not merge back into these ones)."""
    import regex
    import tiktoken
    pat = KIMI_PATTERN.replace("[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]", "(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])")
    pat = pat.replace("[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]", "(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])")
    if "&&" in pat:
        sys.exit("kimi_pieces: a class intersection is left in the pattern")
    rx = regex.compile(pat)
    pieces = []
    for t in texts:
        ps = [m.group(0).encode("utf-8") for m in rx.finditer(t)]
        if b"".join(ps) != t.encode("utf-8"):
            sys.exit("kimi_pieces: the pieces do not tile the text")
        pieces.append(ps)
    vocab = {bytes([b]): b for b in range(256)}
    for ps in pieces:
        for p in ps:
            vocab.setdefault(p, len(vocab))
    enc = tiktoken.Encoding("pieces", pat_str=KIMI_PATTERN, mergeable_ranks=vocab, special_tokens={})
    for i, (t, ps) in enumerate(zip(texts, pieces)):
        if enc.encode_ordinary(t) != [vocab[p] for p in ps]:
            sys.exit("kimi_pieces: tiktoken splits text %d differently from the regex module" % i)
    return [[len(p) for p in ps] for ps in pieces]


# Texts past tokenization_kimi.py's 400,000-character chunk (unit, repeats): short runs, so
# only the chunk boundary cuts, here inside a <|im_end|> (character 400,000 = 33,333 * 12 + 4).
LONG = [("x<|im_end|> ", 33_400), ("a ", 200_001)]


def ids_hash(ids):
    """FNV-1a over the ids (64-bit), as 16 hex digits: the long texts' ids are too many to list."""
    h = 0xcbf29ce484222325
    for i in ids:
        h = ((h ^ i) * 0x100000001b3) & 0xffffffffffffffff
    return "%016x" % h


def long_vectors(enc):
    out = []
    for unit, times in LONG:
        text = unit * times
        ids = kimi_encode(enc, text)
        if enc.decode(ids) != text:
            sys.exit("long text does not round-trip")
        out.append({"unit": unit, "times": times, "n_ids": len(ids), "fnv": ids_hash(ids)})
    return out


def write_vectors(path, enc, texts, extra):
    ids, decoded = [], {}
    for i, t in enumerate(texts + extra):
        e = kimi_encode(enc, t)
        d = enc.decode(e)
        ids.append(e)
        if d != t:
            decoded[str(i)] = d.encode("utf-8").hex()
    import tiktoken
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("{\n\"generator\":\"tools/oracle_kimi.py\",\n")
        f.write("\"versions\":%s,\n" % json.dumps({"tiktoken": tiktoken.__version__}))
        f.write("\"pattern\":%s,\n" % json.dumps(KIMI_PATTERN))
        f.write("\"n_corpus\":%d,\n" % len(texts))
        f.write("\"long\":%s,\n" % json.dumps(long_vectors(enc), separators=(",", ":")))
        f.write("\"extra\":[\n" + ",\n".join(json.dumps(t.encode("utf-8").hex()) for t in extra) + "],\n")
        f.write("\"classes\":%s,\n" % json.dumps(class_ranges(), separators=(",", ":")))
        f.write("\"decoded\":%s,\n" % json.dumps(decoded, separators=(",", ":")))
        f.write("\"pretokens\":[\n" + ",\n".join(json.dumps(x, separators=(",", ":")) for x in kimi_pieces(texts + extra)) + "],\n")
        f.write("\"ids\":[\n" + ",\n".join(json.dumps(x, separators=(",", ":")) for x in ids) + "]\n}\n")


def read_corpus(root):
    with open(os.path.join(root, "tests", "fixtures", "tokenizer", "corpus.jsonl"), encoding="ascii") as f:
        return [bytes.fromhex(json.loads(line)) for line in f]


def write_all(root, corpus_root):
    kdir = os.path.join(root, "tests", "fixtures", "tokenizer-kimi")
    os.makedirs(kdir, exist_ok=True)
    ranks = train_ranks()
    write_files(kdir, ranks)
    enc = encoding(ranks)
    texts = [ot.hf_text(raw) for raw in read_corpus(corpus_root)]
    extra = [ot.hf_text(raw) for raw in kimi_lines()]
    write_vectors(os.path.join(kdir, "vectors.json"), enc, texts, extra)


OUTPUTS = ["tests/fixtures/tokenizer-kimi/tiktoken.model", "tests/fixtures/tokenizer-kimi/tokenizer_config.json",
           "tests/fixtures/tokenizer-kimi/vectors.json"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare with --root")
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not a.check:
        write_all(a.root, a.root)
        print("wrote " + ", ".join(OUTPUTS))
        return
    tmp = tempfile.mkdtemp()
    try:
        write_all(tmp, a.root)
        bad = [p for p in OUTPUTS if not os.path.exists(os.path.join(a.root, p))
               or not filecmp.cmp(os.path.join(tmp, p), os.path.join(a.root, p), shallow=False)]
    finally:
        shutil.rmtree(tmp)
    if bad:
        sys.exit("regenerated files differ: " + ", ".join(bad))
    print("Kimi tokenizer fixtures reproduce byte for byte")


if __name__ == "__main__":
    main()
