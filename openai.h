/* openai.h — the OpenAI-compatible protocol of serve mode, without I/O:
 * request bodies parsed and checked (oai_parse), chat messages rendered
 * in the model's chat format (oai_render: GLM-5 below; DeepSeek-V3, R1,
 * V3.1 and Kimi K2 as their templates render, oai_render_ds_ and
 * oai_render_kimi_), generated text split into reasoning, content and tool
 * calls with stop strings applied (oai_out; each format's call syntax
 * parsed by oai_parse_calls), and the response documents (oai_*_json).
 * Prefix: oai_.
 *
 * GLM-5's template (docs/serve.md): "[gMASK]<sop>", the tools block as a
 * system turn when tools are given, then per message <|system|>text,
 * <|user|>text, <|assistant|> + "<think>reasoning</think>" (turns after the
 * last user message) or "</think>" (earlier ones) + content + tool calls
 * "<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>",
 * <|observation|> once per run of tool results, each
 * "<tool_response>text</tool_response>"; then "<|assistant|><think>"
 * (thinking) or "<|assistant|></think>". A system + user request renders
 * exactly as PROMPT/SYSTEM do (chat.h chat_text). Every string of a format
 * comes from its row of chat.h's table.
 *
 * Must not: read the environment, print, or touch the model. */
#ifndef COLI_OPENAI_H
#define COLI_OPENAI_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "grammar.h"
#include "json.h"

#define OAI_MAX_STOP 16
#define OAI_MAX_TOP_LOGPROBS 20
#define OAI_MAX_TOOL_CALLS 16

/* What a client may ask for at most (serve mode's bounds). */
typedef struct {
    int max_messages; /* messages per request */
    int ctx;          /* the model's context: max_tokens is checked against it */
    int fmt;          /* the model's chat format (chat.h CHAT_*) */
} oai_limits;

typedef struct {
    int chat;   /* /v1/chat/completions, else /v1/completions */
    js_doc *d;  /* the body; strings below point into it */
    char *text; /* the rendered prompt (chat) or the raw prompt (completions) */
    size_t text_len;
    int *ids;   /* completions given token ids instead of text (ids[n_ids]), else NULL */
    int n_ids;
    int max_tokens; /* 0: until a stop token or the context */
    int has_temp, has_top_p, has_top_k, has_min_p, has_seed;
    double temp, top_p, min_p;
    int top_k;
    uint64_t seed;
    int stream, include_usage;
    int logprobs;     /* report each token's log-probability (chat: logprobs true; completions: logprobs N) */
    int top_logprobs; /* ... and this many alternatives (0..OAI_MAX_TOP_LOGPROBS) */
    const char *stop[OAI_MAX_STOP];
    size_t stop_len[OAI_MAX_STOP];
    int n_stop;
    int think;     /* the generation prompt opens a thinking block */
    int tools;     /* the tools array (node), or -1 */
    int parse_tools;
    const char *model;
    gr_grammar *gram; /* response_format's or tool_choice's grammar, or NULL */
    int gram_tools;   /* gram is tool_choice's: the format's tool-call tags may be sampled */
    int fmt;          /* the chat format it was rendered in */
} oai_req;

static inline void oai_req_free(oai_req *r) {
    js_free(r->d);
    free(r->text);
    free(r->ids);
    gr_free(r->gram);
    memset(r, 0, sizeof *r);
}

/* Why a request was refused: the message, and the request field at fault
 * (OpenAI's "param"; "" when no one field is). */
typedef struct {
    char msg[512];
    char param[96];
} oai_err;

static inline int oai_fail_(oai_err *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    return -1;
}

/* A field path with one index ("messages[%d].content") into buf[96]. */
static inline const char *oai_pk_(char *buf, const char *fmt, int k) {
    snprintf(buf, 96, fmt, k);
    return buf;
}

/* ------------------------------------------------------------ rendering */

static inline int oai_is_ws_(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static inline const char *oai_memmem_(const char *h, size_t hn, const char *n, size_t nn) {
    if (!nn || nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == n[0] && !memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

/* Appends s[0..n) with surrounding whitespace removed (Python's strip()
 * for ASCII whitespace). */
static inline void oai_put_strip_(jw *w, const char *s, size_t n) {
    while (n && oai_is_ws_(*s)) s++, n--;
    while (n && oai_is_ws_(s[n - 1])) n--;
    jw_raw(w, s, n);
}

/* A message's content: a string, null, or an array of text parts. Appends
 * it (stripped when strip) or fails with err. */
static inline int oai_content_(const js_doc *d, int c, jw *w, int strip, int k, oai_err *e) {
    jw tmp = {0};
    jw *o = strip ? &tmp : w;
    int rc = 0;
    if (js_typeof(d, c) == JS_STR) jw_raw(o, js_str(d, c), js_str_len(d, c));
    else if (js_typeof(d, c) == JS_ARR) {
        for (int p = js_first(d, c); p >= 0; p = js_next(d, p)) {
            int ty = js_get(d, p, "type"), tx = js_get(d, p, "text");
            const char *tys = js_str(d, ty);
            if (js_typeof(d, p) != JS_OBJ || !tys || strcmp(tys, "text") || js_typeof(d, tx) != JS_STR) {
                rc = oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].content", k), "messages[%d].content: only text parts ({\"type\": \"text\", \"text\": ...}) are supported", k);
                break;
            }
            jw_raw(o, js_str(d, tx), js_str_len(d, tx));
        }
    } else if (js_typeof(d, c) != JS_NULL)
        rc = oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].content", k), "messages[%d].content must be a string or an array of text parts", k);
    if (strip) {
        if (!rc && tmp.n) oai_put_strip_(w, tmp.s, tmp.n);
        jw_free(&tmp);
    }
    return rc;
}

/* One assistant tool call of the history with its arguments as tags (sx:
 * GLM-5's): {"function": {"name", "arguments"}} with arguments a JSON
 * object or a string holding one. */
static inline int oai_render_call_(const js_doc *d, int tc, const gr_tool_syntax *sx, jw *w, int k, oai_err *e) {
    int f = js_get(d, tc, "function");
    if (f < 0) f = tc;
    const char *name = js_str(d, js_get(d, f, "name"));
    if (!name || !*name) return oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].tool_calls", k), "messages[%d].tool_calls: a call without function.name", k);
    int a = js_get(d, f, "arguments");
    js_doc *ad = NULL;
    const js_doc *src = d;
    int obj = a;
    if (js_typeof(d, a) == JS_STR) {
        char jerr[120];
        ad = js_parse(js_str(d, a), js_str_len(d, a), jerr, sizeof jerr);
        if (!ad) return oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].tool_calls", k), "messages[%d].tool_calls[%s].arguments is not valid JSON: %s", k, name, jerr);
        src = ad, obj = ad->root;
    }
    int rc = 0;
    if (js_typeof(src, obj) != JS_OBJ && js_typeof(src, obj) != JS_NULL)
        rc = oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].tool_calls", k), "messages[%d].tool_calls[%s].arguments must be a JSON object", k, name);
    else {
        jw_lit(w, sx->call_begin);
        jw_lit(w, name);
        for (int m = js_first(src, obj); m >= 0; m = js_next(src, m)) {
            jw_lit(w, sx->key_begin);
            jw_raw(w, js_key(src, m), js_key_len(src, m));
            jw_lit(w, sx->key_end), jw_lit(w, sx->value_begin);
            if (js_typeof(src, m) == JS_STR) jw_raw(w, js_str(src, m), js_str_len(src, m));
            else jw_node(w, src, m, 1);
            jw_lit(w, sx->value_end);
        }
        jw_lit(w, sx->call_end);
    }
    js_free(ad);
    return rc;
}

static const char *const oai_msg_keys_[] = {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", NULL};

static inline int oai_known_(const char *k, const char *const *keys) {
    for (int i = 0; keys[i]; i++)
        if (!strcmp(k, keys[i])) return 1;
    return 0;
}

/* GLM-5's rendering of the messages (and tools) into r->text. */
static inline int oai_render_glm_(const js_doc *d, int msgs, int tools, int think, oai_req *r, oai_err *e) {
    const chat_fmt_info *f = chat_info(CHAT_GLM5);
    jw w = {0};
    int last_user = -1, k = 0, rc = 0, prev_tool = 0;
    for (int m = js_first(d, msgs); m >= 0; m = js_next(d, m), k++) {
        const char *role = js_str(d, js_get(d, m, "role"));
        if (role && !strcmp(role, "user")) last_user = k;
    }
    jw_lit(&w, f->bos);
    if (tools >= 0) {
        jw_lit(&w, f->tools_begin);
        for (int t = js_first(d, tools); t >= 0; t = js_next(d, t)) jw_node(&w, d, t, 1), jw_lit(&w, "\n");
        jw_lit(&w, f->tools_end);
    }
    k = 0;
    for (int m = js_first(d, msgs); m >= 0 && !rc; m = js_next(d, m), k++) {
        if (js_typeof(d, m) != JS_OBJ) { rc = oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d]", k), "messages[%d] is not an object", k); break; }
        for (int f = js_first(d, m); f >= 0; f = js_next(d, f))
            if (!oai_known_(js_key(d, f), oai_msg_keys_)) { rc = oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d]", k), "messages[%d]: unknown field \"%s\"", k, js_key(d, f)); break; }
        if (rc) break;
        const char *role = js_str(d, js_get(d, m, "role"));
        int c = js_get(d, m, "content");
        if (!role) { rc = oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].role", k), "messages[%d].role is missing or not a string", k); break; }
        int tool = !strcmp(role, "tool");
        if (!strcmp(role, "system") || !strcmp(role, "developer")) {
            jw_lit(&w, f->system);
            rc = oai_content_(d, c, &w, 0, k, e);
        } else if (!strcmp(role, "user")) {
            jw_lit(&w, f->user);
            rc = oai_content_(d, c, &w, 0, k, e);
        } else if (!strcmp(role, "assistant")) {
            jw_lit(&w, f->assistant);
            int rs = js_get(d, m, "reasoning_content");
            if (k > last_user) {
                jw_lit(&w, f->think_begin);
                if (js_typeof(d, rs) == JS_STR) oai_put_strip_(&w, js_str(d, rs), js_str_len(d, rs));
                jw_lit(&w, f->think_end);
            } else
                jw_lit(&w, f->think_end);
            rc = oai_content_(d, c, &w, 1, k, e);
            int tcs = js_get(d, m, "tool_calls");
            if (!rc && tcs >= 0 && js_typeof(d, tcs) != JS_ARR && js_typeof(d, tcs) != JS_NULL)
                rc = oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].tool_calls", k), "messages[%d].tool_calls must be an array", k);
            for (int tc = js_first(d, tcs); tc >= 0 && !rc; tc = js_next(d, tc)) rc = oai_render_call_(d, tc, &f->calls, &w, k, e);
        } else if (tool) {
            if (!prev_tool) jw_lit(&w, f->results_begin);
            jw_lit(&w, f->result_begin);
            rc = oai_content_(d, c, &w, 0, k, e);
            jw_lit(&w, f->result_end);
        } else
            rc = oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].role", k), "messages[%d].role \"%s\" is not one of system, user, assistant, tool", k, role);
        prev_tool = tool;
    }
    jw_lit(&w, f->assistant);
    jw_lit(&w, think ? f->open_think : f->open_plain);
    if (!rc && w.oom) rc = oai_fail_(e, NULL, "out of memory rendering the messages");
    if (rc) { jw_free(&w); return -1; }
    r->text = w.s, r->text_len = w.n;
    return 0;
}

/* A message's shape, for the formats other than GLM-5 (whose renderer
 * checks as it goes): an object of known fields with a known role. Returns
 * the role, or NULL with err. */
static inline const char *oai_msg_role_(const js_doc *d, int m, int k, oai_err *e) {
    if (js_typeof(d, m) != JS_OBJ) return oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d]", k), "messages[%d] is not an object", k), NULL;
    for (int f = js_first(d, m); f >= 0; f = js_next(d, f))
        if (!oai_known_(js_key(d, f), oai_msg_keys_)) return oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d]", k), "messages[%d]: unknown field \"%s\"", k, js_key(d, f)), NULL;
    const char *role = js_str(d, js_get(d, m, "role"));
    if (!role) return oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].role", k), "messages[%d].role is missing or not a string", k), NULL;
    if (!strcmp(role, "developer")) return "system";
    if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool"))
        return oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].role", k), "messages[%d].role \"%s\" is not one of system, user, assistant, tool", k, role), NULL;
    int tcs = js_get(d, m, "tool_calls");
    if (tcs >= 0 && js_typeof(d, tcs) != JS_ARR && js_typeof(d, tcs) != JS_NULL)
        return oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].tool_calls", k), "messages[%d].tool_calls must be an array", k), NULL;
    return role;
}

/* One history tool call's type, name and arguments text (a string as
 * given; an object written as Python's json.dumps would). */
static inline int oai_call_parts_(const js_doc *d, int tc, int k, const char **type, const char **name, jw *args, oai_err *e) {
    int f = js_get(d, tc, "function");
    if (f < 0) f = tc;
    *type = js_str(d, js_get(d, tc, "type"));
    if (!*type) *type = "function";
    *name = js_str(d, js_get(d, f, "name"));
    if (!*name || !**name) return oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].tool_calls", k), "messages[%d].tool_calls: a call without function.name", k);
    int a = js_get(d, f, "arguments");
    if (js_typeof(d, a) == JS_STR) jw_raw(args, js_str(d, a), js_str_len(d, a));
    else if (js_typeof(d, a) == JS_OBJ) jw_node(args, d, a, 1);
    else return oai_fail_(e, oai_pk_((char[96]){0}, "messages[%d].tool_calls", k), "messages[%d].tool_calls[%s].arguments must be a JSON object or a string holding one", k, *name);
    return 0;
}

/* Appends s[0..n) from after the first (last: R1's template) think_end,
 * or whole when it has none: DeepSeek's templates drop earlier reasoning. */
static inline void oai_put_after_think_(jw *w, const char *s, size_t n, const char *think_end, int last) {
    const char *from = NULL;
    size_t tl = strlen(think_end);
    for (const char *p = s; (p = oai_memmem_(p, (size_t)(s + n - p), think_end, tl)); p += tl) {
        from = p + tl;
        if (!last) break;
    }
    if (from) n -= (size_t)(from - s), s = from;
    jw_raw(w, s, n);
}

/* An assistant message's tool calls in DeepSeek's formats. first carries
 * the templates' is_first flag, which V3 and R1 never reset: a later
 * message's calls continue the first one's list. */
static inline int oai_ds_calls_(const js_doc *d, int m, int tcs, int fmt, int *first, jw *w, int k, oai_err *e) {
    const chat_fmt_info *f = chat_info(fmt);
    const gr_tool_syntax *sx = &f->calls;
    int c = js_get(d, m, "content"), v3 = fmt == CHAT_DEEPSEEK3;
    for (int tc = js_first(d, tcs); tc >= 0; tc = js_next(d, tc)) {
        const char *type, *name;
        jw args = {0};
        if (oai_call_parts_(d, tc, k, &type, &name, &args, e)) { jw_free(&args); return -1; }
        int rc = 0, opens = !*first;
        if (opens) {
            if (fmt != CHAT_DEEPSEEK_V31) jw_lit(w, f->assistant);
            if (fmt != CHAT_DEEPSEEK_R1 && js_typeof(d, c) != JS_NULL) rc = oai_content_(d, c, w, 0, k, e);
            jw_lit(w, sx->section_begin);
            *first = 1;
        } else
            jw_lit(w, sx->call_sep);
        jw_lit(w, sx->call_begin);
        if (sx->typed) jw_lit(w, type), jw_lit(w, sx->sep), jw_lit(w, name);
        else jw_lit(w, name), jw_lit(w, sx->sep);
        jw_lit(w, sx->args_begin), jw_raw(w, args.s ? args.s : "", args.n), jw_lit(w, sx->args_end);
        jw_lit(w, sx->call_end);
        if (v3 && !opens) jw_lit(w, sx->section_end), jw_lit(w, f->reply_end); /* V3's template closes after each later call, never after the first */
        jw_free(&args);
        if (rc) return -1;
    }
    if (!v3) jw_lit(w, sx->section_end), jw_lit(w, f->reply_end);
    return 0;
}

/* DeepSeek-V3, R1 (January 2025 and later) and V3.1: BOS, the system
 * messages (joined by a blank line; R1: the last one), then each turn as the
 * format's template writes it, tool results included; tools themselves are
 * not rendered (none of the templates does). V3's template renders an
 * assistant message's calls only when its content is null, keeps reasoning
 * in earlier replies, and puts a newline between tool results. */
static inline int oai_render_ds_(const js_doc *d, int msgs, int fmt, int think, jw *w, oai_err *e) {
    const chat_fmt_info *f = chat_info(fmt);
    int k = 0, rc = 0, v31 = fmt == CHAT_DEEPSEEK_V31, nsys = 0;
    jw_lit(w, f->bos);
    jw sys = {0};
    for (int m = js_first(d, msgs); m >= 0 && !rc; m = js_next(d, m), k++) {
        const char *role = oai_msg_role_(d, m, k, e);
        if (!role) rc = -1;
        else if (!strcmp(role, "system")) {
            if (fmt == CHAT_DEEPSEEK_R1) sys.n = 0;
            else if (nsys) jw_lit(&sys, "\n\n");
            nsys++;
            rc = oai_content_(d, js_get(d, m, "content"), &sys, 0, k, e);
        }
    }
    if (!rc && sys.n) jw_raw(w, sys.s, sys.n);
    jw_free(&sys);
    int first = 0, is_tool = 0, out_first = 1, last_user = 0;
    k = 0;
    for (int m = js_first(d, msgs); m >= 0 && !rc; m = js_next(d, m), k++) {
        const char *role = oai_msg_role_(d, m, k, e);
        int c = js_get(d, m, "content");
        if (!strcmp(role, "user")) {
            is_tool = 0;
            if (v31) first = 0, last_user = 1;
            jw_lit(w, f->user);
            rc = oai_content_(d, c, w, 0, k, e);
        } else if (!strcmp(role, "assistant")) {
            int tcs = js_get(d, m, "tool_calls"), cnull = c >= 0 && js_typeof(d, c) == JS_NULL;
            int calls = js_typeof(d, tcs) == JS_ARR && (fmt == CHAT_DEEPSEEK3 ? cnull : fmt != CHAT_DEEPSEEK_R1 || js_count(d, tcs));
            if (calls) {
                if (v31 && last_user) jw_lit(w, f->assistant), jw_lit(w, f->think_end);
                if (v31) last_user = 0, first = 0;
                is_tool = 0;
                if ((rc = oai_ds_calls_(d, m, tcs, fmt, &first, w, k, e))) break;
            }
            if (fmt == CHAT_DEEPSEEK_R1 || fmt == CHAT_DEEPSEEK3 ? cnull : calls) continue; /* V3: calls only without content */
            jw body = {0};
            rc = oai_content_(d, c, &body, 0, k, e);
            if (v31) {
                if (last_user) jw_lit(w, f->assistant), jw_lit(w, f->think_end);
                last_user = 0;
            }
            if (is_tool) {
                if (f->results_end) jw_lit(w, f->results_end);
                if (body.n) jw_raw(w, body.s, body.n);
                is_tool = 0;
            } else {
                if (!v31) jw_lit(w, f->assistant);
                if (body.n && !f->think_end) jw_raw(w, body.s, body.n); /* V3 (no reasoning tags) keeps replies whole */
                else if (body.n) oai_put_after_think_(w, body.s, body.n, f->think_end, !v31);
            }
            jw_lit(w, f->reply_end);
            jw_free(&body);
        } else if (!strcmp(role, "tool")) {
            is_tool = 1, last_user = 0;
            if (f->results_begin && out_first) jw_lit(w, f->results_begin), out_first = 0;
            else if (fmt == CHAT_DEEPSEEK_R1 || fmt == CHAT_DEEPSEEK3) jw_lit(w, "\n");
            jw_lit(w, f->result_begin);
            rc = oai_content_(d, c, w, 0, k, e);
            jw_lit(w, f->result_end);
        }
    }
    if (v31) {
        if (last_user && !is_tool) jw_lit(w, f->assistant), jw_lit(w, think ? f->open_think : f->open_plain);
    } else if (is_tool)
        jw_lit(w, f->results_end);
    else
        jw_lit(w, f->assistant), jw_lit(w, think ? f->open_think : f->open_plain);
    return rc;
}

/* Kimi K2: the tools as one "tool_declare" system block (JSON as Python's
 * json.dumps writes it), the default system message when the first message
 * is not one, each message under its role's header closed by <|im_end|>
 * (its tool calls are not rendered: the template writes content only). */
static inline int oai_render_kimi_(const js_doc *d, int msgs, int tools, jw *w, oai_err *e) {
    const chat_fmt_info *f = chat_info(CHAT_KIMI_K2);
    int k = 0, rc = 0;
    if (tools >= 0) jw_lit(w, f->tools_begin), jw_node(w, d, tools, 1), jw_lit(w, f->tools_end);
    for (int m = js_first(d, msgs); m >= 0 && !rc; m = js_next(d, m), k++) {
        const char *role = oai_msg_role_(d, m, k, e);
        if (!role) { rc = -1; break; }
        if (!k && strcmp(role, "system")) jw_lit(w, f->system), jw_lit(w, f->default_system), jw_lit(w, f->end);
        jw_lit(w, !strcmp(role, "system") ? f->system : !strcmp(role, "user") ? f->user : !strcmp(role, "assistant") ? f->assistant : f->tool);
        rc = oai_content_(d, js_get(d, m, "content"), w, 0, k, e);
        jw_lit(w, !strcmp(role, "assistant") ? f->reply_end : f->end);
    }
    jw_lit(w, f->assistant);
    return rc;
}

/* Renders the messages (and tools) of a chat request into r->text in the
 * model's chat format (r->fmt). */
static inline int oai_render(const js_doc *d, int msgs, int tools, int think, oai_req *r, oai_err *e) {
    if (r->fmt == CHAT_GLM5) return oai_render_glm_(d, msgs, tools, think, r, e);
    jw w = {0};
    int rc = r->fmt == CHAT_KIMI_K2 ? oai_render_kimi_(d, msgs, tools, &w, e) : oai_render_ds_(d, msgs, r->fmt, think, &w, e);
    if (!rc && w.oom) rc = oai_fail_(e, NULL, "out of memory rendering the messages");
    if (rc) { jw_free(&w); return -1; }
    r->text = w.s, r->text_len = w.n;
    return 0;
}

/* ------------------------------------------------------------ requests */

/* The fields each endpoint reads. Fields current SDKs send that change
 * nothing here (store, metadata, service_tier, user, prompt_cache_key,
 * safety_identifier, verbosity, prediction) are accepted and ignored; an
 * unknown field is refused by name, since a silently dropped field is a
 * silently wrong answer. */
static const char *const oai_chat_keys_[] = {"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                                             "temperature", "top_p", "top_k", "min_p", "seed", "stop", "tools", "tool_choice", "n",
                                             "response_format", "frequency_penalty", "presence_penalty", "logprobs", "top_logprobs", "user",
                                             "parallel_tool_calls", "chat_template_kwargs", "logit_bias", "reasoning_effort", "store",
                                             "metadata", "service_tier", "prompt_cache_key", "safety_identifier", "verbosity", "prediction",
                                             "modalities", NULL};
static const char *const oai_comp_keys_[] = {"model", "prompt", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k",
                                             "min_p", "seed", "stop", "n", "frequency_penalty", "presence_penalty", "logprobs", "user",
                                             "echo", "logit_bias", "suffix", "best_of", "store", "metadata", NULL};

/* A number field within [lo, hi]: 1 set, 0 absent or null, -1 refused. */
static inline int oai_num_(const js_doc *d, int obj, const char *key, double lo, double hi, int integer, double *out, oai_err *e) {
    int i = js_get(d, obj, key);
    if (i < 0 || js_typeof(d, i) == JS_NULL) return 0;
    if (!js_is_num(d, i) || (integer && !js_is_int(d, i))) return oai_fail_(e, key, "%s must be %s", key, integer ? "an integer" : "a number");
    double v = js_num(d, i);
    if (!(v >= lo && v <= hi)) return oai_fail_(e, key, "%s = %g is outside [%g, %g]", key, v, lo, hi);
    *out = v;
    return 1;
}

static inline int oai_bool_(const js_doc *d, int obj, const char *key, int *out, oai_err *e) {
    int i = js_get(d, obj, key);
    if (i < 0 || js_typeof(d, i) == JS_NULL) return 0;
    if (!js_is_bool(d, i)) return oai_fail_(e, key, "%s must be true or false", key);
    *out = js_typeof(d, i) == JS_TRUE;
    return 1;
}

/* A field that must be absent or carry the one value this server honours. */
static inline int oai_only_(const js_doc *d, int obj, const char *key, double want, const char *why, oai_err *e) {
    double v = want;
    int r = oai_num_(d, obj, key, -1e9, 1e9, 0, &v, e);
    if (r < 0) return -1;
    if (r && v != want) return oai_fail_(e, key, "%s = %g is not supported (%s)", key, v, why);
    return 0;
}

/* Refuses a grammar the recognizer cannot follow (grammar.h gr_check), so
 * the request fails here and not mid-answer. */
static inline int oai_followable_(oai_req *r, const char *param, oai_err *e) {
    char why[300];
    int rule, rc = gr_check(r->gram, &rule, why, sizeof why);
    if (!rc) return 0;
    return rc == -2 ? oai_fail_(e, param, "%s: %s", param, why) : oai_fail_(e, NULL, "%s", why);
}

/* response_format: "text", "json_object" (any JSON object) or
 * "json_schema" ({"json_schema": {"name", "schema", "strict", ...}}):
 * the answer's grammar in r->gram. */
static inline int oai_response_format_(const js_doc *d, int rf, oai_req *r, oai_err *e) {
    const char *t = js_str(d, js_get(d, rf, "type"));
    if (js_typeof(d, rf) != JS_OBJ || !t) return oai_fail_(e, "response_format", "response_format must be an object with a type");
    if (!strcmp(t, "text")) return 0;
    char *gbnf = NULL, gerr[300];
    if (!strcmp(t, "json_object")) {
        size_t n = strlen(gr_js_prims_) + 40;
        if (!(gbnf = (char *)malloc(n))) return oai_fail_(e, NULL, "out of memory");
        snprintf(gbnf, n, "%sroot ::= ws jobject ws\n", gr_js_prims_);
    } else if (!strcmp(t, "json_schema")) {
        int js = js_get(d, rf, "json_schema"), sc = js_get(d, js, "schema");
        if (js_typeof(d, js) != JS_OBJ || sc < 0) return oai_fail_(e, "response_format.json_schema.schema", "response_format.json_schema.schema is missing");
        for (int f = js_first(d, js); f >= 0; f = js_next(d, f)) {
            const char *k = js_key(d, f);
            if (strcmp(k, "name") && strcmp(k, "schema") && strcmp(k, "strict") && strcmp(k, "description"))
                return oai_fail_(e, "response_format.json_schema", "response_format.json_schema: unknown field \"%s\"", k);
        }
        if (!(gbnf = gr_json_schema(d, sc, gerr, sizeof gerr))) return oai_fail_(e, "response_format.json_schema.schema", "response_format.json_schema.schema: %s", gerr);
    } else
        return oai_fail_(e, "response_format", "response_format type \"%s\" is not one of text, json_object, json_schema", t);
    r->gram = gr_parse(gbnf, strlen(gbnf), "root", gerr, sizeof gerr);
    free(gbnf);
    if (!r->gram) return oai_fail_(e, "response_format", "response_format: the grammar written for it is refused (%s)", gerr);
    return oai_followable_(r, "response_format", e);
}

/* tool_choice: "auto", "none" (no tools rendered), "required" (one or more
 * calls; one with parallel_tool_calls false) or {"type": "function",
 * "function": {"name": X}} (one call to X): the last two constrain the
 * answer to the format's tool-call syntax with arguments their schemas
 * allow (r->gram, r->gram_tools). */
static inline int oai_tool_choice_(const js_doc *d, int o, int tc, oai_req *r, oai_err *e) {
    const char *tcs = js_str(d, tc), *only = NULL;
    if (tcs && !strcmp(tcs, "none")) return r->tools = -1, 0;
    if (tcs && !strcmp(tcs, "auto")) return 0;
    if (!tcs) {
        const char *ty = js_str(d, js_get(d, tc, "type"));
        only = js_str(d, js_get(d, js_get(d, tc, "function"), "name"));
        if (js_typeof(d, tc) != JS_OBJ || !ty || strcmp(ty, "function") || !only)
            return oai_fail_(e, "tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (strcmp(tcs, "required"))
        return oai_fail_(e, "tool_choice", "tool_choice \"%s\" is not one of auto, none, required", tcs);
    if (r->tools < 0) return oai_fail_(e, "tool_choice", "tool_choice %s needs tools", only ? "names a function, which" : "\"required\"");
    if (r->gram) return oai_fail_(e, "tool_choice", "tool_choice %s and a JSON response_format cannot both constrain the answer", only ? "naming a function" : "\"required\"");
    int many = 1;
    if (oai_bool_(d, o, "parallel_tool_calls", &many, e) < 0) return -1;
    char gerr[300];
    const chat_fmt_info *f = chat_info(r->fmt);
    int max_calls = many ? OAI_MAX_TOOL_CALLS : 1; /* a forced turn ends: at most this many calls, then the end token */
    char *gbnf = gr_tool_calls(d, r->tools, &f->calls, only, max_calls, r->think ? f->think_end : NULL, gerr, sizeof gerr);
    if (!gbnf) return oai_fail_(e, "tool_choice", "tool_choice: %s", gerr);
    r->gram = gr_parse(gbnf, strlen(gbnf), "root", gerr, sizeof gerr);
    free(gbnf);
    if (!r->gram) return oai_fail_(e, "tool_choice", "tool_choice: the grammar written for the tools is refused (%s)", gerr);
    r->gram_tools = 1;
    return oai_followable_(r, "tools", e);
}

/* stream_options: {"include_usage": bool}; SDKs may add
 * "include_obfuscation", which changes nothing here. */
static inline int oai_stream_options_(const js_doc *d, int so, oai_req *r, oai_err *e) {
    if (so < 0 || js_typeof(d, so) == JS_NULL) return 0;
    if (js_typeof(d, so) != JS_OBJ) return oai_fail_(e, "stream_options", "stream_options must be an object");
    for (int f = js_first(d, so); f >= 0; f = js_next(d, f))
        if (strcmp(js_key(d, f), "include_usage") && strcmp(js_key(d, f), "include_obfuscation"))
            return oai_fail_(e, "stream_options", "stream_options: unknown field \"%s\"", js_key(d, f));
    int ob = 0;
    if (oai_bool_(d, so, "include_obfuscation", &ob, e) < 0) return -1;
    return oai_bool_(d, so, "include_usage", &r->include_usage, e) < 0 ? -1 : 0;
}

/* stop: a string or up to OAI_MAX_STOP strings of at most 256 bytes. */
static inline int oai_stop_(const js_doc *d, int st, oai_req *r, oai_err *e) {
    if (js_typeof(d, st) == JS_STR) {
        if (js_str_len(d, st)) r->stop[0] = js_str(d, st), r->stop_len[0] = js_str_len(d, st), r->n_stop = 1;
    } else if (js_typeof(d, st) == JS_ARR) {
        if (js_count(d, st) > OAI_MAX_STOP) return oai_fail_(e, "stop", "stop: at most %d sequences", OAI_MAX_STOP);
        for (int x = js_first(d, st); x >= 0; x = js_next(d, x)) {
            if (js_typeof(d, x) != JS_STR) return oai_fail_(e, "stop", "stop must be a string or an array of strings");
            if (js_str_len(d, x)) r->stop[r->n_stop] = js_str(d, x), r->stop_len[r->n_stop++] = js_str_len(d, x);
        }
    } else if (st >= 0 && js_typeof(d, st) != JS_NULL)
        return oai_fail_(e, "stop", "stop must be a string or an array of strings");
    for (int i = 0; i < r->n_stop; i++)
        if (r->stop_len[i] > 256) return oai_fail_(e, "stop", "stop: a sequence longer than 256 bytes");
    return 0;
}

/* The fields both endpoints share: stream, max_tokens, sampling, seed,
 * fields that must keep their neutral value, stop. */
static inline int oai_common_(const js_doc *d, int o, int chat, oai_req *r, oai_err *e) {
    double v;
    int s;
    if (oai_bool_(d, o, "stream", &r->stream, e) < 0 || oai_stream_options_(d, js_get(d, o, "stream_options"), r, e)) return -1;
    /* max_tokens beyond the context is clamped to the room the prompt leaves (http.h), as peers do */
    const char *mt = chat && js_get(d, o, "max_completion_tokens") >= 0 ? "max_completion_tokens" : "max_tokens";
    if ((s = oai_num_(d, o, mt, 1, 2147483647.0, 1, &v, e)) < 0) return -1;
    r->max_tokens = s ? (int)v : 0;
    if ((s = oai_num_(d, o, "temperature", 0, 2, 0, &v, e)) < 0) return -1;
    r->has_temp = s, r->temp = s ? v : 0;
    if ((s = oai_num_(d, o, "top_p", 0, 1, 0, &v, e)) < 0) return -1;
    r->has_top_p = s, r->top_p = s ? v : 1;
    if ((s = oai_num_(d, o, "top_k", 0, 1 << 30, 1, &v, e)) < 0) return -1;
    r->has_top_k = s, r->top_k = s ? (int)v : 0;
    if ((s = oai_num_(d, o, "min_p", 0, 1, 0, &v, e)) < 0) return -1;
    r->has_min_p = s, r->min_p = s ? v : 0;
    if ((s = oai_num_(d, o, "seed", -9007199254740991.0, 9007199254740991.0, 1, &v, e)) < 0) return -1;
    r->has_seed = s, r->seed = s ? (uint64_t)(int64_t)v & ((1ull << 53) - 1) : 0;
    if (oai_only_(d, o, "n", 1, "one choice per request", e) || oai_only_(d, o, "frequency_penalty", 0, "no penalties", e) ||
        oai_only_(d, o, "presence_penalty", 0, "no penalties", e))
        return -1;
    int lb = js_get(d, o, "logit_bias");
    if (lb >= 0 && js_typeof(d, lb) != JS_NULL && (js_typeof(d, lb) != JS_OBJ || js_count(d, lb)))
        return oai_fail_(e, "logit_bias", "logit_bias is not supported");
    return oai_stop_(d, js_get(d, o, "stop"), r, e);
}

/* logprobs: chat's {"logprobs": bool, "top_logprobs": 0..20}, or
 * completions' {"logprobs": 0..5} (the alternatives per token). */
static inline int oai_logprobs_(const js_doc *d, int o, int chat, oai_req *r, oai_err *e) {
    double v;
    int s;
    if (!chat) {
        if ((s = oai_num_(d, o, "logprobs", 0, 5, 1, &v, e)) < 0) return -1;
        r->logprobs = s, r->top_logprobs = s ? (int)v : 0;
        return 0;
    }
    if (oai_bool_(d, o, "logprobs", &r->logprobs, e) < 0) return -1;
    if ((s = oai_num_(d, o, "top_logprobs", 0, OAI_MAX_TOP_LOGPROBS, 1, &v, e)) < 0) return -1;
    r->top_logprobs = s ? (int)v : 0;
    if (r->top_logprobs && !r->logprobs) return oai_fail_(e, "top_logprobs", "top_logprobs needs logprobs: true");
    return 0;
}

/* chat_template_kwargs.enable_thinking, else reasoning_effort ("none" and
 * "minimal" off, "low" to "xhigh" on), else off: whether the generation
 * prompt opens a thinking block (chat_thinks decides per format). */
static inline int oai_thinking_(const js_doc *d, int o, oai_req *r, oai_err *e) {
    int kw = js_get(d, o, "chat_template_kwargs"), set = 0;
    r->think = 0;
    if (kw >= 0 && js_typeof(d, kw) != JS_NULL) {
        if (js_typeof(d, kw) != JS_OBJ) return oai_fail_(e, "chat_template_kwargs", "chat_template_kwargs must be an object");
        for (int f = js_first(d, kw); f >= 0; f = js_next(d, f))
            if (strcmp(js_key(d, f), "enable_thinking"))
                return oai_fail_(e, "chat_template_kwargs", "chat_template_kwargs: unknown field \"%s\"", js_key(d, f));
        if ((set = oai_bool_(d, kw, "enable_thinking", &r->think, e)) < 0) return -1;
    }
    int re = js_get(d, o, "reasoning_effort");
    if (re >= 0 && js_typeof(d, re) != JS_NULL) {
        static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", NULL};
        const char *s = js_str(d, re);
        if (!s || !oai_known_(s, efforts))
            return oai_fail_(e, "reasoning_effort", "reasoning_effort must be one of none, minimal, low, medium, high, xhigh");
        if (!set) r->think = strcmp(s, "none") && strcmp(s, "minimal");
    }
    r->think = chat_thinks(r->fmt, r->think);
    return 0;
}

/* The chat fields that ask for what this server cannot give. */
static inline int oai_unsupported_(const js_doc *d, int o, oai_err *e) {
    int m = js_get(d, o, "modalities");
    if (m >= 0 && js_typeof(d, m) != JS_NULL) {
        int ok = js_typeof(d, m) == JS_ARR;
        for (int x = js_first(d, m); x >= 0 && ok; x = js_next(d, x)) ok = js_str(d, x) && !strcmp(js_str(d, x), "text");
        if (!ok) return oai_fail_(e, "modalities", "modalities: only [\"text\"] is supported");
    }
    const char *v = js_str(d, js_get(d, o, "verbosity")), *st = js_str(d, js_get(d, o, "service_tier"));
    int vb = js_get(d, o, "verbosity"), sv = js_get(d, o, "service_tier");
    if (vb >= 0 && js_typeof(d, vb) != JS_NULL && !v) return oai_fail_(e, "verbosity", "verbosity must be a string");
    if (sv >= 0 && js_typeof(d, sv) != JS_NULL && !st) return oai_fail_(e, "service_tier", "service_tier must be a string");
    int md = js_get(d, o, "metadata");
    if (md >= 0 && js_typeof(d, md) != JS_NULL && js_typeof(d, md) != JS_OBJ) return oai_fail_(e, "metadata", "metadata must be an object");
    return 0;
}

/* A completions prompt given as token ids (OpenAI's array of integers, or
 * an array holding one): r->ids. 1 taken, 0 not ids, -1 refused. */
static inline int oai_prompt_ids_(const js_doc *d, int p, oai_req *r, oai_err *e) {
    if (js_typeof(d, p) == JS_ARR && js_count(d, p) == 1 && js_typeof(d, js_first(d, p)) == JS_ARR) p = js_first(d, p);
    if (js_typeof(d, p) != JS_ARR || !js_count(d, p) || !js_is_num(d, js_first(d, p))) return 0;
    if (!(r->ids = (int *)malloc((size_t)js_count(d, p) * sizeof(int)))) return oai_fail_(e, NULL, "out of memory");
    for (int x = js_first(d, p); x >= 0; x = js_next(d, x)) {
        int64_t v = js_int(d, x);
        if (!js_is_int(d, x) || v < 0 || v > 2147483647) return oai_fail_(e, "prompt", "prompt: token ids are integers from 0");
        r->ids[r->n_ids++] = (int)v;
    }
    return 1;
}

/* The completions-only fields: prompt (a string, token ids, or an array
 * holding one of them), and echo, suffix, best_of at their neutral
 * values. */
static inline int oai_completion_(const js_doc *d, int o, oai_req *r, oai_err *e) {
    int echo = 0;
    if (oai_bool_(d, o, "echo", &echo, e) < 0 || echo) return oai_fail_(e, "echo", "echo is not supported");
    int sf = js_get(d, o, "suffix");
    if (sf >= 0 && js_typeof(d, sf) != JS_NULL && (js_typeof(d, sf) != JS_STR || js_str_len(d, sf)))
        return oai_fail_(e, "suffix", "suffix is not supported");
    if (oai_only_(d, o, "best_of", 1, "one choice per request", e)) return -1;
    int p = js_get(d, o, "prompt"), ids = oai_prompt_ids_(d, p, r, e);
    if (ids) return ids < 0 ? -1 : 0;
    if (js_typeof(d, p) == JS_ARR && js_count(d, p) == 1 && js_typeof(d, js_first(d, p)) == JS_STR) p = js_first(d, p);
    if (js_typeof(d, p) != JS_STR) return oai_fail_(e, "prompt", "prompt must be a string or token ids (or an array holding one)");
    if (!js_str_len(d, p)) return oai_fail_(e, "prompt", "prompt is empty");
    if (!(r->text = (char *)malloc(js_str_len(d, p) + 1))) return oai_fail_(e, NULL, "out of memory");
    memcpy(r->text, js_str(d, p), js_str_len(d, p) + 1);
    r->text_len = js_str_len(d, p);
    return 0;
}

/* Parses and checks a request body; for chat requests renders the prompt.
 * 0, or -1 with e saying why and which field (a 400). */
static inline int oai_parse(const char *body, size_t len, int chat, const oai_limits *lim, oai_req *r, oai_err *e) {
    memset(r, 0, sizeof *r);
    r->chat = chat, r->tools = -1, r->fmt = lim->fmt;
    char jerr[160];
    js_doc *d = r->d = js_parse(body, len, jerr, sizeof jerr);
    if (!d) return oai_fail_(e, NULL, "the body is not valid JSON: %s", jerr);
    int o = d->root;
    if (js_typeof(d, o) != JS_OBJ) return oai_fail_(e, NULL, "the body must be a JSON object");
    for (int f = js_first(d, o); f >= 0; f = js_next(d, f))
        if (!oai_known_(js_key(d, f), chat ? oai_chat_keys_ : oai_comp_keys_)) return oai_fail_(e, js_key(d, f), "unknown field \"%s\"", js_key(d, f));
    r->model = js_str(d, js_get(d, o, "model"));
    if (oai_common_(d, o, chat, r, e) || oai_logprobs_(d, o, chat, r, e)) return -1;
    if (!chat) return oai_completion_(d, o, r, e);
    if (oai_unsupported_(d, o, e) || oai_thinking_(d, o, r, e)) return -1;
    int rf = js_get(d, o, "response_format");
    if (rf >= 0 && js_typeof(d, rf) != JS_NULL && oai_response_format_(d, rf, r, e)) return -1;
    int tools = js_get(d, o, "tools");
    if (tools >= 0 && js_typeof(d, tools) != JS_NULL) {
        if (js_typeof(d, tools) != JS_ARR) return oai_fail_(e, "tools", "tools must be an array");
        int k = 0;
        for (int t = js_first(d, tools); t >= 0; t = js_next(d, t), k++) {
            const char *ty = js_str(d, js_get(d, t, "type"));
            int f = js_get(d, t, "function");
            if (!ty || strcmp(ty, "function") || js_typeof(d, f) != JS_OBJ || !js_str(d, js_get(d, f, "name")))
                return oai_fail_(e, oai_pk_((char[96]){0}, "tools[%d]", k), "tools[%d] must be {\"type\": \"function\", \"function\": {\"name\": ...}}", k);
        }
        if (js_count(d, tools)) r->tools = tools;
    }
    int tc = js_get(d, o, "tool_choice");
    if (tc >= 0 && js_typeof(d, tc) != JS_NULL && oai_tool_choice_(d, o, tc, r, e)) return -1;
    int ptc = 0;
    if (oai_bool_(d, o, "parallel_tool_calls", &ptc, e) < 0) return -1;
    r->parse_tools = r->tools >= 0;
    int msgs = js_get(d, o, "messages");
    if (js_typeof(d, msgs) != JS_ARR || !js_count(d, msgs)) return oai_fail_(e, "messages", "messages must be a non-empty array");
    if (js_count(d, msgs) > lim->max_messages) return oai_fail_(e, "messages", "%d messages, at most %d", js_count(d, msgs), lim->max_messages);
    return oai_render(d, msgs, r->tools, r->think, r, e);
}

/* oai_parse for callers that report the message alone (err, errlen). */
static inline int oai_parse_msg(const char *body, size_t len, int chat, const oai_limits *lim, oai_req *r, char *err, size_t errlen) {
    oai_err e;
    int rc = oai_parse(body, len, chat, lim, r, &e);
    if (rc && errlen) snprintf(err, errlen, "%s", e.msg);
    return rc;
}

/* ------------------------------------------------------------ output */

enum { OAI_REASON, OAI_CONTENT, OAI_TOOL };

/* The generated text as it arrives: held back while it could still be the
 * start of a stop string or a tag, then routed to reasoning (inside the
 * thinking block), content, or the tool-call text (from the format's
 * chat_calls_open on, parsed at the end). */
typedef struct {
    const oai_req *r;
    jw all;        /* every generated byte (cut at a stop string) */
    size_t done;   /* bytes of all routed */
    int state;
    int stopped;   /* a stop string matched: r->stop[stop_idx] */
    int stop_idx;
    int finished;  /* oai_out_finish: nothing more arrives */
    jw reason, content, tool; /* what was routed, whole */
    size_t reason_sent, content_sent; /* what oai_out_delta handed out */
} oai_out;

static inline void oai_out_init(oai_out *o, const oai_req *r) {
    memset(o, 0, sizeof *o);
    o->r = r;
    o->state = r->chat && r->think ? OAI_REASON : OAI_CONTENT;
}

static inline void oai_out_free(oai_out *o) {
    jw_free(&o->all), jw_free(&o->reason), jw_free(&o->content), jw_free(&o->tool);
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of p. */
static inline size_t oai_partial_(const char *s, size_t n, const char *p, size_t pn) {
    for (size_t k = pn - 1 < n ? pn - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, p, k)) return k;
    return 0;
}

/* Routes all[done, upto): tags switch the state, text goes to the state's
 * buffer. */
static inline void oai_route_(oai_out *o, size_t upto) {
    while (o->done < upto) {
        const char *s = o->all.s + o->done;
        size_t n = upto - o->done;
        const char *tag = o->state == OAI_REASON ? chat_info(o->r->fmt)->think_end : o->state == OAI_CONTENT && o->r->parse_tools ? chat_calls_open(o->r->fmt) : NULL;
        const char *at = tag ? oai_memmem_(s, n, tag, strlen(tag)) : NULL;
        size_t k = at ? (size_t)(at - s) : n;
        jw *dst = o->state == OAI_REASON ? &o->reason : o->state == OAI_CONTENT ? &o->content : &o->tool;
        if (o->state == OAI_TOOL && at == NULL) k = n;
        jw_raw(dst, s, k);
        o->done += k;
        if (at) {
            if (o->state == OAI_REASON) o->done += strlen(tag), o->state = OAI_CONTENT;
            else o->state = OAI_TOOL; /* the tag stays in the tool text */
        }
    }
}

/* Feeds n generated bytes. Returns 1 when a stop string ended the text. */
static inline int oai_out_put(oai_out *o, const char *s, size_t n) {
    if (o->stopped) return 1;
    size_t from = o->all.n;
    jw_raw(&o->all, s, n);
    size_t cut = o->all.n;
    int which = -1;
    for (int i = 0; i < o->r->n_stop; i++) {
        size_t back = o->r->stop_len[i] - 1 < from ? o->r->stop_len[i] - 1 : from;
        const char *at = oai_memmem_(o->all.s + from - back, o->all.n - (from - back), o->r->stop[i], o->r->stop_len[i]);
        if (at && (size_t)(at - o->all.s) < cut) cut = (size_t)(at - o->all.s), which = i;
    }
    if (cut < o->all.n) {
        o->all.n = cut;
        o->stopped = 1, o->stop_idx = which;
        oai_route_(o, cut);
        return 1;
    }
    size_t hold = 0;
    for (int i = 0; i < o->r->n_stop; i++) {
        size_t h = oai_partial_(o->all.s, o->all.n, o->r->stop[i], o->r->stop_len[i]);
        if (h > hold) hold = h;
    }
    /* the format's reasoning and call tags; a format without reasoning tags
     * (DeepSeek-V3, Kimi K2) still holds back a partial </think>, so that
     * its streamed chunks split where they always have */
    const char *think = chat_info(o->r->fmt)->think_end;
    const char *const tags[] = {think ? think : CHAT_THINK_END, chat_calls_open(o->r->fmt)};
    for (int i = 0; i < 2; i++) {
        size_t h = oai_partial_(o->all.s, o->all.n, tags[i], strlen(tags[i]));
        if (h > hold) hold = h;
    }
    if (o->all.n - hold > o->done) oai_route_(o, o->all.n - hold);
    return 0;
}

/* The end of generation: everything held back is routed. */
static inline void oai_out_finish(oai_out *o) {
    oai_route_(o, o->all.n);
    o->finished = 1;
}

/* The reasoning and content routed since the last call (pointers into the
 * buffers, valid until the next oai_out_put). Cut at a UTF-8 boundary:
 * bytes of an incomplete character wait while more text can still reach
 * that buffer (then they go out as they are: the writer makes them
 * U+FFFD, as in the whole response). */
static inline void oai_out_delta(oai_out *o, const char **rs, size_t *rn, const char **cs, size_t *cn) {
    jw *b[2] = {&o->reason, &o->content};
    size_t *sent[2] = {&o->reason_sent, &o->content_sent};
    const char **p[2] = {rs, cs};
    size_t *l[2] = {rn, cn};
    int closed[2] = {o->finished || o->state != OAI_REASON, o->finished || o->state == OAI_TOOL};
    for (int i = 0; i < 2; i++) {
        size_t end = b[i]->n;
        size_t k = 0; /* an incomplete trailing character waits */
        while (k < 3 && k < end - *sent[i] && ((unsigned char)b[i]->s[end - 1 - k] & 0xC0) == 0x80) k++;
        if (!closed[i] && k < end - *sent[i]) {
            unsigned char lead = (unsigned char)b[i]->s[end - 1 - k];
            int need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
            if (need > (int)k + 1) end -= k + 1;
        }
        *p[i] = b[i]->s ? b[i]->s + *sent[i] : "";
        *l[i] = end - *sent[i];
        *sent[i] = end;
    }
}

typedef struct {
    char *name;
    char *args; /* a JSON object, as text */
} oai_call;

/* Parses tool-call text with the arguments as tags (sx: GLM-5's
 * "<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>...
 * </tool_call>...") into calls; values are strings when the tool's schema
 * says so (or they are not JSON), else the JSON they spell. Returns the
 * number of calls, or -1 when the text is not well formed (the caller
 * returns it as content); with cut (generation was cut short), the calls
 * completed before the first that is not. */
static inline int oai_parse_calls_tags_(const oai_out *o, const gr_tool_syntax *sx, oai_call *calls, int max, int cut) {
    const js_doc *d = o->r->d;
    const char *s = o->tool.s ? o->tool.s : "", *end = s + o->tool.n;
    size_t lcb = strlen(sx->call_begin), lce = strlen(sx->call_end), lkb = strlen(sx->key_begin), lke = strlen(sx->key_end);
    size_t lvb = strlen(sx->value_begin), lve = strlen(sx->value_end);
    int n = 0;
    for (;;) {
        while (s < end && oai_is_ws_(*s)) s++;
        if (s == end) break;
        if (n == max || (size_t)(end - s) < lcb || memcmp(s, sx->call_begin, lcb)) goto bad;
        s += lcb;
        const char *close = oai_memmem_(s, (size_t)(end - s), sx->call_end, lce);
        if (!close) goto bad;
        const char *ak = oai_memmem_(s, (size_t)(close - s), sx->key_begin, lkb), *ne = ak ? ak : close;
        while (s < ne && oai_is_ws_(*s)) s++;
        while (ne > s && oai_is_ws_(ne[-1])) ne--;
        if (ne == s) goto bad;
        for (const char *q = s; q < ne; q++)
            if ((unsigned char)*q < 0x20) goto bad; /* a name is one line of text */
        oai_call *c = &calls[n];
        c->name = strndup(s, (size_t)(ne - s)), c->args = NULL;
        n++;
        if (!c->name) goto bad;
        int props = -1;
        for (int t = js_first(d, o->r->tools); t >= 0; t = js_next(d, t)) {
            int f = js_get(d, t, "function");
            const char *nm = js_str(d, js_get(d, f, "name"));
            if (nm && !strcmp(nm, c->name)) props = js_get(d, js_get(d, f, "parameters"), "properties");
        }
        jw a = {0};
        jw_lit(&a, "{");
        int first = 1;
        for (const char *p = ak ? ak : close; p < close;) {
            while (p < close && oai_is_ws_(*p)) p++;
            if (p == close) break;
            if ((size_t)(close - p) < lkb || memcmp(p, sx->key_begin, lkb)) { jw_free(&a); goto bad; }
            const char *k0 = p + lkb, *k1 = oai_memmem_(k0, (size_t)(close - k0), sx->key_end, lke);
            if (!k1) { jw_free(&a); goto bad; }
            const char *v0 = k1 + lke;
            while (v0 < close && oai_is_ws_(*v0)) v0++;
            if ((size_t)(close - v0) < lvb || memcmp(v0, sx->value_begin, lvb)) { jw_free(&a); goto bad; }
            v0 += lvb;
            const char *v1 = oai_memmem_(v0, (size_t)(close - v0), sx->value_end, lve);
            if (!v1) { jw_free(&a); goto bad; }
            if (!first) jw_lit(&a, ",");
            first = 0;
            jw_strn(&a, k0, (size_t)(k1 - k0));
            jw_lit(&a, ":");
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(k1 - k0 < 255 ? k1 - k0 : 255), k0);
            const char *ty = js_str(d, js_get(d, js_get(d, props, key), "type"));
            js_doc *vd = ty && !strcmp(ty, "string") ? NULL : js_parse(v0, (size_t)(v1 - v0), NULL, 0);
            if (vd) jw_node(&a, vd, vd->root, 0), js_free(vd);
            else jw_strn(&a, v0, (size_t)(v1 - v0));
            p = v1 + lve;
        }
        jw_lit(&a, "}");
        js_doc *check = a.oom ? NULL : js_parse(a.s, a.n, NULL, 0); /* a key given twice is not one object */
        if (!check) { jw_free(&a); goto bad; }
        js_free(check);
        c->args = a.s;
        s = close + lce;
    }
    return n;
bad:
    if (n && !calls[n - 1].args) free(calls[--n].name); /* the call being read */
    if (cut) return n;
    for (int i = 0; i < n; i++) free(calls[i].name), free(calls[i].args);
    return -1;
}

static inline int oai_at_(const char *s, const char *end, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(end - s) >= n && !memcmp(s, lit, n);
}

static inline const char *oai_skip_ws_(const char *s, const char *end) {
    while (s < end && oai_is_ws_(*s)) s++;
    return s;
}

/* The string s without its leading and trailing whitespace: the start,
 * with the length in *len. */
static inline const char *oai_trim_(const char *s, size_t *len) {
    const char *e = s + strlen(s);
    s = oai_skip_ws_(s, e);
    while (e > s && oai_is_ws_(e[-1])) e--;
    *len = (size_t)(e - s);
    return s;
}

/* One call of a JSON-argument syntax sx, body = what lies between the
 * call's begin and end tags: the name and the arguments (a JSON object,
 * written back compactly). 0, or -1 when it is not one. */
static inline int oai_json_call_(const gr_tool_syntax *sx, const char *b, const char *e, oai_call *c) {
    const char *n0 = b, *n1, *a0;
    size_t ls = strlen(sx->sep);
    const char *sep = oai_memmem_(b, (size_t)(e - b), sx->sep, ls);
    if (!sep) return -1;
    if (!sx->typed) { /* name_prefix NAME [index_sep INDEX] sep ARGS */
        a0 = sep + ls, n1 = sep;
        if (sx->name_prefix && oai_at_(n0, n1, sx->name_prefix)) n0 += strlen(sx->name_prefix);
        if (sx->index_sep) {
            size_t li = strlen(sx->index_sep);
            const char *ix = n1;
            while (ix > n0 && ix[-1] >= '0' && ix[-1] <= '9') ix--;
            if (ix < n1 && (size_t)(ix - n0) >= li && !memcmp(ix - li, sx->index_sep, li)) n1 = ix - li;
        }
    } else { /* TYPE sep NAME, its line, then ARGS, fenced by args_begin/args_end (without their whitespace) or not */
        size_t lf, lg;
        const char *fence = oai_trim_(sx->args_begin, &lf), *fence_end = oai_trim_(sx->args_end, &lg);
        n0 = sep + ls;
        n1 = memchr(n0, '\n', (size_t)(e - n0));
        if (!n1) return -1;
        a0 = oai_skip_ws_(n1, e);
        if ((size_t)(e - a0) >= lf && !memcmp(a0, fence, lf)) a0 += lf;
        while (e > a0 && oai_is_ws_(e[-1])) e--;
        if ((size_t)(e - a0) >= lg && !memcmp(e - lg, fence_end, lg)) e -= lg;
    }
    n0 = oai_skip_ws_(n0, n1);
    while (n1 > n0 && oai_is_ws_(n1[-1])) n1--;
    if (n1 == n0) return -1;
    for (const char *q = n0; q < n1; q++)
        if ((unsigned char)*q < 0x20) return -1;
    js_doc *ad = js_parse(a0, (size_t)(e - a0), NULL, 0);
    if (!ad || js_typeof(ad, ad->root) != JS_OBJ) { js_free(ad); return -1; }
    jw a = {0};
    jw_node(&a, ad, ad->root, 0);
    js_free(ad);
    c->name = strndup(n0, (size_t)(n1 - n0)), c->args = a.s;
    if (!c->name || a.oom) { free(c->name), free(c->args); return -1; }
    return 0;
}

/* The DeepSeek and Kimi K2 tool-call sections: the section tag, calls
 * (begin tag, body, end tag; whitespace between), and the closing section
 * tag, which may be missing when generation stopped before it. Returns as
 * oai_parse_calls. */
static inline int oai_parse_calls_json_(const oai_out *o, const gr_tool_syntax *sx, oai_call *calls, int max, int cut) {
    int n = 0;
    const char *open = sx->section_begin, *close = sx->section_end, *cb = sx->call_begin, *ce = sx->call_end;
    const char *s = o->tool.s ? o->tool.s : "", *end = s + o->tool.n;
    s = oai_skip_ws_(s, end);
    if (!oai_at_(s, end, open)) return cut ? 0 : -1;
    s += strlen(open);
    for (;;) {
        s = oai_skip_ws_(s, end);
        if (s == end) break;
        if (oai_at_(s, end, close)) {
            if (oai_skip_ws_(s + strlen(close), end) != end) goto bad;
            break;
        }
        if (n == max || !oai_at_(s, end, cb)) goto bad;
        s += strlen(cb);
        const char *e = oai_memmem_(s, (size_t)(end - s), ce, strlen(ce));
        if (!e || oai_json_call_(sx, s, e, &calls[n])) goto bad;
        n++;
        s = e + strlen(ce);
    }
    return n;
bad:
    if (cut) return n;
    for (int i = 0; i < n; i++) free(calls[i].name), free(calls[i].args);
    return -1;
}

/* The tool-call text parsed into calls in the request's format. Returns
 * the number of calls, or -1 when the text is not well formed (the caller
 * returns it as content). With cut (max_tokens, the context or a stop cut
 * the generation short), the calls completed before the cut and never -1:
 * the unfinished call's markup is dropped, never returned as text. */
static inline int oai_parse_calls(const oai_out *o, oai_call *calls, int max, int cut) {
    const gr_tool_syntax *sx = &chat_info(o->r->fmt)->calls;
    return sx->key_begin ? oai_parse_calls_tags_(o, sx, calls, max, cut) : oai_parse_calls_json_(o, sx, calls, max, cut);
}

static inline void oai_calls_free(oai_call *calls, int n) {
    for (int i = 0; i < n; i++) free(calls[i].name), free(calls[i].args);
}

/* ------------------------------------------------------------ responses */

/* A token's bytes (the tokenizer's piece: may be part of a UTF-8
 * character) and its log-probability. */
typedef struct {
    const char *s;
    size_t n;
    float lp;
} oai_tok;

/* One generated token's log-probabilities: the token and the most likely
 * alternatives, best first, from the distribution it was drawn from. */
typedef struct {
    oai_tok t;
    int n_top;
    oai_tok top[OAI_MAX_TOP_LOGPROBS];
} oai_lp;

/* {"token", "logprob", "bytes" of chat's logprobs, the object left open
 * for the caller's last member and "}". */
static inline void oai_tok_json_(jw *w, const oai_tok *t) {
    jw_lit(w, "{\"token\":");
    jw_strn(w, t->s ? t->s : "", t->n);
    jw_lit(w, ",\"logprob\":");
    jw_num(w, t->lp > -9999.0f ? t->lp : -9999.0f); /* JSON has no -Infinity: OpenAI's floor */
    jw_lit(w, ",\"bytes\":[");
    for (size_t i = 0; i < t->n; i++) jw_lit(w, i ? "," : ""), jw_int(w, (unsigned char)t->s[i]);
    jw_lit(w, "]");
}

/* Chat's "logprobs" value for tokens lp[0..n): {"content": [...],
 * "refusal": null}. */
static inline void oai_chat_logprobs_(jw *w, const oai_lp *lp, int n) {
    jw_lit(w, "{\"content\":[");
    for (int i = 0; i < n; i++) {
        if (i) jw_lit(w, ",");
        oai_tok_json_(w, &lp[i].t);
        jw_lit(w, ",\"top_logprobs\":[");
        for (int k = 0; k < lp[i].n_top; k++) jw_lit(w, k ? "," : ""), oai_tok_json_(w, &lp[i].top[k]), jw_lit(w, "}");
        jw_lit(w, "]}");
    }
    jw_lit(w, "],\"refusal\":null}");
}

/* A token's text as completions' logprobs name it: its UTF-8, or, when
 * its bytes are not whole UTF-8 (part of a character), "bytes:\xNN..." as
 * OpenAI writes them, so distinct tokens stay distinct keys. */
static inline void oai_tok_text_(jw *w, const oai_tok *t) {
    const unsigned char *u = (const unsigned char *)(t->s ? t->s : ""), *end = u + t->n;
    if (js_utf8_prefix(u, t->n) == t->n) { jw_strn(w, (const char *)u, t->n); return; }
    jw_lit(w, "\"bytes:");
    for (; u < end; u++) {
        char b[8];
        snprintf(b, sizeof b, "\\\\x%02x", *u);
        jw_lit(w, b);
    }
    jw_lit(w, "\"");
}

/* Completions' "logprobs" value: tokens, token_logprobs, top_logprobs (an
 * object per token, keyed by oai_tok_text_; an alternative whose key an
 * earlier one took is left out, since an object has one value per key),
 * text_offset (from `offset`, the text before these tokens). */
static inline void oai_comp_logprobs_(jw *w, const oai_lp *lp, int n, size_t offset) {
    jw_lit(w, "{\"tokens\":[");
    for (int i = 0; i < n; i++) jw_lit(w, i ? "," : ""), oai_tok_text_(w, &lp[i].t);
    jw_lit(w, "],\"token_logprobs\":[");
    for (int i = 0; i < n; i++) jw_lit(w, i ? "," : ""), jw_num(w, lp[i].t.lp > -9999.0f ? lp[i].t.lp : -9999.0f);
    jw_lit(w, "],\"top_logprobs\":[");
    for (int i = 0; i < n; i++) {
        jw_lit(w, i ? ",{" : "{");
        jw keys[OAI_MAX_TOP_LOGPROBS];
        int nk = 0;
        for (int k = 0; k < lp[i].n_top && k < OAI_MAX_TOP_LOGPROBS; k++) {
            jw key = {0};
            oai_tok_text_(&key, &lp[i].top[k]);
            int dup = 0;
            for (int j = 0; j < nk && !dup; j++) dup = keys[j].n == key.n && !memcmp(keys[j].s, key.s, key.n);
            if (dup) { jw_free(&key); continue; }
            jw_lit(w, nk ? "," : ""), jw_raw(w, key.s ? key.s : "\"\"", key.s ? key.n : 2), jw_lit(w, ":");
            jw_num(w, lp[i].top[k].lp > -9999.0f ? lp[i].top[k].lp : -9999.0f);
            keys[nk++] = key;
        }
        for (int j = 0; j < nk; j++) jw_free(&keys[j]);
        jw_lit(w, "}");
    }
    jw_lit(w, "],\"text_offset\":[");
    for (int i = 0; i < n; i++) jw_lit(w, i ? "," : ""), jw_int(w, (long long)offset), offset += lp[i].t.n;
    jw_lit(w, "]}");
}

/* The "logprobs" value of a choice: null when not asked for. */
static inline void oai_logprobs_json_(jw *w, const oai_req *r, const oai_lp *lp, int n, size_t offset) {
    if (!r->logprobs) jw_lit(w, "null");
    else if (r->chat) oai_chat_logprobs_(w, lp, n);
    else oai_comp_logprobs_(w, lp, n, offset);
}

/* What a response says besides the text. */
typedef struct {
    const char *id;    /* "chatcmpl-..." or "cmpl-..." */
    const char *model; /* the served model's name */
    const char *fingerprint;
    long long created;
    int prompt_tokens, completion_tokens, cached_tokens;
    const char *finish; /* "stop", "length", "tool_calls"; NULL while streaming */
} oai_meta;

static inline void oai_head_(jw *w, const oai_meta *m, const char *object) {
    jw_lit(w, "{\"id\":");
    jw_str(w, m->id);
    jw_lit(w, ",\"object\":");
    jw_str(w, object);
    jw_lit(w, ",\"created\":");
    jw_int(w, m->created);
    jw_lit(w, ",\"model\":");
    jw_str(w, m->model);
    jw_lit(w, ",\"system_fingerprint\":");
    jw_str(w, m->fingerprint);
}

static inline void oai_usage_(jw *w, const oai_meta *m) {
    jw_lit(w, "\"usage\":{\"prompt_tokens\":");
    jw_int(w, m->prompt_tokens);
    jw_lit(w, ",\"completion_tokens\":");
    jw_int(w, m->completion_tokens);
    jw_lit(w, ",\"total_tokens\":");
    jw_int(w, m->prompt_tokens + m->completion_tokens);
    jw_lit(w, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    jw_int(w, m->cached_tokens);
    jw_lit(w, "}}");
}

static inline void oai_calls_json_(jw *w, const oai_call *calls, int n, const char *id, int with_index) {
    jw_lit(w, "\"tool_calls\":[");
    for (int i = 0; i < n; i++) {
        char cid[96];
        snprintf(cid, sizeof cid, "call_%s_%d", id, i);
        if (i) jw_lit(w, ",");
        jw_lit(w, "{");
        if (with_index) jw_lit(w, "\"index\":"), jw_int(w, i), jw_lit(w, ",");
        jw_lit(w, "\"id\":");
        jw_str(w, cid);
        jw_lit(w, ",\"type\":\"function\",\"function\":{\"name\":");
        jw_str(w, calls[i].name);
        jw_lit(w, ",\"arguments\":");
        jw_str(w, calls[i].args);
        jw_lit(w, "}}");
    }
    jw_lit(w, "]");
}

/* The whole response of a non-streaming request. */
static inline void oai_response_json(jw *w, const oai_req *r, const oai_meta *m, const oai_out *o, const oai_call *calls, int ncalls, const oai_lp *lp,
                                     int nlp) {
    oai_head_(w, m, r->chat ? "chat.completion" : "text_completion");
    jw_lit(w, ",\"choices\":[{\"index\":0,");
    if (r->chat) {
        jw_lit(w, "\"message\":{\"role\":\"assistant\",\"content\":");
        if (o->content.n || ncalls <= 0) jw_strn(w, o->content.s ? o->content.s : "", o->content.n);
        else jw_lit(w, "null");
        if (o->reason.n) jw_lit(w, ",\"reasoning_content\":"), jw_strn(w, o->reason.s, o->reason.n);
        if (ncalls > 0) jw_lit(w, ","), oai_calls_json_(w, calls, ncalls, m->id, 0);
        jw_lit(w, "},");
    } else {
        jw_lit(w, "\"text\":");
        jw_strn(w, o->content.s ? o->content.s : "", o->content.n);
        jw_lit(w, ",");
    }
    jw_lit(w, "\"logprobs\":");
    oai_logprobs_json_(w, r, lp, nlp, 0);
    jw_lit(w, ",\"finish_reason\":");
    jw_str(w, m->finish);
    jw_lit(w, "}],");
    oai_usage_(w, m);
    jw_lit(w, "}");
}

/* One server-sent event of a streaming response: "data: {chunk}\n\n".
 * Chat: delta with role (first), reasoning_content / content text, tool
 * calls, and finish_reason (last); completions: text. usage_only writes
 * the usage chunk (choices empty). */
static inline void oai_chunk_sse(jw *w, const oai_req *r, const oai_meta *m, int first, const char *rs, size_t rn, const char *cs, size_t cn,
                                 const oai_call *calls, int ncalls, int usage_only, const oai_lp *lp, int nlp, size_t offset) {
    jw_lit(w, "data: ");
    oai_head_(w, m, r->chat ? "chat.completion.chunk" : "text_completion");
    jw_lit(w, ",\"choices\":[");
    if (!usage_only) {
        jw_lit(w, "{\"index\":0,");
        if (r->chat) {
            jw_lit(w, "\"delta\":{");
            int any = 0;
            if (first) jw_lit(w, cn ? "\"role\":\"assistant\"" : "\"role\":\"assistant\",\"content\":\"\""), any = 1;
            if (rn) jw_lit(w, any ? "," : ""), jw_lit(w, "\"reasoning_content\":"), jw_strn(w, rs, rn), any = 1;
            if (cn) jw_lit(w, any ? "," : ""), jw_lit(w, "\"content\":"), jw_strn(w, cs, cn), any = 1;
            if (ncalls > 0) jw_lit(w, any ? "," : ""), oai_calls_json_(w, calls, ncalls, m->id, 1);
            jw_lit(w, "},");
        } else {
            jw_lit(w, "\"text\":");
            jw_strn(w, cs ? cs : "", cn);
            jw_lit(w, ",");
        }
        jw_lit(w, "\"logprobs\":");
        if (nlp) oai_logprobs_json_(w, r, lp, nlp, offset);
        else jw_lit(w, "null");
        jw_lit(w, ",\"finish_reason\":");
        if (m->finish) jw_str(w, m->finish);
        else jw_lit(w, "null");
        jw_lit(w, "}");
    }
    jw_lit(w, "]");
    if (usage_only) jw_lit(w, ","), oai_usage_(w, m);
    jw_lit(w, "}\n\n");
}

/* OpenAI's error document; param NULL or "" is null. code: OpenAI's
 * short codes where one fits ("invalid_api_key", "context_length_exceeded"),
 * else NULL. */
static inline void oai_error_json(jw *w, const char *msg, const char *type, const char *param, const char *code) {
    jw_lit(w, "{\"error\":{\"message\":");
    jw_str(w, msg);
    jw_lit(w, ",\"type\":");
    jw_str(w, type);
    jw_lit(w, ",\"param\":");
    if (param && *param) jw_str(w, param);
    else jw_lit(w, "null");
    jw_lit(w, ",\"code\":");
    if (code) jw_str(w, code);
    else jw_lit(w, "null");
    jw_lit(w, "}}");
}

/* ================================================ protocol fronts (shared)
 * What anthropic.h and responses.h share: a finished reply in plain
 * values (their writers read it), built from the output state by
 * oai_reply_of, and a refusal that names the offending field (param). */

/* A finished reply in plain values, for the protocol fronts' writers. */
typedef struct {
    const char *id, *model; /* the reply's id ("msg_...", "resp_..."), the served model */
    long long created;      /* Unix seconds */
    int prompt_tokens, cached_tokens, completion_tokens;
    int reasoning_tokens;   /* of completion_tokens, those inside the thinking block (0: not counted) */
    const char *reasoning; size_t reasoning_len; /* the thinking block's text */
    const char *content; size_t content_len;
    const oai_call *calls; int ncalls;
    const char *finish;   /* "stop" (stop token), "stop_string", "length" (max tokens, the context, or a cut), "tool_calls" */
    const char *stop_seq; /* the stop string that matched, or NULL */
    size_t stop_seq_len;
} oai_reply;

/* The text, calls, finish reason and matched stop string of a finished
 * output (after oai_out_finish, with the tool text already moved into
 * content when its calls did not parse, as serve mode does); length: the
 * generation was cut short (max_tokens, the context, the server stopping),
 * which the finish says even when calls completed before the cut. Ids,
 * model and token counts are the caller's. The pointers stay valid while
 * o and calls do. */
static inline oai_reply oai_reply_of(const oai_out *o, const oai_call *calls, int ncalls, int length) {
    oai_reply y;
    memset(&y, 0, sizeof y);
    y.reasoning = o->reason.s ? o->reason.s : "", y.reasoning_len = o->reason.n;
    y.content = o->content.s ? o->content.s : "", y.content_len = o->content.n;
    y.calls = ncalls > 0 ? calls : NULL, y.ncalls = ncalls > 0 ? ncalls : 0;
    y.finish = length ? "length" : y.ncalls ? "tool_calls" : o->stopped ? "stop_string" : "stop";
    if (o->stopped && !y.ncalls && o->stop_idx >= 0 && o->stop_idx < o->r->n_stop)
        y.stop_seq = o->r->stop[o->stop_idx], y.stop_seq_len = o->r->stop_len[o->stop_idx];
    return y;
}

/* A refusal naming the field: param gets path (e.g. "messages[2].content[0]",
 * "" for the body as a whole), err "path: why" (or "why" without a path).
 * Returns -1. */
static inline int oai_refuse(char *err, size_t errlen, char *param, size_t paramlen, const char *path, const char *fmt, ...) {
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (param && paramlen) snprintf(param, paramlen, "%s", path ? path : "");
    if (path && *path) snprintf(err, errlen, "%s: %s", path, why);
    else snprintf(err, errlen, "%s", why);
    return -1;
}
/* obj's member key when present and not null, else -1. */
static inline int oai_opt(const js_doc *d, int obj, const char *key) {
    int i = js_get(d, obj, key);
    return js_typeof(d, i) == JS_NULL ? -1 : i;
}

/* Refuses obj's first member that keys does not list, naming it under
 * path ("messages[2].content[0].bogus"): 0 or -1 (oai_refuse). */
static inline int oai_refuse_unknown(const js_doc *d, int obj, const char *path, const char *const *keys, char *err, size_t errlen, char *param,
                                     size_t paramlen) {
    for (int f = js_first(d, obj); f >= 0; f = js_next(d, f))
        if (!oai_known_(js_key(d, f), keys)) {
            char p[256];
            snprintf(p, sizeof p, "%s%s%.64s", path, *path ? "." : "", js_key(d, f));
            return oai_refuse(err, errlen, param, paramlen, p, "unknown field");
        }
    return 0;
}
/* ============================================ end of protocol fronts (shared) */

#endif
