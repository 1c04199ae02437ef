/* fuzz_openai.c — serve mode's request parsing and output handling
 * (openai.h) on hostile bytes.
 *
 * Input: a mode byte, then
 *   0  a chat request body: oai_parse (chat); when accepted the rendered
 *      prompt is non-empty, starts with "[gMASK]<sop>", ends with the
 *      generation prompt, and every limit holds (n_stop <= 4, max_tokens
 *      within the context, the message count bound);
 *   1  a completions body: oai_parse (completions); when accepted the text
 *      is the prompt string, non-empty;
 *   2  generated text for a fixed request (thinking on, two stop strings,
 *      a tool with a string and an integer argument), fed in pieces whose
 *      sizes come from the input: what is routed (reasoning + "</think>" +
 *      content + tool text) is exactly the text up to a stop string; the
 *      streamed deltas add up to the final buffers; parsed tool calls have
 *      a name and arguments that parse as a JSON object; every response
 *      document and stream event parses as JSON.
 * On refusal the message is non-empty. */
#include "openai.h"

#include "fuzz_common.h"

static const oai_limits fz_lim = {16, 512, CHAT_GLM5};

static void fz_valid_json(const char *s, size_t n) {
    js_doc *d = js_parse(s, n, NULL, 0);
    FUZZ_CHECK(d != NULL);
    js_free(d);
}

static void fz_request(const uint8_t *p, size_t n, int chat, int fmt) {
    oai_err oe;
    char *err = oe.msg;
    oai_req r;
    err[0] = 0;
    oai_limits lim = fz_lim;
    lim.fmt = fmt; /* every chat format renders the same requests */
    int rc = oai_parse((const char *)p, n, chat, &lim, &r, &oe);
    if (rc) {
        FUZZ_CHECK(err[0] != 0);
        oai_req_free(&r);
        return;
    }
    FUZZ_CHECK(r.ids ? !chat && r.n_ids > 0 && !r.text : r.text != NULL && r.text_len > 0); /* completions may give token ids */
    for (int i = 0; i < r.n_ids; i++) FUZZ_CHECK(r.ids[i] >= 0);
    FUZZ_CHECK(r.n_stop >= 0 && r.n_stop <= OAI_MAX_STOP);
    FUZZ_CHECK(r.max_tokens >= 0); /* beyond the context it is clamped when the prompt's length is known */
    FUZZ_CHECK(r.top_logprobs >= 0 && r.top_logprobs <= OAI_MAX_TOP_LOGPROBS && (!r.top_logprobs || r.logprobs));
    if (r.gram) { /* a grammar that starts: gr_check passed (so gr_init does too) */
        gr_state gs;
        FUZZ_CHECK(gr_init(r.gram, &gs) == 0);
        gr_state_free(&gs);
    }
    for (int i = 0; i < r.n_stop; i++) FUZZ_CHECK(r.stop_len[i] > 0 && r.stop_len[i] <= 256);
    if (r.gram_tools) { /* a forced tool call: its grammar starts */
        gr_state gs;
        FUZZ_CHECK(r.gram != NULL && gr_init(r.gram, &gs) == 0);
        gr_state_free(&gs);
    }
    if (chat && fmt == CHAT_GLM5) {
        FUZZ_CHECK(r.text_len >= 12 && !memcmp(r.text, "[gMASK]<sop>", 12));
        const char *gen = r.think ? "<|assistant|><think>" : "<|assistant|></think>";
        size_t gl = strlen(gen);
        FUZZ_CHECK(r.text_len >= gl && !memcmp(r.text + r.text_len - gl, gen, gl));
    } else if (chat) { /* the other formats open with BOS (DeepSeek) or a system block (Kimi) */
        const char *head = fmt == CHAT_KIMI_K2 ? "<|im_system|>" : CHAT_DS_BOS;
        FUZZ_CHECK(r.text_len >= strlen(head) && !memcmp(r.text, head, strlen(head)));
        FUZZ_CHECK(r.think == chat_thinks(fmt, r.think));
    }
    /* the rendered prompt as content of a response: valid JSON whatever it holds */
    oai_out o;
    oai_out_init(&o, &r);
    if (r.text) oai_out_put(&o, r.text, r.text_len);
    oai_out_finish(&o);
    oai_meta m = {"id", r.model ? r.model : "m", "fp", 1, 1, 1, 0, "stop"};
    jw w = {0};
    oai_response_json(&w, &r, &m, &o, NULL, 0, NULL, 0);
    FUZZ_CHECK(!w.oom);
    fz_valid_json(w.s, w.n);
    jw_free(&w);
    oai_out_free(&o);
    oai_req_free(&r);
}

static const char fz_fixed_req[] =
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"STOP\",\"\xc3\xa9\xc3\xa9\"],"
    "\"chat_template_kwargs\":{\"enable_thinking\":true},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}}}}}]}";

static void fz_output(const uint8_t *p, size_t n, int fmt) {
    oai_err oe;
    oai_req r;
    oai_limits lim = fz_lim;
    lim.fmt = fmt; /* each format's tool-call syntax parsed back */
    FUZZ_CHECK(oai_parse(fz_fixed_req, sizeof fz_fixed_req - 1, 1, &lim, &r, &oe) == 0);
    /* the first bytes choose piece sizes, the rest is the text */
    size_t k = n < 8 ? n : 8;
    const uint8_t *sizes = p, *text = p + k;
    size_t tn = n - k;
    oai_out o;
    oai_out_init(&o, &r);
    jw rs = {0}, cs = {0}, ev = {0};
    oai_meta m = {"id", "m", "fp", 1, 1, 1, 0, NULL};
    for (size_t at = 0, i = 0; at < tn && !o.stopped; i++) {
        size_t step = 1 + (k ? sizes[i % k] % 16 : 0);
        if (step > tn - at) step = tn - at;
        oai_out_put(&o, (const char *)text + at, step);
        at += step;
        const char *a, *b;
        size_t an, bn;
        oai_out_delta(&o, &a, &an, &b, &bn);
        jw_raw(&rs, a, an), jw_raw(&cs, b, bn);
        if (an || bn) {
            jw_free(&ev);
            oai_chunk_sse(&ev, &r, &m, i == 0, a, an, b, bn, NULL, 0, 0, NULL, 0, 0);
            FUZZ_CHECK(ev.n > 8 && !memcmp(ev.s, "data: ", 6));
            fz_valid_json(ev.s + 6, ev.n - 8);
        }
    }
    oai_out_finish(&o);
    const char *a, *b;
    size_t an, bn;
    oai_out_delta(&o, &a, &an, &b, &bn);
    jw_raw(&rs, a, an), jw_raw(&cs, b, bn);
    /* routed text == the text up to the stop string, minus one "</think>" (when the reply opened thinking) */
    size_t routed = o.reason.n + o.content.n + o.tool.n + (r.think && o.state != OAI_REASON ? 8 : 0);
    FUZZ_CHECK(routed == o.all.n);
    FUZZ_CHECK(o.all.n <= tn && (tn == 0 || !memcmp(o.all.s, text, o.all.n)));
    FUZZ_CHECK(rs.n == o.reason.n && (!rs.n || !memcmp(rs.s, o.reason.s, rs.n)));
    FUZZ_CHECK(cs.n == o.content.n && (!cs.n || !memcmp(cs.s, o.content.s, cs.n)));
    for (int i = 0; i < r.n_stop; i++) /* no stop string survives in what is returned */
        FUZZ_CHECK(!o.all.s || !oai_memmem_(o.all.s, o.all.n, r.stop[i], r.stop_len[i]));
    oai_call calls[OAI_MAX_TOOL_CALLS];
    int nc = o.tool.n ? oai_parse_calls(&o, calls, OAI_MAX_TOOL_CALLS, 0) : 0;
    FUZZ_CHECK(nc >= -1 && nc <= OAI_MAX_TOOL_CALLS);
    for (int i = 0; i < nc; i++) {
        FUZZ_CHECK(calls[i].name && calls[i].name[0] && calls[i].args);
        js_doc *d = js_parse(calls[i].args, strlen(calls[i].args), NULL, 0);
        FUZZ_CHECK(d && js_typeof(d, d->root) == JS_OBJ);
        js_free(d);
    }
    m.finish = nc > 0 ? "tool_calls" : "stop";
    jw w = {0};
    oai_response_json(&w, &r, &m, &o, calls, nc > 0 ? nc : 0, NULL, 0);
    fz_valid_json(w.s, w.n);
    jw_free(&w);
    oai_chunk_sse(&w, &r, &m, 0, NULL, 0, NULL, 0, calls, nc > 0 ? nc : 0, 0, NULL, 0, 0);
    fz_valid_json(w.s + 6, w.n - 8);
    jw_free(&w);
    if (nc > 0) oai_calls_free(calls, nc);
    jw_free(&rs), jw_free(&cs), jw_free(&ev);
    oai_out_free(&o);
    oai_req_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    int mode = data[0] % 3;
    if (mode == 2) fz_output(data + 1, size - 1, data[0] / 3 % CHAT_NFMT);
    else fz_request(data + 1, size - 1, mode == 0, data[0] / 3 % CHAT_NFMT);
    return 0;
}
