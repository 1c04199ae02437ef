/* fuzz_anthropic.c — the Anthropic Messages front (anthropic.h) on
 * hostile bytes.
 *
 * Input: a mode byte (mode = byte % 3, chat format = byte / 3 % CHAT_NFMT,
 * thinking omitted when byte / (3 * CHAT_NFMT) is odd), then
 *   0  a /v1/messages body, or
 *   1  a /v1/messages/count_tokens body: ant_parse. Refused → a message,
 *      which starts with the param ("path: ") when the param is not empty.
 *      Accepted → the translated body is a JSON object that oai_parse
 *      either accepts (a prompt, the stream flag agreeing, no max_tokens
 *      for count_tokens) or refuses with a message;
 *   2  generated text for a fixed request (thinking on, two stop strings, a
 *      tool with a string and an integer argument; itself translated from
 *      an Anthropic body), fed through oai_out in pieces whose sizes come
 *      from the first 8 bytes (at most 384 bytes of text: the writers work
 *      per delta, and a longer text only costs time), each delta through the stream writer, then
 *      the calls and the finish (ant_stream_finish), or an error at a
 *      point the input picks: every event is "event: T\ndata: JSON" with
 *      "type" T; message_start first; blocks start, get deltas of their
 *      own kind and stop in turn with indexes 0, 1, ...; message_delta and
 *      message_stop last. The streamed thinking, text and tool inputs add
 *      up to the message document's blocks (ant_message_json) and the
 *      stop reasons agree. */
#include "anthropic.h"

#include "fuzz_common.h"

static const oai_limits fz_lim = {16, 512, CHAT_GLM5};

/* A refusal's message names its param: "param: why". */
static void fz_refusal(const char *err, size_t errlen, const char *param, size_t paramlen) {
    FUZZ_CHECK(fuzz_terminated(err, errlen) && fuzz_terminated(param, paramlen) && err[0]);
    size_t pl = strlen(param);
    FUZZ_CHECK(!pl || (!strncmp(err, param, pl) && err[pl] == ':'));
}

static void fz_request(const uint8_t *p, size_t n, int kind, int fmt) {
    char err[512], param[200];
    ant_req q;
    err[0] = param[0] = 0;
    oai_limits lim = fz_lim;
    lim.fmt = fmt;
    if (ant_parse((const char *)p, n, kind, &lim, &q, err, sizeof err, param, sizeof param)) {
        fz_refusal(err, sizeof err, param, sizeof param);
        ant_req_free(&q);
        return;
    }
    js_doc *d = js_parse(q.chat.s, q.chat.n, NULL, 0);
    FUZZ_CHECK(d && js_typeof(d, d->root) == JS_OBJ && !q.chat.oom);
    FUZZ_CHECK(kind != ANT_COUNT_TOKENS || (js_get(d, d->root, "max_tokens") < 0 && js_get(d, d->root, "stream") < 0));
    js_free(d);
    oai_req r;
    err[0] = 0;
    if (oai_parse_msg(q.chat.s, q.chat.n, 1, &lim, &r, err, sizeof err)) FUZZ_CHECK(err[0] != 0);
    else FUZZ_CHECK(r.text && r.text_len > 0 && r.stream == q.stream && r.max_tokens <= lim.ctx);
    oai_req_free(&r);
    ant_req_free(&q);
}

static const char fz_fixed_body[] =
    "{\"model\":\"m\",\"max_tokens\":100,\"stop_sequences\":[\"STOP\",\"\xc3\xa9\xc3\xa9\"],\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":10},"
    "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}}}}],"
    "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true}";

/* The decoded JSON string at obj.key appended to out. */
static void fz_take(const js_doc *d, int obj, const char *key, jw *out) {
    int s = js_get(d, obj, key);
    FUZZ_CHECK(js_typeof(d, s) == JS_STR);
    jw_raw(out, js_str(d, s), js_str_len(d, s));
}

/* A JSON object text written back compactly (for comparing tool inputs). */
static void fz_compact(const char *s, size_t n, jw *out) {
    js_doc *d = js_parse(s, n, NULL, 0);
    FUZZ_CHECK(d && js_typeof(d, d->root) == JS_OBJ);
    jw_node(out, d, d->root, 0);
    jw_lit(out, "\n");
    js_free(d);
}

/* Walks the stream (as check_ant_stream in tests/test_fronts.c); returns
 * whether it ended with an error event, gathering what it carried. */
static int fz_check_stream(const jw *w, jw *thinking, jw *text, jw *inputs, char *stop_reason, size_t srn) {
    const char *p = w->s, *end = w->s + w->n, *data;
    char name[64], kind[32] = "";
    size_t dn;
    int rc, state = 0, open = -1, next = 0, error = 0;
    jw pj = {0};
    while ((rc = fuzz_sse_next(&p, end, name, sizeof name, &data, &dn)) == 1) {
        js_doc *d = js_parse(data, dn, NULL, 0);
        FUZZ_CHECK(d && js_typeof(d, d->root) == JS_OBJ && state < 3);
        int o = d->root, idx = (int)js_int(d, js_get(d, o, "index"));
        const char *t = js_str(d, js_get(d, o, "type"));
        FUZZ_CHECK(t && !strcmp(t, name));
        if (!strcmp(name, "message_start")) {
            FUZZ_CHECK(state == 0);
            state = 1;
        }
        else if (!strcmp(name, "content_block_start")) {
            int cb = js_get(d, o, "content_block");
            const char *ct = js_str(d, js_get(d, cb, "type"));
            FUZZ_CHECK(state == 1 && open < 0 && idx == next && ct && strlen(ct) < sizeof kind);
            open = idx, strcpy(kind, ct), pj.n = 0;
        } else if (!strcmp(name, "content_block_delta")) {
            int dl = js_get(d, o, "delta");
            const char *dt = js_str(d, js_get(d, dl, "type"));
            FUZZ_CHECK(state == 1 && open == idx && dt);
            int think = !strcmp(dt, "thinking_delta"), sig = !strcmp(dt, "signature_delta"), txt = !strcmp(dt, "text_delta");
            FUZZ_CHECK(think || sig ? !strcmp(kind, "thinking") : txt ? !strcmp(kind, "text") : !strcmp(dt, "input_json_delta") && !strcmp(kind, "tool_use"));
            if (!sig) fz_take(d, dl, think ? "thinking" : txt ? "text" : "partial_json", think ? thinking : txt ? text : &pj);
        } else if (!strcmp(name, "content_block_stop")) {
            FUZZ_CHECK(state == 1 && open == idx);
            if (!strcmp(kind, "tool_use")) fz_compact(pj.s ? pj.s : "", pj.n, inputs);
            open = -1, next++;
        } else if (!strcmp(name, "message_delta")) {
            const char *sr = js_str(d, js_get(d, js_get(d, o, "delta"), "stop_reason"));
            FUZZ_CHECK(state == 1 && open < 0 && sr);
            snprintf(stop_reason, srn, "%s", sr);
            state = 2;
        } else if (!strcmp(name, "message_stop")) {
            FUZZ_CHECK(state == 2);
            state = 3;
        } else {
            FUZZ_CHECK(!strcmp(name, "error") && state == 1);
            error = 1, state = 3;
        }
        js_free(d);
    }
    FUZZ_CHECK(rc == 0 && state == 3);
    jw_free(&pj);
    return error;
}

static void fz_output(const uint8_t *p, size_t n, int fmt, int omit) {
    char err[256], param[64];
    ant_req q;
    oai_req r;
    oai_limits lim = fz_lim;
    lim.fmt = fmt;
    FUZZ_CHECK(ant_parse(fz_fixed_body, sizeof fz_fixed_body - 1, ANT_MESSAGES, &lim, &q, err, sizeof err, param, sizeof param) == 0);
    FUZZ_CHECK(oai_parse_msg(q.chat.s, q.chat.n, 1, &lim, &r, err, sizeof err) == 0);
    q.omit_thinking = omit;
    size_t k = n < 8 ? n : 8;
    const uint8_t *sizes = p, *text = p + k;
    size_t tn = n - k < 384 ? n - k : 384, err_at = k ? (size_t)sizes[0] % 64 * 6 : 0; /* sizes[0] % 4 == 3: an error after err_at bytes */
    int fail = k && sizes[0] % 4 == 3;
    oai_out o;
    oai_out_init(&o, &r);
    oai_reply y;
    memset(&y, 0, sizeof y);
    y.id = "msg_f", y.model = "m", y.prompt_tokens = 5, y.cached_tokens = 2;
    ant_stream st;
    jw w = {0};
    ant_stream_start(&st, &w, &q, &y);
    const char *rs, *cs;
    size_t rn, cn;
    int errored = 0;
    for (size_t at = 0, i = 0; at < tn && !o.stopped; i++) {
        size_t step = 1 + (k ? sizes[i % k] % 16 : 0);
        if (step > tn - at) step = tn - at;
        oai_out_put(&o, (const char *)text + at, step);
        at += step;
        oai_out_delta(&o, &rs, &rn, &cs, &cn);
        ant_stream_delta(&st, &w, rs, rn, cs, cn);
        if (fail && at >= err_at) { ant_stream_error(&w, "api_error", "the model failed \"here\""); errored = 1; break; }
    }
    oai_call calls[OAI_MAX_TOOL_CALLS];
    int nc = 0;
    if (!errored) {
        oai_out_finish(&o);
        nc = o.tool.n ? oai_parse_calls(&o, calls, OAI_MAX_TOOL_CALLS, 0) : 0;
        if (nc < 0) jw_raw(&o.content, o.tool.s, o.tool.n); /* as serve mode: calls that do not parse are text */
        oai_out_delta(&o, &rs, &rn, &cs, &cn);
        ant_stream_delta(&st, &w, rs, rn, cs, cn);
        oai_reply head = y;
        y = oai_reply_of(&o, calls, nc, k && sizes[k - 1] % 5 == 0);
        y.id = head.id, y.model = head.model, y.prompt_tokens = head.prompt_tokens, y.cached_tokens = head.cached_tokens, y.completion_tokens = 7;
        ant_stream_finish(&st, &w, &y);
    }
    FUZZ_CHECK(!w.oom);
    jw th = {0}, tx = {0}, in = {0};
    char sr[32] = "";
    FUZZ_CHECK(fz_check_stream(&w, &th, &tx, &in, sr, sizeof sr) == errored);
    if (!errored) { /* the stream adds up to the document */
        jw doc = {0}, dth = {0}, dtx = {0}, din = {0};
        ant_message_json(&doc, &q, &y);
        js_doc *d = js_parse(doc.s, doc.n, NULL, 0);
        FUZZ_CHECK(d != NULL);
        int c = js_get(d, d->root, "content");
        for (int b = js_first(d, c); b >= 0; b = js_next(d, b)) {
            const char *t = js_str(d, js_get(d, b, "type"));
            FUZZ_CHECK(t != NULL);
            if (!strcmp(t, "thinking")) fz_take(d, b, "thinking", &dth);
            else if (!strcmp(t, "text")) fz_take(d, b, "text", &dtx);
            else {
                jw one = {0};
                FUZZ_CHECK(!strcmp(t, "tool_use"));
                jw_node(&one, d, js_get(d, b, "input"), 0);
                fz_compact(one.s, one.n, &din);
                jw_free(&one);
            }
        }
        FUZZ_CHECK(th.n == dth.n && (!th.n || !memcmp(th.s, dth.s, th.n)));
        FUZZ_CHECK(tx.n == dtx.n && (!tx.n || !memcmp(tx.s, dtx.s, tx.n)));
        FUZZ_CHECK(in.n == din.n && (!in.n || !memcmp(in.s, din.s, in.n)));
        FUZZ_CHECK(!strcmp(sr, ant_stop_reason(&y)) && !strcmp(js_str(d, js_get(d, d->root, "stop_reason")), sr));
        FUZZ_CHECK(!omit || !th.n);
        js_free(d);
        jw_free(&doc), jw_free(&dth), jw_free(&dtx), jw_free(&din);
    }
    if (nc > 0) oai_calls_free(calls, nc);
    jw_free(&th), jw_free(&tx), jw_free(&in), jw_free(&w);
    oai_out_free(&o);
    oai_req_free(&r);
    ant_req_free(&q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    int mode = data[0] % 3, fmt = data[0] / 3 % CHAT_NFMT;
    if (mode == 2) fz_output(data + 1, size - 1, fmt, data[0] / (3 * CHAT_NFMT) % 2);
    else fz_request(data + 1, size - 1, mode == 0 ? ANT_MESSAGES : ANT_COUNT_TOKENS, fmt);
    return 0;
}
