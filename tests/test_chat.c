/* test_chat.c — the chat formats (chat.h, openai.h) against transformers'
 * rendering of the real templates: tests/fixtures/chat_templates.json,
 * written by tools/make_chat_fixtures.py (render: whole message lists
 * through oai_parse; prompt: PROMPT/SYSTEM text and, for DeepSeek, token
 * ids through the DeepSeek tokenizer fixture; turn: --chat follow-ups).
 * Then the choice of format from what a model directory ships, and its
 * refusals; and chat.h's table against the families' real tokenizers and
 * what the renderers and tool-call grammars write. */
#include <sys/stat.h>
#include <unistd.h>

#include "chat.h"
#include "openai.h"
#include "tok.h"

#include "check.h"

#define FX "tests/fixtures/"

static int fmt_of(const char *name) {
    static const char *const names[] = {"glm5", "deepseek3", "deepseek-r1", "deepseek-v3.1", "kimi-k2", "deepseek-r1-jan"};
    for (int i = 0; i < CHAT_NFMT; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

static js_doc *load(const char *path, char **buf) {
    size_t len;
    char err[256];
    *buf = compat_read_file(path, 64u << 20, &len);
    js_doc *d = *buf ? js_parse(*buf, len, err, sizeof err) : NULL;
    if (!d) fprintf(stderr, "%s: cannot load\n", path);
    return d;
}

static int ids_match(const js_doc *v, int arr, const tok_ids *o) {
    if (js_count(v, arr) != (int)o->n) return 0;
    size_t i = 0;
    for (int e = js_first(v, arr); e >= 0; e = js_next(v, e), i++)
        if (js_int(v, e) != o->ids[i]) return 0;
    return 1;
}

static void show_diff(const char *what, const char *got, const char *want) {
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    fprintf(stderr, "%s differs at byte %zu:\n  got:  %s\n  want: %s\n", what, i, got + (i > 20 ? i - 20 : 0), want + (i > 20 ? i - 20 : 0));
}

/* Whole conversations through serve mode's request parser. */
static int render_parity(const js_doc *v, int *total) {
    int good = 0;
    *total = 0;
    for (int c = js_first(v, js_get(v, v->root, "render")); c >= 0; c = js_next(v, c), ++*total) {
        int fmt = fmt_of(js_str(v, js_get(v, c, "format")));
        CHECK(fmt > 0);
        jw body = {0};
        jw_lit(&body, "{\"messages\":");
        jw_node(&body, v, js_get(v, c, "messages"), 0);
        int tools = js_get(v, c, "tools");
        if (tools >= 0) jw_lit(&body, ",\"tools\":"), jw_node(&body, v, tools, 0);
        jw_lit(&body, js_typeof(v, js_get(v, c, "think")) == JS_TRUE ? ",\"chat_template_kwargs\":{\"enable_thinking\":true}}"
                                                                      : ",\"chat_template_kwargs\":{\"enable_thinking\":false}}");
        oai_limits lim = {16, 4096, fmt};
        oai_req r;
        oai_err oe;
        const char *err = oe.msg;
        int rc = oai_parse(body.s, body.n, 1, &lim, &r, &oe);
        const char *want = js_str(v, js_get(v, c, "text"));
        int ok = rc == 0 && r.text_len == js_str_len(v, js_get(v, c, "text")) && !memcmp(r.text, want, r.text_len);
        CHECK(ok);
        if (!ok) {
            fprintf(stderr, "render %s/%s: ", js_str(v, js_get(v, c, "format")), js_str(v, js_get(v, c, "name")));
            if (rc) fprintf(stderr, "refused: %s\n", err);
            else show_diff("text", r.text, want);
        }
        CHECK(rc || r.think == chat_thinks(fmt, js_typeof(v, js_get(v, c, "think")) == JS_TRUE));
        good += ok;
        oai_req_free(&r);
        jw_free(&body);
    }
    return good;
}

/* PROMPT/SYSTEM prompts and --chat turns: text, and ids where the fixture
 * has them (the DeepSeek tokenizer). */
static int prompt_parity(const js_doc *v, const char *kind, const tok *ds, int *total) {
    int good = 0, turn = !strcmp(kind, "turn");
    *total = 0;
    for (int c = js_first(v, js_get(v, v->root, kind)); c >= 0; c = js_next(v, c), ++*total) {
        int fmt = fmt_of(js_str(v, js_get(v, c, "format")));
        const char *sys = js_str(v, js_get(v, c, "system")), *user = js_str(v, js_get(v, c, "user"));
        const char *want = js_str(v, js_get(v, c, "text"));
        int think = js_typeof(v, js_get(v, c, "think")) == JS_TRUE;
        char buf[1024];
        size_t n = turn ? chat_turn_text(fmt, user, think, buf, sizeof buf) : chat_text(fmt, sys, user, think, buf, sizeof buf);
        int ok = fmt > 0 && n == strlen(want) && !strcmp(buf, want);
        if (!ok) show_diff(kind, buf, want);
        int ids = js_get(v, c, "ids");
        if (ok && ids >= 0) {
            tok_ids o = {0};
            int rc = turn ? chat_encode_turn(ds, fmt, user, think, &o) : chat_encode(ds, fmt, sys, user, think, &o);
            ok = rc == 0 && ids_match(v, ids, &o);
            if (!ok) fprintf(stderr, "%s %s \"%s\": ids differ from tokenizers'\n", kind, js_str(v, js_get(v, c, "format")), user);
            tok_ids_free(&o);
        }
        CHECK(ok);
        good += ok;
    }
    return good;
}

/* Markers: what recognises each family's template (real templates are not
 * in the repository; tools/make_chat_fixtures.py checks the same markers
 * against them). */
static void detection(void) {
    CHECK(chat_fmt_of_template("[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>{% endfor %}<|assistant|>") == CHAT_GLM5);
    CHECK(chat_fmt_of_template("{{bos_token}}{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + c}}{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>'}}") == CHAT_DEEPSEEK3);
    CHECK(chat_fmt_of_template("{{'<\xef\xbd\x9cUser\xef\xbd\x9c>'}}{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\\n'}}") == CHAT_DEEPSEEK_R1);
    CHECK(chat_fmt_of_template("{{'<\xef\xbd\x9cUser\xef\xbd\x9c>'}}{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c></think>'}}<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>") == CHAT_DEEPSEEK_V31);
    CHECK(chat_fmt_of_template("<|im_user|>user<|im_middle|>{{x}}<|im_end|><|im_assistant|>") == CHAT_KIMI_K2);
    CHECK(chat_fmt_of_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{% endfor %}") == -1);
    /* Jinja comments render nothing, so markers in them do not count (issue
     * #32: GLM-5's markers only in a {# #} comment made a GLM-5 template);
     * what counts as a comment is what jinja2's lexer takes for one */
    CHECK(chat_fmt_of_template("{# [gMASK]<|assistant|> #}{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}") == -1);
    CHECK(chat_fmt_of_template("[gMASK]<sop>{#- <|assistant|> -#}{{ m.content }}") == -1);
    CHECK(chat_fmt_of_template("[gMASK]{# a #}<|assistant|>") == CHAT_GLM5);
    CHECK(chat_fmt_of_template("[gMA{# a #}SK]<|assistant|>") == CHAT_GLM5); /* the text around a comment joins up */
    CHECK(chat_fmt_of_template("{{'<\xef\xbd\x9cUser\xef\xbd\x9c>'}}{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>'}}{# <\xef\xbd\x9c" "Assistant\xef\xbd\x9c></think> #}") == CHAT_DEEPSEEK3);
    CHECK(chat_fmt_of_template("{{ '{#' }}[gMASK]<|assistant|>{{ '#}' }}") == CHAT_GLM5);        /* in a block's string: no comment */
    CHECK(chat_fmt_of_template("{% set s = \"%}{#\" %}[gMASK]<|assistant|>{# #}") == CHAT_GLM5); /* "%}" in a string ends no block */
    CHECK(chat_fmt_of_template("{% raw %}{# [gMASK]<|assistant|> #}{% endraw %}") == CHAT_GLM5); /* raw text is rendered as is */
    CHECK(chat_fmt_of_template("{%- raw -%}[gMASK]{%- endraw -%}{# <|assistant|> #}") == -1);
    CHECK(chat_fmt_of_template("[gMASK]{# <|assistant|>") == -1); /* an unclosed comment runs to the end */
    for (int f = 0; f < CHAT_NFMT; f++) CHECK(chat_info(f)->name && chat_info(f)->tokens[0]);
    CHECK(chat_thinks(CHAT_DEEPSEEK_R1, 0) == 1 && chat_thinks(CHAT_DEEPSEEK3, 1) == 0 && chat_thinks(CHAT_KIMI_K2, 1) == 0);
    CHECK(chat_thinks(CHAT_DEEPSEEK_V31, 1) == 1 && chat_thinks(CHAT_GLM5, 0) == 0);
    /* GLM-5's renderings are tok.h's, byte for byte */
    char a[256], b[256];
    CHECK(chat_text(CHAT_GLM5, "s", "u", 1, a, sizeof a) == tok_chat_text("s", "u", 1, b, sizeof b) && !strcmp(a, b));
    CHECK(chat_text(CHAT_KIMI_K2, NULL, "hi", 0, a, 8) > 8 && strlen(a) == 7); /* truncated like snprintf */
}

static void put_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) fputs(text, f), fclose(f);
}

static void rm_file(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

/* chat_select on a model directory: template string, template list,
 * chat_template.jinja, none (tokens), and each refusal. */
static void selection(const tok *ds, const tok *glm) {
    char dir[] = "/tmp/test_chat_XXXXXX", err[600];
    if (!mkdtemp(dir)) { CHECK(0); return; }
    int fmt = -1;
    CHECK(chat_select(dir, ds, &fmt, err, sizeof err) == 0 && fmt == CHAT_DEEPSEEK3); /* nothing shipped: DeepSeek's tokens */
    CHECK(chat_select(dir, glm, &fmt, err, sizeof err) == 0 && fmt == CHAT_GLM5);
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": \"{{'<\xef\xbd\x9cUser\xef\xbd\x9c>'}}{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c></think>'}}\"}");
    CHECK(chat_select(dir, ds, &fmt, err, sizeof err) == 0 && fmt == CHAT_DEEPSEEK_V31);
    CHECK(chat_select(dir, glm, &fmt, err, sizeof err) == -1);
    CHECK_HAS(err, "(the DeepSeek-V3.1 chat template needs it)");
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}, {\"name\": \"default\", \"template\": "
                                           "\"{{'<\xef\xbd\x9cUser\xef\xbd\x9c>'}}{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>'}}\"}]}");
    CHECK(chat_select(dir, ds, &fmt, err, sizeof err) == 0 && fmt == CHAT_DEEPSEEK_R1);
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}]}");
    CHECK(chat_select(dir, ds, &fmt, err, sizeof err) == -1);
    CHECK_HAS(err, "tokenizer_config.json: chat_template: a list without a \"default\" template");
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": 7}");
    CHECK(chat_select(dir, ds, &fmt, err, sizeof err) == -1);
    CHECK_HAS(err, "chat_template must be a string");
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": ");
    CHECK(chat_select(dir, ds, &fmt, err, sizeof err) == -1);
    CHECK_HAS(err, "tokenizer_config.json: not valid JSON");
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": \"{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}\"}");
    CHECK(chat_select(dir, ds, &fmt, err, sizeof err) == -1);
    CHECK_HAS(err, "is none colibri renders");
    /* a NUL ("\u0000") would cut the template short in C: refused, naming the file and field (issue #32) */
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": \"[gMASK]<sop><|user|>{{ m }}<|assistant|>\\u0000\"}");
    CHECK(chat_select(dir, glm, &fmt, err, sizeof err) == -1);
    CHECK_HAS(err, "tokenizer_config.json: chat_template holds a NUL character");
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"default\", \"template\": \"[gMASK]\\u0000<|assistant|>\"}]}");
    CHECK(chat_select(dir, glm, &fmt, err, sizeof err) == -1);
    CHECK_HAS(err, "tokenizer_config.json: chat_template[0].template holds a NUL character");
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"x\", \"template\": \"y\"}, {\"name\": \"default\\u0000x\", \"template\": \"[gMASK]<|assistant|>\"}]}");
    CHECK(chat_select(dir, glm, &fmt, err, sizeof err) == -1);
    CHECK_HAS(err, "tokenizer_config.json: chat_template[1].name holds a NUL character");
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": \"{# [gMASK]<sop><|user|><|assistant|> #}{{ m }}\"}");
    CHECK(chat_select(dir, glm, &fmt, err, sizeof err) == -1); /* markers only in a comment */
    CHECK_HAS(err, "is none colibri renders");
    put_file(dir, "tokenizer_config.json", "{\"eos_token\": \"x\"}"); /* no template in it: chat_template.jinja */
    {
        char path[512];
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite("[gMASK]<|assistant|>\0x", 1, 22, f) == 22 && fclose(f) == 0);
        CHECK(chat_select(dir, glm, &fmt, err, sizeof err) == -1);
        CHECK_HAS(err, "chat_template.jinja: holds a NUL byte");
    }
    put_file(dir, "chat_template.jinja", "<|im_user|>user<|im_middle|><|im_end|><|im_assistant|>assistant<|im_middle|>");
    CHECK(chat_select(dir, ds, &fmt, err, sizeof err) == -1 && fmt == CHAT_KIMI_K2);
    CHECK_HAS(err, "no \"<|im_system|>\" (the Kimi K2 chat template needs it)");
    rm_file(dir, "chat_template.jinja");
    rm_file(dir, "tokenizer_config.json");
    /* a tokenizer with neither family's tokens */
    const char *bare = "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[],\"normalizer\":null,"
                       "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
                       "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}";
    char terr[300];
    tok *t = tok_load_mem(bare, strlen(bare), "bare", terr, sizeof terr);
    if (t) {
        CHECK(chat_select(dir, t, &fmt, err, sizeof err) == -1);
        CHECK_HAS(err, "special tokens are none of GLM-5's, DeepSeek's or Kimi's");
        tok_ids o = {0};
        CHECK(chat_encode(t, CHAT_DEEPSEEK3, NULL, "x", 0, &o) == -2 && chat_encode_turn(t, CHAT_KIMI_K2, "x", 0, &o) == -2);
        tok_free(t);
    }
    rmdir(dir);
    CHECK(chat_stop_id(ds, CHAT_DEEPSEEK_R1) == tok_find(ds, CHAT_DS_EOS) && chat_stop_id(ds, CHAT_DEEPSEEK_R1) >= 0);
    CHECK(chat_stop_id(glm, CHAT_GLM5) == -1);
    /* GLM-5's ids are tok.h's, first turn and follow-up */
    tok_ids x = {0}, y = {0};
    for (int think = 0; think < 2; think++) {
        CHECK(chat_encode(glm, CHAT_GLM5, "s", "u v", think, &x) == 0 && tok_chat(glm, "s", "u v", think, &y) == 0);
        CHECK(chat_encode_turn(glm, CHAT_GLM5, "w", think, &x) == 0 && tok_chat_turn(glm, "w", think, &y) == 0);
    }
    CHECK(x.n == y.n && x.n && !memcmp(x.ids, y.ids, x.n * sizeof(int)));
    tok_ids_free(&x), tok_ids_free(&y);
}

/* Feeds text as generated output of request r; returns the parsed calls'
 * count (-1: not calls) with the calls in c. */
static int parse_back(const oai_req *r, const char *text, oai_call *c) {
    oai_out o;
    oai_out_init(&o, r);
    for (size_t i = 0, n = strlen(text); i < n; i += 5) oai_out_put(&o, text + i, n - i < 5 ? n - i : 5); /* tags cut across pieces */
    oai_out_finish(&o);
    int k = o.tool.n ? oai_parse_calls(&o, c, OAI_MAX_TOOL_CALLS, 0) : -1;
    oai_out_free(&o);
    return k;
}

/* Whether gram accepts text whole. */
static int grammar_takes(const gr_grammar *g, const char *text) {
    gr_state st;
    if (!g || gr_init(g, &st)) return 0;
    int ok = gr_accept(g, &st, (const uint8_t *)text, strlen(text)) == 0 && gr_can_end(&st);
    gr_state_free(&st);
    return ok;
}

/* Tool calls in the DeepSeek formats, as the model writes them: the call
 * block of the fixture's rendering of an assistant message with two calls
 * (what the templates teach) parses back into those calls, and the grammar
 * that tool_choice "required" forces accepts it. Kimi K2's template renders
 * no calls; its block is written here as Moonshot documents the syntax. */
static int tool_calls_back(const js_doc *v) {
    int good = 0;
    for (int c = js_first(v, js_get(v, v->root, "render")); c >= 0; c = js_next(v, c)) {
        const char *name = js_str(v, js_get(v, c, "name"));
        int fmt = fmt_of(js_str(v, js_get(v, c, "format")));
        if (strncmp(name, "tool-call-and-results", 21) || fmt == CHAT_KIMI_K2) continue;
        const char *text = js_str(v, js_get(v, c, "text"));
        const char *b = strstr(text, CHAT_DS_CALLS_BEGIN), *e = b ? strstr(b, CHAT_DS_CALLS_END) : NULL;
        CHECK(b && e);
        if (!b || !e) continue;
        char block[2048];
        int think = chat_thinks(fmt, js_typeof(v, js_get(v, c, "think")) == JS_TRUE);
        snprintf(block, sizeof block, "%s%.*s", think ? "check both</think>" : "", (int)(e + strlen(CHAT_DS_CALLS_END) - b), b);
        jw body = {0};
        jw_lit(&body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\",\"tools\":");
        jw_node(&body, v, js_get(v, c, "tools"), 0);
        jw_lit(&body, think ? ",\"chat_template_kwargs\":{\"enable_thinking\":true}}" : "}");
        oai_limits lim = {16, 4096, fmt};
        oai_req r;
        oai_err oe;
        const char *err = oe.msg;
        int ok = oai_parse(body.s, body.n, 1, &lim, &r, &oe) == 0 && r.gram_tools && r.parse_tools;
        if (!ok) fprintf(stderr, "%s/%s: %s\n", js_str(v, js_get(v, c, "format")), name, err);
        ok = ok && grammar_takes(r.gram, block);
        oai_call calls[OAI_MAX_TOOL_CALLS];
        int n = ok ? parse_back(&r, block, calls) : -1, i = 0;
        int want = -1;
        for (int m = js_first(v, js_get(v, c, "messages")); m >= 0; m = js_next(v, m))
            if (js_get(v, m, "tool_calls") >= 0) want = js_get(v, m, "tool_calls");
        ok = ok && n == js_count(v, want);
        for (int tc = js_first(v, want); ok && tc >= 0; tc = js_next(v, tc), i++) {
            int f = js_get(v, tc, "function");
            js_doc *a = js_parse(js_str(v, js_get(v, f, "arguments")), js_str_len(v, js_get(v, f, "arguments")), NULL, 0);
            jw w = {0};
            if (a) jw_node(&w, a, a->root, 0);
            ok = a && !strcmp(calls[i].name, js_str(v, js_get(v, f, "name"))) && !strcmp(calls[i].args, w.s);
            js_free(a), jw_free(&w);
        }
        if (n > 0) oai_calls_free(calls, n);
        if (!ok) fprintf(stderr, "%s/%s: the call block does not come back as its calls\n", js_str(v, js_get(v, c, "format")), name);
        CHECK(ok);
        good += ok;
        oai_req_free(&r);
        jw_free(&body);
    }
    /* Kimi K2 */
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":"
                      "{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]}";
    const char *kimi = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
                       "<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{\"city\":\"K\xc3\xb6ln\"}<|tool_call_end|><|tool_calls_section_end|>";
    oai_limits lim = {16, 4096, CHAT_KIMI_K2};
    oai_req r;
    oai_err oe;
    CHECK(oai_parse(req, strlen(req), 1, &lim, &r, &oe) == 0 && r.gram_tools);
    CHECK(grammar_takes(r.gram, kimi));
    CHECK(!grammar_takes(r.gram, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
                                 "<|tool_calls_section_end|>")); /* city is required */
    oai_call calls[OAI_MAX_TOOL_CALLS];
    int n = parse_back(&r, kimi, calls);
    CHECK(n == 2 && !strcmp(calls[0].name, "get_weather") && !strcmp(calls[0].args, "{\"city\":\"Paris\"}") && !strcmp(calls[1].args, "{\"city\":\"K\xc3\xb6ln\"}"));
    if (n > 0) oai_calls_free(calls, n);
    /* text before the calls is content; a section cut short still parses; broken ones come back as content */
    oai_out o;
    oai_out_init(&o, &r);
    const char *cut = "Sure. <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\":1}<|tool_call_end|>";
    oai_out_put(&o, cut, strlen(cut));
    oai_out_finish(&o);
    CHECK(o.content.n == 6 && !memcmp(o.content.s, "Sure. ", 6));
    CHECK((n = oai_parse_calls(&o, calls, OAI_MAX_TOOL_CALLS, 0)) == 1 && !strcmp(calls[0].name, "f"));
    if (n > 0) oai_calls_free(calls, n);
    oai_out_free(&o);
    static const char *const broken[] = {
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>[1]<|tool_call_end|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0{\"a\":1}<|tool_call_end|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\":1}",
        "<|tool_calls_section_begin|>junk",
        "<|tool_calls_section_begin|><|tool_calls_section_end|>trailing",
        "<|tool_calls_section_begin|><|tool_call_begin|><|tool_call_argument_begin|>{}<|tool_call_end|>",
    };
    for (size_t i = 0; i < sizeof broken / sizeof *broken; i++) CHECK(parse_back(&r, broken[i], calls) == -1);
    oai_req_free(&r);
    lim.fmt = CHAT_DEEPSEEK3;
    CHECK(oai_parse(req, strlen(req), 1, &lim, &r, &oe) == 0);
    CHECK(parse_back(&r, CHAT_DS_CALLS_BEGIN CHAT_DS_CALL_BEGIN "function" CHAT_DS_SEP "get_weather {}" CHAT_DS_CALL_END, calls) == -1); /* no line break */
    CHECK(parse_back(&r, CHAT_DS_CALLS_BEGIN CHAT_DS_CALL_BEGIN "function get_weather\n{}" CHAT_DS_CALL_END, calls) == -1);            /* no separator */
    CHECK((n = parse_back(&r, CHAT_DS_CALLS_BEGIN CHAT_DS_CALL_BEGIN "function" CHAT_DS_SEP "get_weather\n{\"city\": \"x\"}" CHAT_DS_CALL_END, calls)) == 1);
    if (n > 0) oai_calls_free(calls, n);
    oai_req_free(&r);
    return good;
}

/* The tool-call tags of every format, as the families' templates and
 * tokenizers spell them (written out here, not taken from chat.h): what
 * session.h's sess_tag_ids keeps out of every grammar but tool_choice's. */
static const char *const ALL_TOOL_TAGS[] = {
    "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "</think>",
    "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>", "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
    "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>", "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
    "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>",
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
};

static int in_list(const char *s, const char *const *l, int n) {
    for (int i = 0; i < n; i++)
        if (l[i] && !strcmp(s, l[i])) return 1;
    return 0;
}

/* Special token id's text as a C string in piece[128], or NULL (not a
 * special token, empty, or longer). */
static const char *special_piece(const tok *t, int id, char *piece) {
    size_t len;
    const char *p = tok_is_special(t, id) ? tok_piece(t, id, &len) : NULL;
    if (!p || !len || len >= 128) return NULL;
    memcpy(piece, p, len), piece[len] = 0;
    return piece;
}

/* The special tokens of t that occur in text, each checked to be in the
 * list l[0..n) (what the row says it writes); returns how many occur. */
static int specials_in(const tok *t, const char *text, const char *const *l, int n, const char *what, int fmt) {
    int found = 0;
    for (int id = 0; id < tok_n_ids(t); id++) {
        char piece[128];
        if (!special_piece(t, id, piece) || !strstr(text, piece)) continue;
        found++;
        if (!in_list(piece, l, n)) fprintf(stderr, "%s: %s writes \"%s\", which its row does not list\n", chat_info(fmt)->name, what, piece);
        CHECK(in_list(piece, l, n));
    }
    return found;
}

/* The table against the families' real tokenizers and against what the
 * renderers and grammars write: each row's tokens are exactly the added
 * tokens its prompts write; its tool-call tags are special tokens, exactly
 * the ones its forced grammar writes, and their union over the formats is
 * ALL_TOOL_TAGS; every tool token of the tokenizer is in its row; a stop
 * token is the token that closes a reply. */
static void table_facts(void) {
    char err[512];
    tok *fam[3] = {tok_load(FX "tokenizer/tokenizer.json", err, sizeof err), tok_load(FX "tokenizer/deepseek.json", err, sizeof err),
                   tok_load_dir(FX "tokenizer-kimi", err, sizeof err)};
    CHECK(fam[0] && fam[1] && fam[2]);
    const char *all[32], *few[3];
    int na = chat_tool_tags(-1, all, 32), nall = (int)(sizeof ALL_TOOL_TAGS / sizeof *ALL_TOOL_TAGS), covered = 0;
    CHECK(na == nall);
    for (int i = 0; i < nall; i++) CHECK(in_list(ALL_TOOL_TAGS[i], all, na));
    for (int i = 0; i < na && i < 32; i++) CHECK(!in_list(all[i], all, i)); /* each once */
    CHECK(chat_tool_tags(-1, few, 3) == na && !strcmp(few[2], all[2]));  /* bounded like snprintf */
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}}}]";
    js_doc *td = js_parse(tools, strlen(tools), NULL, 0);
    CHECK(td != NULL);
    for (int f = 0; f < CHAT_NFMT && td && fam[0] && fam[1] && fam[2]; f++) {
        const chat_fmt_info *i = chat_info(f);
        const gr_tool_syntax *sx = &i->calls;
        const tok *t = f == CHAT_GLM5 ? fam[0] : f == CHAT_KIMI_K2 ? fam[2] : fam[1];
        const char *tg[16];
        int nt = chat_tool_tags(f, tg, 16), ntok = 0;
        CHECK(nt > 0 && nt <= 16);
        while (i->tokens[ntok]) ntok++;
        CHECK(chat_check(t, f, err, sizeof err) == 0);
        /* the prompts write exactly the row's tokens */
        char text[2048] = "", buf[512];
        for (int k = 0; k < 6; k++) {
            if (k < 4) chat_text(f, k & 1 ? "S" : NULL, "U", k >> 1, buf, sizeof buf);
            else chat_turn_text(f, "U", k & 1, buf, sizeof buf);
            strncat(text, buf, sizeof text - strlen(text) - 1);
        }
        CHECK(specials_in(t, text, i->tokens, ntok, "a prompt", f) == ntok);
        /* a stop token is what closes a reply, and one the prompts write */
        CHECK(i->stop ? !strcmp(i->stop, i->reply_end) && in_list(i->stop, i->tokens, ntok) : f == CHAT_GLM5);
        /* tool-call tags: special tokens in the family's tokenizer, in ALL_TOOL_TAGS */
        for (int k = 0; k < nt; k++) {
            int id = tok_find(t, tg[k]);
            CHECK(tok_is_special(t, id) && in_list(tg[k], ALL_TOOL_TAGS, nall));
            if (!tok_is_special(t, id)) fprintf(stderr, "%s: tool tag \"%s\" is no special token\n", i->name, tg[k]);
            for (int j = 0; j < nall; j++) covered |= !strcmp(tg[k], ALL_TOOL_TAGS[j]) << j;
        }
        CHECK(in_list(chat_calls_open(f), tg, nt));                           /* what routes a reply into its calls */
        CHECK(!chat_thinks(f, 1) || in_list(i->think_end, tg, nt));           /* what routes reasoning out */
        const char *glue[5] = {sx->name_prefix, sx->index_sep, sx->args_begin, sx->args_end, sx->call_sep}; /* text, no tags */
        for (int k = 0; k < 5; k++) CHECK(!glue[k] || !*glue[k] || !tok_is_special(t, tok_find(t, glue[k])));
        /* the forced grammar (thinking where the format can) writes exactly those tags */
        char *g = gr_tool_calls(td, td->root, sx, NULL, 3, chat_thinks(f, 1) ? i->think_end : NULL, err, sizeof err);
        CHECK(g != NULL);
        if (g) {
            CHECK(specials_in(t, g, tg, nt, "its tool grammar", f) == nt);
            free(g);
        }
        /* every tool token of the tokenizer is one of the row's strings */
        const char *row[16] = {sx->section_begin, sx->section_end, sx->call_begin, sx->call_end, sx->key_begin, sx->key_end, sx->value_begin,
                               sx->value_end, sx->sep, i->results_begin, i->results_end, i->result_begin, i->result_end};
        for (int id = 0; id < tok_n_ids(t); id++) {
            char piece[128];
            if (special_piece(t, id, piece) && (strstr(piece, "tool") || strstr(piece, "arg_"))) CHECK(in_list(piece, row, 16));
        }
    }
    CHECK(covered == (1 << nall) - 1); /* every tag is some format's */
    js_free(td);
    for (int k = 0; k < 3; k++) tok_free(fam[k]);
}

/* Serve mode's refusals and defaults for the other formats. */
static void serve_checks(void) {
    oai_err oe;
    const char *err = oe.msg;
    oai_req r;
    oai_limits lim = {16, 4096, CHAT_DEEPSEEK3};
    const char *forced = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                         "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}";
    CHECK(oai_parse(forced, strlen(forced), 1, &lim, &r, &oe) == -1);
    CHECK_HAS(err, "\"g\", which tools does not list");
    oai_req_free(&r);
    const char *bad[] = {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"foo\":1}]}", "{\"messages\":[{\"content\":\"x\"}]}",
                         "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "{\"messages\":[7]}",
                         "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}",
                         "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}]}",
                         "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":3}}]}]}",
                         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}"};
    const char *why[] = {"unknown field \"foo\"", "role is missing", "not one of system", "is not an object", "tool_calls must be an array",
                         "without function.name", "arguments must be a JSON object", "only text parts"};
    for (int f = CHAT_DEEPSEEK3; f < CHAT_NFMT; f++) {
        lim.fmt = f;
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            int rc = oai_parse(bad[i], strlen(bad[i]), 1, &lim, &r, &oe);
            if ((f == CHAT_KIMI_K2 || f == CHAT_DEEPSEEK3) && i >= 5 && i <= 6) { /* Kimi renders no calls, V3 none beside a content */
                CHECK(rc == 0);
                oai_req_free(&r);
                continue;
            }
            CHECK(rc == -1);
            if (rc == -1 && !strstr(err, why[i])) fprintf(stderr, "format %d, body %zu: '%s' lacks '%s'\n", f, i, err, why[i]);
            CHECK(rc == -1 && strstr(err, why[i]));
            oai_req_free(&r);
        }
    }
    /* arguments given as an object: written as json.dumps would; developer counts as system */
    lim.fmt = CHAT_DEEPSEEK_V31;
    const char *obj = "{\"messages\":[{\"role\":\"developer\",\"content\":\"D\"},{\"role\":\"user\",\"content\":\"u\"},"
                      "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{\"a\":[1,\"b\"]}}}]}]}";
    CHECK(oai_parse(obj, strlen(obj), 1, &lim, &r, &oe) == 0);
    CHECK(r.text && strstr(r.text, "D<\xef\xbd\x9cUser\xef\xbd\x9c>u") && strstr(r.text, "f" CHAT_DS_SEP "{\"a\": [1, \"b\"]}" CHAT_DS_CALL_END));
    CHECK(!r.parse_tools);
    oai_req_free(&r);
}

int main(void) {
    char *buf;
    js_doc *v = load(FX "chat_templates.json", &buf);
    CHECK(v != NULL);
    if (!v) return check_report("test_chat");
    char err[512];
    tok *ds = tok_load(FX "tokenizer/deepseek.json", err, sizeof err), *glm = tok_load(FX "tiny-glm5/tokenizer.json", err, sizeof err);
    CHECK(ds && glm);
    if (!ds || !glm) return check_report("test_chat");
    int nr, np, nt;
    int gr = render_parity(v, &nr), gp = prompt_parity(v, "prompt", ds, &np), gt = prompt_parity(v, "turn", ds, &nt);
    CHECK(nr >= 60 && np >= 24 && nt >= 12);
    detection();
    selection(ds, glm);
    serve_checks();
    table_facts();
    int gc = tool_calls_back(v);
    CHECK(gc == 8);
    printf("test_chat: transformers' renderings matched: %d/%d conversations, %d/%d prompts, %d/%d follow-up turns (ids where the DeepSeek tokenizer applies); "
           "DeepSeek call blocks parsed back and accepted by the forced grammar: %d/8\n",
           gr, nr, gp, np, gt, nt, gc);
    tok_free(ds), tok_free(glm);
    js_free(v);
    free(buf);
    return check_report("test_chat");
}
