/* st.h — safetensors shard index and typed reads.
 *
 * Indexes every *.safetensors file of a model directory (cross-checked
 * against model.safetensors.index.json when present): tensor name → file,
 * dtype, shape, absolute byte offset, length. Files are hostile input: the
 * header length is capped before allocation, the JSON is validated strictly,
 * dtypes must be known, shape products are overflow-checked, byte ranges must
 * tile the data section exactly (no gap, overlap or trailing bytes), and a
 * name may appear once across all shards. Every error names the file and the
 * tensor or field. Prefix: st_. Must not: exit, know what a tensor means to
 * the model (model.h, store.h), or write except through the atomic
 * writer. */
#ifndef COLI_ST_H
#define COLI_ST_H

#include <dirent.h>
#include <stdarg.h>

#include "compat.h"
#include "json.h"

#define ST_MAX_HEADER (100u * 1000u * 1000u) /* the reference reader's cap */
#define ST_MAX_RANK 8
#define ST_MAX_NAME 1024
#define ST_MAX_FILES 4096

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_F8_E8M0, ST_I16, ST_U16, ST_F16,
    ST_BF16, ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64, ST_NDTYPE
} st_dtype;

static const char *const st_dtype_names[ST_NDTYPE] = {
    "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16", "F16",
    "BF16", "I32", "U32", "F32", "F64", "I64", "U64"};
static const int st_dtype_bytes[ST_NDTYPE] = {1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};

typedef struct {
    char *name;
    int file;                    /* index into st_index.files */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_RANK];
    uint64_t numel;
    uint64_t off;                /* absolute offset in the file */
    uint64_t nbytes;
} st_tensor;

typedef struct {
    char *path;
    int fd;
    uint64_t size;
} st_file;

typedef struct {
    st_file *files;
    int nfiles;
    st_tensor *t;
    int nt, tcap;
    int *hash;                   /* open addressing, -1 = empty */
    uint32_t hcap;
    const char *strip;           /* a name prefix indexed without it (static), or NULL */
} st_index;

/* The name `name` is indexed under: without ix->strip when it starts so. */
static inline const char *st_key_(const st_index *ix, const char *name) {
    size_t n = ix->strip ? strlen(ix->strip) : 0;
    return n && !strncmp(name, ix->strip, n) ? name + n : name;
}

static inline int st_err_(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static inline uint32_t st_hash_(const char *s) {
    uint32_t h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

static inline int st_hash_insert_(st_index *ix, int ti) {
    if ((uint32_t)(ix->nt * 2) >= ix->hcap) {
        uint32_t nc = ix->hcap ? ix->hcap * 2 : 1024;
        int *nh = (int *)malloc(nc * sizeof(int));
        if (!nh) return -1;
        for (uint32_t i = 0; i < nc; i++) nh[i] = -1;
        for (int k = 0; k < ti; k++) {
            uint32_t h = st_hash_(ix->t[k].name) & (nc - 1);
            while (nh[h] >= 0) h = (h + 1) & (nc - 1);
            nh[h] = k;
        }
        free(ix->hash);
        ix->hash = nh;
        ix->hcap = nc;
    }
    uint32_t h = st_hash_(ix->t[ti].name) & (ix->hcap - 1);
    while (ix->hash[h] >= 0) h = (h + 1) & (ix->hcap - 1);
    ix->hash[h] = ti;
    return 0;
}

/* The tensor named `name`, or NULL. */
static inline const st_tensor *st_find(const st_index *ix, const char *name) {
    if (!ix->hcap) return NULL;
    uint32_t h = st_hash_(name) & (ix->hcap - 1);
    while (ix->hash[h] >= 0) {
        if (!strcmp(ix->t[ix->hash[h]].name, name)) return &ix->t[ix->hash[h]];
        h = (h + 1) & (ix->hcap - 1);
    }
    return NULL;
}

static inline st_dtype st_dtype_parse_(const char *s) {
    for (int i = 0; i < ST_NDTYPE; i++)
        if (!strcmp(s, st_dtype_names[i])) return (st_dtype)i;
    return ST_NDTYPE;
}

/* Reads an exact non-negative integer that fits in uint64 (well, int64). */
static inline int st_u64_(const js_doc *d, int node, uint64_t *out) {
    if (!js_is_int(d, node) || js_int(d, node) < 0) return -1;
    *out = (uint64_t)js_int(d, node);
    return 0;
}

typedef struct { uint64_t b, e; int ti; } st_range_;

static inline int st_range_cmp_(const void *a, const void *b) {
    const st_range_ *x = (const st_range_ *)a, *y = (const st_range_ *)b;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    return (x->e > y->e) - (x->e < y->e);
}

/* Validates one tensor entry of the header of file `fi` and appends it.
 * Returns 0 or -1 with err naming the file and tensor. */
static inline int st_add_entry_(st_index *ix, int fi, const js_doc *d, int node, uint64_t data_start,
                         char *err, size_t errlen) {
    const char *path = ix->files[fi].path, *name = js_key(d, node);
    uint32_t nl = js_key_len(d, node);
    if (nl == 0 || nl > ST_MAX_NAME || memchr(name, 0, nl))
        return st_err_(err, errlen, "%s: tensor name empty, too long or containing NUL", path);
    if (js_typeof(d, node) != JS_OBJ) return st_err_(err, errlen, "%s: tensor '%s': entry is not an object", path, name);
    int jd = js_get(d, node, "dtype"), js = js_get(d, node, "shape"), jo = js_get(d, node, "data_offsets");
    if (!js_str(d, jd)) return st_err_(err, errlen, "%s: tensor '%s': missing or non-string dtype", path, name);
    st_dtype dt = st_dtype_parse_(js_str(d, jd));
    if (dt == ST_NDTYPE) return st_err_(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, name, js_str(d, jd));
    if (js_typeof(d, js) != JS_ARR || js_count(d, js) > ST_MAX_RANK)
        return st_err_(err, errlen, "%s: tensor '%s': shape missing, not an array, or rank > %d", path, name, ST_MAX_RANK);
    if (js_typeof(d, jo) != JS_ARR || js_count(d, jo) != 2)
        return st_err_(err, errlen, "%s: tensor '%s': data_offsets must be two integers", path, name);
    st_tensor t;
    memset(&t, 0, sizeof t);
    t.file = fi;
    t.dtype = dt;
    t.ndim = js_count(d, js);
    uint64_t numel = 1;
    int k = 0;
    for (int c = js_first(d, js); c >= 0; c = js_next(d, c), k++) {
        uint64_t v;
        if (st_u64_(d, c, &v)) return st_err_(err, errlen, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, k);
        if (v && numel > UINT64_MAX / v) return st_err_(err, errlen, "%s: tensor '%s': shape product overflows", path, name);
        numel *= v;
        t.shape[k] = (int64_t)v;
    }
    uint64_t b, e;
    if (st_u64_(d, js_at(d, jo, 0), &b) || st_u64_(d, js_at(d, jo, 1), &e))
        return st_err_(err, errlen, "%s: tensor '%s': data_offsets must be non-negative integers", path, name);
    if (e < b) return st_err_(err, errlen, "%s: tensor '%s': data_offsets end before begin", path, name);
    uint64_t esz = (uint64_t)st_dtype_bytes[dt];
    if (numel > UINT64_MAX / esz) return st_err_(err, errlen, "%s: tensor '%s': byte size overflows", path, name);
    if (e - b != numel * esz)
        return st_err_(err, errlen, "%s: tensor '%s': %llu bytes in data_offsets but shape x %s needs %llu", path, name,
                       (unsigned long long)(e - b), st_dtype_names[dt], (unsigned long long)(numel * esz));
    if (e > ix->files[fi].size - data_start)
        return st_err_(err, errlen, "%s: tensor '%s': data_offsets past end of file", path, name);
    t.numel = numel;
    t.off = data_start + b;
    t.nbytes = e - b;
    const char *key = st_key_(ix, name);
    if (!*key) return st_err_(err, errlen, "%s: tensor name '%s' is only the prefix %s", path, name, ix->strip);
    nl = (uint32_t)strlen(key);
    char *nm = (char *)malloc(nl + 1);
    if (!nm) return st_err_(err, errlen, "out of memory");
    memcpy(nm, key, nl + 1);
    t.name = nm;
    if (st_find(ix, nm)) {
        int other = st_find(ix, nm)->file;
        free(nm);
        return st_err_(err, errlen, "%s: tensor '%s' also defined in %s", path, name, ix->files[other].path);
    }
    if (ix->nt == ix->tcap) {
        int nc = ix->tcap ? ix->tcap * 2 : 256;
        st_tensor *nt = (st_tensor *)realloc(ix->t, (size_t)nc * sizeof *nt);
        if (!nt) { free(nm); return st_err_(err, errlen, "out of memory"); }
        ix->t = nt;
        ix->tcap = nc;
    }
    ix->t[ix->nt] = t;
    if (st_hash_insert_(ix, ix->nt)) { free(nm); return st_err_(err, errlen, "out of memory"); }
    ix->nt++;
    return 0;
}

/* Checks that the tensors [first, ix->nt) of one file tile its data section
 * exactly: sorted by offset, the first starts at 0, each starts where the
 * previous ended, and the last ends at the end of the file. */
static inline int st_check_tiling_(st_index *ix, int fi, int first, uint64_t data_start, char *err, size_t errlen) {
    int n = ix->nt - first;
    const char *path = ix->files[fi].path;
    uint64_t data_len = ix->files[fi].size - data_start;
    if (n == 0) return data_len ? st_err_(err, errlen, "%s: %llu data bytes but no tensors", path, (unsigned long long)data_len) : 0;
    st_range_ *r = (st_range_ *)malloc((size_t)n * sizeof *r);
    if (!r) return st_err_(err, errlen, "out of memory");
    for (int i = 0; i < n; i++) {
        r[i].b = ix->t[first + i].off - data_start;
        r[i].e = r[i].b + ix->t[first + i].nbytes;
        r[i].ti = first + i;
    }
    qsort(r, (size_t)n, sizeof *r, st_range_cmp_);
    uint64_t pos = 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (r[i].b != pos)
            rc = st_err_(err, errlen, "%s: tensor '%s': data %s at offset %llu (expected %llu)", path, ix->t[r[i].ti].name,
                         r[i].b > pos ? "leaves a gap" : "overlaps another tensor", (unsigned long long)r[i].b,
                         (unsigned long long)pos);
        pos = r[i].e;
    }
    if (!rc && pos != data_len)
        rc = st_err_(err, errlen, "%s: %llu trailing bytes after the last tensor", path, (unsigned long long)(data_len - pos));
    free(r);
    return rc;
}

/* Opens one safetensors file and indexes its tensors. Returns 0 or -1. */
static inline int st_add_file(st_index *ix, const char *path, char *err, size_t errlen) {
    if (ix->nfiles >= ST_MAX_FILES) return st_err_(err, errlen, "%s: more than %d shard files", path, ST_MAX_FILES);
    int fd = compat_open_regular(path, 0);
    if (fd < 0) return st_err_(err, errlen, "%s: %s", path, compat_strerror(errno));
    int64_t size = compat_file_size(fd);
    uint8_t hb[8];
    if (size < 8) { close(fd); return st_err_(err, errlen, "%s: file too short for a safetensors header (%lld bytes)", path, (long long)size); }
    if (compat_pread_full(fd, hb, 8, 0)) { close(fd); return st_err_(err, errlen, "%s: %s", path, strerror(errno)); }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | hb[i];
    if (hl > ST_MAX_HEADER) { close(fd); return st_err_(err, errlen, "%s: header length %llu exceeds the %u-byte cap", path, (unsigned long long)hl, ST_MAX_HEADER); }
    if (hl + 8 > (uint64_t)size) { close(fd); return st_err_(err, errlen, "%s: header length %llu runs past end of file (%lld bytes)", path, (unsigned long long)hl, (long long)size); }
    char *hdr = (char *)malloc(hl + 1);
    if (!hdr) { close(fd); return st_err_(err, errlen, "%s: out of memory for header", path); }
    if (compat_pread_full(fd, hdr, hl, 8)) { free(hdr); close(fd); return st_err_(err, errlen, "%s: %s", path, strerror(errno)); }
    char jerr[160];
    js_doc *d = js_parse(hdr, hl, jerr, sizeof jerr);
    free(hdr);
    if (!d) { close(fd); return st_err_(err, errlen, "%s: header is not valid JSON: %s", path, jerr); }
    if (js_typeof(d, d->root) != JS_OBJ) { js_free(d); close(fd); return st_err_(err, errlen, "%s: header is not a JSON object", path); }
    st_file *nf = (st_file *)realloc(ix->files, (size_t)(ix->nfiles + 1) * sizeof *nf);
    if (!nf) { js_free(d); close(fd); return st_err_(err, errlen, "out of memory"); }
    ix->files = nf;
    int fi = ix->nfiles++;
    ix->files[fi].path = strdup(path);
    ix->files[fi].fd = fd;
    ix->files[fi].size = (uint64_t)size;
    if (!ix->files[fi].path) { js_free(d); return st_err_(err, errlen, "out of memory"); } /* st_close closes fd */
    int first = ix->nt, rc = 0;
    uint64_t data_start = 8 + hl;
    for (int c = js_first(d, d->root); c >= 0 && !rc; c = js_next(d, c)) {
        if (!strcmp(js_key(d, c), "__metadata__") && js_key_len(d, c) == 12) {
            if (js_typeof(d, c) != JS_OBJ) rc = st_err_(err, errlen, "%s: __metadata__ is not an object", path);
            for (int m = js_first(d, c); m >= 0 && !rc; m = js_next(d, m))
                if (js_typeof(d, m) != JS_STR) rc = st_err_(err, errlen, "%s: __metadata__ value '%s' is not a string", path, js_key(d, m));
            continue;
        }
        rc = st_add_entry_(ix, fi, d, c, data_start, err, errlen);
    }
    js_free(d);
    if (!rc) rc = st_check_tiling_(ix, fi, first, data_start, err, errlen);
    return rc;
}

static inline int st_name_cmp_(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Cross-checks model.safetensors.index.json (if present) against the index:
 * every listed shard is a plain file name in `dir`, and every listed tensor
 * exists in that shard. */
static inline int st_check_index_json_(st_index *ix, const char *dir, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    js_doc *d = js_load_object(path, 64u << 20, err, errlen);
    if (!d && errno == ENOENT && errlen) err[0] = 0; /* no index is no error: leave no message behind */
    if (!d) return errno == ENOENT ? 0 : -1;
    int wm = js_get(d, d->root, "weight_map"), rc = 0;
    if (js_typeof(d, wm) != JS_OBJ) rc = st_err_(err, errlen, "%s: missing object 'weight_map'", path);
    for (int c = js_first(d, wm); c >= 0 && !rc; c = js_next(d, c)) {
        const char *shard = js_str(d, c), *name = js_key(d, c);
        if (!shard || !*shard || compat_last_sep(shard) || !strcmp(shard, "..") || strlen(shard) != js_str_len(d, c)) {
            rc = st_err_(err, errlen, "%s: weight_map['%s'] is not a file name inside the model directory", path, name);
            break;
        }
        const st_tensor *t = st_find(ix, st_key_(ix, name));
        const char *base = t ? strrchr(ix->files[t->file].path, '/') : NULL;
        base = base ? base + 1 : (t ? ix->files[t->file].path : NULL);
        if (!t) rc = st_err_(err, errlen, "%s: tensor '%s' listed in weight_map is in no shard", path, name);
        else if (strcmp(base, shard)) rc = st_err_(err, errlen, "%s: tensor '%s' listed in %s but found in %s", path, name, shard, base);
    }
    js_free(d);
    return rc;
}

static inline void st_close(st_index *ix) {
    for (int i = 0; i < ix->nfiles; i++) {
        if (ix->files[i].fd >= 0) close(ix->files[i].fd);
        free(ix->files[i].path);
    }
    for (int i = 0; i < ix->nt; i++) free(ix->t[i].name);
    free(ix->files);
    free(ix->t);
    free(ix->hash);
    memset(ix, 0, sizeof *ix);
}

/* Indexes every *.safetensors file of `dir` (sorted by name), names that
 * start with `strip` (a static string, or NULL) under the rest of the name:
 * a multimodal checkpoint's language model ("language_model.") reads as a
 * text model's. Returns 0, or -1 with err set and the index emptied. */
static inline int st_open_dir_as(st_index *ix, const char *dir, const char *strip, char *err, size_t errlen) {
    memset(ix, 0, sizeof *ix);
    ix->strip = strip;
    DIR *dp = opendir(dir);
    if (!dp) return st_err_(err, errlen, "%s: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        size_t l = strlen(de->d_name);
        if (l < 12 || strcmp(de->d_name + l - 12, ".safetensors") || de->d_name[0] == '.') continue;
        if (n >= ST_MAX_FILES) { rc = st_err_(err, errlen, "%s: more than %d shard files", dir, ST_MAX_FILES); break; }
        char **nn = (char **)realloc(names, (size_t)(n + 1) * sizeof *nn);
        if (!nn) { rc = st_err_(err, errlen, "out of memory"); break; }
        names = nn;
        if (!(names[n] = strdup(de->d_name))) { rc = st_err_(err, errlen, "out of memory"); break; }
        n++;
    }
    closedir(dp);
    if (!rc && n == 0) rc = st_err_(err, errlen, "%s: no *.safetensors files", dir);
    if (!rc) qsort(names, (size_t)n, sizeof *names, st_name_cmp_);
    for (int i = 0; i < n && !rc; i++) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= sizeof path) rc = st_err_(err, errlen, "%s: path too long", dir);
        else rc = st_add_file(ix, path, err, errlen);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!rc) rc = st_check_index_json_(ix, dir, err, errlen);
    if (rc) st_close(ix);
    return rc;
}

static inline int st_open_dir(st_index *ix, const char *dir, char *err, size_t errlen) { return st_open_dir_as(ix, dir, NULL, err, errlen); }

/* ---- element conversion ---- */

static inline float st_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float st_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 0) {
        if (m == 0) u = s;
        else { /* subnormal: normalize */
            e = 113;
            while (!(m & 1024)) { m <<= 1; e--; }
            u = s | (e << 23) | ((m & 1023) << 13);
        }
    } else if (e == 31) u = s | 0x7f800000u | (m << 13);
    else u = s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Converts n elements of a float dtype at src into f32. */
static inline void st_convert_f32_(st_dtype dt, const void *src, float *dst, size_t n) {
    const uint8_t *b = (const uint8_t *)src;
    if (dt == ST_F32) { memcpy(dst, src, n * 4); return; }
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(b[2 * i] | (b[2 * i + 1] << 8));
        dst[i] = dt == ST_BF16 ? st_bf16_to_f32(h) : st_f16_to_f32(h);
    }
}

static inline int st_is_float(st_dtype dt) { return dt == ST_F32 || dt == ST_F16 || dt == ST_BF16; }

/* Checks that t is a float tensor (F32/F16/BF16) of shape [d0] (d1 = 0) or
 * [d0, d1]. Returns 0, or -1 with err naming the file, the tensor and what
 * was expected. */
static inline int st_check_float(const st_index *ix, const st_tensor *t, int64_t d0, int64_t d1, char *err, size_t errlen) {
    const char *path = ix->files[t->file].path;
    int nd = d1 ? 2 : 1;
    if (!st_is_float(t->dtype)) return st_err_(err, errlen, "%s: tensor '%s': dtype %s is not F32/F16/BF16", path, t->name, st_dtype_names[t->dtype]);
    if (t->ndim == nd && t->shape[0] == d0 && (nd == 1 || t->shape[1] == d1)) return 0;
    char got[96] = "";
    for (int i = 0, o = 0; i < t->ndim && o < 80; i++) o += snprintf(got + o, sizeof got - (size_t)o, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (nd == 2) return st_err_(err, errlen, "%s: tensor '%s' has shape [%s], expected [%lld, %lld]", path, t->name, got, (long long)d0, (long long)d1);
    return st_err_(err, errlen, "%s: tensor '%s' has shape [%s], expected [%lld]", path, t->name, got, (long long)d0);
}

/* Reads elements [first, first+n) of a float tensor (F32/F16/BF16) as f32.
 * Returns 0 or -1 with err naming file and tensor. */
static inline int st_read_f32_range(const st_index *ix, const st_tensor *t, uint64_t first, size_t n, float *dst, char *err, size_t errlen) {
    const char *path = ix->files[t->file].path;
    if (!st_is_float(t->dtype)) return st_err_(err, errlen, "%s: tensor '%s': dtype %s is not F32/F16/BF16", path, t->name, st_dtype_names[t->dtype]);
    if (first > t->numel || n > t->numel - first) return st_err_(err, errlen, "%s: tensor '%s': read of %zu elements at %llu out of range", path, t->name, n, (unsigned long long)first);
    size_t esz = (size_t)st_dtype_bytes[t->dtype];
    uint64_t off = t->off + first * esz;
    if (t->dtype == ST_F32) {
        if (compat_pread_full(ix->files[t->file].fd, dst, n * 4, off))
            return st_err_(err, errlen, "%s: tensor '%s': read failed: %s", path, t->name, errno == EIO ? "file truncated or I/O error" : strerror(errno));
        return 0;
    }
    enum { CHUNK = 1 << 20 };
    uint8_t *tmp = (uint8_t *)malloc(CHUNK * esz);
    if (!tmp) return st_err_(err, errlen, "out of memory");
    for (size_t done = 0; done < n;) {
        size_t c = n - done < CHUNK ? n - done : CHUNK;
        if (compat_pread_full(ix->files[t->file].fd, tmp, c * esz, off + done * esz)) {
            free(tmp);
            return st_err_(err, errlen, "%s: tensor '%s': read failed: %s", path, t->name, errno == EIO ? "file truncated or I/O error" : strerror(errno));
        }
        st_convert_f32_(t->dtype, tmp, dst + done, c);
        done += c;
    }
    free(tmp);
    return 0;
}

/* Reads a whole float tensor as f32 into dst (numel floats). */
static inline int st_read_f32(const st_index *ix, const st_tensor *t, float *dst, char *err, size_t errlen) {
    return st_read_f32_range(ix, t, 0, (size_t)t->numel, dst, err, errlen);
}

/* Reads the raw bytes of a tensor (any dtype) into dst (t->nbytes bytes). */
static inline int st_read_raw(const st_index *ix, const st_tensor *t, void *dst, char *err, size_t errlen) {
    if (compat_pread_full(ix->files[t->file].fd, dst, (size_t)t->nbytes, t->off))
        return st_err_(err, errlen, "%s: tensor '%s': read failed: %s", ix->files[t->file].path, t->name,
                       errno == EIO ? "file truncated or I/O error" : strerror(errno));
    return 0;
}

/* ---- writing ----
 * A file is written in two steps: declare every tensor (name, dtype, shape)
 * with st_writer_add, then st_writer_begin writes the header to
 * "<path>.tmp" and st_writer_data appends the tensors' bytes in declaration
 * order; st_writer_finish checks that every byte came, syncs and renames to
 * <path>, so a crash never leaves a half-written file under the real name.
 * <path> must be new or a regular file (compat_replace), checked at begin
 * and again at the rename. */

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_RANK];
    uint64_t nbytes;
} st_wentry;

typedef struct {
    st_wentry *e;
    int n, cap;
    char *path, *tmp;
    int fd;
    uint64_t total, written;
} st_writer;

static inline void st_writer_init(st_writer *w) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
}

/* Declares the next tensor. Returns 0 or -1 (bad shape or out of memory). */
static inline int st_writer_add(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > ST_MAX_RANK || dt >= ST_NDTYPE) return -1;
    if (w->n == w->cap) {
        int nc = w->cap ? w->cap * 2 : 64;
        st_wentry *ne = (st_wentry *)realloc(w->e, (size_t)nc * sizeof *ne);
        if (!ne) return -1;
        w->e = ne;
        w->cap = nc;
    }
    st_wentry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && numel > UINT64_MAX / (uint64_t)shape[i])) return -1;
        numel *= (uint64_t)shape[i];
        e->shape[i] = shape[i];
    }
    if (!(e->name = strdup(name))) return -1;
    e->dtype = dt;
    e->ndim = ndim;
    e->nbytes = numel * (uint64_t)st_dtype_bytes[dt];
    w->total += e->nbytes;
    w->n++;
    return 0;
}

/* Appends s to a growable buffer. */
static inline int st_buf_put_(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap : 1024;
        while (nc < *len + n + 1) nc *= 2;
        char *nb = (char *)realloc(*buf, nc);
        if (!nb) return -1;
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

/* Writes a JSON string literal of s. */
static inline int st_buf_str_(char **buf, size_t *len, size_t *cap, const char *s) {
    int rc = st_buf_put_(buf, len, cap, "\"", 1);
    for (; *s && !rc; s++) {
        char esc[8];
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') snprintf(esc, sizeof esc, "\\%c", ch);
        else if (ch < 0x20) snprintf(esc, sizeof esc, "\\u%04x", ch);
        else esc[0] = (char)ch, esc[1] = 0;
        rc = st_buf_put_(buf, len, cap, esc, strlen(esc));
    }
    return rc ? rc : st_buf_put_(buf, len, cap, "\"", 1);
}

/* Writes the header (metadata: string pairs k0, v0, k1, v1, ..., NULL; may
 * be NULL) to "<path>.tmp". Returns 0 or -1 with err. */
static inline int st_writer_begin(st_writer *w, const char *path, const char *const *metadata, char *err, size_t errlen) {
    char *h = NULL, num[160];
    size_t len = 0, cap = 0;
    int rc = st_buf_put_(&h, &len, &cap, "{", 1);
    if (metadata && metadata[0]) {
        rc |= st_buf_put_(&h, &len, &cap, "\"__metadata__\":{", 16);
        for (int i = 0; metadata[i] && metadata[i + 1]; i += 2) {
            if (i) rc |= st_buf_put_(&h, &len, &cap, ",", 1);
            rc |= st_buf_str_(&h, &len, &cap, metadata[i]);
            rc |= st_buf_put_(&h, &len, &cap, ":", 1);
            rc |= st_buf_str_(&h, &len, &cap, metadata[i + 1]);
        }
        rc |= st_buf_put_(&h, &len, &cap, "}", 1);
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n && !rc; i++) {
        const st_wentry *e = &w->e[i];
        if (i || (metadata && metadata[0])) rc |= st_buf_put_(&h, &len, &cap, ",", 1);
        rc |= st_buf_str_(&h, &len, &cap, e->name);
        snprintf(num, sizeof num, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_names[e->dtype]);
        rc |= st_buf_put_(&h, &len, &cap, num, strlen(num));
        for (int d = 0; d < e->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)e->shape[d]);
            rc |= st_buf_put_(&h, &len, &cap, num, strlen(num));
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + e->nbytes));
        rc |= st_buf_put_(&h, &len, &cap, num, strlen(num));
        off += e->nbytes;
    }
    rc |= st_buf_put_(&h, &len, &cap, "}", 1);
    while (!rc && (8 + len) % 8) rc |= st_buf_put_(&h, &len, &cap, " ", 1); /* data starts 8-aligned */
    if (rc) { free(h); return st_err_(err, errlen, "%s: out of memory for the header", path); }
    const char *what = compat_unreplaceable(path); /* before anything is written */
    if (what) { free(h); return st_err_(err, errlen, "%s is %s, not a regular file; not replaced", path, what); }
    size_t pl = strlen(path);
    w->path = strdup(path);
    w->tmp = (char *)malloc(pl + 8);
    if (!w->path || !w->tmp) { free(h); return st_err_(err, errlen, "out of memory"); }
    snprintf(w->tmp, pl + 8, "%s.tmp", path);
    unlink(w->tmp); /* a stale temporary, or a FIFO or link under its name: never written through */
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (w->fd < 0) { free(h); return st_err_(err, errlen, "%s: %s", w->tmp, strerror(errno)); }
    uint8_t lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (uint8_t)((uint64_t)len >> (8 * i));
    rc = compat_write_full(w->fd, lb, 8) || compat_write_full(w->fd, h, len);
    free(h);
    return rc ? st_err_(err, errlen, "%s: %s", w->tmp, strerror(errno)) : 0;
}

/* Appends n bytes of tensor data (in declaration order). */
static inline int st_writer_data(st_writer *w, const void *buf, size_t n, char *err, size_t errlen) {
    if (w->written + n > w->total) return st_err_(err, errlen, "%s: more tensor bytes than declared", w->tmp);
    if (compat_write_full(w->fd, buf, n)) return st_err_(err, errlen, "%s: %s", w->tmp, strerror(errno));
    w->written += n;
    return 0;
}

/* Checks every declared byte was written, syncs, renames to the final
 * path. On failure the temporary file is removed. */
static inline int st_writer_finish(st_writer *w, char *err, size_t errlen) {
    int rc = 0;
    if (w->written != w->total) rc = st_err_(err, errlen, "%s: %llu of %llu tensor bytes written", w->tmp, (unsigned long long)w->written, (unsigned long long)w->total);
    else if (fsync(w->fd)) rc = st_err_(err, errlen, "%s: %s", w->tmp, strerror(errno));
    if (close(w->fd) && !rc) rc = st_err_(err, errlen, "%s: %s", w->tmp, strerror(errno));
    w->fd = -1;
    if (!rc && compat_replace(w->tmp, w->path))
        rc = errno == COMPAT_ENOTREG ? st_err_(err, errlen, "%s is %s, not a regular file; not replaced", w->path, compat_unreplaceable(w->path) ? compat_unreplaceable(w->path) : "not a regular file")
                                     : st_err_(err, errlen, "%s: %s", w->path, strerror(errno));
    if (rc) unlink(w->tmp);
    return rc;
}

/* Releases the writer (removing an unfinished temporary file). */
static inline void st_writer_free(st_writer *w) {
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->tmp);
    }
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    free(w->path);
    free(w->tmp);
    memset(w, 0, sizeof *w);
    w->fd = -1;
}

#endif
