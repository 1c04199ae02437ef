/* fuzz_kv.c — a .coli_kv state (kv_persist.h) from hostile bytes, read
 * from memory (kvp_load_image, as serve mode reads kept and persisted
 * conversations; kvp_load reads files through the same kvp_read_).
 *
 * The model is a small stand-in: 3 layers (the middle one sharing its
 * indexer), kv_lora 4, qk_rope 2, index_dim 2, dim 4, vocab 64, a context
 * of 16, and an MTP layer with its own indexer when the first input byte
 * is odd. The rest of the input is the state (the seeds are valid states
 * written by seeds.py, so mutations start from accepted files).
 *
 * Properties: a refusal has a message naming the state; a checked-only
 * read (keep = 0) and a loading read agree; an accepted state has
 * 1 <= n_tok < ctx, n_kv <= n_tok and every token in the vocabulary, and
 * written back with kvp_image from the loaded caches (with the MTP part it
 * loaded, when it did) it is the input byte for byte, unless the input
 * had an MTP part this model does not load. */
#include "kv_persist.h"

#include "fuzz_common.h"

enum { FZ_L = 3, FZ_CTX = 16 };

static coli_model fz_m;
static unsigned char fz_full[FZ_L + 1] = {1, 0, 1, 1};

static void fz_model(int mtp) {
    static int ready;
    coli_config *c = &fz_m.c;
    if (!ready) {
        c->n_layers = FZ_L, c->kv_lora = 4, c->qk_rope = 2, c->index_dim = 2, c->dim = 4, c->vocab = 64;
        c->idx_full = fz_full;
        size_t bytes = kv_layout(c, FZ_L + 1, FZ_CTX, 1, 32, 32, &fz_m.kv, NULL);
        void *base = calloc(1, bytes);
        FUZZ_CHECK(base != NULL);
        kv_layout(c, FZ_L + 1, FZ_CTX, 1, 32, 32, &fz_m.kv, base);
        for (int l = 0, f = 0; l < FZ_L + 1; l++) fz_m.kv.full_slot[l] = c->idx_full[l] ? f++ : -1;
        fz_m.kv.ctx = FZ_CTX;
        ready = 1;
    }
    fz_m.mtp = mtp;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    fz_model(data[0] & 1);
    const uint8_t *img = data + 1;
    size_t n = size - 1;
    const uint64_t fp = 0x1234567890abcdefull;
    char err[600], err2[600];
    kvp_state a, b;
    err[0] = err2[0] = 0;
    int ra = kvp_load_image(&fz_m, "fuzz.coli_kv", img, n, fp, &a, 0, err, sizeof err);
    int rb = kvp_load_image(&fz_m, "fuzz.coli_kv", img, n, fp, &b, 1, err2, sizeof err2);
    FUZZ_CHECK(ra == rb);
    if (ra) {
        FUZZ_CHECK(!strncmp(err, "fuzz.coli_kv: ", 14) && !strcmp(err, err2));
        return 0;
    }
    FUZZ_CHECK(a.n_tok >= 1 && a.n_tok < FZ_CTX && a.n_kv >= 0 && a.n_kv <= a.n_tok);
    FUZZ_CHECK(a.n_tok == b.n_tok && a.n_kv == b.n_kv && !memcmp(a.tok, b.tok, (size_t)a.n_tok * 4));
    for (int i = 0; i < a.n_tok; i++) FUZZ_CHECK(a.tok[i] >= 0 && a.tok[i] < fz_m.c.vocab);
    FUZZ_CHECK(!a.has_mtp);
    uint32_t flags;
    memcpy(&flags, img + 12, 4);
    if (!(flags & KVP_F_MTP)) {
        uint8_t *out;
        size_t len;
        FUZZ_CHECK(kvp_image(&fz_m, fp, b.tok, b.n_tok, b.n_kv, NULL, &out, &len, err, sizeof err) == 0);
        FUZZ_CHECK(len == n && !memcmp(out, img, n));
        free(out);
    } else if (b.has_mtp) {
        FUZZ_CHECK(fz_m.mtp);
        kvp_mtp k = {b.mtp_pos, b.nq, b.hq, b.tq, b.h_last};
        uint8_t *out;
        size_t len;
        FUZZ_CHECK(kvp_image(&fz_m, fp, b.tok, b.n_tok, b.n_kv, &k, &out, &len, err, sizeof err) == 0);
        FUZZ_CHECK(len == n && !memcmp(out, img, n));
        free(out);
    }
    kvp_state_free(&a);
    kvp_state_free(&b);
    return 0;
}
