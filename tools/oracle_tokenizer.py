#!/usr/bin/env python3
"""Builds the tokenizer fixtures and parity vectors for tok.h with Hugging Face tokenizers.

Writes (paths relative to the repository root):
  tests/fixtures/tiny-glm5/tokenizer.json        byte-level BPE, 352 ids, merges as pairs
  tests/fixtures/tiny-glm52/tokenizer.json       byte-level BPE, 300 ids, merges as "a b" strings
  tests/fixtures/{tiny-glm5,tiny-glm52}/tokenizer_config.json   with the chat template
  tests/fixtures/tokenizer/tokenizer.json        32,000 ids, ignore_merges true
  tests/fixtures/tokenizer/tokenizer_config.json
  tests/fixtures/tokenizer/flags.json            the 352 tokenizer varied for what GLM's files leave
                                                 unexercised (ignore_merges that matters, added-token
                                                 flags, a repeated merge; see build_flags_tokenizer)
  tests/fixtures/tokenizer/corpus.jsonl          parity corpus, one JSON string of hex bytes a line
  tests/fixtures/tokenizer/vectors.json          what tokenizers/transformers produce on it

Every tokenizer uses GLM-5's pipeline: no normalizer, pre-tokenizer Sequence[Split(GLM regex,
Isolated), ByteLevel(add_prefix_space=false, use_regex=false)], BPE, ByteLevel decoder, and
GLM's special tokens appended after the trained vocabulary (as in GLM, where they follow the
BPE ids). Training is deterministic; --check regenerates into a temporary directory and
compares byte for byte.

Importable: GLM_PATTERN, CHAT_TEMPLATE, build_tokenizer(vocab_size, path, ...),
make_corpus(), hf_text(raw), write_vectors(...).

Usage: tools/oracle_tokenizer.py [--root DIR] [--check]
Needs tokenizers 0.23.3 and transformers 5.23.0 (tools/requirements-oracle.txt); no network.
"""
import argparse
import bisect
import filecmp
import json
import os
import shutil
import sys
import tempfile

GLM_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# DeepSeek-V3's three Split regexes (deepseek-ai/DeepSeek-V3 tokenizer.json; the same in R1
# and V3.1): digits by threes, CJK runs, then the rest. CR and LF are literal characters in
# the third, as in the file.
DS_PATTERNS = [
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]
# DeepSeek-V3's added special tokens (a subset, in its id order after the BPE ids).
DS_SPECIALS = [
    "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<\uff5c\u2581pad\u2581\uff5c>",
    "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>", "<think>", "</think>",
    "<\uff5ctool\u2581calls\u2581begin\uff5c>", "<\uff5ctool\u2581call\u2581begin\uff5c>", "<\uff5ctool\u2581sep\uff5c>",
    "<\uff5ctool\u2581call\u2581end\uff5c>", "<\uff5ctool\u2581calls\u2581end\uff5c>",
]

# GLM-5's added special tokens in id order (zai-org/GLM-5 tokenizer_config / tokenizer.json).
GLM_SPECIALS = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>",
    "<|begin_of_video|>", "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>",
    "<|begin_of_transcription|>", "<|end_of_transcription|>", "<|code_prefix|>",
    "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>",
    "</arg_value>", "/nothink", "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
]
# The tiny fixtures have room for few merges, so they carry a subset.
SMALL_SPECIALS = [
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "/nothink",
]

# GLM-5's template for the subset colibri renders: optional system turn, one user turn, the
# generation prompt. No newline after role tokens; enable_thinking=false opens the reply with
# </think>, otherwise <think> (zai-org/GLM-5 chat_template.jinja, generation-prompt line).
CHAT_TEMPLATE = (
    "[gMASK]<sop>"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}<|system|>{{ m.content }}"
    "{%- elif m.role == 'user' -%}<|user|>{{ m.content }}"
    "{%- else -%}{{ raise_exception('this template renders system and user turns only') }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>"
    "{{- '</think>' if (enable_thinking is defined and not enable_thinking) else '<think>' -}}"
    "{%- endif -%}"
)

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_TEXT = os.path.join(HERE, "tok_train.txt")


class Rng:
    """Deterministic choices from random.Random's core generator only (stable across Pythons)."""

    def __init__(self, seed):
        import random
        self.r = random.Random(seed)

    def f(self):
        return self.r.random()

    def n(self, k):
        return int(self.r.random() * k)

    def pick(self, seq):
        return seq[self.n(len(seq))]

    def zipf(self, cum):
        return bisect.bisect_left(cum, self.r.random() * cum[-1])


def zipf_cum(k, s=1.07):
    cum, t = [], 0.0
    for i in range(k):
        t += 1.0 / (i + 1) ** s
        cum.append(t)
    return cum


# ---------------------------------------------------------------- synthetic text

EN_ON = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
         "y", "z", "br", "cr", "dr", "fr", "gr", "pr", "tr", "bl", "cl", "fl", "gl", "pl", "sl",
         "sh", "ch", "th", "wh", "st", "sp", "sk", "sn", "sm", "sw", "qu"]
EN_NU = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "oo", "ou", "ie", "oa", "y", "a", "e", "i", "o"]
EN_CO = ["", "", "n", "r", "s", "t", "l", "d", "m", "ng", "ck", "st", "nd", "rt", "ll", "ss", "x",
         "sh", "th", "nt", "mp"]
RU = "абвгдежзийклмнопрстуфхцчшщъыьэюя"
EL = "αβγδεζηθικλμνξοπρστυφχψω"
AR = [chr(c) for c in range(0x0627, 0x064B)]
AR_MARKS = [chr(c) for c in range(0x064B, 0x0653)]
HI_C = [chr(c) for c in range(0x0915, 0x0939)]
HI_V = [chr(c) for c in range(0x093E, 0x094D)] + ["", "", ""]
TH = [chr(c) for c in range(0x0E01, 0x0E2F)] + [chr(c) for c in range(0x0E30, 0x0E3A)]
KANA = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)]
VI = "aăâeêioôơuưyàảãáạằẳẵắặầẩẫấậèẻẽéẹềểễếệìỉĩíịòỏõóọồổỗốộờởỡớợùủũúụừửữứựỳỷỹýỵđ"
EMOJI = ["😀", "😂", "🥰", "😍", "🤔", "👍", "👍🏽", "👋🏿", "❤️", "✨", "🔥", "🚀", "🎉", "🙏", "💯",
         "👨‍👩‍👧‍👦", "👩‍💻", "🧑‍🚀", "🏳️‍🌈", "🏴‍☠️", "🇨🇳", "🇯🇵", "🇺🇸", "🇫🇷", "🇸🇦", "😶‍🌫️",
         "❤️‍🔥", "🐈‍⬛", "👁️‍🗨️", "☕", "🍜", "⚽", "🌍", "🌸", "🫠", "🫶🏻", "🪿"]
PUNCT_EN = [".", ".", ".", ",", ",", "!", "?", ";", ":", " -", " —", "...", "\"", "'", ")"]
CODE_KW = ["def", "return", "if", "else", "elif", "for", "while", "import", "from", "class",
           "static", "inline", "int", "const", "char", "void", "struct", "size_t", "uint32_t",
           "let", "fn", "pub", "mut", "impl", "self", "None", "True", "False", "null", "async",
           "await", "try", "except", "finally", "with", "as", "lambda", "yield", "switch", "case"]
CODE_OP = [" = ", " == ", " != ", " += ", " -> ", " => ", " && ", " || ", " < ", " >= ", "::",
           ".", ", ", "(", ")", "[", "]", "{", "}", ": ", "; ", " * ", " / ", " % ", "<<", ">>"]


class Lexicon:
    def __init__(self, rng):
        self.rng = rng
        self.en = self._words(6000, self._en_word)
        self.ru = self._words(3000, lambda: self._alpha_word(RU, 2, 9))
        self.el = self._words(2000, lambda: self._alpha_word(EL, 2, 8))
        self.ar = self._words(3000, self._ar_word)
        self.hi = self._words(2000, self._hi_word)
        self.vi = self._words(2000, lambda: self._alpha_word(VI, 1, 5))
        self.ko = self._words(3000, self._ko_word)
        common = sorted({chr(0x4E00 + self.rng.n(0x9FA5 - 0x4E00)) for _ in range(3500)})
        self.hanzi = [common[i] for i in self._perm(len(common))]
        hanzi_cum = zipf_cum(len(self.hanzi), 0.9)
        self.zh = self._words(6000, lambda: "".join(self.hanzi[self.rng.zipf(hanzi_cum)] for _ in range(1 + self.rng.n(3))))
        self.ja = self._words(3000, self._ja_word)
        self.cum = {k: zipf_cum(len(getattr(self, k))) for k in ("en", "ru", "el", "ar", "hi", "vi", "ko", "zh", "ja")}

    def _perm(self, n):
        idx = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.rng.n(i + 1)
            idx[i], idx[j] = idx[j], idx[i]
        return idx

    def _words(self, k, gen):
        seen, out = set(), []
        while len(out) < k:
            w = gen()
            if w and w not in seen:
                seen.add(w)
                out.append(w)
        return out

    def _en_word(self):
        r = self.rng
        return "".join(r.pick(EN_ON) + r.pick(EN_NU) + r.pick(EN_CO) for _ in range(1 + r.zipf(SYL_CUM)))

    def _alpha_word(self, letters, lo, hi):
        return "".join(self.rng.pick(letters) for _ in range(lo + self.rng.n(hi - lo + 1)))

    def _ar_word(self):
        r = self.rng
        w = "".join(r.pick(AR) + (r.pick(AR_MARKS) if r.f() < 0.15 else "") for _ in range(2 + r.n(5)))
        return ("ال" + w) if r.f() < 0.3 else w

    def _hi_word(self):
        return "".join(self.rng.pick(HI_C) + self.rng.pick(HI_V) for _ in range(1 + self.rng.n(4)))

    def _ko_word(self):
        r = self.rng
        return "".join(chr(0xAC00 + (r.zipf(JAMO_L) * 21 + r.zipf(JAMO_V)) * 28 + (r.zipf(JAMO_T) if r.f() < 0.5 else 0))
                       for _ in range(1 + r.n(4)))

    def _ja_word(self):
        r = self.rng
        if r.f() < 0.4:
            return "".join(r.pick(self.hanzi[:800]) for _ in range(1 + r.n(2)))
        return "".join(r.pick(KANA) for _ in range(1 + r.n(4)))

    def word(self, lang):
        return getattr(self, lang)[self.rng.zipf(self.cum[lang])]


SYL_CUM = zipf_cum(4, 1.5)
JAMO_L, JAMO_V, JAMO_T = zipf_cum(19, 0.8), zipf_cum(21, 0.8), zipf_cum(28, 0.8)


def sentence(lex, lang):
    r = lex.rng
    n = 3 + r.n(14)
    if lang in ("zh", "ja", "th"):
        if lang == "th":
            ws = ["".join(r.pick(TH) for _ in range(2 + r.n(5))) for _ in range(n)]
            return "".join(ws) + (" " if r.f() < 0.5 else "")
        ws = [lex.word(lang) for _ in range(n)]
        s = ""
        for i, w in enumerate(ws):
            s += w
            if i + 1 < n and r.f() < 0.15:
                s += r.pick("，、；：")
        return s + r.pick("。。。！？")
    ws = [lex.word(lang) for _ in range(n)]
    if lang == "en":
        for i in range(n):
            x = r.f()
            if x < 0.04:
                ws[i] += r.pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "n't"])
            elif x < 0.06:
                ws[i] = ws[i].upper()
            elif x < 0.08:
                ws[i] = str(r.n(10 ** (1 + r.n(6))))
            elif x < 0.09:
                ws[i] = r.pick(EMOJI)
        ws[0] = ws[0][:1].upper() + ws[0][1:]
    s = ""
    for i, w in enumerate(ws):
        s += w
        if i + 1 < n:
            s += r.pick(PUNCT_EN[:6]) + " " if r.f() < 0.08 else " "
    end = {"ar": "؟.،!", "hi": "।।?", "el": ".;!", "ru": ".!?", "vi": ".?!", "ko": ".?!", "en": ".!?"}[lang]
    return s + r.pick(end)


def code_line(lex):
    r = lex.rng
    ind = r.pick(["", "", "    ", "        ", "\t", "\t\t", "  "])
    parts = []
    for _ in range(2 + r.n(8)):
        x = r.f()
        if x < 0.3:
            parts.append(r.pick(CODE_KW))
        elif x < 0.55:
            a, b = lex.word("en"), lex.word("en")
            parts.append(r.pick([a + "_" + b, a + b[:1].upper() + b[1:], a, a.upper(), "_" + a]))
        elif x < 0.65:
            parts.append(str(r.n(10 ** (1 + r.n(5)))) + r.pick(["", "", "u", "f", ".0", "e-3", "L"]))
        elif x < 0.72:
            parts.append('"' + lex.word("en") + r.pick(["", "\\n", "%d", "{}", ": "]) + '"')
        else:
            parts.append(r.pick(CODE_OP).strip())
    s = ind
    for p in parts:
        s += p + r.pick(["", " ", " ", "(", ", "])
    return s.rstrip() + r.pick(["", ";", ":", " {", "}", ")", " // " + lex.word("en"), "  # " + lex.word("en")])


def paragraph(lex):
    r = lex.rng
    x = r.f()
    if x < 0.08:
        return "\n".join(code_line(lex) for _ in range(2 + r.n(10)))
    lang = r.pick(["en", "en", "en", "en", "zh", "zh", "zh", "ja", "ko", "ar", "ru", "el", "hi", "vi", "th"])
    sents = [sentence(lex, lang) for _ in range(1 + r.n(5))]
    sep = "" if lang in ("zh", "ja", "th") else " "
    p = sep.join(sents)
    if r.f() < 0.1:
        p += " " + r.pick(EMOJI) * (1 + r.n(3))
    if r.f() < 0.05:
        p = sentence(lex, "en") + " " + p
    return p


def synthetic_text(seed, n_bytes):
    """A deterministic multilingual text of about n_bytes UTF-8 bytes, as a list of paragraphs."""
    lex = Lexicon(Rng(seed))
    out, total = [], 0
    while total < n_bytes:
        p = paragraph(lex) + lex.rng.pick(["\n", "\n\n", "\n\n", "\n \n", "\r\n"])
        out.append(p)
        total += len(p.encode("utf-8"))
    return out


# ---------------------------------------------------------------- tokenizers

def ds_pre_tokenizer(byte_level=True):
    from tokenizers import Regex, pre_tokenizers
    splits = [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in DS_PATTERNS]
    return pre_tokenizers.Sequence(splits + ([pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)] if byte_level else []))


def _train(vocab_size, specials, texts, deepseek=False):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    if deepseek:  # as DeepSeek-V3's file: an empty normalizer Sequence, three Splits
        tok.normalizer = normalizers.Sequence([])
        tok.pre_tokenizer = ds_pre_tokenizer()
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(GLM_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if tok.get_vocab_size() != vocab_size:
        sys.exit("trained %d ids, wanted %d (training text too small?)" % (tok.get_vocab_size(), vocab_size))
    return tok


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
        f.write("\n")


def write_tokenizer_config(directory):
    cfg = {
        "tokenizer_class": "TokenizersBackend",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "padding_side": "left",
        "clean_up_tokenization_spaces": False,
        "model_max_length": 202752,
        "do_lower_case": False,
        "remove_space": False,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
        f.write("\n")


def build_tokenizer(vocab_size, path, specials=SMALL_SPECIALS, texts=None, merges_form="pairs",
                    ignore_merges=False, config=True, deepseek=False):
    """Trains a GLM-style byte-level BPE with exactly vocab_size ids and writes it to path
    (compact JSON), plus tokenizer_config.json beside it when config is true. merges_form
    "pairs" writes [["a","b"],...], "strings" the legacy ["a b",...]. Returns the path."""
    if texts is None:
        with open(TRAIN_TEXT, encoding="utf-8") as f:
            texts = f.read().split("\n")
    tok = _train(vocab_size, specials, texts, deepseek)
    obj = json.loads(tok.to_str())
    obj["model"]["ignore_merges"] = bool(ignore_merges)
    if merges_form == "strings":
        obj["model"]["merges"] = ["#version: 0.2"] + [a + " " + b for a, b in obj["model"]["merges"]]
    _write_json(path, obj)
    if config:
        write_tokenizer_config(os.path.dirname(path))
    return path


FLAG_WORDS = ["hello", "Ġworld", "the", "Ġthe", "ä¸Ńæĸĩ", "123", "ĠĠĠ", "'s"]


def build_flags_tokenizer(base_path, path):
    """A variant of the base tokenizer for what the GLM fixtures leave unexercised:
    ignore_merges=true with vocabulary words the merges cannot reach (so the flag changes
    ids), a repeated merge (tokenizers keeps its last rank), Split as Removed+invert,
    a ByteLevel post_processor, and added tokens with lstrip/rstrip, normalized=true
    (second matching pass), special=false, content already in the vocabulary,
    content outside the byte alphabet."""
    from tokenizers import AddedToken, Tokenizer
    with open(base_path, encoding="utf-8") as f:
        obj = json.load(f)
    model = obj["model"]
    for w in FLAG_WORDS:
        if w not in model["vocab"]:
            model["vocab"][w] = len(model["vocab"])
    model["ignore_merges"] = True
    obj["added_tokens"] = []
    split = obj["pre_tokenizer"]["pretokenizers"][0]
    split["behavior"], split["invert"] = "Removed", True
    obj["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tok = Tokenizer.from_str(json.dumps(obj, ensure_ascii=False))
    tok.add_special_tokens([AddedToken(x, special=True, normalized=False) for x in SMALL_SPECIALS])
    tok.add_tokens([
        AddedToken("<b>", special=False, normalized=True),
        AddedToken("hello world", special=False, normalized=True),
        AddedToken("er<|us", special=False, normalized=True),      # loses to <|user|> (pass 1)
        AddedToken("你好", special=False, normalized=True),          # decodes as raw UTF-8
        AddedToken("ĠĠ", special=False, normalized=True),            # decodes through the byte map
        AddedToken("ZZ", special=False, normalized=False),            # non-normalized: pass 1
        AddedToken("<n>", special=False, normalized=True, lstrip=True),
        AddedToken("he", special=False, normalized=True),             # already in the vocabulary
    ])
    tok.add_special_tokens([
        AddedToken("<L>", special=True, normalized=False, lstrip=True),
        AddedToken("<R>", special=True, normalized=False, rstrip=True),
        AddedToken("<LR>", special=True, normalized=False, lstrip=True, rstrip=True),
    ])
    obj = json.loads(tok.to_str())
    merges = obj["model"]["merges"]
    merges.append(list(merges[1]))  # listed twice: tokenizers keeps the later rank
    _write_json(path, obj)
    return path


# ---------------------------------------------------------------- parity corpus

WS = [" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u2029", "\x0b", "\x0c",
      "\x85", "\u2003", "\u202f", "\u1680", "\u180e", "\u200b", "\ufeff", "\x1c", "\x1f"]
SOUP = (list("aZz'sStTrReEvVmMlLdD1234567890!?.,;:-_()[]{}<>|/\\\"#$%&*+=~`^@") +
        ["ſ", "é", "e\u0301", "\u0301", "\u0308", "ß", "İ", "ı", "ǅ", "Å", "K", "ℌ", "ª", "º", "ˆ",
         "中", "文", "の", "ア", "한", "ع", "\u064e", "ب", "ة", "٣", "۵", "߀", "१", "๓", "１", "Ⅻ",
         "²", "½", "₃", "⑦", "〇", "𝟘", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "\u200d", "\ufe0f", "🏳️‍🌈",
         "\U000105c0", "\U00031350", "\U00011f04", "\U00010d40", "\U0001e5d0", "\U00016d43",
         "\ue000", "\U0010fffd", "\ufffd", "\x00", "\x07", "\x7f", "\u0378", "\U000e0001"] + WS)
CONTRACTIONS = ["s", "t", "re", "ve", "m", "ll", "d"]


def _case_variants(s):
    out = [""]
    for ch in s:
        out = [o + c for o in out for c in sorted({ch.lower(), ch.upper()})]
    return out


def handwritten_lines():
    L = []
    L += ["", " ", "  ", "a", "'", "''", "'s", "'S", "'ſ", "'st", "s'", "'", "don't", "DON'T", "Don'T",
          "I'm", "i'M", "we'LL", "WE'll", "you'Ve", "they'RE", "he'D", "it'S'S", "''s", "' s", "'s'",
          "'sa", "'Sa", "'x", "'1", "'中", "a's", "1's", "中's", "!'s", " 's", "\n's", "'ll've'd",
          "rock'n'roll", "O'Neil's", "it'ſa", "'ſſ", "'ſabc", "DON'ſT", "x'ſ1", "'Ss", "'LLama", "'dd", "'REd", "'vex", "’s curly apostrophe is not ASCII", "`s", "ʼs"]
    L += ["hello world", "Hello, World!", "  leading", "trailing  ", " both ", "a  b", "a   b",
          "a\tb", "a \tb", "a\t b", "a\nb", "a \nb", "a\n b", "a\n\nb", "a \n \n b", "a\r\nb",
          "a\r\n\r\nb", "\n", "\n\n\n", " \n", "\n ", " \n ", "\t\t", "\t\tx", "\t\t!", "  !", " !",
          " !!\n\n", "!\r\n", "x!\n\r\n y", "\u00a0x", "\u00a0\u00a0x", "\u3000x", "x\u3000", "\u2028x",
          "x\u2029y", "\x85x", "\x0bx", "\x0cx", "\x1cx", "\x1fx", "\u200bx", "\ufeffx", "\u180ex",
          "end with spaces   ", "end with newline\n", "   \n   ", " \t \n \t ", "tab\tinside\twords"]
    L += ["1", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
          "3.14159", "1,000,000", "v1.2.3", "0x1F", "2024-06-01", "12:30:45", "+49 30 1234567",
          "١٢٣٤٥", "۱۲۳", "१२३४", "１２３４５", "²³", "½¼", "Ⅻ", "ⅫⅫⅫⅫ", "①②③④", "𝟘𝟙𝟚𝟛",
          "a1b22c333d4444", "x²", "H₂O", "〇一二三"]
    L += ["中文", "中文文本没有空格", "你好，世界！", "東京タワー", "ひらがな", "カタカナ", "한국어 문장",
          "مرحبا بالعالم", "كَتَبَ الوَلَدُ", "Привет, мир!", "Γειά σου κόσμε", "नमस्ते दुनिया",
          "สวัสดีครับ", "Tiếng Việt", "e\u0301e\u0301e\u0301", "\u0301\u0301abc", "a\u0308\u0301b",
          "Åström", "İstanbul ılık", "straße STRASSE", "ǅemal", "ℌello", "ªº", "ŉ", "ﬁle ﬂow"]
    L += ["😀", "😀😀😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇨🇳🇯🇵🇺🇸", "a😀b", " 😀", "😀 ", "❤️‍🔥",
          "👩🏽‍💻 codes", "🫠🫠", "\u200d", "x\u200dy", "\ufe0f", "#️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿"]
    L += ["\U000105c0\U000105c1", "x\U000105c0", "\U00031350\U00031351", "\U00011f04a", "\U00010d40\U00010d41",
          "\U0001e5d0 \U0001e5d1", "\U00016d43", "\ue000\ue001", "\U0010fffd", "\ufffd", "\uffff", "\U0010ffff",
          "\x00", "a\x00b", "\x00\x00", "\x01\x02\x03", "\x7f", "\u0378", "\U000e0001x"]
    for s in GLM_SPECIALS:
        L += [s, "x" + s + "y", " " + s + " ", s + s, s[:-1], s[1:]]
    L += ["<|user|>hi<|assistant|>", "[gMASK]<sop><|system|>sys<|user|>u<|assistant|><think>",
          "<think></think>", "<|user|", "<|user|>>", "<<|user|>", "<|<|user|>|>", "</think>x</think>",
          "a <think> b </think> c", "/nothink please", "x/nothink", "er<|user|>", "hello world<b>",
          "<b> <b>  <b>", "say hello world twice: hello world", "<L>", "  <L>  ", "a  <L>b", "<R>  x",
          "x  <R>  y", "  <LR>  ", "a<LR>b", " \n<L>\n ", "<n>", "  <n>", "x <n> y", "你好你好", "ĠĠ",
          "ĠĠĠ", " ĠĠ ", "ZZZ", "aZZb", "he", "hehehe", "the", "<L><R><LR>", "<R> <R>", "<R>\u00a0\u3000y",
          "\u2003<L>", "\u3000<L>", "<R>  <L>", "<LR> <LR>", "x<R> \t<L>y", "<R>\n<n>", "a <R> <n> b", "<R><L>",
          "ZZ  <L>", "<L>  ZZ", "hello world <L> hello", "<|user|> <L>"]
    L += ["hello", "hello world", "the world", " the  the", "中文中文", "123123", "      ", "it's the hello world", "hellohello",
          "Hello", "HELLO", "x123", "'s's"]
    L += ["def f(x):\n    return x * 2\n", "int main(void) { return 0; }", "for (i = 0; i < n; i++) {}",
          "if a == b:\n\tpass", "x = {'a': 1, \"b\": [2, 3]}", "<html><p>hi</p></html>",
          "SELECT * FROM t WHERE id=42;", "$ make test && ./run --flag=value", "a->b, c::d, e=>f",
          "!!!???...", "!!!\n\n\n", "...\r\n\r\n", "/* comment */", "// comment\n", "#include <stdio.h>"]
    return [s.encode("utf-8") for s in L]


def contraction_lines():
    out = []
    for c in CONTRACTIONS:
        for v in _case_variants(c):
            for ctx in ("X'{}", "x'{} y", "'{}", "'{}x", "x '{}.", "'{}'{}", "1'{}", "中'{}"):
                out.append(ctx.replace("{}", v).encode("utf-8"))
    return out


def digit_lines(rng):
    out = []
    for n in range(1, 41):
        d = "".join(str(rng.n(10)) for _ in range(n))
        out += [d.encode(), ("x" + d + "y").encode(), (" " + d + " ").encode(), ("a" + d + "٣").encode()]
    for _ in range(60):
        out.append("".join(rng.pick(["1", "23", "٤٥", "۶", "१", "１", "²", "½", "Ⅻ", ".", ",", " ", "a", "-"])
                           for _ in range(1 + rng.n(20))).encode("utf-8"))
    return out


def whitespace_lines(rng):
    out = []
    pool = WS + ["a", "bc", "!", "?!", "1", "中", "'s", "😀", "\u0301"]
    for _ in range(300):
        out.append("".join(rng.pick(pool) for _ in range(1 + rng.n(14))).encode("utf-8"))
    return out


def soup_lines(rng, k):
    out = []
    for _ in range(k):
        out.append("".join(rng.pick(SOUP) for _ in range(1 + rng.n(24))).encode("utf-8"))
    return out


def special_lines(rng):
    out = []
    pool = GLM_SPECIALS[:12] + ["<L>", "<R>", "<LR>", "<b>", "<n>", "hello world", "ZZ", "你好", "ĠĠ", "er<|us",
                                "he", " ", "  ", "\n", "x", "<", "|", ">", "<|", "|>", "er", "hello", "中文"]
    for _ in range(150):
        out.append("".join(rng.pick(pool) for _ in range(1 + rng.n(10))).encode("utf-8"))
    return out


def invalid_lines(rng):
    fixed = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2", b"\xc2x", b"\xe0\x80\x80", b"\xe0\xa0",
             b"\xe0\xa0x", b"\xed\xa0\x80", b"\xed\x9f\xbf", b"\xef\xbf\xbf", b"\xf0\x80\x80\x80", b"\xf0\x90\x80",
             b"\xf0\x90\x80x", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80",
             b"\xfe\xff", b"\xff", b"a\xffb", b"\xe4\xb8", b"\xe4\xb8\xad\xe4", b"hello\xc3", b"\xc3\xa9\xa9",
             b"\xe2\x82\xac\x80\x80", b"'\xe4s", b"1\x802", b" \x80 ", b"\x80<|user|>\x80", b"<|us\x80er|>",
             b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80\xf0\x9f", b"\xce\xa9\xce", b"\xed\xbf\xbf\xed\xa0\x80"]
    out = list(fixed)
    valid = [s.encode("utf-8") for s in ["héllo", "中文字", "😀👍🏽", "مرحبا", "a b c", "<|user|>"]]
    for _ in range(160):
        x = rng.f()
        if x < 0.5:
            b = bytearray(rng.pick(valid))
            for _ in range(1 + rng.n(3)):
                op = rng.n(3)
                i = rng.n(len(b) + 1)
                if op == 0 and b:
                    del b[min(i, len(b) - 1)]
                elif op == 1:
                    b.insert(i, 0x80 + rng.n(128))
                else:
                    b.insert(i, rng.pick([0xc2, 0xe0, 0xed, 0xf0, 0xf4, 0xf5, 0xff, 0xe4, 0xc0]))
            out.append(bytes(b))
        else:
            out.append(bytes(rng.pick([0x20, 0x61, 0x27, 0x73, 0x0a, 0x31, 0x80, 0xbf, 0xc2, 0xc3, 0xa9, 0xe0, 0xe4,
                                       0xb8, 0xad, 0xed, 0xa0, 0xf0, 0x9f, 0x98, 0xf4, 0x8f, 0xf8, 0xff])
                               for _ in range(1 + rng.n(12))))
    return out


def long_lines(lex):
    r = lex.rng
    out = ["a" * 3000, "ab" * 2000, "1" * 2500, " " * 2000 + "x", "\n" * 500, " \n" * 400, "中" * 1200,
           "😀" * 300, "!?" * 1000, "x" + "\u0301" * 800, "'s" * 600,
           " ".join(lex.word("en") for _ in range(600)),
           "".join(lex.word("zh") for _ in range(500)),
           "".join(lex.word("en") for _ in range(300))]
    return [s.encode("utf-8") for s in out]


def make_corpus():
    """The parity corpus: a list of byte strings (not necessarily valid UTF-8)."""
    rng = Rng(20260523)
    lex = Lexicon(Rng(77))
    lines = handwritten_lines() + contraction_lines() + digit_lines(rng) + whitespace_lines(rng)
    lines += soup_lines(rng, 900) + special_lines(rng) + invalid_lines(rng)
    for _ in range(450):
        lines.append(paragraph(lex).encode("utf-8"))
    for _ in range(40):
        lines.append(code_line(lex).encode("utf-8"))
    lines += long_lines(lex)
    lines += deepseek_lines(Rng(4242))  # appended: the lines above keep their numbers
    return lines


def deepseek_lines(rng):
    """What DeepSeek-V3's three Splits treat differently from GLM's one: digit runs inside words
    and CJK, CJK and kana runs (the class stops at U+9FA5; U+30A0 and U+30FB are punctuation
    inside it), ASCII punctuation glued to letters, marks, symbols, pieces ending in spaces."""
    L = ["www.example.com/path?q=1&x=abc", "a.b,c;d:e!f?g", "x'ye's 'quoted' \"dq\"", "(foo)bar[baz]{qux}<tag>",
         "\u4ef7\u683c\u662f12345\u5186\u3067\u3059", "\u30ab\u30bf\u30ab\u30ca\u30a0\u30fb\u30fc\u3099\u309b",
         "\u9fa5\u9fa6\u9fff\u3400\u4e00", "e\u0301t\u0301e \u0301 \u0301a", "$$ +100 -5% ~x ^y `z`",
         "\U0001f642\U0001f642 \u2014 dash \u2026", "A1B2C3 123456789 1,234.56", "a\u200bb \u00a0x \u3000y",
         "line  \n\n  next\r\n\t end  ", "  \u4e2d\u6587  12  ab  ", "\u0663\u0664\u0665\u0666 \u2167\u2168 \u00bd",
         "\x00\x01 abc \x7f", "\u0915\u093f\u0924\u093e\u092c", "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
         ".\u00e9t\u00e9 ,Stra\u00dfe -\u0430\u0431\u0432", " ...!!! ??\n\n", "@user #tag $var %mod", "\u00ab\u00bbx\u201cy\u201d"]
    out = [x.encode("utf-8") for x in L]
    pool = ["a", "Z", "1", "23", "\u4e00", "\u30a2", "\u3042", ".", ",", "!", "$", "+", " ", "  ", "\n", "\r\n", "\t",
            "\u0301", "\u00e9", "\U0001f600", "\u2014", "\u00a0", "\u200b", "x", "'", "(", "]", "\u0663"]
    for _ in range(120):
        out.append("".join(rng.pick(pool) for _ in range(1 + rng.n(14))).encode("utf-8"))
    return out


def hf_text(raw):
    """What a Python user of tokenizers encodes for these bytes."""
    return raw.decode("utf-8", "replace")


# ---------------------------------------------------------------- vectors

def unicode_classes():
    """Members of \\p{L}, \\p{N}, \\s (GLM's regex) and \\p{M}, \\p{P}, \\p{S} (DeepSeek-V3's) as the
    tokenizers regex engine sees them, as [first, last] ranges."""
    from tokenizers import Regex, pre_tokenizers
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    s = "".join(map(chr, cps))
    out = {}
    for name, pat in (("L", r"\p{L}"), ("N", r"\p{N}"), ("S", r"\s"), ("M", r"\p{M}"), ("P", r"\p{P}"), ("Sym", r"\p{S}")):
        keep = bytearray(len(s))
        for _, (a, b) in pre_tokenizers.Split(Regex(pat), "removed").pre_tokenize_str(s):
            keep[a:b] = b"\x01" * (b - a)
        ranges = []
        for i, c in enumerate(cps):
            if keep[i]:
                continue
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
        out[name] = ranges
    return out


def pretokens(text):
    from tokenizers import Regex, pre_tokenizers
    pieces = pre_tokenizers.Split(Regex(GLM_PATTERN), "isolated").pre_tokenize_str(text)
    lens = [len(p.encode("utf-8")) for p, _ in pieces]
    if sum(lens) != len(text.encode("utf-8")):
        sys.exit("pre-tokens do not cover the text")
    return lens


def pretokens_ds(text):
    """Byte lengths of DeepSeek-V3's pre-tokens (the three Splits, before ByteLevel)."""
    pieces = ds_pre_tokenizer(byte_level=False).pre_tokenize_str(text)
    lens = [len(p.encode("utf-8")) for p, _ in pieces]
    if sum(lens) != len(text.encode("utf-8")):
        sys.exit("DeepSeek pre-tokens do not cover the text")
    return lens


def tokenizer_vectors(path, texts):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    ids, roundtrip, decoded = [], [], {}
    for i, t in enumerate(texts):
        e = tok.encode(t, add_special_tokens=False).ids
        d = tok.decode(e, skip_special_tokens=False)
        ids.append(e)
        roundtrip.append(1 if d == t else 0)
        if d != t:
            decoded[str(i)] = d.encode("utf-8").hex()
    return {"ids": ids, "roundtrip": roundtrip, "decoded": decoded}


CHAT_CASES = [
    ("You are a helpful assistant.", "What's 2+2? 请用中文回答。", True),
    ("You are a helpful assistant.", "What's 2+2? 请用中文回答。", False),
    (None, "Hello  world\n", True),
    (None, "Hi", False),
    ("", "", True),
    ("Answer in one word.", "tell me about <|user|> and </think> tokens", False),
]


def chat_vectors(directory):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    at = AutoTokenizer.from_pretrained(directory)
    raw = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    out = []
    for system, user, think in CHAT_CASES:
        msgs = ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": user}]
        text = at.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=think)
        ids = list(at.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, enable_thinking=think)["input_ids"])
        if ids != raw.encode(text, add_special_tokens=False).ids:
            sys.exit("transformers' template ids differ from tokenizers' encoding of its text")
        out.append({"system": system, "user": user, "think": think, "text": text, "ids": ids})
    return out


def _write_vectors(path, doc):
    """One JSON document, one corpus line per text line so diffs stay readable."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("{\n")
        items = list(doc.items())
        for k, (key, val) in enumerate(items):
            f.write("%s:" % json.dumps(key))
            if key == "tokenizers":
                f.write("{\n")
                names = sorted(val)
                for j, name in enumerate(names):
                    v = val[name]
                    f.write("%s:{\"path\":%s,\"roundtrip\":%s,\"decoded\":%s,\n\"ids\":[\n" % (
                        json.dumps(name), json.dumps(v["path"]), json.dumps(v["roundtrip"], separators=(",", ":")),
                        json.dumps(v["decoded"], separators=(",", ":"))))
                    f.write(",\n".join(json.dumps(x, separators=(",", ":")) for x in v["ids"]))
                    f.write("]}%s\n" % ("," if j + 1 < len(names) else ""))
                f.write("}")
            elif key in ("pretokens", "pretokens_deepseek"):
                f.write("[\n" + ",\n".join(json.dumps(x, separators=(",", ":")) for x in val) + "]")
            else:
                f.write(json.dumps(val, ensure_ascii=False, separators=(",", ":")))
            f.write(",\n" if k + 1 < len(items) else "\n")
        f.write("}\n")


def write_all(root):
    import tokenizers
    import transformers
    fx = os.path.join(root, "tests", "fixtures")
    tdir = os.path.join(fx, "tokenizer")
    os.makedirs(tdir, exist_ok=True)
    small = build_tokenizer(352, os.path.join(fx, "tiny-glm5", "tokenizer.json"))
    build_tokenizer(300, os.path.join(fx, "tiny-glm52", "tokenizer.json"), merges_form="strings")
    big_text = synthetic_text(31337, 6_000_000)
    with open(TRAIN_TEXT, encoding="utf-8") as f:
        big_text += f.read().split("\n")
    build_tokenizer(32000, os.path.join(tdir, "tokenizer.json"), specials=GLM_SPECIALS, texts=big_text,
                    ignore_merges=True)
    build_flags_tokenizer(small, os.path.join(tdir, "flags.json"))
    build_tokenizer(4000, os.path.join(tdir, "deepseek.json"), specials=DS_SPECIALS, texts=big_text, config=False,
                    deepseek=True)

    corpus = make_corpus()
    with open(os.path.join(tdir, "corpus.jsonl"), "w", encoding="ascii", newline="\n") as f:
        for raw in corpus:
            f.write(json.dumps(raw.hex()) + "\n")
    texts = [hf_text(raw) for raw in corpus]
    toks = {
        "tiny-glm5": "tests/fixtures/tiny-glm5/tokenizer.json",
        "tiny-glm52": "tests/fixtures/tiny-glm52/tokenizer.json",
        "glm-32k": "tests/fixtures/tokenizer/tokenizer.json",
        "flags": "tests/fixtures/tokenizer/flags.json",
        "deepseek-v3": "tests/fixtures/tokenizer/deepseek.json",
    }
    vec = {}
    for name, rel in toks.items():
        v = tokenizer_vectors(os.path.join(root, rel), texts)
        v["path"] = rel
        vec[name] = v
    doc = {
        "generator": "tools/oracle_tokenizer.py",
        "versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__},
        "n_lines": len(corpus),
        "texts": {str(i): t.encode("utf-8").hex() for i, (raw, t) in enumerate(zip(corpus, texts))
                  if t.encode("utf-8") != raw},
        "chat": {"tiny-glm5": chat_vectors(os.path.join(fx, "tiny-glm5")), "glm-32k": chat_vectors(tdir)},
        "unicode": unicode_classes(),
        "tokenizers": vec,
        "pretokens": [pretokens(t) for t in texts],
        "pretokens_deepseek": [pretokens_ds(t) for t in texts],
    }
    _write_vectors(os.path.join(tdir, "vectors.json"), doc)


OUTPUTS = ["tests/fixtures/tiny-glm5/tokenizer.json", "tests/fixtures/tiny-glm5/tokenizer_config.json",
           "tests/fixtures/tiny-glm52/tokenizer.json", "tests/fixtures/tiny-glm52/tokenizer_config.json",
           "tests/fixtures/tokenizer/tokenizer.json", "tests/fixtures/tokenizer/tokenizer_config.json",
           "tests/fixtures/tokenizer/flags.json", "tests/fixtures/tokenizer/deepseek.json",
           "tests/fixtures/tokenizer/corpus.jsonl",
           "tests/fixtures/tokenizer/vectors.json"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(HERE, ".."))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare with --root")
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not a.check:
        write_all(a.root)
        print("wrote " + ", ".join(OUTPUTS))
        return
    tmp = tempfile.mkdtemp()
    try:
        for d in ("tiny-glm5", "tiny-glm52", "tokenizer"):
            os.makedirs(os.path.join(tmp, "tests", "fixtures", d))
        write_all(tmp)
        bad = [p for p in OUTPUTS if not os.path.exists(os.path.join(a.root, p))
               or not filecmp.cmp(os.path.join(tmp, p), os.path.join(a.root, p), shallow=False)]
    finally:
        shutil.rmtree(tmp)
    if bad:
        sys.exit("regenerated files differ: " + ", ".join(bad))
    print("tokenizer fixtures reproduce byte for byte")


if __name__ == "__main__":
    main()
