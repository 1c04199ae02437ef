/* responses.h — OpenAI's Responses API (POST /v1/responses) as a protocol
 * front of serve mode, without I/O. A request is checked and translated
 * into an OpenAI chat-completions body (resp_parse) that oai_parse
 * (openai.h) then checks and renders in the model's chat format exactly as
 * it renders /v1/chat/completions: no second implementation of the chat
 * formats, tool grammars or stop strings. Replies are written as the
 * Responses document (resp_response_json) and its server-sent events
 * (resp_stream_*: a state machine fed by oai_out's reasoning/content
 * deltas, then the calls and the finish reason); errors are openai.h's
 * oai_error_json. previous_response_id is served from resp_store, a
 * bounded in-memory map (LRU by count and bytes, thread-safe) from a
 * response id to the conversation it ended, as chat messages. Prefix:
 * resp_.
 *
 * Translation (docs/serve.md "OpenAI Responses"): instructions → a system
 * message first (not carried over by previous_response_id, as OpenAI
 * does); the stored conversation of previous_response_id; input (a string
 * → a user message; items: messages of any role with text parts,
 * function_call items → the tool_calls of one assistant message (joining
 * the assistant message just before them), function_call_output → tool
 * messages, reasoning items → the next assistant message's
 * reasoning_content); flat function tools → chat tools; tool_choice,
 * parallel_tool_calls, max_output_tokens → max_tokens, temperature, top_p,
 * text.format → response_format, reasoning.effort → enable_thinking
 * ("none"/"minimal" off, else on); what does not change the output (store,
 * metadata, user, include, prompt_cache_key, ...) is accepted; what cannot
 * be honoured (images, files, item references, built-in tools, background,
 * conversation, prompt templates) and unknown fields are refused naming
 * the field.
 *
 * Must not: read the environment, print, or touch the model. */
#ifndef COLI_RESPONSES_H
#define COLI_RESPONSES_H

#include <pthread.h>

#include "openai.h"

/* ------------------------------------------------------------ the store */

typedef struct {
    char *id;
    char *text; /* the conversation: a JSON array of chat messages */
    size_t n;
    unsigned long long used; /* the store's clock at the last put or get */
} resp_entry_;

/* Conversations by response id, at most max_items and max_bytes (ids and
 * texts), the least recently used evicted first. One mutex: the HTTP
 * threads read (resp_parse), the compute thread writes. */
typedef struct {
    pthread_mutex_t mu;
    resp_entry_ *e;
    int n, max_items;
    size_t bytes, max_bytes;
    unsigned long long clock;
} resp_store;

/* An empty store with its bounds (max_items >= 1). 0, or -1 out of memory. */
static inline int resp_store_init(resp_store *s, int max_items, size_t max_bytes) {
    memset(s, 0, sizeof *s);
    s->max_items = max_items < 1 ? 1 : max_items, s->max_bytes = max_bytes;
    if (!(s->e = (resp_entry_ *)calloc((size_t)s->max_items, sizeof *s->e))) return -1;
    pthread_mutex_init(&s->mu, NULL);
    return 0;
}

static inline void resp_store_free(resp_store *s) {
    if (!s->e) return;
    for (int i = 0; i < s->n; i++) free(s->e[i].id), free(s->e[i].text);
    free(s->e);
    pthread_mutex_destroy(&s->mu);
    memset(s, 0, sizeof *s);
}

/* Drops entry i (the caller holds mu). */
static inline void resp_store_drop_(resp_store *s, int i) {
    s->bytes -= strlen(s->e[i].id) + s->e[i].n;
    free(s->e[i].id), free(s->e[i].text);
    s->e[i] = s->e[--s->n];
}

static inline int resp_store_find_(const resp_store *s, const char *id) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->e[i].id, id)) return i;
    return -1;
}

/* Keeps a copy of text[0..n) under id (replacing one with the same id),
 * evicting the least recently used entries to stay within the bounds.
 * 0, or -1 when it alone exceeds max_bytes or memory ran out (nothing
 * stored then). */
static inline int resp_store_put(resp_store *s, const char *id, const char *text, size_t n) {
    size_t need = strlen(id) + n;
    if (need > s->max_bytes) return -1;
    char *ic = strdup(id), *tc = (char *)malloc(n + 1);
    if (!ic || !tc) return free(ic), free(tc), -1;
    memcpy(tc, text, n), tc[n] = 0;
    pthread_mutex_lock(&s->mu);
    int i = resp_store_find_(s, id);
    if (i >= 0) resp_store_drop_(s, i);
    while (s->n && (s->n == s->max_items || s->bytes + need > s->max_bytes)) {
        int lru = 0;
        for (int k = 1; k < s->n; k++)
            if (s->e[k].used < s->e[lru].used) lru = k;
        resp_store_drop_(s, lru);
    }
    s->e[s->n++] = (resp_entry_){ic, tc, n, ++s->clock};
    s->bytes += need;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* A copy (malloc'd, NUL-terminated, *n bytes) of the conversation stored
 * under id, now the most recently used; NULL when there is none. */
static inline char *resp_store_get(resp_store *s, const char *id, size_t *n) {
    char *out = NULL;
    pthread_mutex_lock(&s->mu);
    int i = resp_store_find_(s, id);
    if (i >= 0 && (out = (char *)malloc(s->e[i].n + 1))) {
        memcpy(out, s->e[i].text, s->e[i].n + 1);
        *n = s->e[i].n;
        s->e[i].used = ++s->clock;
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

/* ------------------------------------------------------------ requests */

/* A checked request: the body oai_parse renders, the conversation to store,
 * and the body itself, whose fields the response echoes. */
typedef struct {
    js_doc *d;  /* the request body */
    jw chat;    /* the chat-completions body (JSON text) for oai_parse */
    jw conv;    /* the conversation without instructions: a JSON array of chat messages */
    int stream; /* "stream": true */
    int store;  /* keep the reply for previous_response_id ("store", default true) */
} resp_req;

static inline void resp_req_free(resp_req *rq) {
    js_free(rq->d);
    jw_free(&rq->chat), jw_free(&rq->conv);
    memset(rq, 0, sizeof *rq);
}

typedef struct {
    const js_doc *d;
    jw *w;       /* conversation messages (array elements) */
    int nmsg;
    /* the assistant message being gathered: function_call items join it */
    int asst, a_ncalls, a_has_reason;
    jw a_content, a_calls, a_reason;
    jw reason; /* reasoning items waiting for the next assistant message */
    int has_reason;
    char *err, *param;
    size_t errlen, paramlen;
} resp_cx_;

#define RESP_FAIL_(cx, path, ...) oai_refuse((cx)->err, (cx)->errlen, (cx)->param, (cx)->paramlen, (path), __VA_ARGS__)

/* Refuses obj's first member that keys does not list: 0 or -1. */
static inline int resp_keys_(resp_cx_ *cx, int obj, const char *path, const char *const *keys) {
    return oai_refuse_unknown(cx->d, obj, path, keys, cx->err, cx->errlen, cx->param, cx->paramlen);
}

/* A function name: 1..256 bytes of one line (the call syntaxes put it between tags). */
static inline int resp_name_ok_(const js_doc *d, int s) {
    const char *p = js_str(d, s);
    size_t n = js_str_len(d, s);
    if (!p || !n || n > 256) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20) return 0;
    return 1;
}

/* Starts conversation message cx->nmsg: {"role": role (the caller closes it). */
static inline void resp_msg_open_(resp_cx_ *cx, const char *role) {
    jw_lit(cx->w, cx->nmsg++ ? ",{\"role\":" : "{\"role\":");
    jw_str(cx->w, role);
}

/* Writes the gathered assistant message, if one is open. */
static inline void resp_flush_(resp_cx_ *cx) {
    if (!cx->asst) return;
    resp_msg_open_(cx, "assistant");
    jw_lit(cx->w, ",\"content\":");
    if (cx->a_content.n) jw_raw(cx->w, cx->a_content.s, cx->a_content.n);
    else jw_lit(cx->w, cx->a_ncalls ? "null" : "\"\"");
    if (cx->a_has_reason) jw_lit(cx->w, ",\"reasoning_content\":"), jw_strn(cx->w, cx->a_reason.s ? cx->a_reason.s : "", cx->a_reason.n);
    if (cx->a_ncalls) jw_lit(cx->w, ",\"tool_calls\":["), jw_raw(cx->w, cx->a_calls.s, cx->a_calls.n), jw_lit(cx->w, "]");
    jw_lit(cx->w, "}");
    cx->asst = cx->a_ncalls = cx->a_has_reason = 0;
    cx->a_content.n = cx->a_calls.n = cx->a_reason.n = 0;
}

/* Opens an assistant message, which takes the waiting reasoning. */
static inline void resp_asst_open_(resp_cx_ *cx) {
    resp_flush_(cx);
    cx->asst = 1;
    if (cx->has_reason) {
        jw t = cx->a_reason;
        cx->a_reason = cx->reason, cx->reason = t;
        cx->reason.n = 0, cx->has_reason = 0, cx->a_has_reason = 1;
    }
}

/* Content (a string, or parts: input_text / output_text, and refusal for
 * the assistant) written as a chat content value: the string, or text
 * parts. Images, files and audio are refused by type. */
static inline int resp_content_(resp_cx_ *cx, int c, const char *path, int assistant, jw *w) {
    const js_doc *d = cx->d;
    static const char *const in_keys[] = {"type", "text", "prompt_cache_breakpoint", NULL};
    static const char *const out_keys[] = {"type", "text", "annotations", "logprobs", NULL};
    static const char *const ref_keys[] = {"type", "refusal", NULL};
    if (js_typeof(d, c) == JS_STR) return jw_strn(w, js_str(d, c), js_str_len(d, c)), 0;
    if (js_typeof(d, c) != JS_ARR) return RESP_FAIL_(cx, path, "must be a string or an array of content parts");
    int j = 0;
    jw_lit(w, "[");
    for (int p = js_first(d, c); p >= 0; p = js_next(d, p), j++) {
        char pp[200];
        snprintf(pp, sizeof pp, "%s[%d]", path, j);
        const char *t = js_str(d, js_get(d, p, "type"));
        if (js_typeof(d, p) != JS_OBJ || !t) return RESP_FAIL_(cx, pp, "a content part must be an object with a type");
        int ref = assistant && !strcmp(t, "refusal"), out = !strcmp(t, "output_text");
        if (!ref && !out && strcmp(t, "input_text")) {
            if (!strncmp(t, "input_", 6)) return RESP_FAIL_(cx, pp, "\"%.40s\" parts are not supported (text only)", t);
            return RESP_FAIL_(cx, pp, "unknown content part type \"%.40s\"", t);
        }
        if (resp_keys_(cx, p, pp, ref ? ref_keys : out ? out_keys : in_keys)) return -1;
        int tx = js_get(d, p, ref ? "refusal" : "text");
        if (js_typeof(d, tx) != JS_STR) return RESP_FAIL_(cx, pp, "%s must be a string", ref ? "refusal" : "text");
        jw_lit(w, j ? ",{\"type\":\"text\",\"text\":" : "{\"type\":\"text\",\"text\":");
        jw_strn(w, js_str(d, tx), js_str_len(d, tx));
        jw_lit(w, "}");
    }
    jw_lit(w, "]");
    return 0;
}

/* A message item {"role", "content"} (EasyInputMessage, or "type":
 * "message" with id/status/phase). User, system and developer messages
 * end the assistant message being gathered and drop reasoning that no
 * assistant message took. */
static inline int resp_message_(resp_cx_ *cx, int it, const char *path) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"type", "role", "content", "id", "status", "phase", NULL};
    char p[96];
    if (resp_keys_(cx, it, path, keys)) return -1;
    const char *role = js_str(d, js_get(d, it, "role"));
    int c = js_get(d, it, "content");
    snprintf(p, sizeof p, "%s.role", path);
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer")))
        return RESP_FAIL_(cx, p, "must be one of user, assistant, system, developer");
    snprintf(p, sizeof p, "%s.content", path);
    if (!strcmp(role, "assistant")) {
        resp_asst_open_(cx);
        return resp_content_(cx, c, p, 1, &cx->a_content);
    }
    resp_flush_(cx);
    cx->reason.n = 0, cx->has_reason = 0;
    resp_msg_open_(cx, role);
    jw_lit(cx->w, ",\"content\":");
    if (resp_content_(cx, c, p, 0, cx->w)) return -1;
    jw_lit(cx->w, "}");
    return 0;
}

/* A function_call item: one tool call of the assistant message being
 * gathered (a new one when none is open or reasoning waits for one). */
static inline int resp_function_call_(resp_cx_ *cx, int it, const char *path) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"type", "call_id", "name", "arguments", "id", "status", "caller", "namespace", NULL};
    char p[96];
    if (resp_keys_(cx, it, path, keys)) return -1;
    int cid = js_get(d, it, "call_id"), name = js_get(d, it, "name"), args = js_get(d, it, "arguments");
    if (js_typeof(d, cid) != JS_STR) return snprintf(p, sizeof p, "%s.call_id", path), RESP_FAIL_(cx, p, "must be a string");
    if (!resp_name_ok_(d, name)) return snprintf(p, sizeof p, "%s.name", path), RESP_FAIL_(cx, p, "must be a function name (1 to 256 bytes, one line)");
    snprintf(p, sizeof p, "%s.arguments", path);
    if (js_typeof(d, args) != JS_STR) return RESP_FAIL_(cx, p, "must be a string (a JSON object)");
    js_doc *a = js_parse(js_str(d, args), js_str_len(d, args), NULL, 0);
    int obj = a && js_typeof(a, a->root) == JS_OBJ;
    js_free(a);
    if (!obj) return RESP_FAIL_(cx, p, "must hold a JSON object");
    if (!cx->asst || cx->has_reason) resp_asst_open_(cx);
    jw_lit(&cx->a_calls, cx->a_ncalls++ ? ",{\"id\":" : "{\"id\":");
    jw_node(&cx->a_calls, d, cid, 0);
    jw_lit(&cx->a_calls, ",\"type\":\"function\",\"function\":{\"name\":");
    jw_node(&cx->a_calls, d, name, 0);
    jw_lit(&cx->a_calls, ",\"arguments\":");
    jw_node(&cx->a_calls, d, args, 0);
    jw_lit(&cx->a_calls, "}}");
    return 0;
}

/* A function_call_output item → a tool message. */
static inline int resp_call_output_(resp_cx_ *cx, int it, const char *path) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"type", "call_id", "output", "id", "status", "caller", "name", "namespace", NULL};
    char p[96];
    if (resp_keys_(cx, it, path, keys)) return -1;
    int cid = oai_opt(d, it, "call_id"), out = js_get(d, it, "output");
    if (cid >= 0 && js_typeof(d, cid) != JS_STR) return snprintf(p, sizeof p, "%s.call_id", path), RESP_FAIL_(cx, p, "must be a string");
    resp_flush_(cx);
    resp_msg_open_(cx, "tool");
    if (cid >= 0) jw_lit(cx->w, ",\"tool_call_id\":"), jw_node(cx->w, d, cid, 0);
    jw_lit(cx->w, ",\"content\":");
    snprintf(p, sizeof p, "%s.output", path);
    if (resp_content_(cx, out, p, 0, cx->w)) return -1;
    jw_lit(cx->w, "}");
    return 0;
}

/* A reasoning item: its reasoning_text content (else its summary texts)
 * waits for the next assistant message. encrypted_content cannot be read
 * here and is ignored. */
static inline int resp_reasoning_(resp_cx_ *cx, int it, const char *path) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"type", "id", "summary", "content", "encrypted_content", "status", NULL};
    if (resp_keys_(cx, it, path, keys)) return -1;
    int parts[2] = {oai_opt(d, it, "content"), oai_opt(d, it, "summary")};
    const char *names[2] = {"content", "summary"}, *types[2] = {"reasoning_text", "summary_text"};
    int use = js_count(d, parts[0]) ? 0 : 1;
    for (int k = 0; k < 2; k++) {
        char p[160];
        snprintf(p, sizeof p, "%s.%s", path, names[k]);
        if (parts[k] >= 0 && js_typeof(d, parts[k]) != JS_ARR) return RESP_FAIL_(cx, p, "must be an array");
        int j = 0;
        for (int e = js_first(d, parts[k]); e >= 0; e = js_next(d, e), j++) {
            const char *t = js_str(d, js_get(d, e, "type"));
            int tx = js_get(d, e, "text");
            char pp[200];
            snprintf(pp, sizeof pp, "%s[%d]", p, j);
            if (js_typeof(d, e) != JS_OBJ || !t || strcmp(t, types[k]) || js_typeof(d, tx) != JS_STR || js_count(d, e) != 2)
                return RESP_FAIL_(cx, pp, "must be {\"type\": \"%s\", \"text\": ...}", types[k]);
            if (k != use) continue;
            if (k == 1 && j) jw_lit(&cx->reason, "\n\n"); /* summaries are paragraphs */
            jw_raw(&cx->reason, js_str(d, tx), js_str_len(d, tx));
        }
    }
    resp_flush_(cx); /* reasoning belongs to the assistant message after it */
    cx->has_reason = 1;
    return 0;
}

/* The items of input, in order. */
static inline int resp_items_(resp_cx_ *cx, int input) {
    const js_doc *d = cx->d;
    int k = 0;
    for (int it = js_first(d, input); it >= 0; it = js_next(d, it), k++) {
        char p[48];
        snprintf(p, sizeof p, "input[%d]", k);
        if (js_typeof(d, it) != JS_OBJ) return RESP_FAIL_(cx, p, "must be an object");
        int ty = oai_opt(d, it, "type");
        const char *t = js_str(d, ty);
        if (ty >= 0 && !t) return snprintf(p, sizeof p, "input[%d].type", k), RESP_FAIL_(cx, p, "must be a string");
        int rc;
        if (!t || !strcmp(t, "message")) rc = resp_message_(cx, it, p);
        else if (!strcmp(t, "function_call")) rc = resp_function_call_(cx, it, p);
        else if (!strcmp(t, "function_call_output")) rc = resp_call_output_(cx, it, p);
        else if (!strcmp(t, "reasoning")) rc = resp_reasoning_(cx, it, p);
        else if (!strcmp(t, "item_reference")) rc = RESP_FAIL_(cx, p, "item_reference is not supported (send the items, or previous_response_id)");
        else rc = RESP_FAIL_(cx, p, "\"%.48s\" items are not supported (messages, function calls and their outputs, reasoning)", t);
        if (rc) return -1;
    }
    resp_flush_(cx);
    return 0;
}

/* The stored conversation of previous_response_id, copied message by
 * message (the stored text is this file's own, parsed again all the same). */
static inline int resp_previous_(resp_cx_ *cx, resp_store *st, int prev) {
    const char *id = js_str(cx->d, prev);
    size_t n = 0;
    char *text = st && strlen(id) == js_str_len(cx->d, prev) ? resp_store_get(st, id, &n) : NULL;
    js_doc *sd = text ? js_parse(text, n, NULL, 0) : NULL;
    free(text);
    if (!sd || js_typeof(sd, sd->root) != JS_ARR) {
        js_free(sd);
        return RESP_FAIL_(cx, "previous_response_id", "Previous response with id '%.100s' not found.", id);
    }
    for (int m = js_first(sd, sd->root); m >= 0; m = js_next(sd, m)) {
        jw_lit(cx->w, cx->nmsg++ ? "," : "");
        jw_node(cx->w, sd, m, 0);
    }
    js_free(sd);
    return 0;
}

/* tools: function tools {"type": "function", "name", "description",
 * "parameters", "strict"} → chat tools. Built-in tools are refused by
 * type. strict is not rendered: grammars follow the schema either way. */
static inline int resp_tools_(resp_cx_ *cx, int tools, jw *w) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"type", "name", "description", "parameters", "strict", "defer_loading", "allowed_callers", "output_schema", NULL};
    if (js_typeof(d, tools) != JS_ARR) return RESP_FAIL_(cx, "tools", "must be an array");
    int k = 0;
    jw_lit(w, ",\"tools\":[");
    for (int t = js_first(d, tools); t >= 0; t = js_next(d, t), k++) {
        char p[48], f[80];
        snprintf(p, sizeof p, "tools[%d]", k);
        const char *ty = js_str(d, js_get(d, t, "type"));
        if (js_typeof(d, t) != JS_OBJ || !ty) return RESP_FAIL_(cx, p, "must be an object with a type");
        if (strcmp(ty, "function")) return RESP_FAIL_(cx, p, "built-in tool \"%.48s\" is not supported (only function tools)", ty);
        if (resp_keys_(cx, t, p, keys)) return -1;
        int name = js_get(d, t, "name"), desc = oai_opt(d, t, "description"), par = oai_opt(d, t, "parameters"), st = oai_opt(d, t, "strict");
        if (!resp_name_ok_(d, name)) return snprintf(f, sizeof f, "%s.name", p), RESP_FAIL_(cx, f, "must be a function name (1 to 256 bytes, one line)");
        if (desc >= 0 && js_typeof(d, desc) != JS_STR) return snprintf(f, sizeof f, "%s.description", p), RESP_FAIL_(cx, f, "must be a string");
        if (par >= 0 && js_typeof(d, par) != JS_OBJ) return snprintf(f, sizeof f, "%s.parameters", p), RESP_FAIL_(cx, f, "must be a JSON schema object");
        if (st >= 0 && !js_is_bool(d, st)) return snprintf(f, sizeof f, "%s.strict", p), RESP_FAIL_(cx, f, "must be true or false");
        jw_lit(w, k ? ",{\"type\":\"function\",\"function\":{\"name\":" : "{\"type\":\"function\",\"function\":{\"name\":");
        jw_node(w, d, name, 0);
        if (desc >= 0) jw_lit(w, ",\"description\":"), jw_node(w, d, desc, 0);
        if (par >= 0) jw_lit(w, ",\"parameters\":"), jw_node(w, d, par, 0);
        jw_lit(w, "}}");
    }
    jw_lit(w, "]");
    return 0;
}

/* tool_choice: "auto" | "none" | "required" | {"type": "function", "name"};
 * the last two need tools, and the function one they list. */
static inline int resp_tool_choice_(resp_cx_ *cx, int tc, int tools, jw *w) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"type", "name", NULL};
    const char *s = js_str(d, tc);
    if (s) {
        if (strcmp(s, "auto") && strcmp(s, "none") && strcmp(s, "required")) return RESP_FAIL_(cx, "tool_choice", "\"%.40s\" is not one of auto, none, required", s);
        if (!strcmp(s, "required") && !js_count(d, tools)) return RESP_FAIL_(cx, "tool_choice", "\"required\" needs tools");
        jw_lit(w, ",\"tool_choice\":"), jw_node(w, d, tc, 0);
        return 0;
    }
    const char *t = js_str(d, js_get(d, tc, "type"));
    if (js_typeof(d, tc) != JS_OBJ || !t) return RESP_FAIL_(cx, "tool_choice", "must be a string or an object with a type");
    if (strcmp(t, "function")) return RESP_FAIL_(cx, "tool_choice", "{\"type\": \"%.40s\"} is not supported (only function tools)", t);
    if (resp_keys_(cx, tc, "tool_choice", keys)) return -1;
    int name = js_get(d, tc, "name"), listed = 0;
    if (!js_str_len(d, name)) return RESP_FAIL_(cx, "tool_choice.name", "must name a function");
    for (int t = js_first(d, tools); t >= 0 && !listed; t = js_next(d, t)) {
        int n = js_get(d, t, "name");
        listed = js_str_len(d, n) == js_str_len(d, name) && !memcmp(js_str(d, n), js_str(d, name), js_str_len(d, name));
    }
    if (!listed) return RESP_FAIL_(cx, "tool_choice.name", "\"%.64s\" is not one of the tools", js_str(d, name));
    jw_lit(w, ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":");
    jw_node(w, d, name, 0);
    jw_lit(w, "}}");
    return 0;
}

/* text {"format": {"type": text | json_object | json_schema, ...},
 * "verbosity"} → response_format. */
static inline int resp_text_(resp_cx_ *cx, int tx, jw *w) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"format", "verbosity", NULL}, *const verb[] = {"low", "medium", "high", NULL};
    static const char *const skeys[] = {"type", "name", "schema", "strict", "description", NULL}, *const tkeys[] = {"type", NULL};
    if (js_typeof(d, tx) != JS_OBJ) return RESP_FAIL_(cx, "text", "must be an object");
    if (resp_keys_(cx, tx, "text", keys)) return -1;
    int v = oai_opt(d, tx, "verbosity"), f = oai_opt(d, tx, "format");
    if (v >= 0 && (!js_str(d, v) || !oai_known_(js_str(d, v), verb))) return RESP_FAIL_(cx, "text.verbosity", "must be one of low, medium, high");
    if (f < 0) return 0;
    const char *t = js_str(d, js_get(d, f, "type"));
    if (js_typeof(d, f) != JS_OBJ || !t) return RESP_FAIL_(cx, "text.format", "must be an object with a type");
    if (!strcmp(t, "text") || !strcmp(t, "json_object")) {
        if (resp_keys_(cx, f, "text.format", tkeys)) return -1;
        jw_lit(w, !strcmp(t, "text") ? ",\"response_format\":{\"type\":\"text\"}" : ",\"response_format\":{\"type\":\"json_object\"}");
        return 0;
    }
    if (strcmp(t, "json_schema")) return RESP_FAIL_(cx, "text.format.type", "\"%.40s\" is not one of text, json_object, json_schema", t);
    if (resp_keys_(cx, f, "text.format", skeys)) return -1;
    int name = js_get(d, f, "name"), sc = js_get(d, f, "schema"), st = oai_opt(d, f, "strict"), ds = oai_opt(d, f, "description");
    if (js_typeof(d, name) != JS_STR) return RESP_FAIL_(cx, "text.format.name", "must be a string");
    if (js_typeof(d, sc) != JS_OBJ) return RESP_FAIL_(cx, "text.format.schema", "must be a JSON schema object");
    if (st >= 0 && !js_is_bool(d, st)) return RESP_FAIL_(cx, "text.format.strict", "must be true or false");
    if (ds >= 0 && js_typeof(d, ds) != JS_STR) return RESP_FAIL_(cx, "text.format.description", "must be a string");
    jw_lit(w, ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":");
    jw_node(w, d, name, 0);
    jw_lit(w, ",\"schema\":");
    jw_node(w, d, sc, 0);
    if (st >= 0) jw_lit(w, ",\"strict\":"), jw_node(w, d, st, 0);
    if (ds >= 0) jw_lit(w, ",\"description\":"), jw_node(w, d, ds, 0);
    jw_lit(w, "}}");
    return 0;
}

/* reasoning {"effort", "summary", ...}: effort "none"/"minimal" turns the
 * thinking block off, another effort on; without one the model's default
 * (off) stands. Summaries are not written (the reasoning text is). */
static inline int resp_reasoning_opt_(resp_cx_ *cx, int ro, jw *w) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"effort", "summary", "generate_summary", "context", "mode", NULL};
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max", NULL};
    static const char *const sums[] = {"auto", "concise", "detailed", NULL}, *const ctxs[] = {"auto", "current_turn", "all_turns", NULL};
    if (js_typeof(d, ro) != JS_OBJ) return RESP_FAIL_(cx, "reasoning", "must be an object");
    if (resp_keys_(cx, ro, "reasoning", keys)) return -1;
    int e = oai_opt(d, ro, "effort"), s = oai_opt(d, ro, "summary"), g = oai_opt(d, ro, "generate_summary"), c = oai_opt(d, ro, "context");
    int m = oai_opt(d, ro, "mode");
    if (e >= 0 && (!js_str(d, e) || !oai_known_(js_str(d, e), efforts)))
        return RESP_FAIL_(cx, "reasoning.effort", "must be one of none, minimal, low, medium, high, xhigh, max");
    if (s >= 0 && (!js_str(d, s) || !oai_known_(js_str(d, s), sums))) return RESP_FAIL_(cx, "reasoning.summary", "must be one of auto, concise, detailed");
    if (g >= 0 && (!js_str(d, g) || !oai_known_(js_str(d, g), sums))) return RESP_FAIL_(cx, "reasoning.generate_summary", "must be one of auto, concise, detailed");
    if (c >= 0 && (!js_str(d, c) || !oai_known_(js_str(d, c), ctxs))) return RESP_FAIL_(cx, "reasoning.context", "must be one of auto, current_turn, all_turns");
    if (m >= 0 && !js_str(d, m)) return RESP_FAIL_(cx, "reasoning.mode", "must be a string");
    if (e >= 0) {
        int off = !strcmp(js_str(d, e), "none") || !strcmp(js_str(d, e), "minimal");
        jw_lit(w, off ? ",\"chat_template_kwargs\":{\"enable_thinking\":false}" : ",\"chat_template_kwargs\":{\"enable_thinking\":true}");
    }
    return 0;
}

static const char *const resp_keys_all_[] = {"model", "input", "instructions", "previous_response_id", "tools", "tool_choice",
                                             "parallel_tool_calls", "max_output_tokens", "temperature", "top_p", "stream",
                                             "stream_options", "text", "reasoning", "store", "metadata", "user", "safety_identifier",
                                             "prompt_cache_key", "prompt_cache_retention", "service_tier", "truncation", "include",
                                             "top_logprobs", "max_tool_calls", "background", "conversation", "prompt",
                                             "context_management", NULL};

/* A number member within [lo, hi] copied into the chat body as chat_key. */
static inline int resp_num_(resp_cx_ *cx, int o, const char *key, const char *chat_key, double lo, double hi, int integer, jw *w) {
    int i = oai_opt(cx->d, o, key);
    if (i < 0) return 0;
    if (!js_is_num(cx->d, i) || (integer && !js_is_int(cx->d, i))) return RESP_FAIL_(cx, key, "must be %s", integer ? "an integer" : "a number");
    double v = js_num(cx->d, i);
    if (!(v >= lo && v <= hi)) return RESP_FAIL_(cx, key, "%g is outside [%g, %g]", v, lo, hi);
    if (chat_key) jw_lit(w, ",\""), jw_lit(w, chat_key), jw_lit(w, "\":"), jw_node(w, cx->d, i, 0);
    return 1;
}

/* A member that must be absent, null, or of JSON type ty (or a string of
 * allowed, when given). */
static inline int resp_shape_(resp_cx_ *cx, int o, const char *key, js_type ty, const char *const *allowed) {
    int i = oai_opt(cx->d, o, key);
    if (i < 0) return 0;
    int ok = ty == JS_TRUE ? js_is_bool(cx->d, i) : js_typeof(cx->d, i) == ty;
    if (ok && allowed) ok = oai_known_(js_str(cx->d, i), allowed);
    if (ok) return 0;
    if (allowed) {
        char list[160] = "";
        for (int k = 0; allowed[k]; k++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", allowed[k]);
        return RESP_FAIL_(cx, key, "must be one of %s", list);
    }
    return RESP_FAIL_(cx, key, "must be %s", ty == JS_TRUE ? "true or false" : ty == JS_STR ? "a string" : ty == JS_OBJ ? "an object" : "an array");
}

/* The fields that are checked only (they do not change the output), and
 * those refused: background, conversation, prompt, context_management. */
static inline int resp_checked_(resp_cx_ *cx, int o) {
    const js_doc *d = cx->d;
    static const char *const trunc[] = {"auto", "disabled", NULL}, *const retention[] = {"in_memory", "24h", NULL};
    static const char *const tiers[] = {"auto", "default", "flex", "scale", "priority", NULL};
    static const char *const includes[] = {"reasoning.encrypted_content", "message.output_text.logprobs", "file_search_call.results",
                                           "web_search_call.results", "web_search_call.action.sources", "message.input_image.image_url",
                                           "computer_call_output.output.image_url", "code_interpreter_call.outputs", NULL};
    static const char *const strs[] = {"user", "safety_identifier", "prompt_cache_key", NULL};
    for (int i = 0; strs[i]; i++)
        if (resp_shape_(cx, o, strs[i], JS_STR, NULL)) return -1;
    if (resp_shape_(cx, o, "truncation", JS_STR, trunc) || resp_shape_(cx, o, "prompt_cache_retention", JS_STR, retention) ||
        resp_shape_(cx, o, "service_tier", JS_STR, tiers) || resp_shape_(cx, o, "store", JS_TRUE, NULL) ||
        resp_shape_(cx, o, "include", JS_ARR, NULL))
        return -1;
    int v = oai_opt(d, o, "include"), k = 0;
    for (int e = js_first(d, v); e >= 0; e = js_next(d, e), k++)
        if (!js_str(d, e) || !oai_known_(js_str(d, e), includes)) {
            char p[48];
            snprintf(p, sizeof p, "include[%d]", k);
            return RESP_FAIL_(cx, p, "is not a known include value");
        }
    if ((v = oai_opt(d, o, "metadata")) >= 0) {
        if (js_typeof(d, v) != JS_OBJ || js_count(d, v) > 16) return RESP_FAIL_(cx, "metadata", "must be an object of at most 16 strings");
        for (int e = js_first(d, v); e >= 0; e = js_next(d, e))
            if (js_typeof(d, e) != JS_STR || js_key_len(d, e) > 64 || js_str_len(d, e) > 512) {
                char p[96];
                snprintf(p, sizeof p, "metadata.%.64s", js_key(d, e));
                return RESP_FAIL_(cx, p, "must be a string of at most 512 bytes (keys at most 64)");
            }
    }
    if ((v = oai_opt(d, o, "stream_options")) >= 0) {
        static const char *const skeys[] = {"include_obfuscation", NULL};
        if (js_typeof(d, v) != JS_OBJ) return RESP_FAIL_(cx, "stream_options", "must be an object");
        if (resp_keys_(cx, v, "stream_options", skeys) || resp_shape_(cx, v, "include_obfuscation", JS_TRUE, NULL)) return -1;
    }
    if (resp_num_(cx, o, "max_tool_calls", NULL, 0, 1e9, 1, NULL) < 0) return -1; /* counts built-in tool calls: none here */
    if (resp_shape_(cx, o, "background", JS_TRUE, NULL)) return -1;
    if (js_typeof(d, js_get(d, o, "background")) == JS_TRUE) return RESP_FAIL_(cx, "background", "is not supported (responses are answered while the client waits)");
    if (oai_opt(d, o, "conversation") >= 0) return RESP_FAIL_(cx, "conversation", "is not supported (use previous_response_id)");
    if (oai_opt(d, o, "prompt") >= 0) return RESP_FAIL_(cx, "prompt", "prompt templates are not supported");
    if (oai_opt(d, o, "context_management") >= 0) return RESP_FAIL_(cx, "context_management", "is not supported (the conversation is not compacted)");
    return 0;
}

/* The chat body's options after its messages. */
static inline int resp_options_(resp_cx_ *cx, int o, const oai_limits *lim, resp_req *rq, jw *w) {
    const js_doc *d = cx->d;
    int v;
    if (resp_num_(cx, o, "max_output_tokens", "max_tokens", 1, lim->ctx, 1, w) < 0 || resp_num_(cx, o, "temperature", "temperature", 0, 2, 0, w) < 0 ||
        resp_num_(cx, o, "top_p", "top_p", 0, 1, 0, w) < 0 || resp_shape_(cx, o, "stream", JS_TRUE, NULL) ||
        resp_shape_(cx, o, "parallel_tool_calls", JS_TRUE, NULL))
        return -1;
    rq->stream = js_typeof(d, js_get(d, o, "stream")) == JS_TRUE;
    rq->store = js_typeof(d, js_get(d, o, "store")) != JS_FALSE;
    jw_lit(w, rq->stream ? ",\"stream\":true" : ",\"stream\":false");
    if ((v = oai_opt(d, o, "parallel_tool_calls")) >= 0) jw_lit(w, ",\"parallel_tool_calls\":"), jw_node(w, d, v, 0);
    int tl = oai_opt(d, o, "top_logprobs");
    if (resp_num_(cx, o, "top_logprobs", NULL, 0, 20, 1, NULL) < 0) return -1;
    if (tl >= 0 && js_int(d, tl) > 0) jw_lit(w, ",\"logprobs\":true,\"top_logprobs\":"), jw_node(w, d, tl, 0); /* chat's answer to it */
    if ((v = oai_opt(d, o, "tools")) >= 0 && resp_tools_(cx, v, w)) return -1;
    if ((v = oai_opt(d, o, "tool_choice")) >= 0 && resp_tool_choice_(cx, v, oai_opt(d, o, "tools"), w)) return -1;
    if ((v = oai_opt(d, o, "text")) >= 0 && resp_text_(cx, v, w)) return -1;
    if ((v = oai_opt(d, o, "reasoning")) >= 0 && resp_reasoning_opt_(cx, v, w)) return -1;
    return resp_checked_(cx, o);
}

/* The conversation: the stored one of previous_response_id, then input. */
static inline int resp_conversation_(resp_cx_ *cx, int o, resp_store *st) {
    const js_doc *d = cx->d;
    int prev = oai_opt(d, o, "previous_response_id"), in = oai_opt(d, o, "input");
    if (prev >= 0 && js_typeof(d, prev) != JS_STR) return RESP_FAIL_(cx, "previous_response_id", "must be a string");
    if (prev >= 0 && resp_previous_(cx, st, prev)) return -1;
    if (js_typeof(d, in) == JS_STR) {
        resp_msg_open_(cx, "user");
        jw_lit(cx->w, ",\"content\":");
        jw_node(cx->w, d, in, 0);
        jw_lit(cx->w, "}");
    } else if (js_typeof(d, in) == JS_ARR) {
        if (resp_items_(cx, in)) return -1;
    } else if (in >= 0)
        return RESP_FAIL_(cx, "input", "must be a string or an array of input items");
    if (!cx->nmsg) return RESP_FAIL_(cx, "input", "is required (a string or input items)");
    return 0;
}

/* Checks a Responses request body and translates it into rq->chat, an
 * OpenAI chat-completions body for oai_parse (which renders it and may
 * still refuse it: a tool_choice naming an unknown function, a schema
 * outside the supported subset), and rq->conv, the conversation without
 * instructions (resp_store_reply keeps it with the reply). st: the store
 * that previous_response_id reads (NULL: none is found). lim: the serve
 * bounds (max_output_tokens within the context, the message count).
 * 0, or -1 with err (the message) and param (the field's path, "" for the
 * body as a whole). rq is resp_req_free'd by the caller either way. */
static inline int resp_parse(const char *body, size_t len, const oai_limits *lim, resp_store *st, resp_req *rq, char *err, size_t errlen,
                             char *param, size_t paramlen) {
    memset(rq, 0, sizeof *rq);
    char jerr[160];
    js_doc *d = rq->d = js_parse(body, len, jerr, sizeof jerr);
    jw msgs = {0};
    resp_cx_ cx;
    memset(&cx, 0, sizeof cx);
    cx.d = d, cx.w = &msgs, cx.err = err, cx.errlen = errlen, cx.param = param, cx.paramlen = paramlen;
    int rc = -1, o = d ? d->root : -1;
    if (!d) oai_refuse(err, errlen, param, paramlen, "", "the body is not valid JSON: %s", jerr);
    else if (js_typeof(d, o) != JS_OBJ) oai_refuse(err, errlen, param, paramlen, "", "the body must be a JSON object");
    else if (!resp_keys_(&cx, o, "", resp_keys_all_)) {
        int model = oai_opt(d, o, "model"), ins = oai_opt(d, o, "instructions");
        jw *w = &rq->chat;
        if (model >= 0 && js_typeof(d, model) != JS_STR) RESP_FAIL_(&cx, "model", "must be a string");
        else if (ins >= 0 && js_typeof(d, ins) != JS_STR) RESP_FAIL_(&cx, "instructions", "must be a string");
        else if (!resp_conversation_(&cx, o, st)) {
            int sys = ins >= 0 && js_str_len(d, ins) > 0;
            if (cx.nmsg + sys > lim->max_messages)
                RESP_FAIL_(&cx, "input", "%d chat messages with the instructions and the previous response, at most %d", cx.nmsg + sys, lim->max_messages);
            else {
                jw_lit(&rq->conv, "[");
                jw_raw(&rq->conv, msgs.s ? msgs.s : "", msgs.n);
                jw_lit(&rq->conv, "]");
                jw_lit(w, "{");
                if (model >= 0) jw_lit(w, "\"model\":"), jw_node(w, d, model, 0), jw_lit(w, ",");
                jw_lit(w, "\"messages\":[");
                if (sys) jw_lit(w, "{\"role\":\"system\",\"content\":"), jw_node(w, d, ins, 0), jw_lit(w, msgs.n ? "}," : "}");
                jw_raw(w, msgs.s ? msgs.s : "", msgs.n);
                jw_lit(w, "]");
                rc = resp_options_(&cx, o, lim, rq, w);
                jw_lit(w, "}");
                if (!rc && (msgs.oom || w->oom || rq->conv.oom)) rc = oai_refuse(err, errlen, param, paramlen, "", "out of memory translating the request");
            }
        }
    }
    jw_free(&msgs), jw_free(&cx.a_content), jw_free(&cx.a_calls), jw_free(&cx.a_reason), jw_free(&cx.reason);
    return rc;
}

/* ------------------------------------------------------------ replies */

/* The id suffix shared by a reply's items: the response id less "resp_". */
static inline const char *resp_sfx_(const oai_reply *y) {
    const char *id = y->id ? y->id : "";
    return strncmp(id, "resp_", 5) ? id : id + 5;
}

/* An item id: prefix + the reply's suffix (+ "_i" for calls). */
static inline void resp_item_id_(char *b, size_t n, const char *prefix, const char *sfx, int i) {
    if (i < 0) snprintf(b, n, "%s_%.80s", prefix, sfx);
    else snprintf(b, n, "%s_%.80s_%d", prefix, sfx, i);
}

/* Whether the output holds a message item: when there is text, or when
 * nothing else would be there (an empty reply still has its message). */
static inline int resp_has_message_(const oai_reply *y) { return y->content_len || (!y->reasoning_len && !y->ncalls); }

static inline void resp_reasoning_item_(jw *w, const char *sfx, const char *text, size_t n) {
    char id[112];
    resp_item_id_(id, sizeof id, "rs", sfx, -1);
    jw_lit(w, "{\"type\":\"reasoning\",\"id\":");
    jw_str(w, id);
    jw_lit(w, ",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":");
    jw_strn(w, text ? text : "", n);
    jw_lit(w, "}]}");
}

static inline void resp_text_part_(jw *w, const char *text, size_t n) {
    jw_lit(w, "{\"type\":\"output_text\",\"text\":");
    jw_strn(w, text ? text : "", n);
    jw_lit(w, ",\"annotations\":[],\"logprobs\":[]}");
}

/* A message item; text NULL: in progress, no content yet. */
static inline void resp_message_item_(jw *w, const char *sfx, const char *status, const char *text, size_t n) {
    char id[112];
    resp_item_id_(id, sizeof id, "msg", sfx, -1);
    jw_lit(w, "{\"type\":\"message\",\"id\":");
    jw_str(w, id);
    jw_lit(w, ",\"status\":");
    jw_str(w, status);
    jw_lit(w, ",\"role\":\"assistant\",\"content\":[");
    if (text) resp_text_part_(w, text, n);
    jw_lit(w, "]}");
}

/* A function_call item; args NULL: in progress (arguments ""). */
static inline void resp_call_item_(jw *w, const char *sfx, int i, const oai_call *c, int done) {
    char id[112], cid[112];
    resp_item_id_(id, sizeof id, "fc", sfx, i);
    resp_item_id_(cid, sizeof cid, "call", sfx, i);
    jw_lit(w, "{\"type\":\"function_call\",\"id\":");
    jw_str(w, id);
    jw_lit(w, ",\"call_id\":");
    jw_str(w, cid);
    jw_lit(w, ",\"name\":");
    jw_str(w, c->name);
    jw_lit(w, ",\"arguments\":");
    jw_str(w, done ? c->args : "");
    jw_lit(w, done ? ",\"status\":\"completed\"}" : ",\"status\":\"in_progress\"}");
}

static inline int resp_incomplete_(const oai_reply *y) { return y->finish && !strcmp(y->finish, "length"); }

/* The request's member key written back, or dflt (JSON text) when it is
 * absent or null. */
static inline void resp_echo_(jw *w, const js_doc *d, const char *key, const char *dflt) {
    int v = oai_opt(d, d ? d->root : -1, key);
    jw_lit(w, ",\"");
    jw_lit(w, key);
    jw_lit(w, "\":");
    if (v >= 0) jw_node(w, d, v, 0);
    else jw_lit(w, dflt);
}

/* The request's tools as the response lists them (flat function tools). */
static inline void resp_echo_tools_(jw *w, const js_doc *d) {
    int tools = oai_opt(d, d ? d->root : -1, "tools"), k = 0;
    jw_lit(w, ",\"tools\":[");
    for (int t = js_first(d, tools); t >= 0; t = js_next(d, t), k++) {
        jw_lit(w, k ? ",{\"type\":\"function\",\"name\":" : "{\"type\":\"function\",\"name\":");
        jw_node(w, d, js_get(d, t, "name"), 0);
        const char *keys[] = {"description", "parameters", "strict"};
        for (int i = 0; i < 3; i++) {
            int v = js_get(d, t, keys[i]);
            jw_lit(w, ",\""), jw_lit(w, keys[i]), jw_lit(w, "\":");
            if (v >= 0) jw_node(w, d, v, 0);
            else jw_lit(w, "null");
        }
        jw_lit(w, "}");
    }
    jw_lit(w, "]");
}

/* The response document. status: "in_progress" (no output, no usage yet),
 * "completed", "incomplete" or "failed" (error: its message). */
static inline void resp_doc_(jw *w, const resp_req *rq, const oai_reply *y, const char *status, const char *error) {
    const js_doc *d = rq->d;
    const char *sfx = resp_sfx_(y);
    int done = strcmp(status, "in_progress") && strcmp(status, "failed");
    jw_lit(w, "{\"id\":");
    jw_str(w, y->id);
    jw_lit(w, ",\"object\":\"response\",\"created_at\":");
    jw_int(w, y->created);
    jw_lit(w, ",\"status\":");
    jw_str(w, status);
    jw_lit(w, ",\"background\":false,\"error\":");
    if (error) jw_lit(w, "{\"code\":\"server_error\",\"message\":"), jw_str(w, error), jw_lit(w, "}");
    else jw_lit(w, "null");
    jw_lit(w, ",\"incomplete_details\":");
    jw_lit(w, !strcmp(status, "incomplete") ? "{\"reason\":\"max_output_tokens\"}" : "null");
    resp_echo_(w, d, "instructions", "null");
    resp_echo_(w, d, "max_output_tokens", "null");
    jw_lit(w, ",\"model\":");
    jw_str(w, y->model);
    jw_lit(w, ",\"output\":[");
    if (done) {
        int n = 0;
        if (y->reasoning_len) resp_reasoning_item_(w, sfx, y->reasoning, y->reasoning_len), n++;
        if (resp_has_message_(y)) {
            if (n++) jw_lit(w, ",");
            resp_message_item_(w, sfx, resp_incomplete_(y) ? "incomplete" : "completed", y->content, y->content_len);
        }
        for (int i = 0; i < y->ncalls; i++) {
            if (n++) jw_lit(w, ",");
            resp_call_item_(w, sfx, i, &y->calls[i], 1);
        }
    }
    jw_lit(w, "]");
    resp_echo_(w, d, "parallel_tool_calls", "true");
    resp_echo_(w, d, "previous_response_id", "null");
    int ro = oai_opt(d, d ? d->root : -1, "reasoning");
    jw_lit(w, ",\"reasoning\":{\"effort\":");
    if (oai_opt(d, ro, "effort") >= 0) jw_node(w, d, js_get(d, ro, "effort"), 0);
    else jw_lit(w, "null");
    jw_lit(w, ",\"summary\":");
    if (oai_opt(d, ro, "summary") >= 0) jw_node(w, d, js_get(d, ro, "summary"), 0);
    else jw_lit(w, "null");
    jw_lit(w, "}");
    jw_lit(w, rq->store ? ",\"store\":true" : ",\"store\":false");
    resp_echo_(w, d, "temperature", "null");
    int tx = oai_opt(d, d ? d->root : -1, "text");
    jw_lit(w, ",\"text\":{\"format\":");
    if (oai_opt(d, tx, "format") >= 0) jw_node(w, d, js_get(d, tx, "format"), 0);
    else jw_lit(w, "{\"type\":\"text\"}");
    jw_lit(w, "}");
    resp_echo_(w, d, "tool_choice", "\"auto\"");
    resp_echo_tools_(w, d);
    resp_echo_(w, d, "top_p", "null");
    resp_echo_(w, d, "top_logprobs", "0");
    resp_echo_(w, d, "truncation", "\"disabled\"");
    resp_echo_(w, d, "user", "null");
    resp_echo_(w, d, "metadata", "{}");
    jw_lit(w, ",\"usage\":");
    if (done) {
        jw_lit(w, "{\"input_tokens\":");
        jw_int(w, y->prompt_tokens);
        jw_lit(w, ",\"input_tokens_details\":{\"cached_tokens\":");
        jw_int(w, y->cached_tokens);
        jw_lit(w, ",\"cache_write_tokens\":0},\"output_tokens\":");
        jw_int(w, y->completion_tokens);
        jw_lit(w, ",\"output_tokens_details\":{\"reasoning_tokens\":");
        jw_int(w, y->reasoning_tokens);
        jw_lit(w, "},\"total_tokens\":");
        jw_int(w, y->prompt_tokens + y->completion_tokens);
        jw_lit(w, "}");
    } else
        jw_lit(w, "null");
    jw_lit(w, "}");
}

/* The whole response of a non-streaming request: status "completed", or
 * "incomplete" (incomplete_details.reason "max_output_tokens") when the
 * reply ended at the token limit; output: a reasoning item (when the reply
 * thought), a message item, a function_call item per call. */
static inline void resp_response_json(jw *w, const resp_req *rq, const oai_reply *y) {
    resp_doc_(w, rq, y, resp_incomplete_(y) ? "incomplete" : "completed", NULL);
}

/* Keeps the conversation a reply ended (rq->conv and the reply as an
 * assistant message with its reasoning and tool calls) under the reply's
 * id, for a later previous_response_id. Call after the reply completed,
 * when rq->store. 0, or -1 (not stored: too big for the store, or out of
 * memory). */
static inline int resp_store_reply(resp_store *s, const resp_req *rq, const oai_reply *y) {
    jw w = {0};
    const char *sfx = resp_sfx_(y);
    if (rq->conv.n < 2) return -1;
    jw_raw(&w, rq->conv.s, rq->conv.n - 1); /* the array less its "]" */
    jw_lit(&w, rq->conv.n > 2 ? ",{\"role\":\"assistant\",\"content\":" : "{\"role\":\"assistant\",\"content\":");
    if (y->content_len || !y->ncalls) jw_strn(&w, y->content ? y->content : "", y->content_len);
    else jw_lit(&w, "null");
    if (y->reasoning_len) jw_lit(&w, ",\"reasoning_content\":"), jw_strn(&w, y->reasoning, y->reasoning_len);
    for (int i = 0; i < y->ncalls; i++) {
        char cid[112];
        resp_item_id_(cid, sizeof cid, "call", sfx, i);
        jw_lit(&w, i ? ",{\"id\":" : ",\"tool_calls\":[{\"id\":");
        jw_str(&w, cid);
        jw_lit(&w, ",\"type\":\"function\",\"function\":{\"name\":");
        jw_str(&w, y->calls[i].name);
        jw_lit(&w, ",\"arguments\":");
        jw_str(&w, y->calls[i].args);
        jw_lit(&w, "}}");
    }
    jw_lit(&w, y->ncalls ? "]}]" : "}]");
    int rc = w.oom ? -1 : resp_store_put(s, y->id ? y->id : "", w.s, w.n);
    jw_free(&w);
    return rc;
}

/* ------------------------------------------------------------ streaming */

enum { RESP_NONE, RESP_REASONING, RESP_MESSAGE };

/* A streaming reply: the next sequence number and output index, and the
 * open item (reasoning or message) with its text so far (its .done events
 * repeat it). */
typedef struct {
    long long seq;
    int next;     /* the next item's output_index */
    int open, at; /* the open item and its output_index */
    int items;    /* items added so far */
    jw text;
    char sfx[88];
} resp_stream;

/* "event: type\ndata: {"type", "sequence_number" — the caller writes the
 * rest of the object and "}\n\n". */
static inline void resp_event_(resp_stream *s, jw *w, const char *type) {
    jw_lit(w, "event: ");
    jw_lit(w, type);
    jw_lit(w, "\ndata: {\"type\":\"");
    jw_lit(w, type);
    jw_lit(w, "\",\"sequence_number\":");
    jw_int(w, s->seq++);
}

/* ,"item_id":..,"output_index":..,"content_index":0 of the open item. */
static inline void resp_where_(resp_stream *s, jw *w) {
    char id[112];
    resp_item_id_(id, sizeof id, s->open == RESP_REASONING ? "rs" : "msg", s->sfx, -1);
    jw_lit(w, ",\"item_id\":");
    jw_str(w, id);
    jw_lit(w, ",\"output_index\":");
    jw_int(w, s->at);
    jw_lit(w, ",\"content_index\":0");
}

/* Closes the open item: its text's .done, content_part.done, output_item.done. */
static inline void resp_item_close_(resp_stream *s, jw *w, const char *status) {
    if (s->open == RESP_NONE) return;
    int r = s->open == RESP_REASONING;
    const char *t = s->text.s ? s->text.s : "";
    resp_event_(s, w, r ? "response.reasoning_text.done" : "response.output_text.done");
    resp_where_(s, w);
    jw_lit(w, ",\"text\":");
    jw_strn(w, t, s->text.n);
    jw_lit(w, r ? "}\n\n" : ",\"logprobs\":[]}\n\n");
    resp_event_(s, w, "response.content_part.done");
    resp_where_(s, w);
    jw_lit(w, ",\"part\":");
    if (r) jw_lit(w, "{\"type\":\"reasoning_text\",\"text\":"), jw_strn(w, t, s->text.n), jw_lit(w, "}");
    else resp_text_part_(w, t, s->text.n);
    jw_lit(w, "}\n\n");
    resp_event_(s, w, "response.output_item.done");
    jw_lit(w, ",\"output_index\":");
    jw_int(w, s->at);
    jw_lit(w, ",\"item\":");
    if (r) resp_reasoning_item_(w, s->sfx, t, s->text.n);
    else resp_message_item_(w, s->sfx, status, t, s->text.n);
    jw_lit(w, "}\n\n");
    s->open = RESP_NONE, s->text.n = 0;
}

/* Opens a reasoning or message item (closing the other kind first). */
static inline void resp_item_open_(resp_stream *s, jw *w, int kind) {
    if (s->open == kind) return;
    resp_item_close_(s, w, "completed");
    s->open = kind, s->at = s->next++, s->items++;
    resp_event_(s, w, "response.output_item.added");
    jw_lit(w, ",\"output_index\":");
    jw_int(w, s->at);
    jw_lit(w, ",\"item\":");
    if (kind == RESP_REASONING) {
        char id[112];
        resp_item_id_(id, sizeof id, "rs", s->sfx, -1);
        jw_lit(w, "{\"type\":\"reasoning\",\"id\":"), jw_str(w, id), jw_lit(w, ",\"summary\":[],\"content\":[]}");
    } else
        resp_message_item_(w, s->sfx, "in_progress", NULL, 0);
    jw_lit(w, "}\n\n");
    resp_event_(s, w, "response.content_part.added");
    resp_where_(s, w);
    jw_lit(w, kind == RESP_REASONING ? ",\"part\":{\"type\":\"reasoning_text\",\"text\":\"\"}}\n\n" : ",\"part\":");
    if (kind == RESP_MESSAGE) resp_text_part_(w, "", 0), jw_lit(w, "}\n\n");
}

static inline void resp_delta_(resp_stream *s, jw *w, int kind, const char *p, size_t n) {
    resp_item_open_(s, w, kind);
    resp_event_(s, w, kind == RESP_REASONING ? "response.reasoning_text.delta" : "response.output_text.delta");
    resp_where_(s, w);
    jw_lit(w, ",\"delta\":");
    jw_strn(w, p, n);
    jw_lit(w, kind == RESP_REASONING ? "}\n\n" : ",\"logprobs\":[]}\n\n");
    jw_raw(&s->text, p, n);
}

/* The first events: response.created and response.in_progress (the
 * response with no output yet). y: id, model, created are read. */
static inline void resp_stream_start(resp_stream *s, jw *w, const resp_req *rq, const oai_reply *y) {
    memset(s, 0, sizeof *s);
    snprintf(s->sfx, sizeof s->sfx, "%s", resp_sfx_(y));
    const char *ev[2] = {"response.created", "response.in_progress"};
    for (int i = 0; i < 2; i++) {
        resp_event_(s, w, ev[i]);
        jw_lit(w, ",\"response\":");
        resp_doc_(w, rq, y, "in_progress", NULL);
        jw_lit(w, "}\n\n");
    }
}

/* One delta of the reply (oai_out_delta's reasoning then content): a
 * reasoning item's and a message item's events, each item added on its
 * first text and done when the other kind begins. */
static inline void resp_stream_delta(resp_stream *s, jw *w, const char *rs, size_t rn, const char *cs, size_t cn) {
    if (rn) resp_delta_(s, w, RESP_REASONING, rs, rn);
    if (cn) resp_delta_(s, w, RESP_MESSAGE, cs, cn);
}

/* The last events, after the last delta: the open item done (an empty
 * message item when the reply has no other output), a function_call item
 * per call (its arguments as one delta), then response.completed, or
 * response.incomplete when the reply ended at the token limit. */
static inline void resp_stream_finish(resp_stream *s, jw *w, const resp_req *rq, const oai_reply *y) {
    const char *status = resp_incomplete_(y) ? "incomplete" : "completed";
    if (!s->items && !y->ncalls) resp_item_open_(s, w, RESP_MESSAGE);
    resp_item_close_(s, w, status);
    for (int i = 0; i < y->ncalls; i++) {
        int at = s->next++;
        char id[112];
        resp_item_id_(id, sizeof id, "fc", s->sfx, i);
        resp_event_(s, w, "response.output_item.added");
        jw_lit(w, ",\"output_index\":"), jw_int(w, at), jw_lit(w, ",\"item\":");
        resp_call_item_(w, s->sfx, i, &y->calls[i], 0);
        jw_lit(w, "}\n\n");
        const char *ev[2] = {"response.function_call_arguments.delta", "response.function_call_arguments.done"};
        for (int k = 0; k < 2; k++) {
            resp_event_(s, w, ev[k]);
            jw_lit(w, ",\"item_id\":"), jw_str(w, id), jw_lit(w, ",\"output_index\":"), jw_int(w, at);
            jw_lit(w, k ? ",\"name\":" : ",\"delta\":");
            if (k) jw_str(w, y->calls[i].name), jw_lit(w, ",\"arguments\":");
            jw_str(w, y->calls[i].args);
            jw_lit(w, "}\n\n");
        }
        resp_event_(s, w, "response.output_item.done");
        jw_lit(w, ",\"output_index\":"), jw_int(w, at), jw_lit(w, ",\"item\":");
        resp_call_item_(w, s->sfx, i, &y->calls[i], 1);
        jw_lit(w, "}\n\n");
    }
    resp_event_(s, w, !strcmp(status, "incomplete") ? "response.incomplete" : "response.completed");
    jw_lit(w, ",\"response\":");
    resp_doc_(w, rq, y, status, NULL);
    jw_lit(w, "}\n\n");
}

/* An error after the stream began: the "error" event, then response.failed
 * (the stream ends there). */
static inline void resp_stream_error(resp_stream *s, jw *w, const resp_req *rq, const oai_reply *y, const char *msg) {
    resp_event_(s, w, "error");
    jw_lit(w, ",\"code\":\"server_error\",\"message\":");
    jw_str(w, msg);
    jw_lit(w, ",\"param\":null}\n\n");
    resp_event_(s, w, "response.failed");
    jw_lit(w, ",\"response\":");
    resp_doc_(w, rq, y, "failed", msg);
    jw_lit(w, "}\n\n");
}

static inline void resp_stream_free(resp_stream *s) { jw_free(&s->text); }

#endif
