/* test_fronts.c — serve mode's protocol fronts without a network:
 * Anthropic's Messages API (anthropic.h) and OpenAI's Responses API
 * (responses.h). Each request shape is translated and then rendered by
 * oai_parse byte for byte as the equivalent chat-completions body renders,
 * in every chat format (the fronts have no rendering of their own; both
 * bodies are written here by hand); refusals name the field; tool calls
 * round-trip; previous_response_id chains through the store, whose bounds
 * evict the least recently used; every document and event the writers
 * produce parses, in the order each protocol requires.
 *
 * For tests/test_fronts_sdk.py (the real SDKs): `test_fronts --write DIR`
 * writes sample documents and streams; `test_fronts --translate KIND`
 * (anthropic, count_tokens, responses) translates the body on stdin and
 * renders it for GLM-5: the chat body on stdout and status 0, or the
 * refusal ("param: message") and status 1. */
#include "anthropic.h"
#include "responses.h"

#include "check.h"

static const oai_limits LIM = {24, 4096, CHAT_GLM5};

/* JSON written with single quotes: a copy with ' turned into " (tests
 * never need a literal '). Kept until the program ends. */
static const char *J(const char *s) {
    static char *pool[256];
    static int n;
    char *c = strdup(s);
    for (char *p = c; p && *p; p++)
        if (*p == '\'') *p = '"';
    if (n == 256) free(pool[n % 256]);
    pool[n++ % 256] = c;
    return c;
}

/* ------------------------------------------------------------ helpers */

/* The chat body and the translated one render alike in every chat format:
 * both refused with the same message, or the same prompt and options. */
static int same_as_chat(const char *what, const char *chat, const char *tr, size_t tn) {
    int ok = 1;
    for (int fmt = 0; fmt < CHAT_NFMT; fmt++) {
        oai_limits lim = LIM;
        lim.fmt = fmt;
        oai_req a, b;
        char ea[300], eb[300];
        int ra = oai_parse_msg(chat, strlen(chat), 1, &lim, &a, ea, sizeof ea), rb = oai_parse_msg(tr, tn, 1, &lim, &b, eb, sizeof eb);
        if (ra != rb || (ra && strcmp(ea, eb))) {
            fprintf(stderr, "%s (format %d): chat %s, translated %s\n", what, fmt, ra ? ea : "accepted", rb ? eb : "accepted");
            ok = 0;
        } else if (!ra) {
            if (a.text_len != b.text_len || memcmp(a.text, b.text, a.text_len)) {
                fprintf(stderr, "%s (format %d):\nchat:       %s\ntranslated: %s\n", what, fmt, a.text, b.text);
                ok = 0;
            }
            int same = a.max_tokens == b.max_tokens && a.has_temp == b.has_temp && a.temp == b.temp && a.has_top_p == b.has_top_p &&
                       a.top_p == b.top_p && a.has_top_k == b.has_top_k && a.top_k == b.top_k && a.stream == b.stream &&
                       a.n_stop == b.n_stop && a.think == b.think && (a.tools >= 0) == (b.tools >= 0) && a.parse_tools == b.parse_tools &&
                       (a.gram != NULL) == (b.gram != NULL) && a.gram_tools == b.gram_tools;
            for (int i = 0; same && i < a.n_stop; i++) same = a.stop_len[i] == b.stop_len[i] && !memcmp(a.stop[i], b.stop[i], a.stop_len[i]);
            if (!same) fprintf(stderr, "%s (format %d): the options differ\n", what, fmt), ok = 0;
        }
        oai_req_free(&a), oai_req_free(&b);
    }
    return ok;
}

static int ant_same(const char *what, const char *body, int kind, const char *chat) {
    ant_req q;
    char err[400], param[200];
    int rc = ant_parse(body, strlen(body), kind, &LIM, &q, err, sizeof err, param, sizeof param);
    if (rc) fprintf(stderr, "%s: refused: %s (param %s)\n", what, err, param);
    int ok = !rc && same_as_chat(what, chat, q.chat.s, q.chat.n);
    ant_req_free(&q);
    return ok;
}

/* Refused with param exactly and why in the message. */
static int ant_refused(const char *body, int kind, const char *param, const char *why) {
    ant_req q;
    char err[400], p[200];
    int rc = ant_parse(body, strlen(body), kind, &LIM, &q, err, sizeof err, p, sizeof p);
    ant_req_free(&q);
    if (!rc) return fprintf(stderr, "accepted: %s\n", body), 0;
    if (strcmp(p, param) || !strstr(err, why)) return fprintf(stderr, "for %s:\n  want param '%s' and '%s', got '%s': %s\n", body, param, why, p, err), 0;
    return 1;
}

static int resp_same(const char *what, const char *body, resp_store *st, const char *chat) {
    resp_req rq;
    char err[400], param[200];
    int rc = resp_parse(body, strlen(body), &LIM, st, &rq, err, sizeof err, param, sizeof param);
    if (rc) fprintf(stderr, "%s: refused: %s (param %s)\n", what, err, param);
    int ok = !rc && same_as_chat(what, chat, rq.chat.s, rq.chat.n);
    resp_req_free(&rq);
    return ok;
}

static int resp_refused(const char *body, resp_store *st, const char *param, const char *why) {
    resp_req rq;
    char err[400], p[200];
    int rc = resp_parse(body, strlen(body), &LIM, st, &rq, err, sizeof err, p, sizeof p);
    resp_req_free(&rq);
    if (!rc) return fprintf(stderr, "accepted: %s\n", body), 0;
    if (strcmp(p, param) || !strstr(err, why)) return fprintf(stderr, "for %s:\n  want param '%s' and '%s', got '%s': %s\n", body, param, why, p, err), 0;
    return 1;
}

static js_doc *parse_json(const char *s, size_t n) {
    js_doc *d = js_parse(s, n, NULL, 0);
    if (!d) fprintf(stderr, "not JSON: %.*s\n", (int)(n < 400 ? n : 400), s);
    return d;
}

static const char *sget(const js_doc *d, int obj, const char *key) { return js_str(d, js_get(d, obj, key)); }
static int streq(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* One server-sent event "event: NAME\ndata: JSON\n\n" at *p: 1 (name,
 * data), 0 at the end, -1 malformed (a data line holding a line break
 * would end the event early). */
static int sse_next(const char **p, const char *end, char *name, size_t nn, const char **data, size_t *dn) {
    if (*p == end) return 0;
    const char *s = *p;
    if ((size_t)(end - s) < 7 || memcmp(s, "event: ", 7)) return -1;
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    if (!nl || (size_t)(nl - s - 7) >= nn) return -1;
    snprintf(name, nn, "%.*s", (int)(nl - s - 7), s + 7);
    s = nl + 1;
    if ((size_t)(end - s) < 6 || memcmp(s, "data: ", 6)) return -1;
    s += 6;
    nl = memchr(s, '\n', (size_t)(end - s));
    if (!nl || nl + 1 >= end || nl[1] != '\n') return -1;
    *data = s, *dn = (size_t)(nl - s);
    *p = nl + 2;
    return 1;
}

/* ------------------------------------------------------------ Anthropic: requests */

static const char *TOOLS_ANT =
    "'tools':[{'name':'get_weather','description':'Weather','input_schema':{'type':'object','properties':{'city':{'type':'string'},"
    "'days':{'type':'integer'}},'required':['city']},'cache_control':{'type':'ephemeral'}}]";
static const char *TOOLS_CHAT =
    "'tools':[{'type':'function','function':{'name':'get_weather','description':'Weather','parameters':{'type':'object','properties':"
    "{'city':{'type':'string'},'days':{'type':'integer'}},'required':['city']}}}]";

static char *cat(const char *a, const char *b, const char *c) {
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

static void test_ant_requests(void) {
    CHECK(ant_same("basic",
                   J("{'model':'m','max_tokens':100,'system':'Be brief.','messages':[{'role':'user','content':'Hello'}],'temperature':0.5,"
                     "'top_p':0.9,'top_k':40,'stop_sequences':['END','\\n\\n'],'stream':true,'metadata':{'user_id':'u1'},"
                     "'service_tier':'auto','cache_control':{'type':'ephemeral'},'speed':'standard','inference_geo':'us'}"),
                   ANT_MESSAGES,
                   J("{'model':'m','max_tokens':100,'messages':[{'role':'system','content':'Be brief.'},{'role':'user','content':'Hello'}],"
                     "'temperature':0.5,'top_p':0.9,'top_k':40,'stop':['END','\\n\\n'],'stream':true}")));
    /* blocks, thinking, tool_use and tool_result: results first, then the text of their message */
    char *a = cat(J("{'model':'m','max_tokens':200,'system':[{'type':'text','text':'You code.','cache_control':{'type':'ephemeral'}},"
                    "{'type':'text','text':' Carefully.'}],'thinking':{'type':'enabled','budget_tokens':2048},'messages':["
                    "{'role':'user','content':[{'type':'text','text':'Weather in '},{'type':'text','text':'Paris?'}]},"
                    "{'role':'assistant','content':[{'type':'thinking','thinking':'need data','signature':'sig'},{'type':'redacted_thinking','data':'x'},"
                    "{'type':'text','text':'Checking.'},{'type':'tool_use','id':'toolu_1','name':'get_weather','input':{'city':'Paris','days':2}},"
                    "{'type':'tool_use','id':'toolu_2','name':'get_weather','input':{'city':'Lyon'}}]},"
                    "{'role':'user','content':[{'type':'text','text':'Here:'},{'type':'tool_result','tool_use_id':'toolu_1','content':'18C'},"
                    "{'type':'tool_result','tool_use_id':'toolu_2','content':[{'type':'text','text':'sunny'}],'is_error':false}]}],"),
                  J(TOOLS_ANT), "}");
    char *c = cat(J("{'model':'m','max_tokens':200,'chat_template_kwargs':{'enable_thinking':true},'messages':["
                    "{'role':'system','content':'You code. Carefully.'},{'role':'user','content':'Weather in Paris?'},"
                    "{'role':'assistant','content':'Checking.','reasoning_content':'need data','tool_calls':["
                    "{'id':'toolu_1','type':'function','function':{'name':'get_weather','arguments':'{\\'city\\':\\'Paris\\',\\'days\\':2}'}},"
                    "{'id':'toolu_2','type':'function','function':{'name':'get_weather','arguments':'{\\'city\\':\\'Lyon\\'}'}}]},"
                    "{'role':'tool','tool_call_id':'toolu_1','content':'18C'},{'role':'tool','tool_call_id':'toolu_2','content':'sunny'},"
                    "{'role':'user','content':'Here:'}],"),
                  J(TOOLS_CHAT), "}");
    /* J turned the escaped \' into \" inside the arguments strings */
    CHECK(ant_same("blocks and tools", a, ANT_MESSAGES, c));
    free(a), free(c);
    /* an assistant turn of calls only: content null, as chat clients send it (DeepSeek-V3 renders calls only then) */
    a = cat(J("{'model':'m','max_tokens':9,'messages':[{'role':'user','content':'go'},{'role':'assistant','content':[{'type':'tool_use',"
              "'id':'t1','name':'get_weather','input':{}}]},{'role':'user','content':[{'type':'tool_result','tool_use_id':'t1'}]}],"),
            J(TOOLS_ANT), "}");
    c = cat(J("{'model':'m','max_tokens':9,'messages':[{'role':'user','content':'go'},{'role':'assistant','content':null,'tool_calls':[{'id':'t1',"
              "'type':'function','function':{'name':'get_weather','arguments':'{}'}}]},{'role':'tool','tool_call_id':'t1','content':''}],"),
            J(TOOLS_CHAT), "}");
    CHECK(ant_same("calls only", a, ANT_MESSAGES, c));
    free(a), free(c);
    /* tool_choice, each kind */
    const char *choices[][2] = {
        {"'tool_choice':{'type':'any'}", "'tool_choice':'required'"},
        {"'tool_choice':{'type':'any','disable_parallel_tool_use':true}", "'tool_choice':'required','parallel_tool_calls':false"},
        {"'tool_choice':{'type':'tool','name':'get_weather'}", "'tool_choice':{'type':'function','function':{'name':'get_weather'}}"},
        {"'tool_choice':{'type':'none'}", "'tool_choice':'none'"},
        {"'tool_choice':{'type':'auto','disable_parallel_tool_use':false}", "'tool_choice':'auto','parallel_tool_calls':true"},
        {"'thinking':{'type':'adaptive','display':'summarized'}", "'chat_template_kwargs':{'enable_thinking':true}"},
        {"'thinking':{'type':'disabled'}", "'chat_template_kwargs':{'enable_thinking':false}"},
        {"'output_config':{'effort':'high','format':{'type':'json_schema','schema':{'type':'object','properties':{'a':{'type':'integer'}}}}}",
         "'response_format':{'type':'json_schema','json_schema':{'name':'output','schema':{'type':'object','properties':{'a':{'type':'integer'}}}}}"},
    };
    for (size_t i = 0; i < sizeof choices / sizeof *choices; i++) {
        char *ab = cat(J("{'model':'m','max_tokens':30,'messages':[{'role':'user','content':'hi'}],"), J(TOOLS_ANT), ",");
        char *ab2 = cat(ab, J(choices[i][0]), "}");
        char *cb = cat(J("{'model':'m','max_tokens':30,'messages':[{'role':'user','content':'hi'}],"), J(TOOLS_CHAT), ",");
        char *cb2 = cat(cb, J(choices[i][1]), "}");
        CHECK(ant_same(choices[i][0], ab2, ANT_MESSAGES, cb2));
        free(ab), free(ab2), free(cb), free(cb2);
    }
    /* a system message among the messages; count_tokens has no max_tokens */
    CHECK(ant_same("system role", J("{'model':'m','max_tokens':5,'messages':[{'role':'system','content':[{'type':'text','text':'S'}]},"
                                    "{'role':'user','content':'U'}]}"),
                   ANT_MESSAGES, J("{'model':'m','max_tokens':5,'messages':[{'role':'system','content':'S'},{'role':'user','content':'U'}]}")));
    a = cat(J("{'model':'m','system':'S','messages':[{'role':'user','content':'count me'}],'thinking':{'type':'enabled','budget_tokens':1024},"), J(TOOLS_ANT), "}");
    c = cat(J("{'model':'m','messages':[{'role':'system','content':'S'},{'role':'user','content':'count me'}],"
              "'chat_template_kwargs':{'enable_thinking':true},"), J(TOOLS_CHAT), "}");
    CHECK(ant_same("count_tokens", a, ANT_COUNT_TOKENS, c));
    free(a), free(c);
    /* an empty system prompt is none (Kimi K2 then adds its default one, as for chat without one) */
    CHECK(ant_same("empty system", J("{'model':'m','max_tokens':5,'system':'','messages':[{'role':'user','content':'U'}]}"), ANT_MESSAGES,
                   J("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'U'}]}")));
    /* thinking.display omitted is remembered for the writers */
    ant_req q;
    char err[300], param[100];
    CHECK(ant_parse(J("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'U'}],'thinking':{'type':'enabled','budget_tokens':0,"
                      "'display':'omitted'},'stream':true}"),
                    strlen(J("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'U'}],'thinking':{'type':'enabled','budget_tokens':0,"
                             "'display':'omitted'},'stream':true}")),
                    ANT_MESSAGES, &LIM, &q, err, sizeof err, param, sizeof param) == 0);
    CHECK(q.omit_thinking && q.stream && !q.count);
    ant_req_free(&q);
}

static void test_ant_refusals(void) {
    const char *U = "'messages':[{'role':'user','content':'x'}]";
    char b[2048];
#define AB(fmt) (snprintf(b, sizeof b, "%s", J(fmt)), b)
    CHECK(ant_refused("{", ANT_MESSAGES, "", "not valid JSON"));
    CHECK(ant_refused("[]", ANT_MESSAGES, "", "JSON object"));
    snprintf(b, sizeof b, J("{'model':'m','max_tokens':5,%s,'foo':1}"), J(U));
    CHECK(ant_refused(b, ANT_MESSAGES, "foo", "unknown field"));
    snprintf(b, sizeof b, J("{'model':'m','max_tokens':5,%s,'mcp_servers':[{'type':'url','url':'u','name':'n'}]}"), J(U));
    CHECK(ant_refused(b, ANT_MESSAGES, "mcp_servers", "not supported"));
    snprintf(b, sizeof b, J("{'model':'m','max_tokens':5,%s,'context_management':{'edits':[]}}"), J(U));
    CHECK(ant_refused(b, ANT_MESSAGES, "context_management", "not supported"));
    snprintf(b, sizeof b, J("{'model':'m','max_tokens':5,%s,'container':'c1'}"), J(U));
    CHECK(ant_refused(b, ANT_MESSAGES, "container", "not supported"));
    snprintf(b, sizeof b, J("{'model':'m',%s}"), J(U));
    CHECK(ant_refused(b, ANT_MESSAGES, "max_tokens", "required"));
    snprintf(b, sizeof b, J("{'model':'m','max_tokens':0,%s}"), J(U));
    CHECK(ant_refused(b, ANT_MESSAGES, "max_tokens", "outside"));
    snprintf(b, sizeof b, J("{'model':'m','max_tokens':4097,%s}"), J(U));
    CHECK(ant_refused(b, ANT_MESSAGES, "max_tokens", "outside"));
    snprintf(b, sizeof b, J("{'model':'m','max_tokens':5,'temperature':1.5,%s}"), J(U));
    CHECK(ant_refused(b, ANT_MESSAGES, "temperature", "outside [0, 1]"));
    snprintf(b, sizeof b, J("{'max_tokens':5,%s}"), J(U));
    CHECK(ant_refused(b, ANT_MESSAGES, "model", "required"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[]}"), ANT_MESSAGES, "messages", "non-empty"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':[]}]}"), ANT_MESSAGES, "messages[0].content", "non-empty"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':[{'type':'text','text':'a'},"
                         "{'type':'image','source':{'type':'base64','media_type':'image/png','data':'AA=='}}]}]}"),
                      ANT_MESSAGES, "messages[0].content[1]", "\"image\" blocks are not supported"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':[{'type':'document','source':{}}]}]}"), ANT_MESSAGES,
                      "messages[0].content[0]", "\"document\" blocks are not supported"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':[{'type':'tool_result','tool_use_id':'t',"
                         "'content':[{'type':'image','source':{}}]}]}]}"),
                      ANT_MESSAGES, "messages[0].content[0].content[0]", "text only"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':[{'type':'text'}]}]}"), ANT_MESSAGES,
                      "messages[0].content[0].text", "string"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':[{'type':'thinking','thinking':'t','signature':''}]}]}"),
                      ANT_MESSAGES, "messages[0].content[0]", "assistant messages"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'assistant','content':[{'type':'tool_result',"
                         "'tool_use_id':'t'}]},{'role':'user','content':'b'}]}"),
                      ANT_MESSAGES, "messages[1].content[0]", "user messages"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'assistant','content':[{'type':'tool_use',"
                         "'id':'t','name':'f','input':[1]}]},{'role':'user','content':'b'}]}"),
                      ANT_MESSAGES, "messages[1].content[0].input", "object"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'assistant','content':[{'type':'server_tool_use',"
                         "'id':'t','name':'web_search','input':{}}]},{'role':'user','content':'b'}]}"),
                      ANT_MESSAGES, "messages[1].content[0]", "server tools"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'assistant','content':'Sure, '}]}"), ANT_MESSAGES,
                      "messages[1]", "prefill"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a','name':'n'}]}"), ANT_MESSAGES, "messages[0].name",
                      "unknown field"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'tool','content':'a'}]}"), ANT_MESSAGES, "messages[0].role", "not one of"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'tools':[{'type':'web_search_20250305','name':'web_search'}]}"),
                      ANT_MESSAGES, "tools[0]", "server tool \"web_search_20250305\""));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'tools':[{'name':'f','input_schema':{'type':'object'}},"
                         "{'type':'bash_20250124','name':'bash'}]}"),
                      ANT_MESSAGES, "tools[1]", "server tool \"bash_20250124\""));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'tools':[{'name':'f'}]}"), ANT_MESSAGES,
                      "tools[0].input_schema", "schema"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'tools':[{'name':'a\\nb','input_schema':{}}]}"),
                      ANT_MESSAGES, "tools[0].name", "one line"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'tool_choice':{'type':'bogus'}}"), ANT_MESSAGES,
                      "tool_choice.type", "not one of"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'thinking':{'type':'enabled'}}"), ANT_MESSAGES,
                      "thinking.budget_tokens", "integer"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'output_config':{'format':{'type':'xml'}}}"),
                      ANT_MESSAGES, "output_config.format", "json_schema"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'metadata':{'user_id':'u','x':1}}"), ANT_MESSAGES,
                      "metadata.x", "unknown field"));
    char stops[600] = "";
    for (int i = 0; i <= OAI_MAX_STOP; i++) snprintf(stops + strlen(stops), sizeof stops - strlen(stops), "%s's%d'", i ? "," : "", i);
    char sb[1200];
    snprintf(sb, sizeof sb, "{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'stop_sequences':[%s]}", stops);
    CHECK(ant_refused(J(sb), ANT_MESSAGES, "stop_sequences", "at most"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}]}"), ANT_COUNT_TOKENS, "max_tokens", "unknown field"));
    CHECK(ant_refused(AB("{'model':'m','messages':[{'role':'user','content':'a'}],'stream':true}"), ANT_COUNT_TOKENS, "stream", "unknown field"));
    /* the translated message count is bounded like chat's */
    char big[8192] = "{'model':'m','max_tokens':5,'messages':[";
    for (int i = 0; i < LIM.max_messages / 2 + 1; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%s{'role':'user','content':[{'type':'tool_result','tool_use_id':'t'},{'type':'text','text':'x'}]},"
                 "{'role':'assistant','content':'y'}", i ? "," : "");
    snprintf(big + strlen(big), sizeof big - strlen(big), ",{'role':'user','content':'z'}]}");
    CHECK(ant_refused(J(big), ANT_MESSAGES, "messages", "at most"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'tools':[{'name':'f','input_schema':{'type':'object'}}],"
                         "'tool_choice':{'type':'tool','name':'g'}}"),
                      ANT_MESSAGES, "tool_choice.name", "\"g\" is not one of the tools"));
    CHECK(ant_refused(AB("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],'tool_choice':{'type':'any'}}"), ANT_MESSAGES,
                      "tool_choice", "needs tools"));
    /* a refusal that is oai_parse's, after the translation: a schema outside the supported subset */
    ant_req q;
    char err[300], param[100];
    const char *body = J("{'model':'m','max_tokens':5,'messages':[{'role':'user','content':'a'}],"
                         "'output_config':{'format':{'type':'json_schema','schema':{'type':'object','not':{}}}}}");
    CHECK(ant_parse(body, strlen(body), ANT_MESSAGES, &LIM, &q, err, sizeof err, param, sizeof param) == 0);
    oai_req r;
    CHECK(oai_parse_msg(q.chat.s, q.chat.n, 1, &LIM, &r, err, sizeof err) != 0 && strstr(err, "response_format"));
    oai_req_free(&r);
    ant_req_free(&q);
#undef AB
}

/* ------------------------------------------------------------ Anthropic: replies */

static const oai_call CALLS[2] = {{"get_weather", "{\"city\":\"Paris\",\"days\":2}"}, {"get_weather", "{\"city\":\"Lyon\"}"}};

static oai_reply reply(const char *id, const char *reasoning, const char *content, int ncalls, const char *finish) {
    oai_reply y;
    memset(&y, 0, sizeof y);
    y.id = id, y.model = "tiny", y.created = 1700000000;
    y.prompt_tokens = 30, y.cached_tokens = 12, y.completion_tokens = 9, y.reasoning_tokens = 3;
    y.reasoning = reasoning, y.reasoning_len = strlen(reasoning);
    y.content = content, y.content_len = strlen(content);
    y.calls = ncalls ? CALLS : NULL, y.ncalls = ncalls;
    y.finish = finish;
    return y;
}

static void test_ant_message(void) {
    ant_req q = {0};
    oai_reply y = reply("msg_1", "plan", "It's \"18C\"\n", 2, "tool_calls");
    jw w = {0};
    ant_message_json(&w, &q, &y);
    js_doc *d = parse_json(w.s, w.n);
    CHECK(d != NULL);
    if (d) {
        int o = d->root, c = js_get(d, o, "content"), u = js_get(d, o, "usage");
        CHECK(streq(sget(d, o, "id"), "msg_1") && streq(sget(d, o, "type"), "message") && streq(sget(d, o, "role"), "assistant"));
        CHECK(streq(sget(d, o, "model"), "tiny") && streq(sget(d, o, "stop_reason"), "tool_use"));
        CHECK(js_typeof(d, js_get(d, o, "stop_sequence")) == JS_NULL && js_get(d, o, "stop_sequence") >= 0);
        CHECK(js_count(d, c) == 4);
        CHECK(streq(sget(d, js_at(d, c, 0), "type"), "thinking") && streq(sget(d, js_at(d, c, 0), "thinking"), "plan") &&
              streq(sget(d, js_at(d, c, 0), "signature"), ""));
        CHECK(streq(sget(d, js_at(d, c, 1), "type"), "text") && streq(sget(d, js_at(d, c, 1), "text"), "It's \"18C\"\n"));
        int t2 = js_at(d, c, 2), t3 = js_at(d, c, 3);
        CHECK(streq(sget(d, t2, "type"), "tool_use") && streq(sget(d, t2, "name"), "get_weather") && !strncmp(sget(d, t2, "id"), "toolu_", 6));
        CHECK(js_int(d, js_get(d, js_get(d, t2, "input"), "days")) == 2 && streq(sget(d, js_get(d, t3, "input"), "city"), "Lyon"));
        CHECK(sget(d, t2, "id") && sget(d, t3, "id") && strcmp(sget(d, t2, "id"), sget(d, t3, "id")));
        CHECK(js_int(d, js_get(d, u, "input_tokens")) == 18 && js_int(d, js_get(d, u, "cache_read_input_tokens")) == 12 &&
              js_int(d, js_get(d, u, "output_tokens")) == 9 && js_int(d, js_get(d, u, "cache_creation_input_tokens")) == 0);
        js_free(d);
    }
    jw_free(&w);
    /* a stop string; thinking omitted; the finish reasons */
    q.omit_thinking = 1;
    y = reply("msg_2", "secret", "done", 0, "stop_string");
    y.stop_seq = "END", y.stop_seq_len = 3;
    ant_message_json(&w, &q, &y);
    d = parse_json(w.s, w.n);
    CHECK(d && streq(sget(d, d->root, "stop_reason"), "stop_sequence") && streq(sget(d, d->root, "stop_sequence"), "END"));
    CHECK(d && streq(sget(d, js_at(d, js_get(d, d->root, "content"), 0), "thinking"), ""));
    js_free(d), jw_free(&w);
    const char *fin[][2] = {{"stop", "end_turn"}, {"length", "max_tokens"}, {"tool_calls", "tool_use"}, {"stop_string", "stop_sequence"}};
    for (int i = 0; i < 4; i++) {
        y = reply("msg_3", "", "", 0, fin[i][0]);
        CHECK(streq(ant_stop_reason(&y), fin[i][1]));
    }
    /* an empty reply: no blocks */
    ant_message_json(&w, &q, &y);
    d = parse_json(w.s, w.n);
    CHECK(d && js_count(d, js_get(d, d->root, "content")) == 0);
    js_free(d), jw_free(&w);
    ant_error_json(&w, ant_error_type(429), "busy \"now\"");
    d = parse_json(w.s, w.n);
    CHECK(d && streq(sget(d, d->root, "type"), "error") && streq(sget(d, js_get(d, d->root, "error"), "type"), "rate_limit_error") &&
          streq(sget(d, js_get(d, d->root, "error"), "message"), "busy \"now\""));
    js_free(d), jw_free(&w);
    CHECK(streq(ant_error_type(400), "invalid_request_error") && streq(ant_error_type(404), "not_found_error") &&
          streq(ant_error_type(500), "api_error") && streq(ant_error_type(503), "overloaded_error"));
    ant_count_json(&w, 42);
    CHECK(w.s && !strcmp(w.s, "{\"input_tokens\":42}"));
    jw_free(&w);
}

/* Checks an Anthropic event stream: message_start first; blocks opened,
 * fed and stopped in turn with indexes 0, 1, ...; deltas of the open
 * block's kind; message_delta then message_stop last. Gathers the
 * thinking and text and counts tool_use blocks. 1 when well formed. */
static int check_ant_stream(const char *s, size_t n, jw *thinking, jw *text, int *tools, const char **stop_reason_out, int allow_error) {
    const char *p = s, *end = s + n, *data;
    char name[64];
    size_t dn;
    int k = 0, open = -1, next = 0, state = 0, ok = 1, rc; /* state: 0 before start, 1 in message, 2 after message_delta, 3 stopped */
    char kind[32] = "";
    static char stop_reason[32];
    *tools = 0;
    while (ok && (rc = sse_next(&p, end, name, sizeof name, &data, &dn)) == 1) {
        js_doc *d = parse_json(data, dn);
        if (!d) { ok = 0; break; }
        int o = d->root, idx = (int)js_int(d, js_get(d, o, "index"));
        const char *t = sget(d, o, "type");
        ok &= streq(t, name);
        if (!strcmp(name, "message_start")) ok &= state == 0 && k == 0 && js_count(d, js_get(d, js_get(d, o, "message"), "content")) == 0, state = 1;
        else if (!strcmp(name, "content_block_start")) {
            int cb = js_get(d, o, "content_block");
            ok &= state == 1 && open < 0 && idx == next;
            open = idx, snprintf(kind, sizeof kind, "%s", sget(d, cb, "type") ? sget(d, cb, "type") : "");
            if (!strcmp(kind, "tool_use")) ++*tools, ok &= js_typeof(d, js_get(d, cb, "input")) == JS_OBJ && js_count(d, js_get(d, cb, "input")) == 0;
        } else if (!strcmp(name, "content_block_delta")) {
            int dl = js_get(d, o, "delta");
            const char *dt = sget(d, dl, "type");
            ok &= state == 1 && open == idx && dt != NULL;
            if (streq(dt, "thinking_delta")) ok &= !strcmp(kind, "thinking"), jw_lit(thinking, sget(d, dl, "thinking") ? sget(d, dl, "thinking") : "");
            else if (streq(dt, "signature_delta")) ok &= !strcmp(kind, "thinking") && sget(d, dl, "signature");
            else if (streq(dt, "text_delta")) ok &= !strcmp(kind, "text"), jw_lit(text, sget(d, dl, "text") ? sget(d, dl, "text") : "");
            else if (streq(dt, "input_json_delta")) {
                const char *pj = sget(d, dl, "partial_json");
                js_doc *a = pj ? js_parse(pj, strlen(pj), NULL, 0) : NULL;
                ok &= !strcmp(kind, "tool_use") && a && js_typeof(a, a->root) == JS_OBJ;
                js_free(a);
            } else
                ok = 0;
        } else if (!strcmp(name, "content_block_stop")) ok &= state == 1 && open == idx, open = -1, next++;
        else if (!strcmp(name, "message_delta")) {
            ok &= state == 1 && open < 0 && js_typeof(d, js_get(d, js_get(d, o, "usage"), "output_tokens")) == JS_NUM;
            snprintf(stop_reason, sizeof stop_reason, "%s", sget(d, js_get(d, o, "delta"), "stop_reason") ? sget(d, js_get(d, o, "delta"), "stop_reason") : "");
            state = 2;
        } else if (!strcmp(name, "message_stop")) ok &= state == 2, state = 3;
        else if (!strcmp(name, "error") && allow_error) ok &= state == 1 && js_get(d, js_get(d, o, "error"), "message") >= 0, state = 3;
        else ok = 0;
        js_free(d);
        k++;
    }
    if (rc < 0) ok = 0;
    if (stop_reason_out) *stop_reason_out = stop_reason;
    return ok && state == 3 && p == end;
}

static void test_ant_stream(void) {
    ant_req q = {0};
    oai_reply y = reply("msg_s", "Let me think", "Hello \xc3\xa9", 2, "tool_calls");
    ant_stream s;
    jw w = {0};
    ant_stream_start(&s, &w, &q, &y);
    ant_stream_delta(&s, &w, "Let me ", 7, NULL, 0);
    ant_stream_delta(&s, &w, "think", 5, "Hel", 3); /* the thinking block closes where the text begins */
    ant_stream_delta(&s, &w, NULL, 0, "lo \xc3\xa9", 5);
    ant_stream_finish(&s, &w, &y);
    jw th = {0}, tx = {0};
    int tools;
    const char *sr;
    CHECK(check_ant_stream(w.s, w.n, &th, &tx, &tools, &sr, 0));
    CHECK(th.s && !strcmp(th.s, "Let me think") && tx.s && !strcmp(tx.s, "Hello \xc3\xa9") && tools == 2 && streq(sr, "tool_use"));
    jw_free(&w), jw_free(&th), jw_free(&tx);
    /* text only, a stop string; an error mid-stream */
    y = reply("msg_t", "", "abc", 0, "stop_string");
    y.stop_seq = "##", y.stop_seq_len = 2;
    ant_stream_start(&s, &w, &q, &y);
    ant_stream_delta(&s, &w, NULL, 0, "abc", 3);
    ant_stream_finish(&s, &w, &y);
    CHECK(check_ant_stream(w.s, w.n, &th, &tx, &tools, &sr, 0) && tx.s && !strcmp(tx.s, "abc") && !th.n && streq(sr, "stop_sequence"));
    CHECK(strstr(w.s, "\"stop_sequence\":\"##\"") != NULL);
    jw_free(&w), jw_free(&th), jw_free(&tx);
    ant_stream_start(&s, &w, &q, &y);
    ant_stream_delta(&s, &w, "r", 1, NULL, 0);
    ant_stream_error(&w, "api_error", "the model failed");
    CHECK(check_ant_stream(w.s, w.n, &th, &tx, &tools, &sr, 1));
    jw_free(&w), jw_free(&th), jw_free(&tx);
    /* thinking omitted: the block is there, its text is not */
    q.omit_thinking = 1;
    y = reply("msg_u", "hidden", "shown", 0, "stop");
    ant_stream_start(&s, &w, &q, &y);
    ant_stream_delta(&s, &w, "hidden", 6, "shown", 5);
    ant_stream_finish(&s, &w, &y);
    CHECK(check_ant_stream(w.s, w.n, &th, &tx, &tools, &sr, 0) && !th.n && tx.s && !strcmp(tx.s, "shown") && strstr(w.s, "\"thinking\"") &&
          !strstr(w.s, "hidden"));
    jw_free(&w), jw_free(&th), jw_free(&tx);
}

/* oai_reply_of on a real output: the stop string that matched, the finish
 * reasons, and text moved into content when calls did not parse. */
static void test_reply_of(void) {
    oai_req r;
    char err[300];
    const char *body = J("{'messages':[{'role':'user','content':'x'}],'stop':['END','##'],'chat_template_kwargs':{'enable_thinking':true}}");
    CHECK(oai_parse_msg(body, strlen(body), 1, &LIM, &r, err, sizeof err) == 0);
    oai_out o;
    oai_out_init(&o, &r);
    const char *gen = "why</think>so ## and END";
    for (size_t i = 0; gen[i] && !o.stopped; i += 2) oai_out_put(&o, gen + i, gen[i + 1] ? 2 : 1);
    oai_out_finish(&o);
    oai_reply y = oai_reply_of(&o, NULL, 0, 0);
    CHECK(streq(y.finish, "stop_string") && y.stop_seq_len == 2 && !memcmp(y.stop_seq, "##", 2));
    CHECK(y.reasoning_len == 3 && !memcmp(y.reasoning, "why", 3) && y.content_len == 3 && !memcmp(y.content, "so ", 3));
    oai_out_free(&o);
    oai_out_init(&o, &r);
    oai_out_put(&o, "a</think>b", 10);
    oai_out_finish(&o);
    y = oai_reply_of(&o, NULL, 0, 1);
    CHECK(streq(y.finish, "length") && !y.stop_seq);
    y = oai_reply_of(&o, CALLS, 2, 1); /* cut after two complete calls: they are kept, the reply says it was cut */
    CHECK(streq(y.finish, "length") && y.ncalls == 2);
    y = oai_reply_of(&o, CALLS, 2, 0);
    CHECK(streq(y.finish, "tool_calls") && y.ncalls == 2);
    y = oai_reply_of(&o, NULL, -1, 0);
    CHECK(streq(y.finish, "stop") && y.ncalls == 0 && !y.calls);
    oai_out_free(&o);
    oai_req_free(&r);
}

/* ------------------------------------------------------------ Responses: requests */

static const char *TOOLS_RESP =
    "'tools':[{'type':'function','name':'get_weather','description':'Weather','parameters':{'type':'object','properties':{'city':{'type':'string'},"
    "'days':{'type':'integer'}},'required':['city']},'strict':true}]";

static void test_resp_requests(void) {
    CHECK(resp_same("basic",
                    J("{'model':'m','instructions':'Be brief.','input':'Hello','max_output_tokens':50,'temperature':0.2,'top_p':0.8,'stream':true,"
                      "'store':false,'metadata':{'k':'v'},'user':'u','prompt_cache_key':'p','truncation':'auto','include':['reasoning.encrypted_content'],"
                      "'service_tier':'auto','safety_identifier':'s','prompt_cache_retention':'24h','stream_options':{'include_obfuscation':false},"
                      "'background':false,'max_tool_calls':3,'top_logprobs':0}"),
                    NULL,
                    J("{'model':'m','messages':[{'role':'system','content':'Be brief.'},{'role':'user','content':'Hello'}],'max_tokens':50,"
                      "'temperature':0.2,'top_p':0.8,'stream':true}")));
    char *a = cat(J("{'model':'m','input':["
                    "{'role':'developer','content':'Use tools.'},"
                    "{'type':'message','role':'user','content':[{'type':'input_text','text':'Weather in '},{'type':'input_text','text':'Paris?'}]},"
                    "{'type':'reasoning','id':'rs_1','summary':[{'type':'summary_text','text':'sum'}],'content':[{'type':'reasoning_text','text':'need data'}]},"
                    "{'type':'message','id':'msg_1','role':'assistant','status':'completed','content':[{'type':'output_text','text':'Checking.','annotations':[]}]},"
                    "{'type':'function_call','id':'fc_1','call_id':'call_1','name':'get_weather','arguments':'{\\'city\\':\\'Paris\\'}','status':'completed'},"
                    "{'type':'function_call','call_id':'call_2','name':'get_weather','arguments':'{\\'city\\': \\'Lyon\\'}'},"
                    "{'type':'function_call_output','call_id':'call_1','output':'18C'},"
                    "{'type':'function_call_output','call_id':'call_2','output':[{'type':'input_text','text':'sunny'}]},"
                    "{'type':'reasoning','id':'rs_2','summary':[{'type':'summary_text','text':'a'},{'type':'summary_text','text':'b'}],'encrypted_content':null},"
                    "{'role':'assistant','content':'It is 18C.'},"
                    "{'role':'user','content':'Thanks'}],"
                    "'tool_choice':'auto','parallel_tool_calls':true,'reasoning':{'effort':'high','summary':'auto'},"
                    "'text':{'format':{'type':'text'},'verbosity':'low'},"),
                  J(TOOLS_RESP), "}");
    char *c = cat(J("{'model':'m','messages':["
                    "{'role':'developer','content':'Use tools.'},{'role':'user','content':'Weather in Paris?'},"
                    "{'role':'assistant','content':'Checking.','reasoning_content':'need data','tool_calls':["
                    "{'id':'call_1','type':'function','function':{'name':'get_weather','arguments':'{\\'city\\':\\'Paris\\'}'}},"
                    "{'id':'call_2','type':'function','function':{'name':'get_weather','arguments':'{\\'city\\': \\'Lyon\\'}'}}]},"
                    "{'role':'tool','tool_call_id':'call_1','content':'18C'},{'role':'tool','tool_call_id':'call_2','content':'sunny'},"
                    "{'role':'assistant','content':'It is 18C.','reasoning_content':'a\\n\\nb'},{'role':'user','content':'Thanks'}],"
                    "'tool_choice':'auto','parallel_tool_calls':true,'chat_template_kwargs':{'enable_thinking':true},'response_format':{'type':'text'},"),
                  J(TOOLS_CHAT), "}");
    CHECK(resp_same("items", a, NULL, c));
    free(a), free(c);
    /* calls without an assistant message before them: content null */
    a = cat(J("{'input':[{'role':'user','content':'go'},{'type':'function_call','call_id':'c1','name':'get_weather','arguments':'{}'},"
              "{'type':'function_call_output','call_id':'c1','output':'ok'}],"),
            J(TOOLS_RESP), "}");
    c = cat(J("{'messages':[{'role':'user','content':'go'},{'role':'assistant','content':null,'tool_calls':[{'id':'c1','type':'function',"
              "'function':{'name':'get_weather','arguments':'{}'}}]},{'role':'tool','tool_call_id':'c1','content':'ok'}],"),
            J(TOOLS_CHAT), "}");
    CHECK(resp_same("calls only", a, NULL, c));
    free(a), free(c);
    const char *opts[][2] = {
        {"'tool_choice':'required','parallel_tool_calls':false", "'tool_choice':'required','parallel_tool_calls':false"},
        {"'tool_choice':{'type':'function','name':'get_weather'}", "'tool_choice':{'type':'function','function':{'name':'get_weather'}}"},
        {"'tool_choice':'none'", "'tool_choice':'none'"},
        {"'reasoning':{'effort':'minimal'}", "'chat_template_kwargs':{'enable_thinking':false}"},
        {"'reasoning':{'effort':'none','summary':null}", "'chat_template_kwargs':{'enable_thinking':false}"},
        {"'reasoning':{'summary':'detailed'}", "'stream':false"},
        {"'text':{'format':{'type':'json_object'}}", "'response_format':{'type':'json_object'}"},
        {"'text':{'format':{'type':'json_schema','name':'out','strict':true,'schema':{'type':'object','properties':{'a':{'type':'integer'}}}}}",
         "'response_format':{'type':'json_schema','json_schema':{'name':'out','strict':true,'schema':{'type':'object','properties':{'a':{'type':'integer'}}}}}"},
    };
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++) {
        char *ab = cat(J("{'input':'hi',"), J(TOOLS_RESP), ",");
        char *ab2 = cat(ab, J(opts[i][0]), "}");
        char *cb = cat(J("{'messages':[{'role':'user','content':'hi'}],"), J(TOOLS_CHAT), ",");
        char *cb2 = cat(cb, J(opts[i][1]), "}");
        CHECK(resp_same(opts[i][0], ab2, NULL, cb2));
        free(ab), free(ab2), free(cb), free(cb2);
    }
}

static void test_resp_refusals(void) {
    char b[2048];
#define RB(fmt) (snprintf(b, sizeof b, "%s", J(fmt)), b)
    CHECK(resp_refused("{", NULL, "", "not valid JSON"));
    CHECK(resp_refused(RB("{'input':'x','foo':1}"), NULL, "foo", "unknown field"));
    CHECK(resp_refused(RB("{'model':'m'}"), NULL, "input", "required"));
    CHECK(resp_refused(RB("{'input':3}"), NULL, "input", "string or an array"));
    CHECK(resp_refused(RB("{'input':[{'role':'user','content':[{'type':'input_text','text':'a'},{'type':'input_image','image_url':'u'}]}]}"), NULL,
                       "input[0].content[1]", "\"input_image\" parts are not supported"));
    CHECK(resp_refused(RB("{'input':[{'role':'user','content':[{'type':'input_file','file_id':'f'}]}]}"), NULL, "input[0].content[0]",
                       "\"input_file\" parts"));
    CHECK(resp_refused(RB("{'input':[{'role':'user','content':'a'},{'type':'item_reference','id':'msg_1'}]}"), NULL, "input[1]", "item_reference"));
    CHECK(resp_refused(RB("{'input':[{'type':'web_search_call','id':'w','status':'completed'}]}"), NULL, "input[0]", "\"web_search_call\" items"));
    CHECK(resp_refused(RB("{'input':[{'role':'critic','content':'a'}]}"), NULL, "input[0].role", "must be one of"));
    CHECK(resp_refused(RB("{'input':[{'role':'user','content':'a','name':'n'}]}"), NULL, "input[0].name", "unknown field"));
    CHECK(resp_refused(RB("{'input':[{'type':'function_call','call_id':'c','name':'f','arguments':'{oops'}]}"), NULL, "input[0].arguments", "JSON object"));
    CHECK(resp_refused(RB("{'input':[{'type':'function_call','call_id':'c','name':'f\\ng','arguments':'{}'}]}"), NULL, "input[0].name", "one line"));
    CHECK(resp_refused(RB("{'input':[{'type':'reasoning','id':'r','summary':[{'type':'reasoning_text','text':'a'}]}]}"), NULL, "input[0].summary[0]",
                       "summary_text"));
    CHECK(resp_refused(RB("{'input':'x','tools':[{'type':'function','name':'f','parameters':{}},{'type':'web_search'}]}"), NULL, "tools[1]",
                       "built-in tool \"web_search\""));
    CHECK(resp_refused(RB("{'input':'x','tools':[{'type':'custom','name':'apply_patch'}]}"), NULL, "tools[0]", "\"custom\""));
    CHECK(resp_refused(RB("{'input':'x','tools':[{'type':'function','name':'f','parameters':{},'bogus':1}]}"), NULL, "tools[0].bogus", "unknown field"));
    CHECK(resp_refused(RB("{'input':'x','tool_choice':{'type':'web_search_preview'}}"), NULL, "tool_choice", "not supported"));
    CHECK(resp_refused(RB("{'input':'x','tool_choice':'any'}"), NULL, "tool_choice", "not one of"));
    CHECK(resp_refused(RB("{'input':'x','tool_choice':'required'}"), NULL, "tool_choice", "needs tools"));
    CHECK(resp_refused(RB("{'input':'x','tools':[{'type':'function','name':'f'}],'tool_choice':{'type':'function','name':'g'}}"), NULL,
                       "tool_choice.name", "\"g\" is not one of the tools"));
    CHECK(resp_refused(RB("{'input':'x','background':true}"), NULL, "background", "not supported"));
    CHECK(resp_refused(RB("{'input':'x','conversation':'conv_1'}"), NULL, "conversation", "previous_response_id"));
    CHECK(resp_refused(RB("{'input':'x','prompt':{'id':'p'}}"), NULL, "prompt", "not supported"));
    CHECK(resp_refused(RB("{'input':'x','include':['reasoning.encrypted_content','bogus']}"), NULL, "include[1]", "include value"));
    CHECK(resp_refused(RB("{'input':'x','max_output_tokens':0}"), NULL, "max_output_tokens", "outside"));
    CHECK(resp_refused(RB("{'input':'x','max_output_tokens':4097}"), NULL, "max_output_tokens", "outside"));
    CHECK(resp_refused(RB("{'input':'x','temperature':3}"), NULL, "temperature", "outside"));
    CHECK(resp_refused(RB("{'input':'x','truncation':'middle'}"), NULL, "truncation", "auto, disabled"));
    CHECK(resp_refused(RB("{'input':'x','metadata':{'k':1}}"), NULL, "metadata.k", "string"));
    CHECK(resp_refused(RB("{'input':'x','store':'yes'}"), NULL, "store", "true or false"));
    CHECK(resp_refused(RB("{'input':'x','reasoning':{'effort':'extreme'}}"), NULL, "reasoning.effort", "one of"));
    CHECK(resp_refused(RB("{'input':'x','text':{'format':{'type':'xml'}}}"), NULL, "text.format.type", "not one of"));
    CHECK(resp_refused(RB("{'input':'x','text':{'format':{'type':'json_schema','schema':{}}}}"), NULL, "text.format.name", "string"));
    CHECK(resp_refused(RB("{'input':'x','previous_response_id':'resp_nope'}"), NULL, "previous_response_id",
                       "Previous response with id 'resp_nope' not found."));
    char big[4096] = "{'input':[";
    for (int i = 0; i < LIM.max_messages; i++) snprintf(big + strlen(big), sizeof big - strlen(big), "%s{'role':'user','content':'x'}", i ? "," : "");
    snprintf(big + strlen(big), sizeof big - strlen(big), "],'instructions':'I'}");
    CHECK(resp_refused(J(big), NULL, "input", "at most"));
#undef RB
}

/* previous_response_id: the stored conversation (without the earlier
 * instructions) continues, with this request's instructions first. */
static void test_resp_chain(void) {
    resp_store st;
    CHECK(resp_store_init(&st, 8, 1 << 20) == 0);
    resp_req rq;
    char err[300], param[100];
    char *b1 = cat(J("{'model':'m','instructions':'I1','input':'Hi',"), J(TOOLS_RESP), "}");
    CHECK(resp_parse(b1, strlen(b1), &LIM, &st, &rq, err, sizeof err, param, sizeof param) == 0);
    oai_call call = {"get_weather", "{\"city\":\"Rome\"}"};
    oai_reply y = reply("resp_A", "r1", "Hello!", 0, "tool_calls");
    y.calls = &call, y.ncalls = 1;
    CHECK(rq.store && resp_store_reply(&st, &rq, &y) == 0);
    resp_req_free(&rq);
    char *b2 = cat(J("{'model':'m','instructions':'I2','previous_response_id':'resp_A','input':[{'type':'function_call_output','call_id':'call_A_0',"
                     "'output':'20C'}],"),
                   J(TOOLS_RESP), "}");
    char *c2 = cat(J("{'model':'m','messages':[{'role':'system','content':'I2'},{'role':'user','content':'Hi'},{'role':'assistant','content':'Hello!',"
                     "'reasoning_content':'r1','tool_calls':[{'id':'call_A_0','type':'function','function':{'name':'get_weather',"
                     "'arguments':'{\\'city\\':\\'Rome\\'}'}}]},{'role':'tool','tool_call_id':'call_A_0','content':'20C'}],"),
                   J(TOOLS_CHAT), "}");
    CHECK(resp_same("previous_response_id", b2, &st, c2));
    CHECK(resp_parse(b2, strlen(b2), &LIM, &st, &rq, err, sizeof err, param, sizeof param) == 0);
    y = reply("resp_B", "", "It is 20C.", 0, "stop");
    CHECK(resp_store_reply(&st, &rq, &y) == 0);
    resp_req_free(&rq);
    const char *b3 = J("{'model':'m','previous_response_id':'resp_B','input':'And tomorrow?'}");
    char *c3 = cat(J("{'model':'m','messages':[{'role':'user','content':'Hi'},{'role':'assistant','content':'Hello!','reasoning_content':'r1',"
                     "'tool_calls':[{'id':'call_A_0','type':'function','function':{'name':'get_weather','arguments':'{\\'city\\':\\'Rome\\'}'}}]},"
                     "{'role':'tool','tool_call_id':'call_A_0','content':'20C'},{'role':'assistant','content':'It is 20C.'},"
                     "{'role':'user','content':'And tomorrow?'}]"),
                   "", "}");
    CHECK(resp_same("a chain of three", b3, &st, c3));
    /* store: false is remembered; resp_store_reply is the caller's to skip */
    const char *b4 = J("{'previous_response_id':'resp_B','store':false}");
    CHECK(resp_parse(b4, strlen(b4), &LIM, &st, &rq, err, sizeof err, param, sizeof param) == 0 && !rq.store);
    resp_req_free(&rq);
    /* evicted: no longer found */
    for (int i = 0; i < 8; i++) {
        char id[16];
        snprintf(id, sizeof id, "resp_x%d", i);
        CHECK(resp_store_put(&st, id, "[]", 2) == 0);
    }
    CHECK(resp_refused(b3, &st, "previous_response_id", "Previous response with id 'resp_B' not found."));
    free(b1), free(b2), free(c2), free(c3);
    resp_store_free(&st);
}

static int has(resp_store *s, const char *id) {
    size_t n;
    char *t = resp_store_get(s, id, &n);
    free(t);
    return t != NULL;
}

static void *store_worker(void *arg) {
    resp_store *s = (resp_store *)arg;
    char id[16], text[64];
    uint64_t x = (uint64_t)(uintptr_t)&id;
    for (int i = 0; i < 3000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        snprintf(id, sizeof id, "r%d", (int)(x % 20));
        if (x & 1) {
            size_t n = (size_t)(x >> 8) % 60;
            memset(text, 'a' + (int)(x % 26), n);
            resp_store_put(s, id, text, n);
        } else {
            size_t n;
            free(resp_store_get(s, id, &n));
        }
    }
    return NULL;
}

/* The store's bounds: count and bytes, least recently used first. */
static void test_store(void) {
    resp_store s;
    CHECK(resp_store_init(&s, 3, 100) == 0);
    CHECK(resp_store_put(&s, "a", "[1]", 3) == 0 && resp_store_put(&s, "b", "[2]", 3) == 0 && resp_store_put(&s, "c", "[3]", 3) == 0);
    CHECK(has(&s, "a")); /* a is now more recent than b */
    CHECK(resp_store_put(&s, "d", "[4]", 3) == 0);
    CHECK(!has(&s, "b") && has(&s, "a") && has(&s, "c") && has(&s, "d") && s.n == 3 && s.bytes == 12);
    size_t n = 0;
    char *t = resp_store_get(&s, "d", &n);
    CHECK(t && n == 3 && !strcmp(t, "[4]"));
    free(t);
    CHECK(resp_store_put(&s, "c", "[33]", 4) == 0 && s.n == 3 && s.bytes == 13); /* replaced, not added */
    char big[128];
    memset(big, 'x', sizeof big);
    CHECK(resp_store_put(&s, "e", big, 100) == -1 && s.n == 3); /* alone over the bytes: refused, nothing evicted */
    CHECK(resp_store_put(&s, "e", big, 90) == 0); /* 91 bytes: the others go, oldest first, until it fits */
    CHECK(has(&s, "e") && s.bytes <= 100 && s.n <= 3 && !has(&s, "a"));
    resp_store_free(&s);
    /* concurrent puts and gets keep the bounds (and TSan quiet) */
    CHECK(resp_store_init(&s, 8, 300) == 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, store_worker, &s);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    size_t sum = 0;
    for (int i = 0; i < s.n; i++) sum += strlen(s.e[i].id) + s.e[i].n;
    CHECK(s.n <= 8 && s.bytes <= 300 && sum == s.bytes);
    resp_store_free(&s);
}

/* ------------------------------------------------------------ Responses: replies */

static void test_resp_response(void) {
    resp_req rq;
    char err[300], param[100];
    char *body = cat(J("{'model':'m','input':'x','instructions':'I','metadata':{'k':'v'},'store':false,'tool_choice':'auto','temperature':0.3,"
                       "'reasoning':{'effort':'high'},"),
                     J(TOOLS_RESP), "}");
    CHECK(resp_parse(body, strlen(body), &LIM, NULL, &rq, err, sizeof err, param, sizeof param) == 0);
    oai_reply y = reply("resp_1", "plan", "It is \"18C\".", 2, "tool_calls");
    jw w = {0};
    resp_response_json(&w, &rq, &y);
    js_doc *d = parse_json(w.s, w.n);
    CHECK(d != NULL);
    if (d) {
        int o = d->root, out = js_get(d, o, "output"), u = js_get(d, o, "usage");
        const char *req[] = {"id", "object", "created_at", "model", "output", "parallel_tool_calls", "tool_choice", "tools", "status", "error",
                             "incomplete_details", "instructions", "metadata", "temperature", "top_p", "usage", "text", "reasoning", "store"};
        for (size_t i = 0; i < sizeof req / sizeof *req; i++) CHECK(js_get(d, o, req[i]) >= 0);
        CHECK(streq(sget(d, o, "object"), "response") && streq(sget(d, o, "status"), "completed") && streq(sget(d, o, "instructions"), "I"));
        CHECK(js_typeof(d, js_get(d, o, "store")) == JS_FALSE && streq(sget(d, js_get(d, o, "metadata"), "k"), "v"));
        CHECK(js_num(d, js_get(d, o, "temperature")) == 0.3 && streq(sget(d, js_get(d, o, "reasoning"), "effort"), "high"));
        int tl = js_get(d, o, "tools");
        CHECK(js_count(d, tl) == 1 && streq(sget(d, js_at(d, tl, 0), "name"), "get_weather") && streq(sget(d, js_at(d, tl, 0), "type"), "function"));
        CHECK(js_count(d, out) == 4);
        int r = js_at(d, out, 0), m = js_at(d, out, 1), f0 = js_at(d, out, 2), f1 = js_at(d, out, 3);
        CHECK(streq(sget(d, r, "type"), "reasoning") && streq(sget(d, js_at(d, js_get(d, r, "content"), 0), "text"), "plan"));
        CHECK(streq(sget(d, m, "type"), "message") && streq(sget(d, m, "status"), "completed") && streq(sget(d, m, "role"), "assistant"));
        int part = js_at(d, js_get(d, m, "content"), 0);
        CHECK(streq(sget(d, part, "type"), "output_text") && streq(sget(d, part, "text"), "It is \"18C\".") &&
              js_typeof(d, js_get(d, part, "annotations")) == JS_ARR);
        CHECK(streq(sget(d, f0, "type"), "function_call") && streq(sget(d, f0, "arguments"), CALLS[0].args) && streq(sget(d, f0, "call_id"), "call_1_0"));
        CHECK(streq(sget(d, f1, "call_id"), "call_1_1") && streq(sget(d, f1, "id"), "fc_1_1") && streq(sget(d, f0, "status"), "completed"));
        CHECK(js_int(d, js_get(d, u, "input_tokens")) == 30 && js_int(d, js_get(d, u, "output_tokens")) == 9 &&
              js_int(d, js_get(d, u, "total_tokens")) == 39 && js_int(d, js_get(d, js_get(d, u, "input_tokens_details"), "cached_tokens")) == 12 &&
              js_int(d, js_get(d, js_get(d, u, "output_tokens_details"), "reasoning_tokens")) == 3);
        js_free(d);
    }
    jw_free(&w);
    /* the token limit: incomplete; an empty reply still has its message */
    y = reply("resp_2", "", "", 0, "length");
    resp_response_json(&w, &rq, &y);
    d = parse_json(w.s, w.n);
    CHECK(d && streq(sget(d, d->root, "status"), "incomplete") &&
          streq(sget(d, js_get(d, d->root, "incomplete_details"), "reason"), "max_output_tokens"));
    int m = d ? js_at(d, js_get(d, d->root, "output"), 0) : -1;
    CHECK(d && js_count(d, js_get(d, d->root, "output")) == 1 && streq(sget(d, m, "status"), "incomplete") &&
          streq(sget(d, js_at(d, js_get(d, m, "content"), 0), "text"), ""));
    js_free(d), jw_free(&w);
    resp_req_free(&rq);
    free(body);
}

/* Checks a Responses event stream: "type" equals the event name, sequence
 * numbers count from 0, response.created first, items added with output
 * indexes 0, 1, ... and each done before the next is added, every content
 * event naming the open item, deltas adding up to the .done text, and the
 * final response (completed, incomplete or failed) last. Returns the
 * final event's response document (malloc'd) or NULL. */
static char *check_resp_stream(const char *s, size_t n, jw *reasoning, jw *text, int *calls) {
    const char *p = s, *end = s + n, *data;
    char name[80], item[128] = "", *final = NULL;
    size_t dn;
    long long seq = 0;
    int ok = 1, rc, open = -1, next = 0, ended = 0;
    jw cur = {0};
    *calls = 0;
    while (ok && !ended && (rc = sse_next(&p, end, name, sizeof name, &data, &dn)) == 1) {
        js_doc *d = parse_json(data, dn);
        if (!d) { ok = 0; break; }
        int o = d->root, oi = (int)js_int(d, js_get(d, o, "output_index"));
        ok &= streq(sget(d, o, "type"), name) && js_is_int(d, js_get(d, o, "sequence_number")) && js_int(d, js_get(d, o, "sequence_number")) == seq++;
        if (seq == 1) ok &= !strcmp(name, "response.created");
        if (!strcmp(name, "response.created") || !strcmp(name, "response.in_progress")) {
            int r = js_get(d, o, "response");
            ok &= seq <= 2 && streq(sget(d, r, "status"), "in_progress") && js_count(d, js_get(d, r, "output")) == 0;
        } else if (!strcmp(name, "response.output_item.added")) {
            int it = js_get(d, o, "item");
            ok &= open < 0 && oi == next && sget(d, it, "id");
            open = oi, cur.n = 0, snprintf(item, sizeof item, "%s", sget(d, it, "id") ? sget(d, it, "id") : "");
            if (streq(sget(d, it, "type"), "function_call")) ++*calls, ok &= streq(sget(d, it, "arguments"), "");
        } else if (!strcmp(name, "response.output_item.done")) {
            int it = js_get(d, o, "item");
            ok &= open == oi && streq(sget(d, it, "id"), item);
            const char *ty = sget(d, it, "type");
            if (streq(ty, "message")) ok &= cur.n == strlen(sget(d, js_at(d, js_get(d, it, "content"), 0), "text")), jw_raw(text, cur.s ? cur.s : "", cur.n);
            else if (streq(ty, "reasoning")) ok &= cur.n == strlen(sget(d, js_at(d, js_get(d, it, "content"), 0), "text")), jw_raw(reasoning, cur.s ? cur.s : "", cur.n);
            else if (streq(ty, "function_call")) ok &= streq(sget(d, it, "arguments"), cur.s ? cur.s : "") && streq(sget(d, it, "status"), "completed");
            open = -1, next++;
        } else if (!strcmp(name, "response.content_part.added") || !strcmp(name, "response.content_part.done") ||
                   strstr(name, ".delta") || strstr(name, "_text.done") || !strcmp(name, "response.function_call_arguments.done")) {
            ok &= open == oi && streq(sget(d, o, "item_id"), item);
            const char *dl = sget(d, o, "delta");
            if (dl) jw_lit(&cur, dl);
            if (strstr(name, "_text.done")) ok &= streq(sget(d, o, "text"), cur.s ? cur.s : "");
            if (!strcmp(name, "response.function_call_arguments.done")) ok &= streq(sget(d, o, "arguments"), cur.s ? cur.s : "");
            if (strstr(name, "content_part")) ok &= js_get(d, o, "content_index") >= 0;
        } else if (!strcmp(name, "response.completed") || !strcmp(name, "response.incomplete") || !strcmp(name, "response.failed")) {
            jw r = {0};
            jw_node(&r, d, js_get(d, o, "response"), 0);
            final = r.s, ended = 1;
            ok &= open < 0 || !strcmp(name, "response.failed");
        } else if (!strcmp(name, "error"))
            ok &= js_get(d, o, "message") >= 0 && js_get(d, o, "param") >= 0;
        else
            ok = 0;
        js_free(d);
    }
    jw_free(&cur);
    if (!ok || p != end || !ended) {
        fprintf(stderr, "bad stream near event %lld (%s)\n", seq - 1, name);
        free(final);
        return NULL;
    }
    return final;
}

/* The stream for reply y fed as the deltas, and the document it ends with
 * compared to the non-streaming one (written back compactly, both). */
static int resp_stream_ok(const resp_req *rq, const oai_reply *y, const char *const *rd, const char *const *cd, int nd, jw *w) {
    resp_stream s;
    resp_stream_start(&s, w, rq, y);
    for (int i = 0; i < nd; i++) resp_stream_delta(&s, w, rd[i], rd[i] ? strlen(rd[i]) : 0, cd[i], cd[i] ? strlen(cd[i]) : 0);
    resp_stream_finish(&s, w, rq, y);
    resp_stream_free(&s);
    jw r = {0}, t = {0}, doc = {0};
    int calls, ok = 0;
    char *final = check_resp_stream(w->s, w->n, &r, &t, &calls);
    if (final) {
        resp_response_json(&doc, rq, y);
        js_doc *dd = parse_json(doc.s, doc.n);
        jw again = {0};
        if (dd) jw_node(&again, dd, dd->root, 0);
        ok = again.s && !strcmp(final, again.s) && r.n == y->reasoning_len && (!r.n || !memcmp(r.s, y->reasoning, r.n)) && t.n == y->content_len &&
             (!t.n || !memcmp(t.s, y->content, t.n)) && calls == y->ncalls;
        if (!ok) fprintf(stderr, "stream and document differ:\n%s\n%s\n", final, again.s ? again.s : "(none)");
        js_free(dd), jw_free(&again);
    }
    free(final), jw_free(&r), jw_free(&t), jw_free(&doc);
    return ok;
}

static void test_resp_stream(void) {
    resp_req rq;
    char err[300], param[100];
    char *body = cat(J("{'model':'m','input':'x','stream':true,"), J(TOOLS_RESP), "}");
    CHECK(resp_parse(body, strlen(body), &LIM, NULL, &rq, err, sizeof err, param, sizeof param) == 0 && rq.stream);
    jw w = {0};
    oai_reply y = reply("resp_s", "Let me think", "Hello \xc3\xa9", 2, "tool_calls");
    const char *rd[] = {"Let me ", "think", NULL}, *cd[] = {NULL, "Hel", "lo \xc3\xa9"};
    CHECK(resp_stream_ok(&rq, &y, rd, cd, 3, &w));
    jw_free(&w);
    y = reply("resp_t", "", "cut sho", 0, "length");
    const char *rd2[] = {NULL, NULL}, *cd2[] = {"cut ", "sho"};
    CHECK(resp_stream_ok(&rq, &y, rd2, cd2, 2, &w));
    CHECK(strstr(w.s, "event: response.incomplete\n") != NULL);
    jw_free(&w);
    y = reply("resp_u", "", "", 0, "stop"); /* nothing generated: one empty message item */
    CHECK(resp_stream_ok(&rq, &y, NULL, NULL, 0, &w));
    jw_free(&w);
    y = reply("resp_v", "only thought", "", 0, "length");
    const char *rd3[] = {"only ", "thought"}, *cd3[] = {NULL, NULL};
    CHECK(resp_stream_ok(&rq, &y, rd3, cd3, 2, &w));
    jw_free(&w);
    /* an error mid-stream: error, then response.failed */
    resp_stream s;
    y = reply("resp_w", "", "", 0, "stop");
    resp_stream_start(&s, &w, &rq, &y);
    resp_stream_delta(&s, &w, NULL, 0, "par", 3);
    resp_stream_error(&s, &w, &rq, &y, "the model failed");
    resp_stream_free(&s);
    jw r = {0}, t = {0};
    int calls;
    char *final = check_resp_stream(w.s, w.n, &r, &t, &calls);
    CHECK(final && strstr(final, "\"status\":\"failed\"") && strstr(final, "the model failed") && strstr(w.s, "event: error\n"));
    free(final), jw_free(&r), jw_free(&t), jw_free(&w);
    resp_req_free(&rq);
    free(body);
}

/* ------------------------------------------------------------ samples for the SDK test */

static void write_file(const char *dir, const char *name, const jw *w) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(w->s, 1, w->n, f) == w->n);
    if (f) fclose(f);
}

static void write_samples(const char *dir) {
    jw w = {0};
    ant_req q = {0};
    oai_reply y = reply("msg_1", "plan", "It is \"18C\".", 2, "tool_calls");
    ant_stream as;
    ant_message_json(&w, &q, &y), write_file(dir, "ant_message.json", &w), jw_free(&w);
    ant_stream_start(&as, &w, &q, &y);
    ant_stream_delta(&as, &w, "pl", 2, NULL, 0);
    ant_stream_delta(&as, &w, "an", 2, "It is ", 6);
    ant_stream_delta(&as, &w, NULL, 0, "\"18C\".", 6);
    ant_stream_finish(&as, &w, &y), write_file(dir, "ant_stream.txt", &w), jw_free(&w);
    y = reply("msg_2", "", "abc", 0, "stop_string");
    y.stop_seq = "END", y.stop_seq_len = 3;
    ant_message_json(&w, &q, &y), write_file(dir, "ant_stop.json", &w), jw_free(&w);
    ant_stream_start(&as, &w, &q, &y);
    ant_stream_delta(&as, &w, NULL, 0, "ab", 2);
    ant_stream_error(&w, "api_error", "the model failed"), write_file(dir, "ant_stream_error.txt", &w), jw_free(&w);
    ant_error_json(&w, "invalid_request_error", "messages[0].content[1]: \"image\" blocks are not supported"), write_file(dir, "ant_error.json", &w), jw_free(&w);
    ant_count_json(&w, 42), write_file(dir, "ant_count.json", &w), jw_free(&w);

    resp_req rq;
    char err[300], param[100];
    char *body = cat(J("{'model':'m','input':'x','instructions':'I','metadata':{'k':'v'},'reasoning':{'effort':'high','summary':'auto'},"
                       "'text':{'format':{'type':'text'}},"),
                     J(TOOLS_RESP), "}");
    CHECK(resp_parse(body, strlen(body), &LIM, NULL, &rq, err, sizeof err, param, sizeof param) == 0);
    y = reply("resp_1", "plan", "It is \"18C\".", 2, "tool_calls");
    resp_response_json(&w, &rq, &y), write_file(dir, "resp_response.json", &w), jw_free(&w);
    resp_stream rs;
    resp_stream_start(&rs, &w, &rq, &y);
    resp_stream_delta(&rs, &w, "pl", 2, NULL, 0);
    resp_stream_delta(&rs, &w, "an", 2, "It is ", 6);
    resp_stream_delta(&rs, &w, NULL, 0, "\"18C\".", 6);
    resp_stream_finish(&rs, &w, &rq, &y), write_file(dir, "resp_stream.txt", &w), jw_free(&w);
    resp_stream_free(&rs);
    y = reply("resp_2", "", "cut", 0, "length");
    resp_response_json(&w, &rq, &y), write_file(dir, "resp_incomplete.json", &w), jw_free(&w);
    resp_stream_start(&rs, &w, &rq, &y);
    resp_stream_delta(&rs, &w, NULL, 0, "cut", 3);
    resp_stream_finish(&rs, &w, &rq, &y), write_file(dir, "resp_stream_incomplete.txt", &w), jw_free(&w);
    resp_stream_free(&rs);
    resp_stream_start(&rs, &w, &rq, &y);
    resp_stream_delta(&rs, &w, NULL, 0, "cu", 2);
    resp_stream_error(&rs, &w, &rq, &y, "the model failed"), write_file(dir, "resp_stream_error.txt", &w), jw_free(&w);
    resp_stream_free(&rs);
    oai_error_json(&w, "Previous response with id 'resp_x' not found.", "invalid_request_error", "previous_response_id", NULL);
    write_file(dir, "resp_error.json", &w), jw_free(&w);
    resp_req_free(&rq);
    free(body);
}

/* --translate: stdin's body through a front, then oai_parse. */
static int translate_stdin(const char *kind) {
    jw in = {0};
    char buf[4096], err[400], param[200];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) jw_raw(&in, buf, n);
    ant_req q = {0};
    resp_req rq = {0};
    const jw *chat = NULL;
    int rc;
    if (!strcmp(kind, "responses")) rc = resp_parse(in.s ? in.s : "", in.n, &LIM, NULL, &rq, err, sizeof err, param, sizeof param), chat = &rq.chat;
    else rc = ant_parse(in.s ? in.s : "", in.n, strcmp(kind, "count_tokens") ? ANT_MESSAGES : ANT_COUNT_TOKENS, &LIM, &q, err, sizeof err, param, sizeof param), chat = &q.chat;
    oai_req r = {0};
    if (!rc && oai_parse_msg(chat->s, chat->n, 1, &LIM, &r, err, sizeof err)) rc = -1, snprintf(param, sizeof param, "(chat)");
    if (rc) printf("%s: %s\n", param, err);
    else printf("%s\n", chat->s);
    oai_req_free(&r), ant_req_free(&q), resp_req_free(&rq), jw_free(&in);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--translate")) return translate_stdin(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--write")) {
        write_samples(argv[2]);
        return check_report("test_fronts --write");
    }
    test_ant_requests();
    test_ant_refusals();
    test_ant_message();
    test_ant_stream();
    test_reply_of();
    test_resp_requests();
    test_resp_refusals();
    test_resp_chain();
    test_store();
    test_resp_response();
    test_resp_stream();
    return check_report("test_fronts");
}
