/* fuzz_safetensors.c — st_open_dir (st.h) on a hostile model directory.
 *
 * Input: parts separated by FUZZ_SEP (fuzz_common.h).
 *   one part            one shard, no index
 *   k + 1 parts (k≥1)   k shards, then model.safetensors.index.json
 *                       (not written when that last part is empty)
 * Shard i of k is written as model-0000<i>-of-0000<k>.safetensors in a
 * per-process scratch directory (reused; removed at exit).
 *
 * On an accepted directory, for every tensor: st_find returns it; name,
 * dtype, rank, numel and byte range are consistent and the ranges tile each
 * file's data section; st_read_raw gives exactly the file's bytes;
 * st_read_f32 / st_read_f32_range convert F32/BF16/F16 as an independent
 * reference does and refuse out-of-range reads and other dtypes;
 * st_check_float accepts the tensor's own shape and refuses another.
 * Every read is bounded by the input (a tensor's bytes lie in the file). On
 * refusal the message is non-empty and the index is left empty. */
#include <math.h>

#include "st.h"

#include "fuzz_common.h"

static float fz_ref_f16(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 1024), e - 25);
    return (h >> 15) ? -v : v;
}

static float fz_ref_elem(st_dtype dt, const uint8_t *b, uint64_t i) {
    if (dt == ST_F32) {
        float f;
        memcpy(&f, b + 4 * i, 4);
        return f;
    }
    uint16_t h = (uint16_t)(b[2 * i] | (b[2 * i + 1] << 8));
    if (dt == ST_F16) return fz_ref_f16(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int fz_same_float(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return !memcmp(&a, &b, 4);
}

static void fz_check_tensor(const st_index *ix, int i, const fuzz_parts *pp) {
    const st_tensor *t = &ix->t[i];
    char err[512];
    FUZZ_CHECK(t->name && st_find(ix, t->name) == t);
    size_t nl = strlen(t->name);
    FUZZ_CHECK(nl >= 1 && nl <= ST_MAX_NAME);
    FUZZ_CHECK(t->file >= 0 && t->file < ix->nfiles);
    FUZZ_CHECK(t->dtype >= 0 && t->dtype < ST_NDTYPE);
    FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_RANK);
    uint64_t numel = 1;
    for (int k = 0; k < t->ndim; k++) {
        FUZZ_CHECK(t->shape[k] >= 0);
        numel *= (uint64_t)t->shape[k];
    }
    FUZZ_CHECK(numel == t->numel);
    const size_t esz = (size_t)st_dtype_bytes[t->dtype];
    FUZZ_CHECK(t->nbytes == t->numel * esz);
    const uint8_t *file = pp->p[t->file];
    const uint64_t fsize = pp->n[t->file];
    FUZZ_CHECK(ix->files[t->file].size == fsize);
    FUZZ_CHECK(t->off >= 8 && t->off <= fsize && t->nbytes <= fsize - t->off);

    /* raw bytes: exactly the file's */
    uint8_t *raw = (uint8_t *)malloc(t->nbytes ? (size_t)t->nbytes : 1);
    FUZZ_CHECK(raw);
    FUZZ_CHECK(st_read_raw(ix, t, raw, err, sizeof err) == 0);
    FUZZ_CHECK(!memcmp(raw, file + t->off, (size_t)t->nbytes));

    /* float reads */
    float *f = (float *)malloc((size_t)t->numel * sizeof(float) + sizeof(float));
    FUZZ_CHECK(f);
    if (st_is_float(t->dtype)) {
        FUZZ_CHECK(st_read_f32(ix, t, f, err, sizeof err) == 0);
        for (uint64_t k = 0; k < t->numel; k++) FUZZ_CHECK(fz_same_float(f[k], fz_ref_elem(t->dtype, raw, k)));
        uint64_t first = t->numel / 2;
        FUZZ_CHECK(st_read_f32_range(ix, t, first, (size_t)(t->numel - first), f, err, sizeof err) == 0);
        for (uint64_t k = first; k < t->numel; k++) FUZZ_CHECK(fz_same_float(f[k - first], fz_ref_elem(t->dtype, raw, k)));
        FUZZ_CHECK(st_read_f32_range(ix, t, t->numel, 0, f, err, sizeof err) == 0);
        FUZZ_CHECK(st_read_f32_range(ix, t, t->numel, 1, f, err, sizeof err) == -1 && err[0]);
        FUZZ_CHECK(st_read_f32_range(ix, t, t->numel + 1, 0, f, err, sizeof err) == -1);
        FUZZ_CHECK(st_read_f32_range(ix, t, 1, SIZE_MAX, f, err, sizeof err) == -1);
        if (t->ndim == 1) FUZZ_CHECK(st_check_float(ix, t, t->shape[0], 0, err, sizeof err) == 0);
        if (t->ndim == 2 && t->shape[1]) FUZZ_CHECK(st_check_float(ix, t, t->shape[0], t->shape[1], err, sizeof err) == 0);
        err[0] = 0;
        FUZZ_CHECK(st_check_float(ix, t, t->ndim ? t->shape[0] ^ 1 : 1, 0, err, sizeof err) == -1 && err[0]);
    } else {
        err[0] = 0;
        FUZZ_CHECK(st_read_f32(ix, t, f, err, sizeof err) == -1 && err[0]);
        FUZZ_CHECK(st_check_float(ix, t, 1, 0, err, sizeof err) == -1);
    }
    FUZZ_CHECK(fuzz_terminated(err, sizeof err));
    free(f);
    free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_parts pp;
    fuzz_split(data, size, 5, &pp);
    const int nshards = pp.count == 1 ? 1 : pp.count - 1;
    const char *dir = fuzz_dir();
    for (int i = 0; i < nshards; i++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, nshards);
        fuzz_write(name, pp.p[i], pp.n[i]);
    }
    if (pp.count > 1 && pp.n[pp.count - 1]) fuzz_write("model.safetensors.index.json", pp.p[pp.count - 1], pp.n[pp.count - 1]);

    st_index ix;
    char err[512];
    memset(err, 'x', sizeof err);
    if (st_open_dir(&ix, dir, err, sizeof err)) {
        FUZZ_CHECK(fuzz_terminated(err, sizeof err) && err[0]);
        FUZZ_CHECK(ix.nt == 0 && ix.nfiles == 0 && !ix.t && !ix.files && !ix.hash);
        return 0;
    }
    FUZZ_CHECK(ix.nfiles == nshards);
    /* the tensors of each file tile its data section */
    for (int fi = 0; fi < ix.nfiles; fi++) {
        FUZZ_CHECK(ix.files[fi].fd >= 0 && ix.files[fi].size == pp.n[fi] && pp.n[fi] >= 8);
        uint64_t hl = 0;
        for (int b = 7; b >= 0; b--) hl = (hl << 8) | pp.p[fi][b];
        uint64_t sum = 0;
        for (int i = 0; i < ix.nt; i++)
            if (ix.t[i].file == fi) {
                FUZZ_CHECK(ix.t[i].off >= 8 + hl);
                sum += ix.t[i].nbytes;
            }
        FUZZ_CHECK(sum == pp.n[fi] - 8 - hl);
    }
    for (int i = 0; i < ix.nt; i++) fz_check_tensor(&ix, i, &pp);
    const st_tensor *m = st_find(&ix, "\x01missing");
    FUZZ_CHECK(!m || !strcmp(m->name, "\x01missing"));
    st_close(&ix);
    FUZZ_CHECK(ix.nt == 0 && ix.t == NULL);
    return 0;
}
