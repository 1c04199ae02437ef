/* chat.h — the chat formats colibri renders, chosen once per model.
 *
 * A model's chat template (tokenizer_config.json "chat_template", else
 * chat_template.jinja; one holding a NUL is refused) is recognised by the
 * markers only its family writes, outside Jinja comments; without a
 * template, by the special tokens its tokenizer has. Each format is one
 * row of the table below (chat_info): every string it writes and reads.
 * Rendering reads it here (one-shot PROMPT/SYSTEM prompts and --chat
 * follow-up turns) and in openai.h (whole message lists), as do the
 * parsing of replies (thinking, tool calls: openai.h), the forced
 * tool-call grammars (grammar.h, given the row's gr_tool_syntax), and
 * colibri.c's stop tokens and grammar masks. Parity against
 * transformers' rendering of the real templates: tests/test_chat.c with
 * tests/fixtures/chat_templates.json (tools/make_chat_fixtures.py).
 *
 *   GLM-5          "[gMASK]<sop>" [<|system|>S] <|user|>U <|assistant|> + <think> or </think>
 *   DeepSeek-V3    BOS S <｜User｜>U <｜Assistant｜>
 *   DeepSeek-R1 (January 2025)  the same prompt; earlier replies cut at </think>
 *   DeepSeek-R1    BOS S <｜User｜>U <｜Assistant｜><think>\n  (always thinks)
 *   DeepSeek-V3.1  BOS S <｜User｜>U <｜Assistant｜> + <think> or </think>
 *   Kimi K2        <|im_system|>system<|im_middle|>S<|im_end|> (a default S when
 *                  none is given) <|im_user|>user<|im_middle|>U<|im_end|>
 *                  <|im_assistant|>assistant<|im_middle|>
 *
 * A follow-up turn of --chat mode continues ids that end where generation
 * stopped: the end-of-turn token (never kept) or the token limit. DeepSeek
 * and Kimi histories close a reply with that token, so their turn text
 * starts with it; GLM-5's closer is the next <|user|> itself.
 *
 * Prefix chat_. No globals, no exit, no getenv. */
#ifndef COLI_CHAT_H
#define COLI_CHAT_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "grammar.h"
#include "json.h"
#include "tok.h"

enum { CHAT_GLM5, CHAT_DEEPSEEK3, CHAT_DEEPSEEK_R1, CHAT_DEEPSEEK_V31, CHAT_KIMI_K2, CHAT_DEEPSEEK_R1_JAN, CHAT_NFMT };

/* The added tokens (and texts) the formats write, each spelled once: the
 * table below is made of them, and code outside this file reads the table
 * (chat_info). */
#define CHAT_THINK_BEGIN "<think>"
#define CHAT_THINK_END "</think>"
#define CHAT_GLM_GMASK "[gMASK]"
#define CHAT_GLM_SOP "<sop>"
#define CHAT_GLM_SYSTEM "<|system|>"
#define CHAT_GLM_USER "<|user|>"
#define CHAT_GLM_ASSISTANT "<|assistant|>"
#define CHAT_GLM_CALL_BEGIN "<tool_call>"
#define CHAT_GLM_CALL_END "</tool_call>"
#define CHAT_GLM_KEY_BEGIN "<arg_key>"
#define CHAT_GLM_KEY_END "</arg_key>"
#define CHAT_GLM_VALUE_BEGIN "<arg_value>"
#define CHAT_GLM_VALUE_END "</arg_value>"
#define CHAT_DS_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define CHAT_DS_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define CHAT_DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define CHAT_DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define CHAT_DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CHAT_DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define CHAT_DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CHAT_DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define CHAT_DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"
#define CHAT_DS_OUTS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81outputs\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CHAT_DS_OUTS_END "<\xef\xbd\x9ctool\xe2\x96\x81outputs\xe2\x96\x81" "end\xef\xbd\x9c>"
#define CHAT_DS_OUT_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81output\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CHAT_DS_OUT_END "<\xef\xbd\x9ctool\xe2\x96\x81output\xe2\x96\x81" "end\xef\xbd\x9c>"
#define CHAT_KIMI_SYSTEM "<|im_system|>"
#define CHAT_KIMI_USER "<|im_user|>"
#define CHAT_KIMI_ASSISTANT "<|im_assistant|>"
#define CHAT_KIMI_MIDDLE "<|im_middle|>"
#define CHAT_KIMI_END "<|im_end|>"
#define CHAT_KIMI_DEFAULT_SYSTEM "You are a helpful assistant"

enum { CHAT_THINKS_NEVER, CHAT_THINKS_ASKED, CHAT_THINKS_ALWAYS };

/* One chat format: every string its renderings write and its replies are
 * read by. A prompt is bos, each message as its role's header + text +
 * end (an assistant reply: + reply_end), then assistant and the
 * generation prompt's opening (open_think or open_plain); a follow-up
 * turn of --chat starts with reply_end, closing the reply generation
 * stopped in. NULL: the format writes none. */
typedef struct {
    const char *name;
    const char *tokens[8]; /* the added tokens its renderings write, in the order chat_check looks (NULL-terminated) */
    const char *stop;      /* the end-of-turn token that must end generation, or NULL (GLM-5's come from generation_config.json) */
    const char *bos;       /* opens the conversation */
    const char *system, *user, *assistant, *tool; /* role headers; tool NULL: results only in result tags */
    const char *end;       /* closes a system, user or tool message */
    const char *reply_end; /* closes an assistant reply */
    const char *default_system; /* the system message when none is given, or NULL (none) */
    int thinks;            /* CHAT_THINKS_*: whether a reply starts inside a thinking block */
    const char *think_begin, *think_end; /* around a reasoning block */
    const char *open_think, *open_plain; /* the generation prompt after assistant, thinking or not */
    const char *tools_begin, *tools_end; /* around the tool declarations (NULL: tools are not rendered) */
    gr_tool_syntax calls;                /* tool calls, as replies write them (grammar.h) */
    const char *results_begin, *results_end; /* around a run of tool results */
    const char *result_begin, *result_end;   /* around one tool result */
} chat_fmt_info;

/* What every DeepSeek format shares; its tool calls: V3 and R1 write a
 * call as TYPE<｜tool▁sep｜>NAME and fenced JSON, one per line; V3.1 as
 * NAME<｜tool▁sep｜>JSON. */
#define CHAT_DS_COMMON_                                                                                                   \
    .stop = CHAT_DS_EOS, .bos = CHAT_DS_BOS, .system = "", .user = CHAT_DS_USER, .assistant = CHAT_DS_ASSISTANT, .end = "", \
    .reply_end = CHAT_DS_EOS, .result_begin = CHAT_DS_OUT_BEGIN, .result_end = CHAT_DS_OUT_END
#define CHAT_DS_CALLS_(ty, csep, argb, arge)                                                                              \
    {.section_begin = CHAT_DS_CALLS_BEGIN, .section_end = CHAT_DS_CALLS_END, .call_sep = csep, .call_begin = CHAT_DS_CALL_BEGIN, \
     .call_end = CHAT_DS_CALL_END, .sep = CHAT_DS_SEP, .typed = ty, .name_prefix = "", .args_begin = argb, .args_end = arge}

static const chat_fmt_info chat_fmts_[CHAT_NFMT] = {
    [CHAT_GLM5] = {
        .name = "GLM-5",
        .tokens = {CHAT_GLM_GMASK, CHAT_GLM_SOP, CHAT_GLM_SYSTEM, CHAT_GLM_USER, CHAT_GLM_ASSISTANT, CHAT_THINK_BEGIN, CHAT_THINK_END},
        .bos = CHAT_GLM_GMASK CHAT_GLM_SOP, .system = CHAT_GLM_SYSTEM, .user = CHAT_GLM_USER, .assistant = CHAT_GLM_ASSISTANT,
        .end = "", .reply_end = "",
        .thinks = CHAT_THINKS_ASKED, .think_begin = CHAT_THINK_BEGIN, .think_end = CHAT_THINK_END,
        .open_think = CHAT_THINK_BEGIN, .open_plain = CHAT_THINK_END,
        .tools_begin = CHAT_GLM_SYSTEM "\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                       "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
        .tools_end = "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
                     CHAT_GLM_CALL_BEGIN "{function-name}" CHAT_GLM_KEY_BEGIN "{arg-key-1}" CHAT_GLM_KEY_END CHAT_GLM_VALUE_BEGIN
                     "{arg-value-1}" CHAT_GLM_VALUE_END CHAT_GLM_KEY_BEGIN "{arg-key-2}" CHAT_GLM_KEY_END CHAT_GLM_VALUE_BEGIN
                     "{arg-value-2}" CHAT_GLM_VALUE_END "..." CHAT_GLM_CALL_END,
        .calls = {.call_sep = "", .call_begin = CHAT_GLM_CALL_BEGIN, .call_end = CHAT_GLM_CALL_END, .key_begin = CHAT_GLM_KEY_BEGIN,
                  .key_end = CHAT_GLM_KEY_END, .value_begin = CHAT_GLM_VALUE_BEGIN, .value_end = CHAT_GLM_VALUE_END},
        .results_begin = "<|observation|>", .result_begin = "<tool_response>", .result_end = "</tool_response>",
    },
    [CHAT_DEEPSEEK3] = {
        .name = "DeepSeek-V3", CHAT_DS_COMMON_,
        .tokens = {CHAT_DS_BOS, CHAT_DS_EOS, CHAT_DS_USER, CHAT_DS_ASSISTANT},
        .thinks = CHAT_THINKS_NEVER, .open_plain = "",
        .calls = CHAT_DS_CALLS_(1, "\n", "\n```json\n", "\n```"),
        .results_begin = CHAT_DS_OUTS_BEGIN, .results_end = CHAT_DS_OUTS_END,
    },
    [CHAT_DEEPSEEK_R1] = {
        .name = "DeepSeek-R1", CHAT_DS_COMMON_,
        .tokens = {CHAT_DS_BOS, CHAT_DS_EOS, CHAT_DS_USER, CHAT_DS_ASSISTANT, CHAT_THINK_BEGIN},
        .thinks = CHAT_THINKS_ALWAYS, .think_begin = CHAT_THINK_BEGIN, .think_end = CHAT_THINK_END, .open_think = CHAT_THINK_BEGIN "\n",
        .calls = CHAT_DS_CALLS_(1, "\n", "\n```json\n", "\n```"),
        .results_begin = CHAT_DS_OUTS_BEGIN, .results_end = CHAT_DS_OUTS_END,
    },
    [CHAT_DEEPSEEK_V31] = {
        .name = "DeepSeek-V3.1", CHAT_DS_COMMON_,
        .tokens = {CHAT_DS_BOS, CHAT_DS_EOS, CHAT_DS_USER, CHAT_DS_ASSISTANT, CHAT_THINK_BEGIN, CHAT_THINK_END},
        .thinks = CHAT_THINKS_ASKED, .think_begin = CHAT_THINK_BEGIN, .think_end = CHAT_THINK_END,
        .open_think = CHAT_THINK_BEGIN, .open_plain = CHAT_THINK_END,
        .calls = CHAT_DS_CALLS_(0, "", "", ""), /* and no <｜tool▁outputs▁begin｜> around results */
    },
    [CHAT_KIMI_K2] = {
        .name = "Kimi K2",
        .tokens = {CHAT_KIMI_SYSTEM, CHAT_KIMI_USER, CHAT_KIMI_ASSISTANT, CHAT_KIMI_MIDDLE, CHAT_KIMI_END},
        .stop = CHAT_KIMI_END, .bos = "", .system = CHAT_KIMI_SYSTEM "system" CHAT_KIMI_MIDDLE, .user = CHAT_KIMI_USER "user" CHAT_KIMI_MIDDLE,
        .assistant = CHAT_KIMI_ASSISTANT "assistant" CHAT_KIMI_MIDDLE, .tool = CHAT_KIMI_SYSTEM "tool" CHAT_KIMI_MIDDLE,
        .end = CHAT_KIMI_END, .reply_end = CHAT_KIMI_END, .default_system = CHAT_KIMI_DEFAULT_SYSTEM,
        .thinks = CHAT_THINKS_NEVER, .open_plain = "",
        .tools_begin = CHAT_KIMI_SYSTEM "tool_declare" CHAT_KIMI_MIDDLE, .tools_end = CHAT_KIMI_END,
        .calls = {.section_begin = "<|tool_calls_section_begin|>", .section_end = "<|tool_calls_section_end|>", .call_sep = "",
                  .call_begin = "<|tool_call_begin|>", .call_end = "<|tool_call_end|>", .sep = "<|tool_call_argument_begin|>",
                  .name_prefix = "functions.", .index_sep = ":", .args_begin = "", .args_end = ""},
    },
    [CHAT_DEEPSEEK_R1_JAN] = { /* R1's first template: no <think> opened, earlier replies cut at </think> */
        .name = "DeepSeek-R1 (January 2025)", CHAT_DS_COMMON_,
        .tokens = {CHAT_DS_BOS, CHAT_DS_EOS, CHAT_DS_USER, CHAT_DS_ASSISTANT},
        .thinks = CHAT_THINKS_NEVER, .think_begin = CHAT_THINK_BEGIN, .think_end = CHAT_THINK_END, .open_plain = "",
        .calls = CHAT_DS_CALLS_(1, "\n", "\n```json\n", "\n```"),
        .results_begin = CHAT_DS_OUTS_BEGIN, .results_end = CHAT_DS_OUTS_END,
    },
};

static inline const chat_fmt_info *chat_info(int fmt) { return &chat_fmts_[fmt >= 0 && fmt < CHAT_NFMT ? fmt : 0]; }

/* Whether a reply starts inside a thinking block: R1 always, GLM-5 and
 * V3.1 when asked (think), DeepSeek-V3 and Kimi K2 never. */
static inline int chat_thinks(int fmt, int think) {
    int t = chat_info(fmt)->thinks;
    return t == CHAT_THINKS_ALWAYS || (t == CHAT_THINKS_ASKED && think);
}

/* The text that opens a reply's tool calls: the section's tag, else the
 * first call's. */
static inline const char *chat_calls_open(int fmt) {
    const gr_tool_syntax *c = &chat_info(fmt)->calls;
    return c->section_begin ? c->section_begin : c->call_begin;
}

/* The k-th (0..CHAT_NTAGS_-1) tool-call tag of format f, or NULL: its call
 * syntax's tags (special tokens; the rest of the syntax is text), then
 * think_end when its replies can think (a forced grammar closes the
 * reasoning block first). */
#define CHAT_NTAGS_ 10
static inline const char *chat_tool_tag_(int f, int k) {
    const chat_fmt_info *i = chat_info(f);
    const gr_tool_syntax *c = &i->calls;
    const char *tag[CHAT_NTAGS_] = {c->section_begin, c->section_end, c->call_begin, c->call_end, c->key_begin, c->key_end,
                                    c->value_begin, c->value_end, c->sep, i->thinks != CHAT_THINKS_NEVER ? i->think_end : NULL};
    return tag[k];
}

/* The tags a forced tool-call grammar of format fmt writes (fmt < 0:
 * every format's), each once: what session.h keeps out of every other
 * grammar's masks. Writes at most max to out; returns the count, which may
 * exceed max. */
static inline int chat_tool_tags(int fmt, const char **out, int max) {
    int n = 0, f0 = fmt < 0 ? 0 : fmt, f1 = fmt < 0 ? CHAT_NFMT : fmt + 1;
    for (int f = f0; f < f1; f++)
        for (int k = 0; k < CHAT_NTAGS_; k++) {
            const char *t = chat_tool_tag_(f, k);
            int seen = !t;
            for (int g = f0; g <= f && !seen; g++) /* the same string earlier in the scan */
                for (int j = 0; j < (g < f ? CHAT_NTAGS_ : k) && !seen; j++) seen = chat_tool_tag_(g, j) && !strcmp(chat_tool_tag_(g, j), t);
            if (seen) continue;
            if (n < max) out[n] = t;
            n++;
        }
    return n;
}

/* Whether p (at "{%") is the block tag {% word %} (whitespace control
 * "-" or "+" allowed on either side); *end is past its "%}". */
static inline int chat_jinja_tag_(const char *p, const char *word, const char **end) {
    p += 2;
    if (*p == '-' || *p == '+') p++;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    size_t l = strlen(word);
    if (strncmp(p, word, l)) return 0;
    p += l;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p == '-' || *p == '+') p++;
    if (p[0] != '%' || p[1] != '}') return 0;
    *end = p + 2;
    return 1;
}

/* Copies tpl into out (room for strlen(tpl) + 1) without its Jinja
 * comments, found as Jinja's lexer finds them: "{#" ... "#}" in the text
 * (an unclosed one runs to the end), not inside a {{ }} or {% %} block,
 * whose quoted strings may hold "{#", and not between {% raw %} and
 * {% endraw %}. What a comment holds is never rendered, so it is no
 * marker of the template's format. */
static inline void chat_jinja_uncomment_(const char *tpl, char *out) {
    const char *p = tpl;
    char *o = out;
    while (*p) {
        if (p[0] != '{' || (p[1] != '#' && p[1] != '{' && p[1] != '%')) { *o++ = *p++; continue; }
        if (p[1] == '#') { /* a comment: dropped */
            const char *e = strstr(p + 2, "#}");
            p = e ? e + 2 : p + strlen(p);
            continue;
        }
        const char *end;
        if (p[1] == '%' && chat_jinja_tag_(p, "raw", &end)) { /* raw text up to {% endraw %}, comments and all */
            const char *q = end;
            while (*q && !(q[0] == '{' && q[1] == '%' && chat_jinja_tag_(q, "endraw", &end))) q++;
            size_t n = (size_t)((*q ? end : q) - p);
            memcpy(o, p, n), o += n, p += n;
            continue;
        }
        char close = p[1] == '{' ? '}' : '%', quote = 0; /* a block, through its closing delimiter */
        *o++ = *p++, *o++ = *p++;
        while (*p && (quote || p[0] != close || p[1] != '}')) {
            if (quote && *p == '\\' && p[1]) *o++ = *p++;
            else if (quote ? *p == quote : (*p == '\'' || *p == '"')) quote = quote ? 0 : *p;
            *o++ = *p++;
        }
        if (*p) *o++ = *p++, *o++ = *p++;
    }
    *o = 0;
}

/* The format of a template's text without its comments, or -1. The
 * markers are the role tokens each family's template spells, then what
 * DeepSeek's templates write after <｜Assistant｜> (V3.1: "</think>" for a
 * non-thinking reply; R1: "<think>"), else whether they mention "</think>"
 * at all (R1's January template cuts earlier replies at it; V3's never
 * names it). */
static inline int chat_fmt_of_text_(const char *tpl) {
    if (strstr(tpl, CHAT_KIMI_USER) && strstr(tpl, CHAT_KIMI_ASSISTANT)) return CHAT_KIMI_K2;
    if (strstr(tpl, CHAT_DS_USER) && strstr(tpl, CHAT_DS_ASSISTANT)) {
        if (strstr(tpl, CHAT_DS_ASSISTANT CHAT_THINK_END)) return CHAT_DEEPSEEK_V31;
        if (strstr(tpl, CHAT_DS_ASSISTANT CHAT_THINK_BEGIN)) return CHAT_DEEPSEEK_R1;
        if (strstr(tpl, CHAT_THINK_END)) return CHAT_DEEPSEEK_R1_JAN; /* drops reasoning from history, no <think> opened */
        return CHAT_DEEPSEEK3;
    }
    if (strstr(tpl, CHAT_GLM_GMASK) && strstr(tpl, CHAT_GLM_ASSISTANT)) return CHAT_GLM5;
    return -1;
}

/* The format a template is written for (chat_fmt_of_text_ after its Jinja
 * comments are left out), -1 for none, or -2 (out of memory). */
static inline int chat_fmt_of_template(const char *tpl) {
    char *text = (char *)malloc(strlen(tpl) + 1);
    if (!text) return -2;
    chat_jinja_uncomment_(tpl, text);
    int fmt = chat_fmt_of_text_(text);
    free(text);
    return fmt;
}

static inline int chat_has_added_(const tok *t, const char *s) {
    int id = tok_find(t, s);
    return id >= 0 && (t->flags[id] & TOK_F_ADDED);
}

/* The format a tokenizer's special tokens point to (no template shipped),
 * or -1. DeepSeek's tokens alone cannot tell V3 from R1 or V3.1: V3. */
static inline int chat_fmt_of_tokens(const tok *t) {
    if (chat_has_added_(t, CHAT_GLM_GMASK) && chat_has_added_(t, CHAT_GLM_ASSISTANT)) return CHAT_GLM5;
    if (chat_has_added_(t, CHAT_DS_USER) && chat_has_added_(t, CHAT_DS_ASSISTANT)) return CHAT_DEEPSEEK3;
    if (chat_has_added_(t, CHAT_KIMI_USER) && chat_has_added_(t, CHAT_KIMI_ASSISTANT)) return CHAT_KIMI_K2;
    return -1;
}

/* Checks that the tokenizer has every added token the format writes.
 * 0, or -1 with the missing token named in err. */
static inline int chat_check(const tok *t, int fmt, char *err, size_t errlen) {
    const chat_fmt_info *f = chat_info(fmt);
    for (int i = 0; f->tokens[i]; i++)
        if (!chat_has_added_(t, f->tokens[i])) {
            if (err) snprintf(err, errlen, "%s: added_tokens: no \"%s\" (the %s chat template needs it)", t->name, f->tokens[i], f->name);
            return -1;
        }
    return 0;
}

/* Reads the chat template shipped in dir: tokenizer_config.json's
 * "chat_template" (a string, or a list of {name, template} where "default"
 * counts), else chat_template.jinja. Returns a malloc'd string, NULL with
 * *bad = 0 when there is none, or NULL with *bad = 1 and err naming the
 * file and field. */
static inline char *chat_template_read(const char *dir, int *bad, char *err, size_t errlen) {
    char path[4096];
    size_t len;
    *bad = 0;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *text = compat_read_file(path, 64u << 20, &len), *out = NULL;
    if (text) {
        char jerr[200];
        js_doc *d = js_parse(text, len, jerr, sizeof jerr);
        free(text);
        if (!d) return *bad = 1, snprintf(err, errlen, "%s: not valid JSON: %s", path, jerr), NULL;
        int ct = js_get(d, d->root, "chat_template");
        if (js_typeof(d, ct) == JS_STR && strlen(js_str(d, ct)) != js_str_len(d, ct)) /* "\u0000": C strings would cut it there */
            return js_free(d), *bad = 1, snprintf(err, errlen, "%s: chat_template holds a NUL character (\\u0000)", path), NULL;
        if (js_typeof(d, ct) == JS_STR) out = strdup(js_str(d, ct));
        else if (js_typeof(d, ct) == JS_ARR) {
            int k = 0;
            for (int e = js_first(d, ct); e >= 0; e = js_next(d, e), k++) {
                int nn = js_get(d, e, "name"), tn = js_get(d, e, "template");
                const char *nm = js_str(d, nn), *tp = js_str(d, tn);
                if ((nm && strlen(nm) != js_str_len(d, nn)) || (tp && strlen(tp) != js_str_len(d, tn))) {
                    snprintf(err, errlen, "%s: chat_template[%d].%s holds a NUL character (\\u0000)", path, k, nm && strlen(nm) != js_str_len(d, nn) ? "name" : "template");
                    js_free(d), free(out);
                    return *bad = 1, NULL;
                }
                if (nm && tp && !strcmp(nm, "default") && !out && !(out = strdup(tp)))
                    return js_free(d), *bad = 1, snprintf(err, errlen, "%s: chat_template: out of memory", path), NULL;
            }
            if (!out) *bad = 1, snprintf(err, errlen, "%s: chat_template: a list without a \"default\" template", path);
        } else if (ct >= 0 && js_typeof(d, ct) != JS_NULL)
            *bad = 1, snprintf(err, errlen, "%s: chat_template must be a string or a list of {name, template}", path);
        if (!*bad && js_typeof(d, ct) == JS_STR && !out) *bad = 1, snprintf(err, errlen, "%s: chat_template: out of memory", path);
        js_free(d);
        if (out || *bad) return out;
    } else if (errno != ENOENT)
        return *bad = 1, snprintf(err, errlen, "%s: %s", path, errno == ENOMEM ? "out of memory" : compat_strerror(errno)), NULL;
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if ((out = compat_read_file(path, 64u << 20, &len))) {
        if (strlen(out) != len) return free(out), *bad = 1, snprintf(err, errlen, "%s: holds a NUL byte", path), NULL;
        return out;
    }
    if (errno != ENOENT) *bad = 1, snprintf(err, errlen, "%s: %s", path, errno == ENOMEM ? "out of memory" : compat_strerror(errno));
    return NULL;
}

/* The model's chat format: from its template when it ships one, else from
 * the tokenizer's special tokens; then its tokens checked. 0 with *fmt, or
 * -1 with err saying why (an unreadable or unrecognised template, no chat
 * tokens, a missing token). */
static inline int chat_select(const char *dir, const tok *t, int *fmt, char *err, size_t errlen) {
    int bad;
    char *tpl = chat_template_read(dir, &bad, err, errlen);
    if (bad) return -1;
    if (tpl) {
        *fmt = chat_fmt_of_template(tpl);
        free(tpl);
        if (*fmt == -2) return snprintf(err, errlen, "%s: out of memory reading the chat template", dir), -1;
        if (*fmt < 0) {
            snprintf(err, errlen, "%s: the chat template that ships with the model is none colibri renders (GLM-5, DeepSeek-V3, R1, V3.1, Kimi K2)", dir);
            return -1;
        }
    } else if ((*fmt = chat_fmt_of_tokens(t)) < 0) {
        snprintf(err, errlen, "%s: no chat template ships with the model and its special tokens are none of GLM-5's, DeepSeek's or Kimi's", t->name);
        return -1;
    }
    return chat_check(t, *fmt, err, errlen);
}

/* Joins n parts into buf like snprintf (at most cap bytes with the NUL);
 * returns the full length. */
static inline size_t chat_join_(const char *const *part, int n, char *buf, size_t cap) {
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(part[i]);
        if (cap && o < cap - 1) memcpy(buf + o, part[i], l < cap - 1 - o ? l : cap - 1 - o);
        o += l;
    }
    if (cap) buf[o < cap - 1 ? o : cap - 1] = 0;
    return o;
}

/* What the generation prompt writes after the assistant header. */
static inline const char *chat_open_(int fmt, int think) {
    const chat_fmt_info *f = chat_info(fmt);
    return chat_thinks(fmt, think) ? f->open_think : f->open_plain;
}

/* The prompt for one optional system turn (NULL: none, or the format's
 * default) and one user turn (NULL counts as ""), with the generation
 * prompt, as the format's template renders it. Writes at most cap bytes
 * with the NUL; returns the length. */
static inline size_t chat_text(int fmt, const char *system, const char *user, int think, char *buf, size_t cap) {
    const chat_fmt_info *f = chat_info(fmt);
    const char *sys = system ? system : f->default_system, *p[10];
    int n = 0;
    p[n++] = f->bos;
    if (sys) p[n++] = f->system, p[n++] = sys, p[n++] = f->end;
    p[n++] = f->user, p[n++] = user ? user : "", p[n++] = f->end;
    p[n++] = f->assistant, p[n++] = chat_open_(fmt, think);
    return chat_join_(p, n, buf, cap);
}

/* A follow-up user turn of --chat mode (see the top of this file). */
static inline size_t chat_turn_text(int fmt, const char *user, int think, char *buf, size_t cap) {
    const chat_fmt_info *f = chat_info(fmt);
    const char *p[6] = {f->reply_end, f->user, user ? user : "", f->end, f->assistant, chat_open_(fmt, think)};
    return chat_join_(p, 6, buf, cap);
}

/* Appends the ids of a rendering (first turn when turn == 0, else a
 * follow-up turn): the text encoded, as apply_chat_template(tokenize=True)
 * does. 0, -1 (out of memory) or -2 (a token the format writes is not an
 * added token; chat_check says which). */
static inline int chat_encode_(const tok *t, int fmt, int turn, const char *system, const char *user, int think, tok_ids *out) {
    if (chat_check(t, fmt, NULL, 0)) return -2;
    size_t n = turn ? chat_turn_text(fmt, user, think, NULL, 0) : chat_text(fmt, system, user, think, NULL, 0);
    char *buf = (char *)malloc(n + 1);
    if (!buf) return -1;
    if (turn) chat_turn_text(fmt, user, think, buf, n + 1);
    else chat_text(fmt, system, user, think, buf, n + 1);
    int rc = tok_encode(t, buf, n, out);
    free(buf);
    return rc;
}

static inline int chat_encode(const tok *t, int fmt, const char *system, const char *user, int think, tok_ids *out) {
    return chat_encode_(t, fmt, 0, system, user, think, out);
}

static inline int chat_encode_turn(const tok *t, int fmt, const char *user, int think, tok_ids *out) {
    return chat_encode_(t, fmt, 1, NULL, user, think, out);
}

/* The id of the format's end-of-turn token in t, or -1 (GLM-5: its stop
 * tokens come from generation_config.json). */
static inline int chat_stop_id(const tok *t, int fmt) {
    const char *s = chat_info(fmt)->stop;
    return s ? tok_find(t, s) : -1;
}

#endif
