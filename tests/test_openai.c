/* test_openai.c — serve mode's protocol without a network: the JSON
 * writer (never invalid JSON, whatever the bytes), request checks, GLM-5
 * template rendering, and the generated text split into reasoning,
 * content, stop strings and tool calls. Expected Python renderings were
 * printed by Python's json.dumps(ensure_ascii=False). */
#include "openai.h"
#include "tok.h"

#include "check.h"

/* The writer's output parses back, and gives the input's valid UTF-8
 * (invalid bytes as U+FFFD). */
static void test_writer(void) {
    jw w = {0};
    jw_str(&w, "a\"b\\c\n\t\x01\x7f\xc3\xa9");
    CHECK(!strcmp(w.s, "\"a\\\"b\\\\c\\n\\t\\u0001\x7f\xc3\xa9\""));
    jw_free(&w);
    jw_strn(&w, "x\xff\xc3y\xed\xa0\x80", 7); /* a stray byte, a cut character, a surrogate */
    CHECK(!strcmp(w.s, "\"x\xef\xbf\xbd\xef\xbf\xbdy\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""));
    jw_free(&w);
    jw_num(&w, 0.1), jw_lit(&w, " "), jw_num(&w, 1.0 / 0.0), jw_lit(&w, " "), jw_num(&w, -2.5e-7);
    CHECK(!strcmp(w.s, "0.1 null -2.5e-07"));
    jw_free(&w);
    /* random bytes: always one valid JSON string */
    uint64_t x = 88172645463325252ull;
    int bad = 0;
    for (int it = 0; it < 3000; it++) {
        char buf[64];
        size_t n = (size_t)(it % 64);
        for (size_t i = 0; i < n; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, buf[i] = (char)(x >> 24);
        jw_strn(&w, buf, n);
        js_doc *d = js_parse(w.s, w.n, NULL, 0);
        if (!d || js_typeof(d, d->root) != JS_STR) bad++;
        js_free(d);
        jw_free(&w);
    }
    CHECK(bad == 0);
    const char *src = "{\"a\": [1, 2.5, \"x\xc3\xa9\"], \"b\": {\"c\": null, \"d\": true}, \"e\": -0.1, \"f\": 1e300}";
    js_doc *d = js_parse(src, strlen(src), NULL, 0);
    CHECK(d != NULL);
    if (d) {
        jw_node(&w, d, d->root, 1);
        CHECK(!strcmp(w.s, "{\"a\": [1, 2.5, \"x\xc3\xa9\"], \"b\": {\"c\": null, \"d\": true}, \"e\": -0.1, \"f\": 1e+300}"));
        jw_free(&w);
        jw_node(&w, d, d->root, 0);
        CHECK(!strcmp(w.s, "{\"a\":[1,2.5,\"x\xc3\xa9\"],\"b\":{\"c\":null,\"d\":true},\"e\":-0.1,\"f\":1e+300}"));
        jw_free(&w);
        js_free(d);
    }
}

static const oai_limits LIM = {8, 256, CHAT_GLM5};

static int parse_ok(const char *body, int chat, oai_req *r) {
    oai_err oe;
    const char *err = oe.msg;
    int rc = oai_parse(body, strlen(body), chat, &LIM, r, &oe);
    if (rc) fprintf(stderr, "refused: %s: %s\n", body, err);
    return rc == 0;
}

static int refused(const char *body, int chat, const char *why) {
    oai_err oe;
    const char *err = oe.msg;
    oai_req r;
    int rc = oai_parse(body, strlen(body), chat, &LIM, &r, &oe);
    oai_req_free(&r);
    if (!rc) { fprintf(stderr, "accepted: %s\n", body); return 0; }
    if (!strstr(err, why)) { fprintf(stderr, "for %s: expected '%s' in '%s'\n", body, why, err); return 0; }
    return 1;
}

/* What current SDKs send is accepted (and honoured where it changes the
 * answer); a refusal names the field at fault in param. */
static void test_client_fields(void) {
    oai_req r;
    CHECK(parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"store\":false,\"metadata\":{\"a\":\"b\"},\"service_tier\":\"auto\","
                   "\"user\":\"u\",\"parallel_tool_calls\":true,\"top_logprobs\":0,\"logprobs\":false,\"prompt_cache_key\":\"k\","
                   "\"safety_identifier\":\"s\",\"verbosity\":\"low\",\"modalities\":[\"text\"],\"stream_options\":{\"include_usage\":true,"
                   "\"include_obfuscation\":false},\"max_completion_tokens\":1000000}", 1, &r));
    CHECK(r.max_tokens == 1000000 && !r.logprobs && !r.think); /* clamped to the context by the server, not refused */
    oai_req_free(&r);
    CHECK(parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":20,\"reasoning_effort\":\"high\"}", 1, &r));
    CHECK(r.logprobs && r.top_logprobs == 20 && r.think && strstr(r.text, "<think>"));
    oai_req_free(&r);
    CHECK(parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"high\",\"chat_template_kwargs\":{\"enable_thinking\":false}}", 1, &r));
    CHECK(!r.think); /* the explicit switch wins */
    oai_req_free(&r);
    CHECK(parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"minimal\"}", 1, &r));
    CHECK(!r.think);
    oai_req_free(&r);
    CHECK(parse_ok("{\"prompt\":\"x\",\"logprobs\":3,\"suffix\":null,\"best_of\":1}", 0, &r));
    CHECK(r.logprobs && r.top_logprobs == 3);
    oai_req_free(&r);
    static const struct {
        const char *body, *param;
    } bad[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"bogus\":1}", "bogus"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":9}", "temperature"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"user\",\"content\":7}]}", "messages[1].content"},
        {"{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages[0].role"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"x\"}]}", "tools[0]"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"regex\"}}", "response_format"},
        {"{\"prompt\":\"x\",\"echo\":true}", "echo"},
        {"{\"messages\":[]}", "messages"},
        {"{", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        oai_err oe;
        int rc = oai_parse(bad[i].body, strlen(bad[i].body), !strstr(bad[i].body, "\"prompt\""), &LIM, &r, &oe);
        oai_req_free(&r);
        CHECK(rc == -1 && !strcmp(oe.param, bad[i].param));
        if (rc != -1 || strcmp(oe.param, bad[i].param)) fprintf(stderr, "%s: param '%s', want '%s'\n", bad[i].body, oe.param, bad[i].param);
    }
    jw w = {0};
    oai_error_json(&w, "m", "invalid_request_error", "messages[1].content", "context_length_exceeded");
    CHECK(w.s && strstr(w.s, "\"param\":\"messages[1].content\"") && strstr(w.s, "\"code\":\"context_length_exceeded\""));
    jw_free(&w);
}

/* The logprobs documents: chat's content entries with bytes and
 * alternatives, completions' parallel arrays (a repeated alternative text
 * kept once), -inf written as OpenAI's floor; every document parses. */
static void test_logprob_writers(void) {
    oai_lp lp[2];
    memset(lp, 0, sizeof lp);
    lp[0].t = (oai_tok){"He", 2, -0.25f};
    lp[0].n_top = 2, lp[0].top[0] = lp[0].t, lp[0].top[1] = (oai_tok){"\xc3", 1, -2.5f};
    lp[1].t = (oai_tok){"llo", 3, -INFINITY};
    lp[1].n_top = 2, lp[1].top[0] = (oai_tok){"x", 1, -0.1f}, lp[1].top[1] = (oai_tok){"x", 1, -3.0f};
    oai_req r;
    memset(&r, 0, sizeof r);
    r.chat = 1, r.logprobs = 1;
    jw w = {0};
    oai_logprobs_json_(&w, &r, lp, 2, 0);
    js_doc *d = w.s ? js_parse(w.s, w.n, NULL, 0) : NULL;
    int c = js_get(d, d ? d->root : -1, "content"), e0 = js_at(d, c, 0), e1 = js_at(d, c, 1);
    CHECK(d && js_count(d, c) == 2 && !strcmp(js_str(d, js_get(d, e0, "token")), "He") && js_num(d, js_get(d, e0, "logprob")) == -0.25);
    CHECK(d && js_count(d, js_get(d, e0, "bytes")) == 2 && js_int(d, js_at(d, js_get(d, js_at(d, js_get(d, e0, "top_logprobs"), 1), "bytes"), 0)) == 0xc3);
    CHECK(d && js_num(d, js_get(d, e1, "logprob")) == -9999);
    js_free(d), jw_free(&w);
    r.chat = 0;
    oai_logprobs_json_(&w, &r, lp, 2, 7);
    d = w.s ? js_parse(w.s, w.n, NULL, 0) : NULL;
    int to = js_get(d, d ? d->root : -1, "text_offset"), tl = js_get(d, d ? d->root : -1, "top_logprobs");
    CHECK(d && js_int(d, js_at(d, to, 0)) == 7 && js_int(d, js_at(d, to, 1)) == 9);
    CHECK(d && js_count(d, js_at(d, tl, 1)) == 1 && js_num(d, js_get(d, js_at(d, tl, 1), "x")) == (double)-0.1f);
    CHECK(d && js_num(d, js_get(d, js_at(d, tl, 0), "bytes:\\xc3")) == -2.5); /* part of a character: OpenAI's spelling */
    js_free(d), jw_free(&w);
    r.logprobs = 0;
    oai_logprobs_json_(&w, &r, lp, 2, 0);
    CHECK(w.s && !strcmp(w.s, "null"));
    jw_free(&w);
}

static void test_requests(void) {
    oai_req r;
    CHECK(parse_ok("{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U\"}],\"max_tokens\":5,"
                   "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":4,\"min_p\":0.1,\"seed\":9,\"stop\":[\"a\",\"bb\"],\"stream\":true,"
                   "\"stream_options\":{\"include_usage\":true},\"n\":1,\"presence_penalty\":0}", 1, &r));
    char want[200];
    tok_chat_text("S", "U", 0, want, sizeof want); /* PROMPT/SYSTEM's rendering */
    CHECK(r.text && !strcmp(r.text, want));
    CHECK(r.max_tokens == 5 && r.has_temp && r.temp == 0.5 && r.top_k == 4 && r.seed == 9 && r.n_stop == 2 && r.stream && r.include_usage);
    CHECK(r.stop_len[1] == 2 && !memcmp(r.stop[1], "bb", 2));
    oai_req_free(&r);
    CHECK(parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                   "\"chat_template_kwargs\":{\"enable_thinking\":true}}", 1, &r));
    CHECK(r.text && !strcmp(r.text, "[gMASK]<sop><|user|>ab<|assistant|><think>") && r.think);
    oai_req_free(&r);
    CHECK(parse_ok("{\"prompt\":[\"raw text\"],\"max_tokens\":3}", 0, &r));
    CHECK(r.text && !strcmp(r.text, "raw text") && !r.chat);
    oai_req_free(&r);
    CHECK(refused("{", 1, "not valid JSON"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"foo\":1}", 1, "unknown field \"foo\""));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"bar\":1}]}", 1, "messages[0]: unknown field \"bar\""));
    CHECK(refused("{\"messages\":[]}", 1, "non-empty"));
    CHECK(refused("{\"messages\":[{\"content\":\"x\"}]}", 1, "role is missing"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", 1, "max_tokens"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2147483648}", 1, "outside"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2.5}", 1, "integer"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}", 1, "temperature"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\","
                  "\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]}", 1, "at most 16"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[1]}", 1, "stop must be"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", 1, "needs logprobs"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", 1, "outside"));
    CHECK(refused("{\"prompt\":\"x\",\"logprobs\":6}", 0, "outside"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"max\"}", 1, "reasoning_effort"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"modalities\":[\"audio\"]}", 1, "modalities"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frequency_penalty\":1}", 1, "penalties"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"function\"}}", 1, "tool_choice must be"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", 1, "needs tools"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"any\"}", 1, "not one of auto"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                  "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", 1, "\"g\", which tools does not list"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                  "\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}", 1, "cannot both"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                  "\"tool_choice\":\"required\",\"parallel_tool_calls\":1}", 1, "parallel_tool_calls"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"code\"}]}", 1, "tools[0]"));
    CHECK(refused("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{oops\"}}]}]}", 1,
                  "not valid JSON"));
    CHECK(refused("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 1, "only text parts"));
    CHECK(refused("{\"messages\":[1,2,3,4,5,6,7,8,9]}", 1, "at most 8"));
    CHECK(refused("{\"prompt\":\"\"}", 0, "empty"));
    CHECK(refused("{\"prompt\":\"x\",\"messages\":[]}", 0, "unknown field"));
    CHECK(refused("{\"prompt\":\"x\",\"echo\":true}", 0, "echo"));
}

/* The whole template on a conversation with tools, an earlier assistant
 * turn, a tool call with typed arguments and two tool results, as the
 * GLM-5 format in docs/serve.md spells it. */
static void test_render(void) {
    const char *body =
        "{\"messages\":["
        "{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":\"  hello \\n\",\"reasoning_content\":\"old\"},"
        "{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\" look it up \",\"tool_calls\":[{\"id\":\"1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 2, \\\"opts\\\": {\\\"u\\\": [1, true]}}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"1\",\"content\":\"18C\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"1\",\"content\":\"sunny\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}";
    const char *want =
        "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}\n"
        "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
        "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
        "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>"
        "<|system|>Be brief.<|user|>hi<|assistant|></think>hello<|user|>weather?"
        "<|assistant|><think>look it up</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>2</arg_value><arg_key>opts</arg_key><arg_value>{\"u\": [1, true]}</arg_value></tool_call>"
        "<|observation|><tool_response>18C</tool_response><tool_response>sunny</tool_response><|assistant|></think>";
    oai_req r;
    CHECK(parse_ok(body, 1, &r));
    CHECK(r.text && !strcmp(r.text, want));
    if (r.text && strcmp(r.text, want)) fprintf(stderr, "got:  %s\nwant: %s\n", r.text, want);
    CHECK(r.parse_tools && r.tools >= 0);
    oai_req_free(&r);
}

/* Feeds text in pieces of every size 1..7; returns the output state. */
static void feed(oai_out *o, const char *s, size_t step, jw *streamed_c, jw *streamed_r) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n && !o->stopped; i += step) {
        oai_out_put(o, s + i, i + step < n ? step : n - i);
        const char *rs, *cs;
        size_t rn, cn;
        oai_out_delta(o, &rs, &rn, &cs, &cn);
        jw_raw(streamed_r, rs, rn), jw_raw(streamed_c, cs, cn);
    }
    oai_out_finish(o);
    const char *rs, *cs;
    size_t rn, cn;
    oai_out_delta(o, &rs, &rn, &cs, &cn);
    jw_raw(streamed_r, rs, rn), jw_raw(streamed_c, cs, cn);
}

static void test_output(void) {
    oai_req r;
    CHECK(parse_ok("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"END\",\"\xc3\xa9!\"],\"chat_template_kwargs\":{\"enable_thinking\":true},"
                   "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                   "\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\"}}}}}]}",
                   1, &r));
    int ok_split = 1, ok_stop = 1, ok_utf = 1, ok_calls = 1;
    for (size_t step = 1; step <= 7; step++) {
        oai_out o;
        jw c = {0}, rs = {0};
        oai_out_init(&o, &r);
        feed(&o, "plan it</think>The answer", step, &c, &rs);
        ok_split &= !strcmp(o.reason.s, "plan it") && !strcmp(o.content.s, "The answer") && c.s && !strcmp(c.s, "The answer") && !strcmp(rs.s, "plan it");
        oai_out_free(&o), jw_free(&c), jw_free(&rs);

        oai_out_init(&o, &r);
        feed(&o, "</think>one EN two END three", step, &c, &rs);
        ok_stop &= o.stopped && !strcmp(o.content.s, "one EN two ") && c.s && !strcmp(c.s, "one EN two ");
        oai_out_free(&o), jw_free(&c), jw_free(&rs);

        oai_out_init(&o, &r);
        feed(&o, "</think>caf\xc3\xa9 ok \xc3\xa9!x", step, &c, &rs); /* a stop string starting with a 2-byte character */
        ok_utf &= o.stopped && c.s && !strcmp(c.s, "caf\xc3\xa9 ok ");
        oai_out_free(&o), jw_free(&c), jw_free(&rs);

        oai_out_init(&o, &r);
        feed(&o, "</think>Let me check.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
                 "<arg_key>zip</arg_key><arg_value>75001</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>\n"
                 "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>",
             step, &c, &rs);
        oai_call calls[4];
        int n = oai_parse_calls(&o, calls, 4, 0);
        ok_calls &= n == 2 && c.s && !strcmp(c.s, "Let me check.");
        if (n == 2) {
            ok_calls &= !strcmp(calls[0].name, "get_weather") && !strcmp(calls[0].args, "{\"city\":\"Paris\",\"zip\":\"75001\",\"days\":2}");
            ok_calls &= !strcmp(calls[1].args, "{\"city\":\"Rome\"}");
            oai_calls_free(calls, n);
        }
        oai_out_free(&o), jw_free(&c), jw_free(&rs);
    }
    /* found by fuzz_openai: reasoning that ends in a cut character is
     * streamed whole once the thinking block closes */
    {
        oai_out o;
        jw c = {0}, rs = {0};
        oai_out_init(&o, &r);
        feed(&o, "ab\xc3</think>x", 1, &c, &rs);
        CHECK(rs.n == 3 && !memcmp(rs.s, "ab\xc3", 3) && c.s && !strcmp(c.s, "x"));
        oai_out_free(&o), jw_free(&c), jw_free(&rs);
    }
    CHECK(ok_split);
    CHECK(ok_stop);
    CHECK(ok_utf);
    CHECK(ok_calls);
    /* malformed calls are text */
    const char *bad[] = {"<tool_call>f<arg_key>a</arg_key></tool_call>", "<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
                         "<tool_call>f<arg_key>a</arg_key><arg_value>1", "<tool_call>f</tool_call>junk",
                         /* found by fuzz_openai: a key given twice, a name with a control byte */
                         "<tool_call>f<arg_key>n</arg_key><arg_value>1</arg_value><arg_key>n</arg_key><arg_value>2</arg_value></tool_call>",
                         "<tool_call>\x01f</tool_call>"};
    for (int i = 0; i < 6; i++) {
        oai_out o;
        jw c = {0}, rs = {0};
        oai_out_init(&o, &r);
        feed(&o, "</think>", 3, &c, &rs);
        o.stopped = 0;
        oai_out_put(&o, bad[i], strlen(bad[i]));
        oai_out_finish(&o);
        oai_call calls[4];
        CHECK(oai_parse_calls(&o, calls, 4, 0) == -1);
        oai_out_free(&o), jw_free(&c), jw_free(&rs);
    }
    /* the response documents are valid JSON with the fields clients read */
    oai_out o;
    oai_out_init(&o, &r);
    oai_out_put(&o, "why</think>\"quoted\" \xff", 21);
    oai_out_finish(&o);
    oai_meta m = {"chatcmpl-1", "tiny", "colibri-0", 1, 10, 4, 3, "stop"};
    jw w = {0};
    oai_response_json(&w, &r, &m, &o, NULL, 0, NULL, 0);
    js_doc *d = js_parse(w.s, w.n, NULL, 0);
    CHECK(d != NULL);
    if (d) {
        int msg = js_get(d, js_at(d, js_get(d, d->root, "choices"), 0), "message");
        CHECK(js_str(d, js_get(d, msg, "content")) && !strcmp(js_str(d, js_get(d, msg, "content")), "\"quoted\" \xef\xbf\xbd"));
        CHECK(js_str(d, js_get(d, msg, "reasoning_content")) && !strcmp(js_str(d, js_get(d, msg, "reasoning_content")), "why"));
        int u = js_get(d, d->root, "usage");
        CHECK(js_int(d, js_get(d, u, "total_tokens")) == 14);
        CHECK(js_int(d, js_get(d, js_get(d, u, "prompt_tokens_details"), "cached_tokens")) == 3);
        js_free(d);
    }
    jw_free(&w);
    oai_chunk_sse(&w, &r, &m, 1, "r", 1, "c", 1, NULL, 0, 0, NULL, 0, 0);
    CHECK(w.n > 8 && !memcmp(w.s, "data: ", 6) && !strcmp(w.s + w.n - 2, "\n\n"));
    d = js_parse(w.s + 6, w.n - 8, NULL, 0);
    CHECK(d != NULL);
    js_free(d);
    jw_free(&w);
    oai_error_json(&w, "bad \"thing\"", "invalid_request_error", NULL, NULL);
    d = js_parse(w.s, w.n, NULL, 0);
    CHECK(d && !strcmp(js_str(d, js_get(d, js_get(d, d->root, "error"), "message")), "bad \"thing\""));
    js_free(d);
    jw_free(&w);
    oai_out_free(&o);
    oai_req_free(&r);
}

int main(void) {
    test_writer();
    test_requests();
    test_client_fields();
    test_logprob_writers();
    test_render();
    test_output();
    return check_report("test_openai");
}
