/* fuzz_responses.c — the OpenAI Responses front (responses.h) on hostile
 * bytes.
 *
 * Input: a mode byte (mode = byte % 2, chat format = byte / 2 % CHAT_NFMT),
 * then
 *   0  a /v1/responses body, parsed against a fresh store holding one
 *      conversation ("resp_seed"): resp_parse. Refused → a message, which
 *      starts with the param ("path: ") when the param is not empty.
 *      Accepted → the translated body is a JSON object and the
 *      conversation a JSON array; oai_parse either accepts the body (a
 *      prompt, the stream flag agreeing) or refuses it with a message;
 *      the response document and the first stream events (echoing the
 *      request's fields) parse; the reply stored (resp_store_reply) is the
 *      conversation and one assistant message more, and a request that
 *      continues it (previous_response_id) is translated with one more
 *      message still (or refused for the message count only);
 *   1  generated text for a fixed request (reasoning effort high, a tool
 *      with a string and an integer argument; itself a Responses body),
 *      fed through oai_out in pieces whose sizes come from the first 8
 *      bytes (at most 384 bytes of text: the writers work per delta, and a
 *      longer text only costs time), each delta through the stream writer, then the calls and the
 *      finish (resp_stream_finish), or an error at a point the input picks:
 *      every event is "event: T\ndata: JSON" with "type" T and sequence
 *      numbers 0, 1, ...; response.created first; items added with output
 *      indexes 0, 1, ... and done before the next; content events name the
 *      open item; deltas add up to each .done text; the final response
 *      equals resp_response_json's document, whose texts the stream
 *      carried. */
#include "responses.h"

#include "fuzz_common.h"

static const oai_limits fz_lim = {16, 512, CHAT_GLM5};

static void fz_valid_json(const char *s, size_t n) {
    js_doc *d = js_parse(s, n, NULL, 0);
    FUZZ_CHECK(d != NULL);
    js_free(d);
}

static void fz_refusal(const char *err, size_t errlen, const char *param, size_t paramlen) {
    FUZZ_CHECK(fuzz_terminated(err, errlen) && fuzz_terminated(param, paramlen) && err[0]);
    size_t pl = strlen(param);
    FUZZ_CHECK(!pl || (!strncmp(err, param, pl) && err[pl] == ':'));
}

static const char fz_seed_conv[] =
    "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"r\",\"tool_calls\":[{\"id\":\"call_seed_0\","
    "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"s\\\":\\\"x\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_seed_0\","
    "\"content\":\"ok\"}]";

static int fz_count(const char *s, size_t n) {
    js_doc *d = js_parse(s, n, NULL, 0);
    FUZZ_CHECK(d && js_typeof(d, d->root) == JS_ARR);
    int c = js_count(d, d->root);
    js_free(d);
    return c;
}

static void fz_request(const uint8_t *p, size_t n, int fmt) {
    char err[512], param[200];
    resp_store st;
    FUZZ_CHECK(resp_store_init(&st, 4, 1 << 16) == 0);
    FUZZ_CHECK(resp_store_put(&st, "resp_seed", fz_seed_conv, sizeof fz_seed_conv - 1) == 0);
    oai_limits lim = fz_lim;
    lim.fmt = fmt;
    resp_req rq;
    err[0] = param[0] = 0;
    if (resp_parse((const char *)p, n, &lim, &st, &rq, err, sizeof err, param, sizeof param)) {
        fz_refusal(err, sizeof err, param, sizeof param);
        resp_req_free(&rq);
        resp_store_free(&st);
        return;
    }
    js_doc *d = js_parse(rq.chat.s, rq.chat.n, NULL, 0);
    FUZZ_CHECK(d && js_typeof(d, d->root) == JS_OBJ && !rq.chat.oom);
    js_free(d);
    int nconv = fz_count(rq.conv.s, rq.conv.n);
    oai_req r;
    err[0] = 0;
    if (oai_parse_msg(rq.chat.s, rq.chat.n, 1, &lim, &r, err, sizeof err)) FUZZ_CHECK(err[0] != 0);
    else FUZZ_CHECK(r.text && r.text_len > 0 && r.stream == rq.stream && r.max_tokens <= lim.ctx);
    oai_req_free(&r);
    /* the documents echo the request's fields: valid JSON whatever they hold */
    oai_call call = {"f", "{\"s\":\"\\u00e9\",\"n\":1}"};
    oai_reply y;
    memset(&y, 0, sizeof y);
    y.id = "resp_next", y.model = "m", y.content = "ok", y.content_len = 2, y.reasoning = "why", y.reasoning_len = 3;
    y.calls = &call, y.ncalls = 1, y.finish = "tool_calls";
    jw w = {0};
    resp_response_json(&w, &rq, &y);
    FUZZ_CHECK(!w.oom);
    fz_valid_json(w.s, w.n);
    jw_free(&w);
    resp_stream s;
    resp_stream_start(&s, &w, &rq, &y);
    const char *q = w.s, *end = w.s + w.n, *data;
    char name[64];
    size_t dn;
    int k = 0;
    while (fuzz_sse_next(&q, end, name, sizeof name, &data, &dn) == 1) fz_valid_json(data, dn), k++;
    FUZZ_CHECK(k == 2 && q == end);
    resp_stream_free(&s), jw_free(&w);
    /* stored, then continued */
    if (resp_store_reply(&st, &rq, &y) == 0) {
        size_t sn;
        char *stored = resp_store_get(&st, "resp_next", &sn);
        FUZZ_CHECK(stored && fz_count(stored, sn) == nconv + 1);
        free(stored);
        static const char more[] = "{\"previous_response_id\":\"resp_next\",\"input\":\"more\"}";
        resp_req r2;
        if (resp_parse(more, sizeof more - 1, &lim, &st, &r2, err, sizeof err, param, sizeof param)) FUZZ_CHECK(!strcmp(param, "input"));
        else FUZZ_CHECK(fz_count(r2.conv.s, r2.conv.n) == nconv + 2);
        resp_req_free(&r2);
    }
    resp_req_free(&rq);
    resp_store_free(&st);
}

static const char fz_fixed_body[] =
    "{\"model\":\"m\",\"input\":\"x\",\"stream\":true,\"reasoning\":{\"effort\":\"high\"},\"tools\":[{\"type\":\"function\",\"name\":\"f\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}}}}]}";

/* Walks the stream; returns the final response document (malloc'd,
 * compact) and whether it ended in failure, gathering the texts. */
static char *fz_check_stream(const jw *w, jw *reasoning, jw *text, jw *args, int *failed) {
    const char *p = w->s, *end = w->s + w->n, *data;
    char name[80], item[128] = "", *final = NULL;
    size_t dn;
    long long seq = 0;
    int rc, open = -1, next = 0;
    jw cur = {0};
    *failed = 0;
    while ((rc = fuzz_sse_next(&p, end, name, sizeof name, &data, &dn)) == 1) {
        js_doc *d = js_parse(data, dn, NULL, 0);
        FUZZ_CHECK(d && js_typeof(d, d->root) == JS_OBJ && !final);
        int o = d->root, oi = (int)js_int(d, js_get(d, o, "output_index"));
        const char *t = js_str(d, js_get(d, o, "type"));
        FUZZ_CHECK(t && !strcmp(t, name) && js_is_int(d, js_get(d, o, "sequence_number")) && js_int(d, js_get(d, o, "sequence_number")) == seq);
        FUZZ_CHECK(seq++ || !strcmp(name, "response.created"));
        if (!strcmp(name, "response.created") || !strcmp(name, "response.in_progress")) FUZZ_CHECK(seq <= 2);
        else if (!strcmp(name, "response.output_item.added")) {
            const char *id = js_str(d, js_get(d, js_get(d, o, "item"), "id"));
            FUZZ_CHECK(open < 0 && oi == next && id && strlen(id) < sizeof item);
            open = oi, cur.n = 0, strcpy(item, id);
        } else if (!strcmp(name, "response.output_item.done")) {
            int it = js_get(d, o, "item");
            const char *ty = js_str(d, js_get(d, it, "type")), *id = js_str(d, js_get(d, it, "id"));
            FUZZ_CHECK(open == oi && id && !strcmp(id, item) && ty);
            jw done = {0};
            if (!strcmp(ty, "function_call")) jw_lit(&done, js_str(d, js_get(d, it, "arguments"))), jw_raw(args, cur.s ? cur.s : "", cur.n), jw_lit(args, "\n");
            else {
                int tx = js_get(d, js_at(d, js_get(d, it, "content"), 0), "text");
                FUZZ_CHECK(js_typeof(d, tx) == JS_STR);
                jw_raw(&done, js_str(d, tx), js_str_len(d, tx));
                jw_raw(!strcmp(ty, "reasoning") ? reasoning : text, cur.s ? cur.s : "", cur.n);
            }
            FUZZ_CHECK(done.n == cur.n && (!cur.n || !memcmp(done.s, cur.s, cur.n)));
            jw_free(&done);
            open = -1, next++;
        } else if (!strcmp(name, "response.completed") || !strcmp(name, "response.incomplete") || !strcmp(name, "response.failed")) {
            jw r = {0};
            FUZZ_CHECK(open < 0 || !strcmp(name, "response.failed"));
            jw_node(&r, d, js_get(d, o, "response"), 0);
            final = r.s, *failed = !strcmp(name, "response.failed");
        } else if (!strcmp(name, "error"))
            FUZZ_CHECK(js_str(d, js_get(d, o, "message")) != NULL);
        else {
            FUZZ_CHECK(open == oi && !strcmp(js_str(d, js_get(d, o, "item_id")) ? js_str(d, js_get(d, o, "item_id")) : "", item));
            int dl = js_get(d, o, "delta");
            if (dl >= 0) {
                FUZZ_CHECK(js_typeof(d, dl) == JS_STR);
                jw_raw(&cur, js_str(d, dl), js_str_len(d, dl));
            }
            int tx = js_get(d, o, strstr(name, "arguments") ? "arguments" : "text");
            if (strstr(name, ".done") && !strstr(name, "content_part"))
                FUZZ_CHECK(js_typeof(d, tx) == JS_STR && js_str_len(d, tx) == cur.n && (!cur.n || !memcmp(js_str(d, tx), cur.s, cur.n)));
        }
        js_free(d);
    }
    FUZZ_CHECK(rc == 0 && final);
    jw_free(&cur);
    return final;
}

static void fz_output(const uint8_t *p, size_t n, int fmt) {
    char err[256], param[64];
    resp_req rq;
    oai_req r;
    oai_limits lim = fz_lim;
    lim.fmt = fmt;
    FUZZ_CHECK(resp_parse(fz_fixed_body, sizeof fz_fixed_body - 1, &lim, NULL, &rq, err, sizeof err, param, sizeof param) == 0);
    FUZZ_CHECK(oai_parse_msg(rq.chat.s, rq.chat.n, 1, &lim, &r, err, sizeof err) == 0);
    size_t k = n < 8 ? n : 8;
    const uint8_t *sizes = p, *text = p + k;
    size_t tn = n - k < 384 ? n - k : 384, err_at = k ? (size_t)sizes[0] % 64 * 6 : 0;
    int fail = k && sizes[0] % 4 == 3, errored = 0;
    oai_out o;
    oai_out_init(&o, &r);
    oai_reply y;
    memset(&y, 0, sizeof y);
    y.id = "resp_f", y.model = "m", y.created = 1, y.prompt_tokens = 5, y.cached_tokens = 2;
    resp_stream st;
    jw w = {0};
    resp_stream_start(&st, &w, &rq, &y);
    const char *rs, *cs;
    size_t rn, cn;
    for (size_t at = 0, i = 0; at < tn && !o.stopped; i++) {
        size_t step = 1 + (k ? sizes[i % k] % 16 : 0);
        if (step > tn - at) step = tn - at;
        oai_out_put(&o, (const char *)text + at, step);
        at += step;
        oai_out_delta(&o, &rs, &rn, &cs, &cn);
        resp_stream_delta(&st, &w, rs, rn, cs, cn);
        if (fail && at >= err_at) { resp_stream_error(&st, &w, &rq, &y, "the model failed \"here\""); errored = 1; break; }
    }
    oai_call calls[OAI_MAX_TOOL_CALLS];
    int nc = 0;
    if (!errored) {
        oai_out_finish(&o);
        nc = o.tool.n ? oai_parse_calls(&o, calls, OAI_MAX_TOOL_CALLS, 0) : 0;
        if (nc < 0) jw_raw(&o.content, o.tool.s, o.tool.n); /* as serve mode: calls that do not parse are text */
        oai_out_delta(&o, &rs, &rn, &cs, &cn);
        resp_stream_delta(&st, &w, rs, rn, cs, cn);
        oai_reply head = y;
        y = oai_reply_of(&o, calls, nc, k && sizes[k - 1] % 5 == 0);
        y.id = head.id, y.model = head.model, y.created = head.created, y.prompt_tokens = head.prompt_tokens, y.cached_tokens = head.cached_tokens;
        y.completion_tokens = 7;
        resp_stream_finish(&st, &w, &rq, &y);
    }
    FUZZ_CHECK(!w.oom);
    jw rr = {0}, tx = {0}, ar = {0};
    int failed;
    char *final = fz_check_stream(&w, &rr, &tx, &ar, &failed);
    FUZZ_CHECK(failed == errored);
    if (!errored) { /* the stream's final response is the document, whose texts it carried */
        jw doc = {0}, again = {0}, drr = {0}, dtx = {0}, dar = {0};
        resp_response_json(&doc, &rq, &y);
        js_doc *d = js_parse(doc.s, doc.n, NULL, 0);
        FUZZ_CHECK(d != NULL);
        jw_node(&again, d, d->root, 0);
        FUZZ_CHECK(!strcmp(final, again.s));
        for (int it = js_first(d, js_get(d, d->root, "output")); it >= 0; it = js_next(d, it)) {
            const char *ty = js_str(d, js_get(d, it, "type"));
            int t = js_get(d, js_at(d, js_get(d, it, "content"), 0), "text");
            if (!strcmp(ty, "function_call")) jw_lit(&dar, js_str(d, js_get(d, it, "arguments"))), jw_lit(&dar, "\n");
            else jw_raw(!strcmp(ty, "reasoning") ? &drr : &dtx, js_str(d, t), js_str_len(d, t));
        }
        FUZZ_CHECK(rr.n == drr.n && (!rr.n || !memcmp(rr.s, drr.s, rr.n)));
        FUZZ_CHECK(tx.n == dtx.n && (!tx.n || !memcmp(tx.s, dtx.s, tx.n)));
        FUZZ_CHECK(ar.n == dar.n && (!ar.n || !memcmp(ar.s, dar.s, ar.n)));
        js_free(d);
        jw_free(&doc), jw_free(&again), jw_free(&drr), jw_free(&dtx), jw_free(&dar);
    }
    free(final);
    resp_stream_free(&st);
    if (nc > 0) oai_calls_free(calls, nc);
    jw_free(&rr), jw_free(&tx), jw_free(&ar), jw_free(&w);
    oai_out_free(&o);
    oai_req_free(&r);
    resp_req_free(&rq);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    int fmt = data[0] / 2 % CHAT_NFMT;
    if (data[0] % 2) fz_output(data + 1, size - 1, fmt);
    else fz_request(data + 1, size - 1, fmt);
    return 0;
}
