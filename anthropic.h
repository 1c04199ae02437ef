/* anthropic.h — Anthropic's Messages API (POST /v1/messages and
 * POST /v1/messages/count_tokens) as a protocol front of serve mode,
 * without I/O. A request is checked and translated into an OpenAI
 * chat-completions body (ant_parse) that oai_parse (openai.h) then checks
 * and renders in the model's chat format exactly as it renders
 * /v1/chat/completions: there is no second implementation of the chat
 * formats, tool grammars or stop strings. Replies are written as
 * Anthropic's message document (ant_message_json), its server-sent events
 * (ant_stream_*: a small state machine fed by the reasoning/content deltas
 * of oai_out, then the calls and the finish reason), the count_tokens
 * answer and its error document. Prefix: ant_.
 *
 * Translation (docs/serve.md "Anthropic Messages"): system (a string or
 * text blocks) → a system message; each message in order → user,
 * assistant, system messages (tool_result blocks become tool messages,
 * placed before the text of their user message, which Anthropic requires
 * to follow them; assistant thinking → reasoning_content, tool_use →
 * tool_calls with the input as compact JSON text); tools (custom ones) →
 * function tools; tool_choice auto/any/tool/none → auto/required/the
 * function/none, disable_parallel_tool_use → parallel_tool_calls false;
 * thinking enabled/adaptive/disabled → enable_thinking; stop_sequences →
 * stop; output_config.format → a json_schema response_format. What does
 * not change the output (metadata, cache_control, service_tier, ...) is
 * accepted and ignored; what cannot be honoured (images, documents,
 * server tools, MCP servers, a container, prefill) and unknown fields are
 * refused naming the field.
 *
 * Must not: read the environment, print, or touch the model. */
#ifndef COLI_ANTHROPIC_H
#define COLI_ANTHROPIC_H

#include "openai.h"

enum { ANT_MESSAGES, ANT_COUNT_TOKENS };

/* A checked request: the body oai_parse renders, and what the writers need. */
typedef struct {
    jw chat;           /* the chat-completions body (JSON text) for oai_parse */
    int count;         /* /v1/messages/count_tokens */
    int stream;        /* "stream": true */
    int omit_thinking; /* thinking.display "omitted": thinking blocks carry no text */
} ant_req;

static inline void ant_req_free(ant_req *q) {
    jw_free(&q->chat);
    memset(q, 0, sizeof *q);
}

/* ------------------------------------------------------------ requests */

typedef struct {
    const js_doc *d;
    jw *w;     /* the chat messages being written */
    int nmsg;  /* chat messages written */
    char *err, *param;
    size_t errlen, paramlen;
} ant_cx_;

#define ANT_FAIL_(cx, path, ...) oai_refuse((cx)->err, (cx)->errlen, (cx)->param, (cx)->paramlen, (path), __VA_ARGS__)

/* Refuses obj's first member that keys does not list: 0 or -1. */
static inline int ant_keys_(ant_cx_ *cx, int obj, const char *path, const char *const *keys) {
    return oai_refuse_unknown(cx->d, obj, path, keys, cx->err, cx->errlen, cx->param, cx->paramlen);
}

/* A block's type (string) or NULL with the refusal written. */
static inline const char *ant_block_type_(ant_cx_ *cx, int b, const char *path) {
    const char *t = js_str(cx->d, js_get(cx->d, b, "type"));
    if (js_typeof(cx->d, b) != JS_OBJ || !t) return ANT_FAIL_(cx, path, "a content block must be an object with a type"), NULL;
    return t;
}

/* A tool name: 1..256 bytes of one line (the call syntaxes put it between tags). */
static inline int ant_name_ok_(const js_doc *d, int s) {
    const char *p = js_str(d, s);
    size_t n = js_str_len(d, s);
    if (!p || !n || n > 256) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20) return 0;
    return 1;
}

static const char *const ant_text_keys_[] = {"type", "text", "cache_control", "citations", NULL};

/* A text block {"type": "text", "text"} (type already read) appended as a
 * chat text part, with a comma when *n > 0. */
static inline int ant_text_part_(ant_cx_ *cx, int b, const char *path, jw *w, int *n) {
    int t = js_get(cx->d, b, "text");
    if (ant_keys_(cx, b, path, ant_text_keys_)) return -1;
    if (js_typeof(cx->d, t) != JS_STR) {
        char p[200];
        snprintf(p, sizeof p, "%s.text", path);
        return ANT_FAIL_(cx, p, "must be a string");
    }
    jw_lit(w, *n ? ",{\"type\":\"text\",\"text\":" : "{\"type\":\"text\",\"text\":");
    jw_strn(w, js_str(cx->d, t), js_str_len(cx->d, t));
    jw_lit(w, "}");
    ++*n;
    return 0;
}

/* A value that must be a string or text blocks (system, tool_result
 * content), written as a chat content value: the string, or an array of
 * text parts. Other blocks are refused by type. */
static inline int ant_text_value_(ant_cx_ *cx, int v, const char *path, jw *w) {
    const js_doc *d = cx->d;
    if (js_typeof(d, v) == JS_STR) return jw_strn(w, js_str(d, v), js_str_len(d, v)), 0;
    if (js_typeof(d, v) != JS_ARR) return ANT_FAIL_(cx, path, "must be a string or an array of text blocks");
    int j = 0, n = 0;
    jw_lit(w, "[");
    for (int b = js_first(d, v); b >= 0; b = js_next(d, b), j++) {
        char p[200];
        snprintf(p, sizeof p, "%s[%d]", path, j);
        const char *t = ant_block_type_(cx, b, p);
        if (!t) return -1;
        if (strcmp(t, "text")) return ANT_FAIL_(cx, p, "\"%.40s\" blocks are not supported here (text only)", t);
        if (ant_text_part_(cx, b, p, w, &n)) return -1;
    }
    jw_lit(w, "]");
    return 0;
}

/* Starts chat message number cx->nmsg: {"role": role (the caller closes it). */
static inline void ant_msg_open_(ant_cx_ *cx, const char *role) {
    jw_lit(cx->w, cx->nmsg++ ? ",{\"role\":" : "{\"role\":");
    jw_str(cx->w, role);
}

static const char *const ant_result_keys_[] = {"type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name", NULL};

/* A tool_result block as a tool message. is_error is accepted and not
 * rendered: the chat formats have no place for it (the result's text
 * usually says so). */
static inline int ant_tool_result_(ant_cx_ *cx, int b, const char *path) {
    const js_doc *d = cx->d;
    char p[200];
    if (ant_keys_(cx, b, path, ant_result_keys_)) return -1;
    int id = js_get(d, b, "tool_use_id"), c = oai_opt(d, b, "content"), ie = oai_opt(d, b, "is_error");
    if (js_typeof(d, id) != JS_STR) return snprintf(p, sizeof p, "%s.tool_use_id", path), ANT_FAIL_(cx, p, "must be a string");
    if (ie >= 0 && !js_is_bool(d, ie)) return snprintf(p, sizeof p, "%s.is_error", path), ANT_FAIL_(cx, p, "must be true or false");
    ant_msg_open_(cx, "tool");
    jw_lit(cx->w, ",\"tool_call_id\":");
    jw_strn(cx->w, js_str(d, id), js_str_len(d, id));
    jw_lit(cx->w, ",\"content\":");
    if (c < 0) jw_lit(cx->w, "\"\"");
    else if (snprintf(p, sizeof p, "%s.content", path), ant_text_value_(cx, c, p, cx->w)) return -1;
    jw_lit(cx->w, "}");
    return 0;
}

/* Why a block that is not text, tool_result, thinking or tool_use is
 * refused, or NULL for an unknown type. */
static inline const char *ant_unsupported_(const char *t) {
    static const char *const media[] = {"image", "document", "search_result", "container_upload", NULL};
    if (oai_known_(t, media)) return "blocks are not supported (text only)";
    if (!strcmp(t, "server_tool_use") || strstr(t, "_tool_result") || !strcmp(t, "mcp_tool_use"))
        return "blocks are not supported (server tools do not run here)";
    return NULL;
}

/* A message whose content is one string c: the chat message of role. 0. */
static inline int ant_text_msg_(ant_cx_ *cx, const char *role, int c) {
    ant_msg_open_(cx, role);
    jw_lit(cx->w, ",\"content\":");
    jw_strn(cx->w, js_str(cx->d, c), js_str_len(cx->d, c));
    jw_lit(cx->w, "}");
    return 0;
}

/* A user message: tool_result blocks as tool messages first, then one user
 * message with the text blocks (when there are any). */
static inline int ant_user_(ant_cx_ *cx, int c, const char *path) {
    const js_doc *d = cx->d;
    char cp[96];
    snprintf(cp, sizeof cp, "%s.content", path);
    if (js_typeof(d, c) == JS_STR) return ant_text_msg_(cx, "user", c);
    if (js_typeof(d, c) != JS_ARR || !js_count(d, c)) return ANT_FAIL_(cx, cp, "must be a string or a non-empty array of content blocks");
    jw parts = {0};
    int j = 0, n = 0, rc = 0;
    for (int b = js_first(d, c); b >= 0 && !rc; b = js_next(d, b), j++) {
        char p[200];
        snprintf(p, sizeof p, "%s[%d]", cp, j);
        const char *t = ant_block_type_(cx, b, p), *why;
        if (!t) rc = -1;
        else if (!strcmp(t, "text")) rc = ant_text_part_(cx, b, p, &parts, &n);
        else if (!strcmp(t, "tool_result")) rc = ant_tool_result_(cx, b, p);
        else if (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking") || !strcmp(t, "tool_use"))
            rc = ANT_FAIL_(cx, p, "\"%s\" blocks belong to assistant messages", t);
        else if ((why = ant_unsupported_(t))) rc = ANT_FAIL_(cx, p, "\"%.40s\" %s", t, why);
        else rc = ANT_FAIL_(cx, p, "unknown block type \"%.40s\"", t);
    }
    if (!rc && n) {
        ant_msg_open_(cx, "user");
        jw_lit(cx->w, ",\"content\":[");
        jw_raw(cx->w, parts.s, parts.n);
        jw_lit(cx->w, "]}");
    }
    jw_free(&parts);
    return rc;
}

static const char *const ant_thinking_keys_[] = {"type", "thinking", "signature", "cache_control", NULL};
static const char *const ant_redacted_keys_[] = {"type", "data", "cache_control", NULL};
static const char *const ant_use_keys_[] = {"type", "id", "name", "input", "cache_control", "caller", "toolset_name", NULL};

/* A tool_use block as a chat tool call, the input written as compact JSON
 * text (as the chat front returns arguments, so a round trip renders the
 * same bytes). */
static inline int ant_tool_use_(ant_cx_ *cx, int b, const char *path, jw *calls, int *n) {
    const js_doc *d = cx->d;
    char p[200];
    if (ant_keys_(cx, b, path, ant_use_keys_)) return -1;
    int id = js_get(d, b, "id"), name = js_get(d, b, "name"), in = js_get(d, b, "input");
    if (js_typeof(d, id) != JS_STR) return snprintf(p, sizeof p, "%s.id", path), ANT_FAIL_(cx, p, "must be a string");
    if (!ant_name_ok_(d, name)) return snprintf(p, sizeof p, "%s.name", path), ANT_FAIL_(cx, p, "must be a tool name (1 to 256 bytes, one line)");
    if (js_typeof(d, in) != JS_OBJ) return snprintf(p, sizeof p, "%s.input", path), ANT_FAIL_(cx, p, "must be an object");
    jw args = {0};
    jw_node(&args, d, in, 0);
    jw_lit(calls, (*n)++ ? ",{\"id\":" : "{\"id\":");
    jw_strn(calls, js_str(d, id), js_str_len(d, id));
    jw_lit(calls, ",\"type\":\"function\",\"function\":{\"name\":");
    jw_strn(calls, js_str(d, name), js_str_len(d, name));
    jw_lit(calls, ",\"arguments\":");
    jw_strn(calls, args.s ? args.s : "{}", args.s ? args.n : 2);
    jw_lit(calls, "}}");
    jw_free(&args);
    return 0;
}

/* An assistant message: text blocks → content, thinking → reasoning_content
 * (the signature is not checked: nothing here signs), redacted_thinking
 * dropped, tool_use → tool_calls. Content is null when there are calls and
 * no text, as chat clients send it. */
static inline int ant_assistant_(ant_cx_ *cx, int c, const char *path) {
    const js_doc *d = cx->d;
    char cp[96];
    snprintf(cp, sizeof cp, "%s.content", path);
    if (js_typeof(d, c) == JS_STR) return ant_text_msg_(cx, "assistant", c);
    if (js_typeof(d, c) != JS_ARR) return ANT_FAIL_(cx, cp, "must be a string or an array of content blocks");
    jw parts = {0}, reason = {0}, calls = {0};
    int j = 0, n = 0, nthink = 0, ncalls = 0, rc = 0;
    for (int b = js_first(d, c); b >= 0 && !rc; b = js_next(d, b), j++) {
        char p[200];
        snprintf(p, sizeof p, "%s[%d]", cp, j);
        const char *t = ant_block_type_(cx, b, p), *why;
        if (!t) rc = -1;
        else if (!strcmp(t, "text")) rc = ant_text_part_(cx, b, p, &parts, &n);
        else if (!strcmp(t, "thinking")) {
            int th = js_get(d, b, "thinking"), sg = oai_opt(d, b, "signature");
            if (!(rc = ant_keys_(cx, b, p, ant_thinking_keys_))) {
                if (js_typeof(d, th) != JS_STR || (sg >= 0 && js_typeof(d, sg) != JS_STR))
                    rc = ANT_FAIL_(cx, p, "a thinking block needs \"thinking\" and \"signature\" strings");
                else
                    jw_raw(&reason, js_str(d, th), js_str_len(d, th)), nthink++;
            }
        } else if (!strcmp(t, "redacted_thinking"))
            rc = ant_keys_(cx, b, p, ant_redacted_keys_); /* encrypted elsewhere: nothing to render */
        else if (!strcmp(t, "tool_use")) rc = ant_tool_use_(cx, b, p, &calls, &ncalls);
        else if (!strcmp(t, "tool_result")) rc = ANT_FAIL_(cx, p, "\"tool_result\" blocks belong to user messages");
        else if ((why = ant_unsupported_(t))) rc = ANT_FAIL_(cx, p, "\"%.40s\" %s", t, why);
        else rc = ANT_FAIL_(cx, p, "unknown block type \"%.40s\"", t);
    }
    if (!rc) {
        ant_msg_open_(cx, "assistant");
        jw_lit(cx->w, ",\"content\":");
        if (n) jw_lit(cx->w, "["), jw_raw(cx->w, parts.s, parts.n), jw_lit(cx->w, "]");
        else jw_lit(cx->w, ncalls ? "null" : "\"\"");
        if (nthink) jw_lit(cx->w, ",\"reasoning_content\":"), jw_strn(cx->w, reason.s ? reason.s : "", reason.n);
        if (ncalls) jw_lit(cx->w, ",\"tool_calls\":["), jw_raw(cx->w, calls.s, calls.n), jw_lit(cx->w, "]");
        jw_lit(cx->w, "}");
    }
    jw_free(&parts), jw_free(&reason), jw_free(&calls);
    return rc;
}

static const char *const ant_msg_keys_[] = {"role", "content", NULL};

/* The messages array into chat messages, in order. A last assistant
 * message would be a prefill (the reply continues it), which the chat
 * rendering cannot express: refused. */
static inline int ant_messages_(ant_cx_ *cx, int msgs) {
    const js_doc *d = cx->d;
    if (js_typeof(d, msgs) != JS_ARR || !js_count(d, msgs)) return ANT_FAIL_(cx, "messages", "must be a non-empty array");
    int k = 0, last = js_count(d, msgs) - 1;
    for (int m = js_first(d, msgs); m >= 0; m = js_next(d, m), k++) {
        char p[64], rp[80];
        snprintf(p, sizeof p, "messages[%d]", k);
        snprintf(rp, sizeof rp, "%s.role", p);
        if (js_typeof(d, m) != JS_OBJ) return ANT_FAIL_(cx, p, "must be an object");
        if (ant_keys_(cx, m, p, ant_msg_keys_)) return -1;
        const char *role = js_str(d, js_get(d, m, "role"));
        int c = js_get(d, m, "content");
        if (!role) return ANT_FAIL_(cx, rp, "must be \"user\" or \"assistant\"");
        if (c < 0) return snprintf(rp, sizeof rp, "%s.content", p), ANT_FAIL_(cx, rp, "is missing");
        int rc;
        if (!strcmp(role, "user")) rc = ant_user_(cx, c, p);
        else if (!strcmp(role, "assistant")) {
            if (k == last) return ANT_FAIL_(cx, p, "a last assistant message (prefill) is not supported: the reply is a new turn");
            rc = ant_assistant_(cx, c, p);
        } else if (!strcmp(role, "system")) {
            ant_msg_open_(cx, "system");
            jw_lit(cx->w, ",\"content\":");
            snprintf(rp, sizeof rp, "%s.content", p);
            rc = ant_text_value_(cx, c, rp, cx->w);
            jw_lit(cx->w, "}");
        } else
            return ANT_FAIL_(cx, rp, "\"%.40s\" is not one of user, assistant, system", role);
        if (rc) return -1;
    }
    return 0;
}

static const char *const ant_tool_keys_[] = {"type", "name", "description", "input_schema", "cache_control", "strict", "defer_loading",
                                             "eager_input_streaming", "input_examples", "allowed_callers", NULL};

/* tools → chat function tools {"type": "function", "function": {"name",
 * "description", "parameters"}}. Only custom tools (no type, or "custom"):
 * server tools (web search, bash, code execution, ...) are refused by name. */
static inline int ant_tools_(ant_cx_ *cx, int tools, jw *w) {
    const js_doc *d = cx->d;
    if (js_typeof(d, tools) != JS_ARR) return ANT_FAIL_(cx, "tools", "must be an array");
    int k = 0;
    jw_lit(w, ",\"tools\":[");
    for (int t = js_first(d, tools); t >= 0; t = js_next(d, t), k++) {
        char p[48], f[80];
        snprintf(p, sizeof p, "tools[%d]", k);
        if (js_typeof(d, t) != JS_OBJ) return ANT_FAIL_(cx, p, "must be an object");
        int ty = oai_opt(d, t, "type"), name = js_get(d, t, "name"), desc = oai_opt(d, t, "description"), sc = js_get(d, t, "input_schema");
        if (ty >= 0 && (!js_str(d, ty) || strcmp(js_str(d, ty), "custom"))) {
            snprintf(f, sizeof f, "%s.type", p);
            if (!js_str(d, ty)) return ANT_FAIL_(cx, f, "must be a string");
            return ANT_FAIL_(cx, p, "server tool \"%.60s\" is not supported (only custom tools: name, description, input_schema)", js_str(d, ty));
        }
        if (ant_keys_(cx, t, p, ant_tool_keys_)) return -1;
        if (!ant_name_ok_(d, name)) return snprintf(f, sizeof f, "%s.name", p), ANT_FAIL_(cx, f, "must be a tool name (1 to 256 bytes, one line)");
        if (desc >= 0 && js_typeof(d, desc) != JS_STR) return snprintf(f, sizeof f, "%s.description", p), ANT_FAIL_(cx, f, "must be a string");
        if (js_typeof(d, sc) != JS_OBJ) return snprintf(f, sizeof f, "%s.input_schema", p), ANT_FAIL_(cx, f, "must be a JSON schema object");
        jw_lit(w, k ? ",{\"type\":\"function\",\"function\":{\"name\":" : "{\"type\":\"function\",\"function\":{\"name\":");
        jw_node(w, d, name, 0);
        if (desc >= 0) jw_lit(w, ",\"description\":"), jw_node(w, d, desc, 0);
        jw_lit(w, ",\"parameters\":");
        jw_node(w, d, sc, 0);
        jw_lit(w, "}}");
    }
    jw_lit(w, "]");
    return 0;
}

/* Whether tools (an array, or -1) lists a tool named like name (a string node). */
static inline int ant_lists_(const js_doc *d, int tools, int name) {
    for (int t = js_first(d, tools); t >= 0; t = js_next(d, t)) {
        int n = js_get(d, t, "name");
        if (js_str_len(d, n) == js_str_len(d, name) && !memcmp(js_str(d, n), js_str(d, name), js_str_len(d, name))) return 1;
    }
    return 0;
}

/* tool_choice {"type": auto|any|tool|none, "name", "disable_parallel_tool_use"};
 * any and tool need tools, and tool one they list. */
static inline int ant_tool_choice_(ant_cx_ *cx, int tc, int tools, jw *w) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
    const char *t = js_str(d, js_get(d, tc, "type"));
    if (js_typeof(d, tc) != JS_OBJ || !t) return ANT_FAIL_(cx, "tool_choice", "must be an object with a type");
    if (ant_keys_(cx, tc, "tool_choice", keys)) return -1;
    int name = js_get(d, tc, "name"), dp = oai_opt(d, tc, "disable_parallel_tool_use");
    if (dp >= 0 && !js_is_bool(d, dp)) return ANT_FAIL_(cx, "tool_choice.disable_parallel_tool_use", "must be true or false");
    if ((!strcmp(t, "tool") || !strcmp(t, "any")) && !js_count(d, tools)) return ANT_FAIL_(cx, "tool_choice", "{\"type\": \"%s\"} needs tools", t);
    if (!strcmp(t, "tool")) {
        if (!ant_name_ok_(d, name)) return ANT_FAIL_(cx, "tool_choice.name", "must name a tool");
        if (!ant_lists_(d, tools, name)) return ANT_FAIL_(cx, "tool_choice.name", "\"%.64s\" is not one of the tools", js_str(d, name));
        jw_lit(w, ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":");
        jw_node(w, d, name, 0);
        jw_lit(w, "}}");
    } else if (name >= 0)
        return ANT_FAIL_(cx, "tool_choice.name", "is only for {\"type\": \"tool\"}");
    else if (!strcmp(t, "auto") || !strcmp(t, "any") || !strcmp(t, "none"))
        jw_lit(w, !strcmp(t, "auto") ? ",\"tool_choice\":\"auto\"" : !strcmp(t, "any") ? ",\"tool_choice\":\"required\"" : ",\"tool_choice\":\"none\"");
    else
        return ANT_FAIL_(cx, "tool_choice.type", "\"%.40s\" is not one of auto, any, tool, none", t);
    if (dp >= 0) jw_lit(w, js_typeof(d, dp) == JS_TRUE ? ",\"parallel_tool_calls\":false" : ",\"parallel_tool_calls\":true");
    return 0;
}

/* thinking {"type": "enabled", "budget_tokens"} | {"type": "adaptive"} |
 * {"type": "disabled"} (display "summarized" | "omitted") → enable_thinking.
 * budget_tokens is checked, not enforced: the block ends when the model
 * ends it, within max_tokens. */
static inline int ant_thinking_(ant_cx_ *cx, int th, ant_req *q, jw *w) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"type", "budget_tokens", "display", NULL};
    const char *t = js_str(d, js_get(d, th, "type"));
    if (js_typeof(d, th) != JS_OBJ || !t) return ANT_FAIL_(cx, "thinking", "must be an object with a type");
    if (ant_keys_(cx, th, "thinking", keys)) return -1;
    int on = !strcmp(t, "enabled") || !strcmp(t, "adaptive"), bt = js_get(d, th, "budget_tokens"), disp = oai_opt(d, th, "display");
    if (!on && strcmp(t, "disabled")) return ANT_FAIL_(cx, "thinking.type", "\"%.40s\" is not one of enabled, adaptive, disabled", t);
    if (!strcmp(t, "enabled") && (!js_is_int(d, bt) || js_int(d, bt) < 0))
        return ANT_FAIL_(cx, "thinking.budget_tokens", "must be a non-negative integer");
    if (strcmp(t, "enabled") && bt >= 0) return ANT_FAIL_(cx, "thinking.budget_tokens", "is only for {\"type\": \"enabled\"}");
    if (disp >= 0) {
        const char *ds = js_str(d, disp);
        if (!ds || (strcmp(ds, "summarized") && strcmp(ds, "omitted"))) return ANT_FAIL_(cx, "thinking.display", "must be \"summarized\" or \"omitted\"");
        q->omit_thinking = on && !strcmp(ds, "omitted");
    }
    jw_lit(w, on ? ",\"chat_template_kwargs\":{\"enable_thinking\":true}" : ",\"chat_template_kwargs\":{\"enable_thinking\":false}");
    return 0;
}

/* output_config {"effort", "format": {"type": "json_schema", "schema"}}:
 * the format becomes a json_schema response_format; effort is a hint this
 * server does not use (accepted when it is one of Anthropic's values). */
static inline int ant_output_config_(ant_cx_ *cx, int oc, jw *w) {
    const js_doc *d = cx->d;
    static const char *const keys[] = {"effort", "format", NULL}, *const efforts[] = {"low", "medium", "high", "xhigh", "max", NULL};
    static const char *const fkeys[] = {"type", "schema", NULL};
    if (js_typeof(d, oc) != JS_OBJ) return ANT_FAIL_(cx, "output_config", "must be an object");
    if (ant_keys_(cx, oc, "output_config", keys)) return -1;
    int ef = oai_opt(d, oc, "effort"), f = oai_opt(d, oc, "format");
    if (ef >= 0 && (!js_str(d, ef) || !oai_known_(js_str(d, ef), efforts)))
        return ANT_FAIL_(cx, "output_config.effort", "must be one of low, medium, high, xhigh, max");
    if (f < 0) return 0;
    const char *t = js_str(d, js_get(d, f, "type"));
    if (js_typeof(d, f) != JS_OBJ || !t || strcmp(t, "json_schema")) return ANT_FAIL_(cx, "output_config.format", "must be {\"type\": \"json_schema\", \"schema\": {...}}");
    if (ant_keys_(cx, f, "output_config.format", fkeys)) return -1;
    int sc = js_get(d, f, "schema");
    if (js_typeof(d, sc) != JS_OBJ) return ANT_FAIL_(cx, "output_config.format.schema", "must be a JSON schema object");
    jw_lit(w, ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"output\",\"schema\":");
    jw_node(w, d, sc, 0);
    jw_lit(w, "}}");
    return 0;
}

/* A number member within [lo, hi] copied into the chat body under the
 * same name (its digits kept): 0 (absent or null) or 1, -1 refused. */
static inline int ant_num_(ant_cx_ *cx, int o, const char *key, double lo, double hi, int integer, jw *w) {
    int i = oai_opt(cx->d, o, key);
    if (i < 0) return 0;
    if (!js_is_num(cx->d, i) || (integer && !js_is_int(cx->d, i))) return ANT_FAIL_(cx, key, "must be %s", integer ? "an integer" : "a number");
    double v = js_num(cx->d, i);
    if (!(v >= lo && v <= hi)) return ANT_FAIL_(cx, key, "%g is outside [%g, %g]", v, lo, hi);
    jw_lit(w, ",\"");
    jw_lit(w, key);
    jw_lit(w, "\":");
    jw_node(w, cx->d, i, 0);
    return 1;
}

/* The body's fields: those translated, those accepted and ignored (they
 * do not change the output), and those refused with a reason. */
static const char *const ant_create_keys_[] = {"model", "max_tokens", "messages", "system", "tools", "tool_choice", "thinking",
                                               "stop_sequences", "temperature", "top_p", "top_k", "stream", "output_config",
                                               "metadata", "service_tier", "cache_control", "diagnostics", "inference_geo",
                                               "speed", "user_profile_id", "workspace_id", "container", "mcp_servers",
                                               "context_management", NULL};
static const char *const ant_count_keys_[] = {"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config",
                                              "cache_control", "speed", "user_profile_id", "workspace_id", "mcp_servers",
                                              "context_management", NULL};

/* The fields checked only for their shape: metadata {user_id},
 * service_tier, speed, inference_geo, workspace and user profile ids,
 * diagnostics, cache_control. Refused: a container (no code runs here),
 * MCP servers (none is called from here), context_management (the
 * conversation is rendered as sent, never edited). */
static inline int ant_ignored_(ant_cx_ *cx, int o) {
    const js_doc *d = cx->d;
    static const char *const mkeys[] = {"user_id", NULL}, *const tiers[] = {"auto", "standard_only", NULL}, *const speeds[] = {"standard", "fast", NULL};
    static const char *const strs[] = {"inference_geo", "user_profile_id", "workspace_id", NULL};
    int v;
    if ((v = oai_opt(d, o, "metadata")) >= 0) {
        if (js_typeof(d, v) != JS_OBJ) return ANT_FAIL_(cx, "metadata", "must be an object");
        if (ant_keys_(cx, v, "metadata", mkeys)) return -1;
        int u = oai_opt(d, v, "user_id");
        if (u >= 0 && js_typeof(d, u) != JS_STR) return ANT_FAIL_(cx, "metadata.user_id", "must be a string");
    }
    if ((v = oai_opt(d, o, "service_tier")) >= 0 && (!js_str(d, v) || !oai_known_(js_str(d, v), tiers)))
        return ANT_FAIL_(cx, "service_tier", "must be \"auto\" or \"standard_only\"");
    if ((v = oai_opt(d, o, "speed")) >= 0 && (!js_str(d, v) || !oai_known_(js_str(d, v), speeds)))
        return ANT_FAIL_(cx, "speed", "must be \"standard\" or \"fast\"");
    for (int i = 0; strs[i]; i++)
        if ((v = oai_opt(d, o, strs[i])) >= 0 && js_typeof(d, v) != JS_STR) return ANT_FAIL_(cx, strs[i], "must be a string");
    if ((v = oai_opt(d, o, "diagnostics")) >= 0 && js_typeof(d, v) != JS_OBJ) return ANT_FAIL_(cx, "diagnostics", "must be an object");
    if ((v = oai_opt(d, o, "cache_control")) >= 0 && js_typeof(d, v) != JS_OBJ) return ANT_FAIL_(cx, "cache_control", "must be an object");
    if (oai_opt(d, o, "container") >= 0) return ANT_FAIL_(cx, "container", "is not supported (no code execution here)");
    if (oai_opt(d, o, "mcp_servers") >= 0) return ANT_FAIL_(cx, "mcp_servers", "is not supported (no MCP server is called from here)");
    if (oai_opt(d, o, "context_management") >= 0) return ANT_FAIL_(cx, "context_management", "is not supported (the conversation is rendered as sent)");
    return 0;
}

/* The translated body, after the messages: sampling, stop, tools, thinking,
 * format. */
static inline int ant_options_(ant_cx_ *cx, int o, ant_req *q, const oai_limits *lim, jw *w) {
    const js_doc *d = cx->d;
    int v;
    if (!q->count) {
        int mt = js_get(d, o, "max_tokens");
        if (mt < 0) return ANT_FAIL_(cx, "max_tokens", "is required");
        if (ant_num_(cx, o, "max_tokens", 1, lim->ctx, 1, w) <= 0)
            return oai_opt(d, o, "max_tokens") < 0 ? ANT_FAIL_(cx, "max_tokens", "must be an integer") : -1;
        if (ant_num_(cx, o, "temperature", 0, 1, 0, w) < 0 || ant_num_(cx, o, "top_p", 0, 1, 0, w) < 0 ||
            ant_num_(cx, o, "top_k", 0, 1 << 30, 1, w) < 0)
            return -1;
        if ((v = oai_opt(d, o, "stream")) >= 0) {
            if (!js_is_bool(d, v)) return ANT_FAIL_(cx, "stream", "must be true or false");
            q->stream = js_typeof(d, v) == JS_TRUE;
            jw_lit(w, q->stream ? ",\"stream\":true" : ",\"stream\":false");
        }
        if ((v = oai_opt(d, o, "stop_sequences")) >= 0) {
            if (js_typeof(d, v) != JS_ARR) return ANT_FAIL_(cx, "stop_sequences", "must be an array of strings");
            if (js_count(d, v) > OAI_MAX_STOP) return ANT_FAIL_(cx, "stop_sequences", "at most %d sequences", OAI_MAX_STOP);
            for (int e = js_first(d, v); e >= 0; e = js_next(d, e))
                if (js_typeof(d, e) != JS_STR) return ANT_FAIL_(cx, "stop_sequences", "must be an array of strings");
            jw_lit(w, ",\"stop\":");
            jw_node(w, d, v, 0);
        }
    }
    if ((v = oai_opt(d, o, "tools")) >= 0 && ant_tools_(cx, v, w)) return -1;
    if ((v = oai_opt(d, o, "tool_choice")) >= 0 && ant_tool_choice_(cx, v, oai_opt(d, o, "tools"), w)) return -1;
    if ((v = oai_opt(d, o, "thinking")) >= 0 && ant_thinking_(cx, v, q, w)) return -1;
    if ((v = oai_opt(d, o, "output_config")) >= 0 && ant_output_config_(cx, v, w)) return -1;
    return ant_ignored_(cx, o);
}

/* Checks an Anthropic request body and translates it into q->chat, an
 * OpenAI chat-completions body for oai_parse (which then renders it and
 * may still refuse it: a tool_choice naming an unknown tool, a schema
 * outside the supported subset). kind: ANT_MESSAGES or ANT_COUNT_TOKENS
 * (no max_tokens, sampling, stop or stream there). lim: the serve bounds
 * (max_tokens within the context, the translated message count).
 * 0, or -1 with err (the message) and param (the field's path, "" for the
 * body as a whole). q is ant_req_free'd by the caller either way. */
static inline int ant_parse(const char *body, size_t len, int kind, const oai_limits *lim, ant_req *q, char *err, size_t errlen, char *param,
                            size_t paramlen) {
    memset(q, 0, sizeof *q);
    q->count = kind == ANT_COUNT_TOKENS;
    char jerr[160];
    js_doc *d = js_parse(body, len, jerr, sizeof jerr);
    jw msgs = {0};
    ant_cx_ cx = {d, &msgs, 0, err, param, errlen, paramlen};
    int rc = -1, o = d ? d->root : -1;
    if (!d) oai_refuse(err, errlen, param, paramlen, "", "the body is not valid JSON: %s", jerr);
    else if (js_typeof(d, o) != JS_OBJ) oai_refuse(err, errlen, param, paramlen, "", "the body must be a JSON object");
    else if (!ant_keys_(&cx, o, "", q->count ? ant_count_keys_ : ant_create_keys_)) {
        int model = js_get(d, o, "model"), sys = oai_opt(d, o, "system");
        jw *w = &q->chat;
        if (js_typeof(d, model) != JS_STR) ANT_FAIL_(&cx, "model", "is required (a string)");
        else if (sys >= 0 && js_typeof(d, sys) != JS_STR && js_typeof(d, sys) != JS_ARR) ANT_FAIL_(&cx, "system", "must be a string or an array of text blocks");
        else {
            if (sys >= 0 && (js_typeof(d, sys) == JS_STR ? js_str_len(d, sys) > 0 : js_count(d, sys) > 0)) { /* an empty system is none */
                ant_msg_open_(&cx, "system");
                jw_lit(&msgs, ",\"content\":");
                rc = ant_text_value_(&cx, sys, "system", &msgs);
                jw_lit(&msgs, "}");
            } else
                rc = 0;
            if (!rc) rc = ant_messages_(&cx, js_get(d, o, "messages"));
            if (!rc && cx.nmsg > lim->max_messages)
                rc = ANT_FAIL_(&cx, "messages", "%d chat messages after translation, at most %d", cx.nmsg, lim->max_messages);
            if (!rc) {
                jw_lit(w, "{\"model\":");
                jw_node(w, d, model, 0);
                jw_lit(w, ",\"messages\":[");
                jw_raw(w, msgs.s ? msgs.s : "", msgs.n);
                jw_lit(w, "]");
                rc = ant_options_(&cx, o, q, lim, w);
                jw_lit(w, "}");
            }
            if (!rc && (msgs.oom || w->oom)) rc = oai_refuse(err, errlen, param, paramlen, "", "out of memory translating the request");
        }
    }
    jw_free(&msgs);
    js_free(d);
    return rc;
}

/* ------------------------------------------------------------ replies */

/* Anthropic's stop_reason for a reply's finish. */
static inline const char *ant_stop_reason(const oai_reply *y) {
    const char *f = y->finish ? y->finish : "stop";
    return !strcmp(f, "tool_calls") ? "tool_use" : !strcmp(f, "length") ? "max_tokens" : !strcmp(f, "stop_string") ? "stop_sequence" : "end_turn";
}

/* The error type of Anthropic's error document for an HTTP status. */
static inline const char *ant_error_type(int status) {
    switch (status) {
    case 400: case 405: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return "api_error";
    }
}

/* Anthropic's error document {"type": "error", "error": {"type", "message"}}. */
static inline void ant_error_json(jw *w, const char *type, const char *msg) {
    jw_lit(w, "{\"type\":\"error\",\"error\":{\"type\":");
    jw_str(w, type);
    jw_lit(w, ",\"message\":");
    jw_str(w, msg);
    jw_lit(w, "}}");
}

/* The count_tokens answer. */
static inline void ant_count_json(jw *w, int input_tokens) {
    jw_lit(w, "{\"input_tokens\":");
    jw_int(w, input_tokens);
    jw_lit(w, "}");
}

/* A tool_use id, from the reply id ("msg_X" → "toolu_X_i"). */
static inline void ant_tool_id_(char *b, size_t n, const oai_reply *y, int i) {
    const char *id = y->id ? y->id : "";
    if (!strncmp(id, "msg_", 4)) id += 4;
    snprintf(b, n, "toolu_%.80s_%d", id, i);
}

/* usage: input tokens are the prompt's less those read from the prefix cache. */
static inline void ant_usage_(jw *w, const oai_reply *y, int output_tokens) {
    jw_lit(w, "{\"input_tokens\":");
    jw_int(w, y->prompt_tokens - y->cached_tokens);
    jw_lit(w, ",\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":");
    jw_int(w, y->cached_tokens);
    jw_lit(w, ",\"output_tokens\":");
    jw_int(w, output_tokens);
    jw_lit(w, "}");
}

/* A call's arguments (a JSON object as text) written as a JSON value; {}
 * when they do not parse (oai_parse_calls never returns such). */
static inline void ant_input_(jw *w, const char *args) {
    js_doc *a = args ? js_parse(args, strlen(args), NULL, 0) : NULL;
    if (a && js_typeof(a, a->root) == JS_OBJ) jw_node(w, a, a->root, 0);
    else jw_lit(w, "{}");
    js_free(a);
}

/* The message head: {"id", "type", "role", "model", "content": [ (the
 * caller writes the blocks). */
static inline void ant_head_(jw *w, const oai_reply *y) {
    jw_lit(w, "{\"id\":");
    jw_str(w, y->id);
    jw_lit(w, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    jw_str(w, y->model);
    jw_lit(w, ",\"content\":[");
}

/* The whole message of a non-streaming request: a thinking block (when
 * the reply thought), a text block (when it has text), a tool_use block
 * per call, stop_reason, stop_sequence and usage. */
static inline void ant_message_json(jw *w, const ant_req *q, const oai_reply *y) {
    int n = 0;
    ant_head_(w, y);
    if (y->reasoning_len) {
        jw_lit(w, "{\"type\":\"thinking\",\"thinking\":");
        jw_strn(w, y->reasoning, q->omit_thinking ? 0 : y->reasoning_len);
        jw_lit(w, ",\"signature\":\"\"}");
        n++;
    }
    if (y->content_len) {
        jw_lit(w, n++ ? ",{\"type\":\"text\",\"text\":" : "{\"type\":\"text\",\"text\":");
        jw_strn(w, y->content, y->content_len);
        jw_lit(w, "}");
    }
    for (int i = 0; i < y->ncalls; i++) {
        char id[112];
        ant_tool_id_(id, sizeof id, y, i);
        jw_lit(w, n++ ? ",{\"type\":\"tool_use\",\"id\":" : "{\"type\":\"tool_use\",\"id\":");
        jw_str(w, id);
        jw_lit(w, ",\"name\":");
        jw_str(w, y->calls[i].name);
        jw_lit(w, ",\"input\":");
        ant_input_(w, y->calls[i].args);
        jw_lit(w, "}");
    }
    jw_lit(w, "],\"stop_reason\":");
    jw_str(w, ant_stop_reason(y));
    jw_lit(w, ",\"stop_sequence\":");
    if (y->stop_seq && !y->ncalls) jw_strn(w, y->stop_seq, y->stop_seq_len);
    else jw_lit(w, "null");
    jw_lit(w, ",\"usage\":");
    ant_usage_(w, y, y->completion_tokens);
    jw_lit(w, "}");
}

/* ------------------------------------------------------------ streaming */

enum { ANT_NONE, ANT_THINKING, ANT_TEXT };

/* A streaming reply: which content block is open and the next block's index. */
typedef struct {
    int open;  /* ANT_NONE, ANT_THINKING, ANT_TEXT */
    int index; /* the open block's index, or the next one's when none is open */
    int omit_thinking;
} ant_stream;

/* "event: type\ndata: " — the caller writes the JSON and ends with "\n\n". */
static inline void ant_event_(jw *w, const char *type) {
    jw_lit(w, "event: ");
    jw_lit(w, type);
    jw_lit(w, "\ndata: ");
}

static inline void ant_block_stop_(ant_stream *s, jw *w) {
    if (s->open == ANT_NONE) return;
    if (s->open == ANT_THINKING) { /* the SDKs take the block's signature from this delta */
        ant_event_(w, "content_block_delta");
        jw_lit(w, "{\"type\":\"content_block_delta\",\"index\":");
        jw_int(w, s->index);
        jw_lit(w, ",\"delta\":{\"type\":\"signature_delta\",\"signature\":\"\"}}\n\n");
    }
    ant_event_(w, "content_block_stop");
    jw_lit(w, "{\"type\":\"content_block_stop\",\"index\":");
    jw_int(w, s->index);
    jw_lit(w, "}\n\n");
    s->open = ANT_NONE, s->index++;
}

/* Opens a block of kind (closing another kind first): content_block_start. */
static inline void ant_block_open_(ant_stream *s, jw *w, int kind) {
    if (s->open == kind) return;
    ant_block_stop_(s, w);
    ant_event_(w, "content_block_start");
    jw_lit(w, "{\"type\":\"content_block_start\",\"index\":");
    jw_int(w, s->index);
    jw_lit(w, kind == ANT_THINKING ? ",\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n"
                                   : ",\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    s->open = kind;
}

/* The first events: message_start (the message with no content yet and
 * the input usage). y: id, model, prompt_tokens, cached_tokens are read. */
static inline void ant_stream_start(ant_stream *s, jw *w, const ant_req *q, const oai_reply *y) {
    memset(s, 0, sizeof *s);
    s->omit_thinking = q->omit_thinking;
    ant_event_(w, "message_start");
    jw_lit(w, "{\"type\":\"message_start\",\"message\":");
    ant_head_(w, y);
    jw_lit(w, "],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
    ant_usage_(w, y, 0);
    jw_lit(w, "}}\n\n");
}

/* One delta of the reply (oai_out_delta's reasoning then content): a
 * thinking block's and a text block's deltas, each block opened on its
 * first text and closed when the other kind begins. */
static inline void ant_stream_delta(ant_stream *s, jw *w, const char *rs, size_t rn, const char *cs, size_t cn) {
    if (rn) {
        ant_block_open_(s, w, ANT_THINKING);
        if (!s->omit_thinking) {
            ant_event_(w, "content_block_delta");
            jw_lit(w, "{\"type\":\"content_block_delta\",\"index\":");
            jw_int(w, s->index);
            jw_lit(w, ",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":");
            jw_strn(w, rs, rn);
            jw_lit(w, "}}\n\n");
        }
    }
    if (cn) {
        ant_block_open_(s, w, ANT_TEXT);
        ant_event_(w, "content_block_delta");
        jw_lit(w, "{\"type\":\"content_block_delta\",\"index\":");
        jw_int(w, s->index);
        jw_lit(w, ",\"delta\":{\"type\":\"text_delta\",\"text\":");
        jw_strn(w, cs, cn);
        jw_lit(w, "}}\n\n");
    }
}

/* The last events, after the last delta: the open block closed, a
 * tool_use block per call (its input as one input_json_delta),
 * message_delta (stop_reason, stop_sequence, usage) and message_stop. */
static inline void ant_stream_finish(ant_stream *s, jw *w, const oai_reply *y) {
    ant_block_stop_(s, w);
    for (int i = 0; i < y->ncalls; i++, s->index++) {
        char id[112];
        ant_tool_id_(id, sizeof id, y, i);
        ant_event_(w, "content_block_start");
        jw_lit(w, "{\"type\":\"content_block_start\",\"index\":");
        jw_int(w, s->index);
        jw_lit(w, ",\"content_block\":{\"type\":\"tool_use\",\"id\":");
        jw_str(w, id);
        jw_lit(w, ",\"name\":");
        jw_str(w, y->calls[i].name);
        jw_lit(w, ",\"input\":{}}}\n\n");
        jw in = {0};
        ant_input_(&in, y->calls[i].args);
        ant_event_(w, "content_block_delta");
        jw_lit(w, "{\"type\":\"content_block_delta\",\"index\":");
        jw_int(w, s->index);
        jw_lit(w, ",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":");
        jw_strn(w, in.s ? in.s : "{}", in.s ? in.n : 2);
        jw_lit(w, "}}\n\n");
        jw_free(&in);
        ant_event_(w, "content_block_stop");
        jw_lit(w, "{\"type\":\"content_block_stop\",\"index\":");
        jw_int(w, s->index);
        jw_lit(w, "}\n\n");
    }
    ant_event_(w, "message_delta");
    jw_lit(w, "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":");
    jw_str(w, ant_stop_reason(y));
    jw_lit(w, ",\"stop_sequence\":");
    if (y->stop_seq && !y->ncalls) jw_strn(w, y->stop_seq, y->stop_seq_len);
    else jw_lit(w, "null");
    jw_lit(w, "},\"usage\":");
    ant_usage_(w, y, y->completion_tokens);
    jw_lit(w, "}\n\n");
    ant_event_(w, "message_stop");
    jw_lit(w, "{\"type\":\"message_stop\"}\n\n");
}

/* An error after the stream began: "event: error" with the error document
 * (the stream ends there). */
static inline void ant_stream_error(jw *w, const char *type, const char *msg) {
    ant_event_(w, "error");
    ant_error_json(w, type, msg);
    jw_lit(w, "\n\n");
}

#endif
