/* kv_persist.h — a conversation's per-position state in a .coli_kv file,
 * so that a later run (KV_LOAD, SESSION) prefills only the new tokens.
 *
 * Layout (little-endian, no padding; KVP_VERSION 1):
 *   header   "COLIKV\r\n", u32 version, u32 flags (KVP_F_MTP),
 *            u64 model fingerprint (kvp_fingerprint),
 *            u32 n_tok, n_kv, n_layers, kv_lora, qk_rope, index_dim, n_full,
 *            dim, mtp_pos, mtp_nq, mtp_full, formats
 *   i32      tok[n_tok]                 the conversation so far
 *   rows     per main layer: latent [n_kv] rows of kv_lora, rope key [n_kv]
 *            rows of qk_rope
 *   rows     per main full-indexer layer: indexer keys [n_kv] rows of index_dim
 * Rows are the KV cache's own (kvq.h): f32 arrays, or KV_BITS /
 * KV_INDEX_BITS rows as they are in memory; formats is 0 for f32 rows
 * everywhere, else KV_BITS | KV_INDEX_BITS << 8 (32 for f32), and a file
 * loads only into a cache of the same formats.
 *   KVP_F_MTP (the MTP head was drafting): the MTP layer's latent and rope
 *            key [mtp_pos][..] (+ indexer keys when mtp_full), the rows
 *            queued for it (hidden [mtp_nq][dim], token [mtp_nq]) and the
 *            hidden row of position n_kv-1, h_last [dim]; the queue covers
 *            positions mtp_pos .. n_kv-2 (mtp_pos + mtp_nq = n_kv - 1)
 *   u64      FNV-1a 64 of every byte before it
 * The cache is the selected KV slot's (kv.slot, model.h); a file saved
 * from one slot loads into any.
 * Positions [0, n_kv) have cached state; tokens [n_kv, n_tok) were produced
 * but not yet fed (the last generated token) and are fed on resume.
 *
 * Written to a temporary name beside the file, fsync'd and renamed, so a
 * crash leaves the old file or the whole new one; only over a regular file
 * or to a new name (compat_replace's rule: a device, FIFO, directory or
 * symbolic link there is refused by name). Read in bounded pieces
 * straight into the KV cache; used only when the magic, version,
 * fingerprint, every dimension, the lengths (against the model's context)
 * and the checksum agree. Prefix: kvp_. Must not: read the environment,
 * print, or keep state between calls. */
#ifndef COLI_KV_PERSIST_H
#define COLI_KV_PERSIST_H

#include "model.h"

#define KVP_MAGIC "COLIKV\r\n"
#define KVP_VERSION 1u
#define KVP_F_MTP 1u
#define KVP_HEADER_BYTES 72 /* 8 + 4 + 4 + 8 + 12 x 4 */

typedef struct {
    uint32_t version, flags;
    uint64_t fingerprint;
    uint32_t n_tok, n_kv, n_layers, kv_lora, qk_rope, index_dim, n_full, dim, mtp_pos, mtp_nq, mtp_full, formats;
} kvp_header;

/* The MTP head's part of the state (spec.h), as plain values. */
typedef struct {
    int mtp_pos, nq;
    const float *hq; /* [nq][dim] */
    const int *tq;   /* [nq] */
    const float *h_last; /* [dim] */
} kvp_mtp;

/* What kvp_load hands back (kvp_state_free releases it). */
typedef struct {
    int *tok;
    int n_tok, n_kv;
    int has_mtp; /* the file's MTP part was loaded into the model's MTP cache */
    int mtp_pos, nq;
    float *hq, *h_last;
    int *tq;
} kvp_state;

static inline void kvp_state_free(kvp_state *s) {
    free(s->tok), free(s->hq), free(s->h_last), free(s->tq);
    memset(s, 0, sizeof *s);
}

static inline uint64_t kvp_fnv_(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = (const uint8_t *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define KVP_FNV0 0xcbf29ce484222325ull

/* The model's identity: config.json's bytes, every tensor's name, dtype,
 * shape, shard and offsets, and each shard's size. Two checkpoints that
 * differ in any of these never share a state. 0 when config.json cannot be
 * read (then nothing matches). */
static inline uint64_t kvp_fingerprint(const coli_model *m, const char *dir) {
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *cfg = compat_read_file(path, 16u << 20, &len);
    if (!cfg) return 0;
    uint64_t h = kvp_fnv_(KVP_FNV0, cfg, len);
    free(cfg);
    for (int i = 0; i < m->st.nt; i++) {
        const st_tensor *t = &m->st.t[i];
        int64_t v[4 + ST_MAX_RANK] = {t->file, t->dtype, t->ndim, (int64_t)t->off};
        for (int d = 0; d < t->ndim && d < ST_MAX_RANK; d++) v[4 + d] = t->shape[d];
        h = kvp_fnv_(h, t->name, strlen(t->name) + 1);
        h = kvp_fnv_(h, v, sizeof v);
        h = kvp_fnv_(h, &t->nbytes, sizeof t->nbytes);
    }
    for (int f = 0; f < m->st.nfiles; f++) h = kvp_fnv_(h, &m->st.files[f].size, sizeof m->st.files[f].size);
    return h ? h : 1;
}

static inline int kvp_fail_(char *err, size_t n, const char *path, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, n, "%s: %s", path, msg);
    return -1;
}

/* ---------------------------------------------------------------- writing */

/* Where a state is written: a file descriptor, or (mem != NULL) a buffer
 * of exactly the state's size (kvp_image). */
typedef struct {
    int fd;
    uint64_t h, off;
    int failed;
    uint8_t *mem;
} kvp_out_;

static inline void kvp_put_(kvp_out_ *o, const void *p, size_t n) {
    if (o->failed || !n) return;
    o->h = kvp_fnv_(o->h, p, n);
    if (o->mem) memcpy(o->mem + o->off, p, n);
    else if (compat_write_full(o->fd, p, n)) o->failed = errno ? errno : EIO;
    o->off += n;
}

/* Rows [0, n) of each layer's caches in `layers` (main: [0, n_layers); or
 * the MTP layer alone) of the selected slot (kv.slot). */
static inline void kvp_put_layers_(kvp_out_ *o, const coli_model *m, int l0, int l1, int n) {
    const coli_config *c = &m->c;
    int s = m->kv.slot;
    for (int l = l0; l < l1; l++) {
        kvp_put_(o, kv_lat(&m->kv, s, l), (size_t)n * m->kv.lrb);
        kvp_put_(o, kv_rope(&m->kv, s, l), (size_t)n * m->kv.rrb);
    }
    for (int l = l0; l < l1; l++)
        if (c->idx_full[l]) kvp_put_(o, kv_ikey(&m->kv, s, l), (size_t)n * m->kv.irb);
}

static inline void kvp_header_bytes_(const kvp_header *h, uint8_t *b) {
    memcpy(b, KVP_MAGIC, 8);
    memcpy(b + 8, &h->version, 4);
    memcpy(b + 12, &h->flags, 4);
    memcpy(b + 16, &h->fingerprint, 8);
    memcpy(b + 24, &h->n_tok, 12 * 4); /* n_tok .. formats are consecutive u32s */
}

/* The header's formats field for the model's KV cache. */
static inline uint32_t kvp_formats_(const coli_kv *kv) { return kv->bits == 32 && kv->ibits == 32 ? 0 : (uint32_t)kv->bits | (uint32_t)kv->ibits << 8; }

/* Bytes of one position's rows in layers of the cache kv: nl attention
 * layers, nf of them with indexer keys. */
static inline uint64_t kvp_row_bytes_(const coli_kv *kv, uint64_t nl, uint64_t nf) { return nl * (kv->lrb + kv->rrb) + nf * kv->irb; }

static inline int kvp_main_full_(const coli_config *c) {
    int n = 0;
    for (int l = 0; l < c->n_layers; l++) n += c->idx_full[l];
    return n;
}

/* The header of a state of n_tok tokens, n_kv cached (and the MTP part
 * when mtp is given and in step), and its size in bytes. NULL mtp when
 * it is not in step. */
static inline uint64_t kvp_plan_(const coli_model *m, int n_tok, int n_kv, const kvp_mtp **mtp, kvp_header *h) {
    const coli_config *c = &m->c;
    const kvp_mtp *x = *mtp;
    if (x && (x->mtp_pos < 0 || x->nq < 0 || x->mtp_pos + x->nq != n_kv - 1)) x = *mtp = NULL; /* not in step: leave it out */
    kvp_header hh = {KVP_VERSION, x ? KVP_F_MTP : 0, 0, (uint32_t)n_tok, (uint32_t)n_kv, (uint32_t)c->n_layers, (uint32_t)c->kv_lora,
                     (uint32_t)c->qk_rope, (uint32_t)c->index_dim, (uint32_t)kvp_main_full_(c), (uint32_t)c->dim,
                     x ? (uint32_t)x->mtp_pos : 0, x ? (uint32_t)x->nq : 0, x ? c->idx_full[c->n_layers] : 0, kvp_formats_(&m->kv)};
    *h = hh;
    uint64_t size = KVP_HEADER_BYTES + 4ull * hh.n_tok + kvp_row_bytes_(&m->kv, hh.n_layers, hh.n_full) * hh.n_kv + 8;
    if (x) size += kvp_row_bytes_(&m->kv, 1, hh.mtp_full) * hh.mtp_pos + 4ull * hh.mtp_nq * (hh.dim + 1) + 4ull * hh.dim;
    return size;
}

/* Writes the whole state (header, tokens, caches, MTP part, checksum). */
static inline void kvp_write_(kvp_out_ *o, const coli_model *m, const kvp_header *h, const int *tok, const kvp_mtp *mtp) {
    const coli_config *c = &m->c;
    uint8_t hb[KVP_HEADER_BYTES];
    kvp_header_bytes_(h, hb);
    kvp_put_(o, hb, sizeof hb);
    kvp_put_(o, tok, (size_t)h->n_tok * 4);
    kvp_put_layers_(o, m, 0, c->n_layers, (int)h->n_kv);
    if (mtp) {
        kvp_put_layers_(o, m, c->n_layers, c->n_layers + 1, mtp->mtp_pos);
        kvp_put_(o, mtp->hq, (size_t)mtp->nq * c->dim * 4);
        kvp_put_(o, mtp->tq, (size_t)mtp->nq * 4);
        kvp_put_(o, mtp->h_last, (size_t)c->dim * 4);
    }
    uint64_t sum = o->h;
    kvp_put_(o, &sum, 8);
}

static inline int kvp_args_(const coli_model *m, const char *path, int n_tok, int n_kv, char *err, size_t errlen) {
    if (n_tok < 1) return kvp_fail_(err, errlen, path, "the conversation is empty: nothing to save");
    if (n_kv < 0 || n_kv > n_tok || n_kv > m->kv.ctx) return kvp_fail_(err, errlen, path, "nothing consistent to save (%d tokens, %d cached)", n_tok, n_kv);
    return 0;
}

#define KVP_NOT_REPLACED_ "%s, not a regular file; not replaced (a state is written only under a new name or over a regular file)"

/* Whether kvp_save may write path (compat_replace's rule), asked before a
 * run computes what it would save there. 0, or -1 with err naming the
 * file and what it is. */
static inline int kvp_check_target(const char *path, char *err, size_t errlen) {
    const char *what = compat_unreplaceable(path);
    return what ? kvp_fail_(err, errlen, path, KVP_NOT_REPLACED_, what) : 0;
}

/* Saves tokens tok[0..n_tok) with the model's caches of positions
 * [0, n_kv) (and the MTP part when mtp is given) to path, atomically.
 * 0, or -1 with err naming the file. */
static inline int kvp_save(const coli_model *m, const char *path, uint64_t fp, const int *tok, int n_tok, int n_kv, const kvp_mtp *mtp,
                           char *err, size_t errlen) {
    if (kvp_args_(m, path, n_tok, n_kv, err, errlen) || kvp_check_target(path, err, errlen)) return -1;
    kvp_header h;
    kvp_plan_(m, n_tok, n_kv, &mtp, &h);
    h.fingerprint = fp;
    size_t pl = strlen(path);
    char *tmp = (char *)malloc(pl + 32);
    if (!tmp) return kvp_fail_(err, errlen, path, "out of memory");
    snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
    compat_sweep_temps(path, 1); /* no lock: a live writer's temporary stays */
    unlink(tmp);
    kvp_out_ o = {open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644), KVP_FNV0, 0, 0, NULL};
    if (o.fd < 0) {
        int e = errno;
        free(tmp);
        return kvp_fail_(err, errlen, path, "cannot create %s.tmp.*: %s", path, strerror(e));
    }
    kvp_write_(&o, m, &h, tok, mtp);
    int e = o.failed ? o.failed : fsync(o.fd) ? errno : 0;
    if (close(o.fd) && !e) e = errno;
    if (!e && compat_replace(tmp, path)) e = errno;
    if (e) unlink(tmp);
    free(tmp);
    if (e == COMPAT_ENOTREG) /* it became one while we wrote */
        return kvp_fail_(err, errlen, path, KVP_NOT_REPLACED_, compat_unreplaceable(path) ? compat_unreplaceable(path) : "not a regular file");
    return e ? kvp_fail_(err, errlen, path, "cannot write: %s (the previous file, if any, is unchanged)", strerror(e)) : 0;
}

/* The same state as kvp_save writes (the MTP part when mtp is given and
 * in step), into memory: a conversation kept aside by serve mode. *img is
 * malloc'd. 0, or -1 (err). */
static inline int kvp_image(const coli_model *m, uint64_t fp, const int *tok, int n_tok, int n_kv, const kvp_mtp *mtp, uint8_t **img, size_t *len,
                            char *err, size_t errlen) {
    *img = NULL, *len = 0;
    if (kvp_args_(m, "(memory)", n_tok, n_kv, err, errlen)) return -1;
    kvp_header h;
    uint64_t size = kvp_plan_(m, n_tok, n_kv, &mtp, &h);
    h.fingerprint = fp;
    kvp_out_ o = {-1, KVP_FNV0, 0, 0, (uint8_t *)malloc(size)};
    if (!o.mem) return kvp_fail_(err, errlen, "(memory)", "out of memory keeping a %.1f MB state", size / 1e6);
    kvp_write_(&o, m, &h, tok, mtp);
    *img = o.mem, *len = (size_t)size;
    return 0;
}

/* ---------------------------------------------------------------- reading */

typedef struct {
    int fd;
    uint64_t h, off, size;
    const uint8_t *mem; /* reading an image (kvp_load_image) */
} kvp_in_;

/* Reads n bytes at the cursor into p (NULL: read and discard). 0 or -1. */
static inline int kvp_get_(kvp_in_ *in, void *p, size_t n) {
    uint8_t buf[1 << 16];
    while (n) {
        size_t k = p ? n : (n < sizeof buf ? n : sizeof buf);
        uint8_t *dst = p ? (uint8_t *)p : buf;
        if (in->off + k > in->size) return -1;
        if (in->mem) memcpy(dst, in->mem + in->off, k);
        else if (compat_pread_full(in->fd, dst, k, in->off)) return -1;
        in->h = kvp_fnv_(in->h, dst, k);
        in->off += k, n -= k;
        if (p) break;
    }
    return 0;
}

/* Rows [0, n) of layers [l0, l1) into the selected slot (kv.slot), or
 * read and discarded (keep 0). */
static inline int kvp_get_layers_(kvp_in_ *in, coli_model *m, int l0, int l1, int n, int keep) {
    const coli_config *c = &m->c;
    int s = m->kv.slot;
    m->kv.gen += keep && l1 > l0 && s == 0; /* slot 0's rows replaced (even when the read fails part way): copies elsewhere are stale */
    for (int l = l0; l < l1; l++) {
        if (kvp_get_(in, keep ? kv_lat(&m->kv, s, l) : NULL, (size_t)n * m->kv.lrb)) return -1;
        if (kvp_get_(in, keep ? kv_rope(&m->kv, s, l) : NULL, (size_t)n * m->kv.rrb)) return -1;
    }
    for (int l = l0; l < l1; l++)
        if (c->idx_full[l] && kvp_get_(in, keep ? kv_ikey(&m->kv, s, l) : NULL, (size_t)n * m->kv.irb)) return -1;
    return 0;
}

/* Checks a header against the model and the file's size. 0 or -1 (err). */
static inline int kvp_check_(const coli_model *m, const char *path, const kvp_header *h, uint64_t fp, uint64_t size, char *err, size_t errlen) {
    const coli_config *c = &m->c;
    if (h->version != KVP_VERSION)
        return kvp_fail_(err, errlen, path, "format version %u, this colibri reads version %u", h->version, KVP_VERSION);
    if (h->fingerprint != fp) return kvp_fail_(err, errlen, path, "saved by another model (its config.json or tensors differ from this one's)");
    if (h->n_layers != (uint32_t)c->n_layers || h->kv_lora != (uint32_t)c->kv_lora || h->qk_rope != (uint32_t)c->qk_rope ||
        h->index_dim != (uint32_t)c->index_dim || h->n_full != (uint32_t)kvp_main_full_(c) || h->dim != (uint32_t)c->dim)
        return kvp_fail_(err, errlen, path, "its dimensions do not match this model's");
    if ((h->flags & ~KVP_F_MTP) || h->mtp_full > 1) return kvp_fail_(err, errlen, path, "unknown flags");
    if (h->formats != kvp_formats_(&m->kv)) {
        unsigned b = h->formats ? h->formats & 255 : 32, ib = h->formats ? h->formats >> 8 : 32;
        if (h->formats >> 16 || !(b == 32 || b == 8 || b == 4) || !(ib == 32 || ib == 8 || ib == 4))
            return kvp_fail_(err, errlen, path, "unknown KV cache format %#x", h->formats);
        return kvp_fail_(err, errlen, path, "saved with KV_BITS=%u KV_INDEX_BITS=%u; this run keeps its cache in KV_BITS=%d KV_INDEX_BITS=%d", b, ib,
                         m->kv.bits, m->kv.ibits);
    }
    if (h->n_tok < 1 || h->n_kv > h->n_tok || h->n_tok >= (uint32_t)m->kv.ctx)
        return kvp_fail_(err, errlen, path, "%u tokens (%u cached) do not fit CTX=%d with room to continue", h->n_tok, h->n_kv, m->kv.ctx);
    int mtp = (h->flags & KVP_F_MTP) != 0;
    if (mtp && (h->n_kv < 1 || (uint64_t)h->mtp_pos + h->mtp_nq != (uint64_t)h->n_kv - 1))
        return kvp_fail_(err, errlen, path, "its MTP part is inconsistent");
    if (!mtp && (h->mtp_pos || h->mtp_nq || h->mtp_full)) return kvp_fail_(err, errlen, path, "its MTP fields are set without an MTP part");
    uint64_t want = KVP_HEADER_BYTES + 4ull * h->n_tok + kvp_row_bytes_(&m->kv, h->n_layers, h->n_full) * h->n_kv + 8;
    if (mtp) want += kvp_row_bytes_(&m->kv, 1, h->mtp_full) * h->mtp_pos + 4ull * h->mtp_nq * (h->dim + 1) + 4ull * h->dim;
    if (size != want)
        return kvp_fail_(err, errlen, path, "%llu bytes, expected %llu for its header (truncated or padded)", (unsigned long long)size,
                         (unsigned long long)want);
    return 0;
}

/* Reads a whole state through in: into the model's caches and st (keep),
 * or only checked, with st->tok filled (keep = 0: the model untouched).
 * 0, or -1 with err naming `name`. */
static inline int kvp_read_(coli_model *m, const char *name, kvp_in_ *in, uint64_t fp, kvp_state *st, int keep, char *err, size_t errlen) {
    const coli_config *c = &m->c;
    uint8_t hb[KVP_HEADER_BYTES];
    kvp_header h;
    if (kvp_get_(in, hb, sizeof hb) || memcmp(hb, KVP_MAGIC, 8))
        return kvp_fail_(err, errlen, name, "not a colibri KV state (bad magic or shorter than its header)");
    memcpy(&h.version, hb + 8, 4), memcpy(&h.flags, hb + 12, 4), memcpy(&h.fingerprint, hb + 16, 8), memcpy(&h.n_tok, hb + 24, 12 * 4);
    if (kvp_check_(m, name, &h, fp, in->size, err, errlen)) return -1;
    int mtp_file = (h.flags & KVP_F_MTP) != 0, mtp = keep && mtp_file && m->mtp && h.mtp_full == c->idx_full[c->n_layers];
    st->tok = (int *)malloc((size_t)h.n_tok * 4);
    if (mtp) {
        st->hq = (float *)malloc((size_t)h.mtp_nq * c->dim * 4 + 4), st->tq = (int *)malloc((size_t)h.mtp_nq * 4 + 4);
        st->h_last = (float *)malloc((size_t)c->dim * 4);
    }
    if (!st->tok || (mtp && (!st->hq || !st->tq || !st->h_last))) return kvp_fail_(err, errlen, name, "out of memory");
    if (kvp_get_(in, st->tok, (size_t)h.n_tok * 4) || kvp_get_layers_(in, m, 0, c->n_layers, (int)h.n_kv, keep)) goto short_;
    if (mtp_file) { /* read (and check) it even when this run does not use it */
        if (kvp_get_layers_(in, m, c->n_layers, c->n_layers + mtp, (int)h.mtp_pos, keep) ||
            (!mtp && kvp_get_(in, NULL, 4ull * h.mtp_pos * (h.kv_lora + h.qk_rope + h.mtp_full * h.index_dim))) ||
            kvp_get_(in, mtp ? st->hq : NULL, (size_t)h.mtp_nq * c->dim * 4) || kvp_get_(in, mtp ? st->tq : NULL, (size_t)h.mtp_nq * 4) ||
            kvp_get_(in, mtp ? st->h_last : NULL, (size_t)c->dim * 4))
            goto short_;
    }
    uint64_t want = in->h, got;
    if (kvp_get_(in, &got, 8)) goto short_;
    if (got != want) return kvp_fail_(err, errlen, name, "checksum mismatch (the file is damaged)");
    for (uint32_t i = 0; i < h.n_tok; i++)
        if (st->tok[i] < 0 || st->tok[i] >= c->vocab) return kvp_fail_(err, errlen, name, "token %u is %d, outside the vocabulary (%d)", i, st->tok[i], c->vocab);
    for (uint32_t i = 0; mtp && i < h.mtp_nq; i++)
        if (st->tq[i] < 0 || st->tq[i] >= c->vocab) return kvp_fail_(err, errlen, name, "a queued MTP token is outside the vocabulary");
    st->n_tok = (int)h.n_tok, st->n_kv = (int)h.n_kv, st->has_mtp = mtp, st->mtp_pos = (int)h.mtp_pos, st->nq = (int)h.mtp_nq;
    return 0;
short_:
    return kvp_fail_(err, errlen, name, "cannot read it whole (truncated, or a read error)");
}

/* Loads path into the model's caches and st. Returns 0, 1 when there is no
 * such file, or -1 with err naming the file and the reason (nothing of it
 * may be used; the caches may hold part of it). */
static inline int kvp_load(coli_model *m, const char *path, uint64_t fp, kvp_state *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    int fd = compat_open_regular(path, 0);
    if (fd < 0) {
        if (errno == ENOENT) return 1;
        return kvp_fail_(err, errlen, path, "cannot open: %s", compat_strerror(errno));
    }
    int64_t size = compat_file_size(fd);
    kvp_in_ in = {fd, KVP_FNV0, 0, size < 0 ? 0 : (uint64_t)size, NULL};
    int rc = kvp_read_(m, path, &in, fp, st, 1, err, errlen);
    close(fd);
    if (rc) kvp_state_free(st);
    return rc;
}

/* A state held in memory (kvp_image, or a file's bytes): loaded into the
 * model's caches (keep) or only checked (keep = 0), as kvp_load; name is
 * what messages call it. 0 or -1 (err). */
static inline int kvp_load_image(coli_model *m, const char *name, const uint8_t *img, size_t len, uint64_t fp, kvp_state *st, int keep, char *err,
                                 size_t errlen) {
    memset(st, 0, sizeof *st);
    kvp_in_ in = {-1, KVP_FNV0, 0, (uint64_t)len, img};
    int rc = kvp_read_(m, name, &in, fp, st, keep, err, errlen);
    if (rc) kvp_state_free(st);
    return rc;
}

#endif
