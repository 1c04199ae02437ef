/* test_st.c — the safetensors index: typed reads of valid files, and every
 * kind of hostile header refused with a message naming file and tensor. */
#include "st.h"

#include <math.h>

#include "check.h"

static char dir[256];

/* Writes <dir>/<name>: 8-byte length, header text, then `data` bytes. A
 * negative hlen_override writes the real header length. */
static void write_st(const char *name, const char *header, const void *data, size_t n, long long hlen_override) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    uint64_t hl = hlen_override >= 0 ? (uint64_t)hlen_override : strlen(header);
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hl >> (8 * i));
    fwrite(b, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static void clean_dir(void) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
}

/* Opens the directory expecting failure with all the needles in the message. */
static void expect_refused(const char *needle1, const char *needle2) {
    st_index ix;
    char err[512] = "";
    int rc = st_open_dir(&ix, dir, err, sizeof err);
    CHECK(rc == -1);
    CHECK_HAS(err, needle1);
    if (needle2) CHECK_HAS(err, needle2);
    if (!rc) st_close(&ix);
    clean_dir();
}

static void test_valid(void) {
    /* f32 [2], bf16 [2], f16 [3], u8 [3]: 8 + 4 + 6 + 3 = 21 bytes */
    unsigned char data[21];
    float f[2] = {1.5f, -2.25f};
    memcpy(data, f, 8);
    uint16_t bf[2] = {0x3fc0, 0xc010};        /* 1.5, -2.25 */
    uint16_t hf[3] = {0x3e00, 0x0001, 0xfc00}; /* 1.5, smallest subnormal, -inf */
    memcpy(data + 8, bf, 4);
    memcpy(data + 12, hf, 6);
    data[18] = 7, data[19] = 8, data[20] = 9;
    write_st("a.safetensors",
             "{\"__metadata__\":{\"format\":\"pt\"},\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[18,21]},"
             "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[8,12]},"
             "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[12,18]}}   ",
             data, sizeof data, -1);
    write_st("b.safetensors", "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]}}", NULL, 0, -1);
    st_index ix;
    char err[512] = "";
    CHECK(st_open_dir(&ix, dir, err, sizeof err) == 0);
    if (err[0]) fprintf(stderr, "%s\n", err);
    CHECK(ix.nfiles == 2 && ix.nt == 5);
    float out[3];
    const st_tensor *t = st_find(&ix, "w");
    CHECK(t && st_read_f32(&ix, t, out, err, sizeof err) == 0 && out[0] == 1.5f && out[1] == -2.25f);
    t = st_find(&ix, "b");
    CHECK(t && t->ndim == 2 && t->shape[1] == 2 && st_read_f32(&ix, t, out, err, sizeof err) == 0 && out[0] == 1.5f && out[1] == -2.25f);
    t = st_find(&ix, "h");
    CHECK(t && st_read_f32(&ix, t, out, err, sizeof err) == 0 && out[0] == 1.5f && out[1] == 5.9604644775390625e-8f && isinf(out[2]) && out[2] < 0);
    t = st_find(&ix, "u");
    unsigned char raw[3];
    CHECK(t && st_read_raw(&ix, t, raw, err, sizeof err) == 0 && raw[0] == 7 && raw[2] == 9);
    CHECK(st_read_f32(&ix, t, out, err, sizeof err) == -1);
    CHECK_HAS(err, "'u'");
    CHECK_HAS(err, "not F32/F16/BF16");
    CHECK(st_find(&ix, "e") && st_find(&ix, "e")->numel == 0);
    CHECK(st_find(&ix, "missing") == NULL);
    /* a file that shrinks after indexing: the read says so, never zeros */
    char path[512];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    const st_tensor *th = st_find(&ix, "h");
    CHECK(th && truncate(path, (off_t)th->off + 2) == 0);
    t = st_find(&ix, "h");
    CHECK(st_read_f32(&ix, t, out, err, sizeof err) == -1);
    CHECK_HAS(err, "a.safetensors");
    CHECK_HAS(err, "truncated");
    st_close(&ix);
    clean_dir();

    /* model.safetensors.index.json agreeing with the shards is accepted */
    write_st("m-1.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", f, 4, -1);
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *fi = fopen(p, "w");
    fputs("{\"metadata\":{},\"weight_map\":{\"x\":\"m-1.safetensors\"}}", fi);
    fclose(fi);
    CHECK(st_open_dir(&ix, dir, err, sizeof err) == 0);
    st_close(&ix);
    clean_dir();
}

static void test_hostile(void) {
    char data[64] = {0};
    write_st("s.safetensors", "", NULL, 0, 0);
    {   /* file shorter than 8 bytes */
        char p[512];
        snprintf(p, sizeof p, "%s/s.safetensors", dir);
        CHECK(truncate(p, 5) == 0);
    }
    expect_refused("s.safetensors", "too short");
    write_st("s.safetensors", "{}", NULL, 0, 200000000);
    expect_refused("s.safetensors", "exceeds");
    write_st("s.safetensors", "{}", NULL, 0, 4000);
    expect_refused("s.safetensors", "past end of file");
    write_st("s.safetensors", "{\"a\":", NULL, 0, -1);
    expect_refused("s.safetensors", "not valid JSON");
    write_st("s.safetensors", "[1,2]", NULL, 0, -1);
    expect_refused("s.safetensors", "not a JSON object");
    write_st("s.safetensors", "{\"t\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4, -1);
    expect_refused("'t'", "unknown dtype 'F33'");
    write_st("s.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,4]}}", data, 4, -1);
    expect_refused("'t'", "overflows");
    write_st("s.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", data, 4, -1);
    expect_refused("'t'", "shape[0]");
    write_st("s.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", data, 4, -1);
    expect_refused("'t'", "data_offsets");
    write_st("s.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", data, 4, -1);
    expect_refused("'t'", "data_offsets");
    write_st("s.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 4, -1);
    expect_refused("'t'", "past end of file");
    write_st("s.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", data, 4, -1);
    expect_refused("'t'", "shape x F32 needs 8");
    write_st("s.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", data, 4, -1);
    expect_refused("'t'", "end before begin");
    write_st("s.safetensors",
             "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
             data, 12, -1);
    expect_refused("'u'", "gap");
    write_st("s.safetensors",
             "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             data, 8, -1);
    expect_refused("s.safetensors", "overlaps");
    write_st("s.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 9, -1);
    expect_refused("s.safetensors", "5 trailing bytes");
    write_st("s.safetensors",
             "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             data, 8, -1);
    expect_refused("s.safetensors", "duplicate key");
    write_st("a.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4, -1);
    write_st("b.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4, -1);
    expect_refused("b.safetensors: tensor 't' also defined in", "a.safetensors");
    write_st("s.safetensors", "{\"__metadata__\":{\"a\":1},\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4, -1);
    expect_refused("s.safetensors", "__metadata__ value 'a'");
    write_st("s.safetensors", "{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4, -1);
    expect_refused("'t'", "dtype");
    write_st("s.safetensors", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4, -1);
    expect_refused("s.safetensors", "name empty");
    write_st("s.safetensors", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4, -1);
    expect_refused("s.safetensors", "NUL");
    expect_refused("no *.safetensors", NULL); /* empty directory */

    /* index.json: path escaping the directory, and a tensor in the wrong shard */
    char p[512];
    write_st("m-1.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4, -1);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *fi = fopen(p, "w");
    fputs("{\"weight_map\":{\"x\":\"../m-1.safetensors\"}}", fi);
    fclose(fi);
    expect_refused("model.safetensors.index.json", "weight_map['x']");
    write_st("m-1.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4, -1);
    fi = fopen(p, "w");
    fputs("{\"weight_map\":{\"y\":\"m-1.safetensors\"}}", fi);
    fclose(fi);
    expect_refused("tensor 'y' listed in weight_map", NULL);

    st_index ix;
    char err[512];
    CHECK(st_open_dir(&ix, "/nonexistent-colibri-dir", err, sizeof err) == -1);
    CHECK_HAS(err, "/nonexistent-colibri-dir");
}

/* The writer: a round trip through the reader, and an unfinished file that
 * never appears under its real name. */
static void test_writer(void) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    st_writer w;
    st_writer_init(&w);
    int64_t s1[2] = {2, 3}, s2[1] = {5};
    CHECK(st_writer_add(&w, "a.weight", ST_F32, 2, s1) == 0);
    CHECK(st_writer_add(&w, "b \"quoted\"", ST_U8, 1, s2) == 0);
    const char *meta[] = {"format", "pt", NULL};
    CHECK(st_writer_begin(&w, path, meta, err, sizeof err) == 0);
    float f[6] = {1, 2, 3, 4, 5, 6};
    uint8_t u[5] = {9, 8, 7, 6, 5};
    CHECK(st_writer_data(&w, f, sizeof f, err, sizeof err) == 0);
    CHECK(st_writer_data(&w, u, 3, err, sizeof err) == 0);
    CHECK(st_writer_data(&w, u + 3, 2, err, sizeof err) == 0);
    CHECK(st_writer_data(&w, u, 1, err, sizeof err) == -1); /* more than declared */
    CHECK(st_writer_finish(&w, err, sizeof err) == 0);
    st_writer_free(&w);
    st_index ix;
    CHECK(st_open_dir(&ix, dir, err, sizeof err) == 0);
    const st_tensor *a = st_find(&ix, "a.weight"), *b = st_find(&ix, "b \"quoted\"");
    float back[6];
    uint8_t ub[5];
    CHECK(a && b && a->off % 8 == 0 && st_read_f32(&ix, a, back, err, sizeof err) == 0 && !memcmp(back, f, sizeof f));
    CHECK(b && st_read_raw(&ix, b, ub, err, sizeof err) == 0 && !memcmp(ub, u, 5));
    st_close(&ix);
    clean_dir();
    /* too few bytes: refused, and nothing left behind */
    st_writer_init(&w);
    CHECK(st_writer_add(&w, "x", ST_F32, 1, s2) == 0);
    CHECK(st_writer_begin(&w, path, NULL, err, sizeof err) == 0);
    CHECK(st_writer_data(&w, f, 8, err, sizeof err) == 0);
    CHECK(st_writer_finish(&w, err, sizeof err) == -1);
    CHECK_HAS(err, "8 of 20 tensor bytes written");
    st_writer_free(&w);
    CHECK(access(path, F_OK) != 0);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);
}

/* st_open_dir_as: names under the prefix are indexed without it (also in
 * model.safetensors.index.json), others as they are; a stripped name that
 * collides with another is refused, and so is a name that is only the prefix. */
static void test_strip(void) {
    float v[3] = {1, 2, 3};
    write_st("m.safetensors",
             "{\"language_model.model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"vision_tower.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
             "\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
             v, sizeof v, -1);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"weight_map\":{\"language_model.model.norm.weight\":\"m.safetensors\",\"vision_tower.w\":\"m.safetensors\","
          "\"lm_head.weight\":\"m.safetensors\"}}", f);
    fclose(f);
    st_index ix;
    char err[512] = "";
    CHECK(st_open_dir_as(&ix, dir, "language_model.", err, sizeof err) == 0);
    if (err[0]) fprintf(stderr, "%s\n", err);
    const st_tensor *n = st_find(&ix, "model.norm.weight");
    CHECK(n && n->off == 8 + strlen("{\"language_model.model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                     "\"vision_tower.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                                     "\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}"));
    CHECK(st_find(&ix, "vision_tower.w") && st_find(&ix, "lm_head.weight") && !st_find(&ix, "language_model.model.norm.weight"));
    st_close(&ix);
    unlink(path);
    write_st("m.safetensors",
             "{\"language_model.x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", v, 8, -1);
    CHECK(st_open_dir_as(&ix, dir, "language_model.", err, sizeof err) == -1);
    CHECK_HAS(err, "also defined in");
    write_st("m.safetensors", "{\"language_model.\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", v, 4, -1);
    CHECK(st_open_dir_as(&ix, dir, "language_model.", err, sizeof err) == -1);
    CHECK_HAS(err, "is only the prefix");
    clean_dir();
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/colibri-test-st-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_valid();
    test_hostile();
    test_writer();
    test_strip();
    rmdir(dir);
    return check_report("test_st");
}
