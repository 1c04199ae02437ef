/* env.h — the registry of every environment knob colibri reads: name, type,
 * default, accepted range, one line of documentation. The engine resolves
 * each knob once at startup through env_parse (strict: the whole string must
 * be a value in range) and passes plain values on; nothing else reads the
 * environment. ENVIRONMENT.md carries the same table (a test compares it
 * with env_write_table). Prefix: env_. Must not: be read anywhere but the
 * run modes (colibri.c), which pass plain values on. */
#ifndef COLI_ENV_H
#define COLI_ENV_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { ENV_KIND_INT, ENV_KIND_FLOAT, ENV_KIND_BOOL, ENV_KIND_STR, ENV_KIND_CHOICE, ENV_KIND_FLOAT_OR, ENV_KIND_TEXT } env_kind;

typedef struct {
    const char *name;
    env_kind kind;
    const char *def;      /* default as text; NULL = unset */
    double lo, hi;        /* inclusive range for INT/FLOAT */
    const char *choices;  /* "a|b|c" for CHOICE */
    const char *doc;
} env_knob;

/* The registry, as one list expanded twice: into the knob ids (ENV_<NAME>,
 * so a misspelt knob does not compile) and into the table env_knobs[].
 * INT(name, default, lo, hi, doc), FLOAT(...), BOOL(name, default, doc),
 * STR(name, default, doc): non-empty text (a path, a name: empty would only
 * ever be a mistake), TEXT(name, default, doc): any text, empty included
 * (where empty means something, said in doc), CHOICE(name, default, "a|b",
 * doc), FLOAT_OR(name, default, lo, hi, word, doc): a number in range, or
 * one word (parsed as i = 1). Numbers are plain decimal (env_decimal_). */
#define ENV_REGISTRY(INT, FLOAT, BOOL, STR, CHOICE, FLOAT_OR, TEXT) \
    TEXT(PROMPT, NULL, \
        "Text to continue; unset = run the oracle self-test against the model directory's ref.json; empty = an empty user turn (refused with CHAT_TEMPLATE=0).") \
    TEXT(SYSTEM, NULL, \
        "System message placed before the prompt by the chat template; empty = an empty system message (Kimi K2: instead of its default one).") \
    BOOL(CHAT_TEMPLATE, "1", \
        "1 = wrap PROMPT in the model's chat template (GLM-5, DeepSeek-V3/R1/V3.1, Kimi K2); 0 = tokenize PROMPT as is.") \
    BOOL(THINK, "0", \
        "1 = open the reply with <think> (thinking); 0 = with </think> (GLM-5, DeepSeek-V3.1; R1 always thinks).") \
    INT(NGEN, "256", 1, 1048576, \
        "Maximum generated tokens (generation also stops at a stop token or when CTX is full).") \
    FLOAT(TEMP, NULL, 0, 100, \
        "Sampling temperature; 0 = greedy. Unset = generation_config.json (greedy if it does not sample).") \
    FLOAT(TEMPERATURE, NULL, 0, 100, \
        "The same as TEMP, and wins over it: for Windows, where TEMP names the temporary directory.") \
    INT(TOP_K, NULL, 0, 16777216, \
        "Keep the K most likely tokens; 0 = off. Unset = generation_config.json.") \
    FLOAT(TOP_P, NULL, 0, 1, \
        "Nucleus sampling: keep the most likely tokens up to this probability mass. Unset = generation_config.json.") \
    FLOAT(MIN_P, NULL, 0, 1, \
        "Drop tokens less likely than MIN_P times the most likely one. Unset = generation_config.json.") \
    INT(SEED, NULL, 0, 9007199254740991.0, \
        "Random seed for sampling; unset = from the clock (the seed used is printed).") \
    BOOL(TOKENS, "0", \
        "1 = print the prompt and generated token ids on stderr.") \
    BOOL(CHAT, "0", \
        "1 = chat at the terminal (as --chat): each line of stdin is a user turn, the KV cache kept between turns; Ctrl-C stops an answer; /save, /load, /reset, /quit.") \
    STR(KV_LOAD, NULL, \
        "Resume a conversation saved by KV_SAVE: its tokens and KV cache are loaded and only the new prompt is prefilled (with the chat template, as a follow-up user turn).") \
    STR(KV_SAVE, NULL, \
        "Save the conversation (tokens and KV cache) to this file at the end of the run, atomically, for KV_LOAD or SESSION.") \
    STR(SESSION, NULL, \
        "KV_LOAD and KV_SAVE on one file: resumed when it exists, started when it does not, saved at the end.") \
    STR(GRAMMAR, NULL, \
        "A GBNF grammar file (llama.cpp's syntax, start rule root): every answer is a sentence of it; tokens that cannot continue it are masked, forced ones batched.") \
    STR(JSON_SCHEMA, NULL, \
        "A JSON schema file (the subset in docs/grammar.md): every answer is JSON that validates against it (as GRAMMAR, with the grammar written from the schema).") \
    BOOL(GRAMMAR_BATCH, "1", \
        "1 = feed the tokens a grammar forces in one forward with the sampled token before them; 0 = one forward per token (the same tokens, for comparison).") \
    BOOL(GRAMMAR_DRAFT, "0", \
        "1 = GRAMMAR / JSON_SCHEMA do not constrain: the tokens the grammar would force are drafts the model verifies in one forward; the output is the unconstrained model's, token for token.") \
    BOOL(SERVE, "0", \
        "1 = serve the OpenAI-compatible HTTP API (as --serve) on COLI_HOST:COLI_PORT until SIGTERM or Ctrl-C.") \
    STR(COLI_HOST, "127.0.0.1", \
        "Serve mode: the address to listen on (a name or a numeric IPv4/IPv6 address). Anything but loopback without COLI_API_KEY is named at startup.") \
    INT(COLI_PORT, "8080", 0, 65535, \
        "Serve mode: the TCP port; 0 = any free port (the startup line says which).") \
    TEXT(HOST, NULL, \
        "Not read (some shells export the machine's name as HOST): serve mode listens on COLI_HOST; set without it (empty = set too), serve mode says so.") \
    TEXT(PORT, NULL, \
        "Not read (platforms set it for their own servers): serve mode listens on COLI_PORT; set without it (empty = set too), serve mode says so.") \
    STR(COLI_API_KEY, NULL, \
        "Serve mode: API keys (comma-separated) a request must carry as 'Authorization: Bearer KEY' or 'x-api-key: KEY' (401 otherwise); GET /health and the chat page stay open.") \
    STR(COLI_API_KEY_FILE, NULL, \
        "Serve mode: a file of API keys, one per line (# comments and blank lines ignored), so keys stay out of ps and shell history; joins COLI_API_KEY.") \
    STR(COLI_CORS, NULL, \
        "Serve mode: origins whose browser pages may call the API (comma-separated, e.g. http://localhost:3000), or * for any; unset = none (no CORS headers).") \
    STR(SERVE_MODEL, NULL, \
        "Serve mode: the model name /v1/models lists and responses carry; unset = the model directory's last component.") \
    INT(SERVE_SLOTS, "0", 0, 64, \
        "Serve mode: requests decoded together, each row of one forward belonging to one of them; each has a KV cache of CTX positions in the memory plan. More wait in the queue. 0 = as many as fit, up to 8, with all their KV caches and decoding states in a quarter of the RAM budget left after the dense weights, the rest of the working set and the reserve.") \
    INT(SERVE_QUEUE, "16", 0, 4096, \
        "Serve mode: requests that may wait while SERVE_SLOTS compute; more are refused with 429.") \
    INT(SERVE_CONNS, "64", 1, 4096, \
        "Serve mode: connections open at once (each has a thread); more are refused.") \
    INT(SERVE_CONNS_PER_IP, "32", 1, 4096, \
        "Serve mode: connections one client address may hold at once (at most SERVE_CONNS), so one client cannot take them all; past it a request is answered 429 and its connection closed.") \
    INT(SERVE_TIMEOUT, "60", 1, 86400, \
        "Serve mode: seconds a whole request (headers and body) may take to arrive once its connection is ready for it (408 and closed beyond), and an idle connection may stay open.") \
    INT(SERVE_MAX_BODY, "8388608", 1024, 1073741824, \
        "Serve mode: the largest request body in bytes (413 beyond it).") \
    INT(SERVE_MAX_MESSAGES, "1024", 1, 1000000, \
        "Serve mode: the most messages one chat request may carry.") \
    FLOAT(KV_CACHE_GB, "4", 0, 1048576, \
        "Serve mode: memory for the KV state of conversations other than the current one, kept for prefix reuse and evicted from memory least recently used; 0 = keep only the current one.") \
    STR(KV_CACHE_DIR, NULL, \
        "Serve mode: keep the conversations' KV state in .coli_kv files in this directory too, so a restarted server resumes them (the newest that fit KV_CACHE_GB); files are never deleted.") \
    BOOL(MTP, "1", \
        "1 = load the checkpoint's MTP layer (when config.json declares one) for speculative decoding; 0 = ignore it.") \
    INT(DRAFT, "-1", -1, 16, \
        "Tokens the MTP head drafts per verifying forward; -1 = auto (0 to 4, from the measured acceptance and forward costs); 0 = no speculation. The output is identical for every value, greedy or sampled.") \
    INT(DRAFT_GUARD_PCT, "10", 0, 100, \
        "Pause drafting when fewer than this percent of a window's drafts are accepted; 0 = never pause.") \
    INT(DRAFT_WINDOW, "24", 1, 1048576, \
        "Drafts per acceptance window: the guard (and DRAFT=-1's choice of k) decides once per window.") \
    INT(DRAFT_PAUSE, "256", 1, 1048576, \
        "Tokens decoded without drafts after the guard trips; drafting then re-arms on a fresh window.") \
    INT(CAP, "0", 0, 1048576, \
        "Expert cache (LRU) slots per MoE layer; 0 = what the RAM budget leaves after the dense weights, KV cache, working set and pinned set.") \
    INT(CTX, "4096", 16, 1048576, \
        "Context capacity in tokens (prompt + generated); capped at the model's max_position_embeddings.") \
    INT(THREADS, "0", 0, 4096, \
        "Compute threads; 0 = OpenMP's default (OMP_NUM_THREADS if set, else one per CPU).") \
    CHOICE(ABSORB, "auto", "auto|0|1", \
        "MLA evaluation: auto = whichever costs less for the batch (absorbed for decode and small batches, reconstructed for large prefill batches); 1 = always absorbed; 0 = always reconstructed.") \
    INT(UBATCH, "512", 1, 65536, \
        "Prompt positions per forward pass during prefill; 1 processes the prompt one token at a time.") \
    CHOICE(SIMD, "auto", "auto|scalar|avx2|avxvnni|avx512|avx512vnni|neon|neon-dotprod|neon-i8mm", \
        "Matmul kernel level; auto = the best this CPU supports (named on the startup line). A level the CPU lacks is refused.") \
    BOOL(IDOT, "1", \
        "1 = int8/int4 weights multiply activations quantized to int8 with integer dot products; 0 = exact float accumulation.") \
    CHOICE(CUDA, "auto", "auto|0|1", \
        "GPU for the dense matmuls (a build with CUDA: make CUDA=1): auto = use device CUDA_DEVICE when there is one, else the CPU, saying so; 1 = required (exit 2 without it); 0 = CPU only. Tokens are the same either way.") \
    INT(CUDA_DEVICE, "0", 0, 64, \
        "Which GPU CUDA uses (0 = the first).") \
    FLOAT(CUDA_EXPERT_GB, NULL, 0, 1e6, \
        "GPU memory for the routed-expert tier (the most used experts, computed there; hot ones move in as they run); unset = what the GPU holds after the dense matrices and a 1 GiB reserve; 0 = none.") \
    BOOL(CUDA_ATTN, "1", \
        "1 = absorbed attention, the DSA indexer's scores and their caches (every layer, CTX positions) in GPU memory when the GPU holds the attention's kv_b; 0 = both on the CPU, their GPU memory left to the expert tier.") \
    FLOAT(CUDA_FILL_MB, "64", 0, 1e6, \
        "Most MB of experts one forward pass copies into the GPU expert tier (an expert moves in after it ran on the CPU, when clearly hotter than the coldest it would replace); 0 = the tier keeps what startup put there.") \
    CHOICE(DENSE_BITS, "16", "2|4|8|16", \
        "Quantize full-precision dense weights at load time (8 = int8, 4 = int4, 2 = int2; 16 = keep them f32). Changes the model.") \
    CHOICE(EXPERT_BITS, "16", "2|4|8|16", \
        "Quantize full-precision routed experts as they are read (8, 4, 2; 16 = keep f32). Changes the model.") \
    INT(GROUP_SIZE, "0", 0, 256, \
        "Group size for 4-bit load-time quantization (a multiple of 16); 0 = one scale per row.") \
    CHOICE(KV_BITS, "32", "4|8|32", \
        "The KV cache's MLA latents and rope keys: 32 = f32 (exact); 8 or 4 = integers with one scale per 32 values, read by attention as they are (GLM-5: 648 or 360 bytes a position and layer against 2,304). Changes the model; the GPU then leaves attention to the CPU.") \
    CHOICE(KV_INDEX_BITS, "32", "4|8|32", \
        "The DSA indexer's cached keys: 32 = f32 (exact); 8 or 4 as KV_BITS. Changes which keys are kept; the GPU then leaves the indexer's scores to the CPU.") \
    FLOAT(RAM_GB, "0", 0, 1e6, \
        "RAM budget in GB (10^9 bytes) for weights, KV cache, expert caches and working memory; 0 = 90% of the memory available at start.") \
    BOOL(COLI_RAM_OVERCOMMIT, "0", \
        "1 = start even when the resident part does not fit the RAM budget.") \
    STR(PIN, "auto", \
        "Pinned hot set: auto = from the model directory's .coli_usage history, 0 = none, or the path of a usage file.") \
    FLOAT_OR(PIN_GB, NULL, 0, 1e6, "all", \
        "GB of experts to pin (most used first); all = everything the budget allows; unset = every expert the history has seen, within the budget.") \
    INT(REPIN, "0", 0, 1000000000, \
        "Re-rank and swap pinned experts every N generated tokens; 0 = never.") \
    FLOAT(RSS_GUARD_GB, "0", 0, 1e6, \
        "Resident-memory guard in GB: above it, cached experts are freed and the cache shrinks; 0 = the RAM budget.") \
    BOOL(USAGE_SAVE, "1", \
        "1 = add this run's expert routing counts to <model>/.coli_usage at the end; 0 = read-only.") \
    BOOL(PROF, "0", \
        "1 = print a per-stage time breakdown at the end of the run.") \
    CHOICE(PIPE, "auto", "auto|0|1", \
        "Expert misses read by a pool of reader threads while resident experts compute; auto = on unless io_uring is used; 0 = read on the compute thread.") \
    INT(PIPE_WORKERS, "4", 1, 64, \
        "Reader threads of the PIPE pool.") \
    CHOICE(URING, "auto", "auto|0|1", \
        "Expert misses of a layer submitted as one io_uring batch; auto = on when built with liburing and the kernel allows it.") \
    BOOL(DIRECT, "0", \
        "1 = expert weights read with O_DIRECT (bypassing the page cache); scales stay buffered.") \
    BOOL(PILOT, "0", \
        "1 = after each layer's attention, predict the next layer's experts and ask the kernel to read them ahead.") \
    BOOL(PILOT_REAL, "0", \
        "1 = load the predicted experts into the next layer's cache (never evicting a clearly hotter one).") \
    INT(PILOT_K, "0", 0, 1024, \
        "Experts predicted per position for PILOT / PILOT_REAL; 0 = num_experts_per_tok.") \
    STR(ROUTE_TRACE, NULL, \
        "Record a routing trace to this file at the end of the run: every main-model forward row's chosen experts per MoE layer, and PILOT's predictions when it is on (bench/README.md).") \
    STR(ROUTE_REPLAY, NULL, \
        "Bench instrument: every MoE layer takes its experts, row after row, from this routing trace (ids by rank of use; PILOT takes its predictions too). Changes what is computed; every end line says so.") \
    BOOL(COLI_MMAP, "0", \
        "1 = map the shards and use expert weights in place instead of copying them into caches.") \
    BOOL(MLOCK, "0", \
        "1 = lock the pinned experts' memory (or, with COLI_MMAP, their mapped pages) against swapping.") \
    BOOL(COLI_NUMA, "0", \
        "1 = interleave large resident allocations across NUMA nodes (needs libnuma at build time).") \
    STR(COLI_MODEL_MIRROR, NULL, \
        "Directories (comma-separated) holding byte-identical copies of some or all shards on other drives; expert reads are spread over them.") \
    STR(COLI_DISK_WEIGHTS, NULL, \
        "Read shares of the primary and each mirror, e.g. 3,1; unset = measured at startup.") \
    FLOAT(MPI_TIMEOUT, "60", 0, 86400, \
        "MPI builds (make MPI=1): the longest rank 0 waits for another rank's experts within a forward, in seconds, before the job ends naming that rank; 0 = no limit.") \
    INT(COLI_IO_FAULT, "0", 0, 1000000000, \
        "Testing: the Nth expert read fails with EIO; 0 = off.") \
    INT(COLI_CUDA_FAULT, "0", 0, 1000000000, \
        "Testing: the Nth GPU call fails as a CUDA error would, so the CPU computes from there on; 0 = off.")

#define ENV_ID_(name, ...) ENV_##name,
typedef enum { ENV_REGISTRY(ENV_ID_, ENV_ID_, ENV_ID_, ENV_ID_, ENV_ID_, ENV_ID_, ENV_ID_) ENV_COUNT } env_id;
#undef ENV_ID_

#define ENV_T_INT(name, def, lo, hi, doc) {#name, ENV_KIND_INT, def, lo, hi, NULL, doc},
#define ENV_T_FLOAT(name, def, lo, hi, doc) {#name, ENV_KIND_FLOAT, def, lo, hi, NULL, doc},
#define ENV_T_BOOL(name, def, doc) {#name, ENV_KIND_BOOL, def, 0, 1, NULL, doc},
#define ENV_T_STR(name, def, doc) {#name, ENV_KIND_STR, def, 0, 0, NULL, doc},
#define ENV_T_CHOICE(name, def, choices, doc) {#name, ENV_KIND_CHOICE, def, 0, 0, choices, doc},
#define ENV_T_FLOAT_OR(name, def, lo, hi, word, doc) {#name, ENV_KIND_FLOAT_OR, def, lo, hi, word, doc},
#define ENV_T_TEXT(name, def, doc) {#name, ENV_KIND_TEXT, def, 0, 0, NULL, doc},
static const env_knob env_knobs[ENV_COUNT] = {ENV_REGISTRY(ENV_T_INT, ENV_T_FLOAT, ENV_T_BOOL, ENV_T_STR, ENV_T_CHOICE, ENV_T_FLOAT_OR, ENV_T_TEXT)};
#undef ENV_T_INT
#undef ENV_T_FLOAT
#undef ENV_T_BOOL
#undef ENV_T_STR
#undef ENV_T_CHOICE
#undef ENV_T_FLOAT_OR
#undef ENV_T_TEXT



typedef struct {
    int set;          /* 1 if taken from the environment, 0 if the default */
    long long i;      /* INT, BOOL; CHOICE: index into choices */
    double f;         /* FLOAT */
    const char *s;    /* STR, CHOICE (the raw text); NULL when unset */
} env_val;

/* Index of the knob named `name`, or -1. */
static inline int env_index(const char *name) {
    for (int i = 0; i < ENV_COUNT; i++)
        if (!strcmp(env_knobs[i].name, name)) return i;
    return -1;
}

/* Index of `word` within a "a|b|c" list, or -1. */
static inline int env_choice_index(const char *choices, const char *word) {
    size_t wl = strlen(word);
    int idx = 0;
    for (const char *p = choices;; idx++) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == wl && !strncmp(p, word, l)) return idx;
        if (!bar) return -1;
        p = bar + 1;
    }
}

static inline void env_describe_range_(const env_knob *k, char *buf, size_t n) {
    switch (k->kind) {
    case ENV_KIND_INT: snprintf(buf, n, "an integer in [%.0f, %.0f]", k->lo, k->hi); break;
    case ENV_KIND_FLOAT: snprintf(buf, n, "a number in [%g, %g]", k->lo, k->hi); break;
    case ENV_KIND_BOOL: snprintf(buf, n, "0 or 1"); break;
    case ENV_KIND_FLOAT_OR: snprintf(buf, n, "a number in [%g, %g] or %s", k->lo, k->hi, k->choices); break;
    case ENV_KIND_CHOICE: {
        size_t o = (size_t)snprintf(buf, n, "one of ");
        for (const char *p = k->choices; *p && o + 3 < n; p++) {
            if (*p == '|') { buf[o++] = ','; buf[o++] = ' '; }
            else buf[o++] = *p;
        }
        buf[o < n ? o : n - 1] = 0;
        break;
    }
    case ENV_KIND_STR: snprintf(buf, n, "non-empty text"); break;
    default: snprintf(buf, n, "any text"); break;
    }
}

/* Whether v is a plain decimal number, the only form number knobs take:
 * digits, a leading '-' only when neg (the range has negatives), and only
 * when frac a fraction (".5", "1.") and an exponent ("1e-3"). strtoll and
 * strtod alone would also take leading whitespace, '+', hex ("0x10",
 * "0x0.8p0"), inf and nan, none of which anyone means in a knob. */
static inline int env_decimal_(const char *v, int neg, int frac) {
    static const char digits[] = "0123456789";
    const char *p = v + (neg && *v == '-');
    size_t d = strspn(p, digits);
    p += d;
    if (frac && *p == '.') {
        size_t f = strspn(p + 1, digits);
        p += 1 + f, d += f;
    }
    if (!d) return 0;
    if (frac && (*p == 'e' || *p == 'E')) {
        p += 1 + (p[1] == '+' || p[1] == '-');
        size_t e = strspn(p, digits);
        if (!e) return 0;
        p += e;
    }
    return *p == 0;
}

/* v for a message: control characters escaped (\n, \xNN), cut after 48
 * bytes, so a value cannot break or flood the line. */
static inline void env_quote_(const char *v, char *buf, size_t n) {
    size_t o = 0, i = 0;
    for (; v[i] && i < 48 && o + 8 < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c == '\n') buf[o++] = '\\', buf[o++] = 'n';
        else if (c == '\t') buf[o++] = '\\', buf[o++] = 't';
        else if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
        else buf[o++] = (char)c;
    }
    if (v[i] && o + 4 < n) buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
    buf[o < n ? o : n - 1] = 0;
}

/* Parses `raw` (NULL = use the default) for knob k into *out. Strict: the
 * whole string is the value; numbers plain decimal and in range; STR knobs
 * non-empty. Returns 0, or -1 with a message naming the variable and the
 * accepted values. */
static inline int env_parse(const env_knob *k, const char *raw, env_val *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->set = raw != NULL;
    const char *v = raw ? raw : k->def;
    if (!v) return 0;
    out->s = v;
    char want[160], form[160] = "", shown[256];
    env_describe_range_(k, want, sizeof want);
    char *end = NULL;
    errno = 0;
    switch (k->kind) {
    case ENV_KIND_TEXT: return 0;
    case ENV_KIND_STR:
        if (*v) return 0;
        snprintf(form, sizeof form, " (unset it for the default)");
        break;
    case ENV_KIND_CHOICE:
        out->i = env_choice_index(k->choices, v);
        if (out->i >= 0) return 0;
        break;
    case ENV_KIND_INT:
    case ENV_KIND_BOOL: {
        snprintf(form, sizeof form, ", written in decimal digits%s (no spaces, '+' or hex)", k->lo < 0 ? " with an optional leading -" : "");
        if (!env_decimal_(v, k->lo < 0, 0)) break;
        long long x = strtoll(v, &end, 10);
        if (errno || *end || x < k->lo || x > k->hi) break;
        out->i = x;
        return 0;
    }
    case ENV_KIND_FLOAT_OR:
        if (!strcmp(v, k->choices)) {
            out->i = 1;
            return 0;
        }
        /* fall through */
    case ENV_KIND_FLOAT: {
        snprintf(form, sizeof form, ", written in decimal such as 2, 0.5 or 1e-3 (no spaces, '+', hex, inf or nan)");
        if (!env_decimal_(v, k->lo < 0, 1)) break;
        double x = strtod(v, &end);
        if (errno || *end || !isfinite(x) || x < k->lo || x > k->hi) break;
        out->f = x;
        return 0;
    }
    }
    env_quote_(v, shown, sizeof shown);
    snprintf(err, errlen, "%s=%s is invalid: expected %s%s", k->name, shown, want, form);
    return -1;
}

/* Levenshtein distance of two short strings (capped at 64 characters). */
static inline int env_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 64;
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* The knob a variable named `name` was probably meant to be: a knob's name
 * in the wrong case; for a COLI_-prefixed name that is not a knob, the
 * closest knob (with or without the prefix) within an edit distance of a
 * third of the name's length (at least 1); any other name of 4+ characters
 * one edit away from a knob. NULL if none or if `name` is itself a knob. */
static inline const char *env_suggest(const char *name) {
    if (env_index(name) >= 0) return NULL;
    char up[72];
    size_t n = strlen(name);
    if (n < sizeof up) {
        for (size_t i = 0; i <= n; i++) up[i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 32 : name[i]);
        int k = env_index(up);
        if (k >= 0) return env_knobs[k].name;
    }
    int prefixed = !strncmp(name, "COLI_", 5), best = 99;
    const char *pick = NULL;
    for (int i = 0; i < ENV_COUNT; i++) {
        int d = env_distance(name, env_knobs[i].name);
        if (prefixed) {
            int d2 = env_distance(name + 5, env_knobs[i].name);
            if (d2 < d) d = d2;
        }
        if (d < best) { best = d; pick = env_knobs[i].name; }
    }
    if (prefixed) {
        int limit = (int)(n - 5) / 3 > 1 ? (int)(n - 5) / 3 : 1;
        return best <= limit ? pick : NULL;
    }
    return (best == 1 && n >= 4) ? pick : NULL;
}

/* Writes the registry as the markdown table kept in ENVIRONMENT.md. */
static inline void env_write_table(FILE *f) {
    fprintf(f, "| variable | accepts | default | meaning |\n|---|---|---|---|\n");
    for (int i = 0; i < ENV_COUNT; i++) {
        char want[160];
        env_describe_range_(&env_knobs[i], want, sizeof want);
        fprintf(f, "| `%s` | %s | %s%s%s | %s |\n", env_knobs[i].name, want, env_knobs[i].def ? "`" : "",
                env_knobs[i].def ? env_knobs[i].def : "unset", env_knobs[i].def ? "`" : "", env_knobs[i].doc);
    }
}

#endif
