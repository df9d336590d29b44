/*
 * safetensors.c: mmap'ed safetensors reader with validation and dtype conversion, and an atomic,
 * optionally sharded writer (see safetensors.h for the format and the error contract).
 */
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "signals.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors.c assumes a little-endian host");

// the safetensors crate refuses headers above 100 MB; so do we (a corrupt length field usually is huge)
#define ST_MAX_HEADER ((uint64_t)100000000)
#define ST_CHUNK_ELEMS 16384
#define ST_WRITE_CHUNK ((size_t)64 << 20)

static const char* st_dtype_str(DType dt) { return dt == DT_F32 ? "F32" : dt == DT_F16 ? "F16" : "BF16"; }

static void shape_str(char* buf, size_t len, int ndim, const int64_t* shape) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && n < len; i++) n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

// ---------------------------------------------------------------------------------------------
// element conversion

uint16_t safetensors_f32_to_f16(float f) {
    // F. Giesen's round-to-nearest-even float->half (public domain technique)
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint16_t o;
    if (u >= (uint32_t)(127 + 16) << 23) {  // >= 65536 (after rounding: inf) or inf / nan
        o = u > 0x7f800000u ? 0x7e00 : 0x7c00;
    } else if (u < (uint32_t)113 << 23) {  // result is a subnormal half or zero
        const uint32_t magic_u = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
        float magic, x;
        memcpy(&magic, &magic_u, 4);
        memcpy(&x, &u, 4);
        x += magic;  // the FPU rounds to nearest even at the half-subnormal ulp
        uint32_t xu;
        memcpy(&xu, &x, 4);
        o = (uint16_t)(xu - magic_u);
    } else {
        uint32_t mant_odd = (u >> 13) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfff;
        u += mant_odd;
        o = (uint16_t)(u >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

uint16_t safetensors_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float safetensors_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0) {
        float v = (float)mant * (1.0f / 16777216.0f);  // mant * 2^-24, exact
        memcpy(&u, &v, 4);
        u |= sign;
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float safetensors_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void safetensors_convert(void* dst, DType ddt, const void* src, DType sdt, size_t n) {
    if (ddt == sdt) {
        if (dst != src) memcpy(dst, src, n * dtype_size(ddt));
        return;
    }
    const uint8_t* s = (const uint8_t*)src;
    uint8_t* d = (uint8_t*)dst;
    for (size_t i = 0; i < n; i++) {
        float f;
        if (sdt == DT_F32) {
            memcpy(&f, s + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            f = sdt == DT_F16 ? safetensors_f16_to_f32(h) : safetensors_bf16_to_f32(h);
        }
        if (ddt == DT_F32) {
            memcpy(d + 4 * i, &f, 4);
        } else {
            uint16_t h = ddt == DT_F16 ? safetensors_f32_to_f16(f) : safetensors_f32_to_bf16(f);
            memcpy(d + 2 * i, &h, 2);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// reader

typedef struct {
    char* path;
    bool opened;         // mapped and validated
    uint8_t* map;        // whole file, PROT_READ
    size_t size;         // file size in bytes
    size_t data_start;   // 8 + header length
} StFile;

typedef struct {
    SafeTensorInfo info;
    int file;       // index into files
    bool loaded;    // info filled from the file's header
    size_t offset;  // absolute byte offset of the data in the file
} StEntry;

struct SafeTensors {
    char* path;  // as opened
    StFile* files;
    int nfiles;
    StEntry* t;
    int n;
    char** meta_keys;
    char** meta_vals;
    int nmeta;
    bool sharded;
};

static int st_find(const SafeTensors* st, const char* name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->t[i].info.name, name) == 0) return i;
    return -1;
}

static void st_add_meta(SafeTensors* st, const char* k, const char* v) {
    st->meta_keys = realloc_check(st->meta_keys, (size_t)(st->nmeta + 1) * sizeof(char*));
    st->meta_vals = realloc_check(st->meta_vals, (size_t)(st->nmeta + 1) * sizeof(char*));
    st->meta_keys[st->nmeta] = strdup_check(k);
    st->meta_vals[st->nmeta] = strdup_check(v);
    st->nmeta++;
}

static int parse_dtype(const char* s, DType* dt) {
    if (strcmp(s, "F32") == 0) *dt = DT_F32;
    else if (strcmp(s, "F16") == 0) *dt = DT_F16;
    else if (strcmp(s, "BF16") == 0) *dt = DT_BF16;
    else return -1;
    return 0;
}

typedef struct {
    size_t begin, end;
    const char* name;
} StRange;

static int cmp_range(const void* a, const void* b) {
    const StRange* x = a;
    const StRange* y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

// Maps and validates file fi. For a single file (add_all) every tensor becomes an entry; for a shard the
// entries named by the index and mapped to this file are filled (others in the shard are ignored, as HF does).
static int st_open_file(SafeTensors* st, int fi, bool add_all, char* err, size_t errlen) {
    StFile* f = &st->files[fi];
    const char* p = f->path;
    int fd = open(p, O_RDONLY);
    if (fd < 0) return t5_set_err(err, errlen, "cannot open %s: %s", p, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return t5_set_err(err, errlen, "cannot stat %s: %s", p, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return t5_set_err(err, errlen, "%s is not a regular file", p);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return t5_set_err(err, errlen, "truncated safetensors file %s: %zu bytes, less than the 8-byte header length", p,
                      size);
    }
    uint8_t* map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) return t5_set_err(err, errlen, "cannot mmap %s: %s", p, strerror(map_errno));
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)map[i] << (8 * i);
    int rc = -1;
    json_t* root = NULL;
    StRange* ranges = NULL;
    if (hlen > ST_MAX_HEADER) {
        t5_set_err(err, errlen, "corrupt safetensors header in %s: header length %llu is implausible (limit %llu)", p,
               (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
        goto out;
    }
    if (hlen > size - 8) {
        t5_set_err(err, errlen, "truncated safetensors file %s: header length %llu exceeds the %zu bytes after it", p,
               (unsigned long long)hlen, size - 8);
        goto out;
    }
    // the safetensors crate's order: the header is UTF-8 text starting with '{' (a NUL or any other
    // control byte is invalid JSON anyway; jansson would also stop at an embedded NUL)
    if (hlen == 0 || map[8] != '{') {
        t5_set_err(err, errlen, "corrupt safetensors header in %s: the header does not start with '{'", p);
        goto out;
    }
    if (memchr(map + 8, 0, (size_t)hlen) != NULL) {
        t5_set_err(err, errlen, "corrupt safetensors header in %s: the header holds a NUL byte", p);
        goto out;
    }
    json_error_t jerr;
    // duplicate names are an error (jansson would keep the last one silently)
    root = json_loadb((const char*)map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        t5_set_err(err, errlen, "corrupt safetensors header in %s: invalid JSON at byte %d: %s", p, jerr.position,
               jerr.text);
        goto out;
    }
    if (!json_is_object(root)) {
        t5_set_err(err, errlen, "corrupt safetensors header in %s: not a JSON object", p);
        goto out;
    }
    size_t data_start = 8 + (size_t)hlen, data_len = size - data_start;
    size_t nt = json_object_size(root), nr = 0;
    ranges = calloc_check(nt ? nt : 1, sizeof(StRange));
    const char* key;
    json_t* v;
    json_object_foreach(root, key, v) {
        if (key[0] == 0) {
            t5_set_err(err, errlen, "corrupt safetensors header in %s: a tensor has an empty name", p);
            goto out;
        }
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                t5_set_err(err, errlen, "corrupt safetensors header in %s: __metadata__ is not an object", p);
                goto out;
            }
            const char* mk;
            json_t* mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    t5_set_err(err, errlen, "corrupt safetensors header in %s: __metadata__ value of '%s' is not a string",
                           p, mk);
                    goto out;
                }
                if (add_all) st_add_meta(st, mk, json_string_value(mv));
            }
            continue;
        }
        json_t* jd = json_object_get(v, "dtype");
        json_t* js = json_object_get(v, "shape");
        json_t* jo = json_object_get(v, "data_offsets");
        if (!json_is_object(v) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) ||
            json_array_size(jo) != 2) {
            t5_set_err(err, errlen,
                   "corrupt safetensors header in %s: tensor '%s' needs \"dtype\", \"shape\" and a 2-element "
                   "\"data_offsets\"",
                   p, key);
            goto out;
        }
        SafeTensorInfo info = {0};
        if (parse_dtype(json_string_value(jd), &info.dtype) != 0) {
            t5_set_err(err, errlen, "tensor '%s' in %s has unsupported dtype %s (t5train reads F32, F16 and BF16)", key, p,
                   json_string_value(jd));
            goto out;
        }
        if (json_array_size(js) > SAFETENSORS_MAX_DIMS) {
            t5_set_err(err, errlen, "tensor '%s' in %s has %zu dimensions (at most %d supported)", key, p,
                   json_array_size(js), SAFETENSORS_MAX_DIMS);
            goto out;
        }
        info.ndim = (int)json_array_size(js);
        info.numel = 1;
        for (int d = 0; d < info.ndim; d++) {
            json_t* e = json_array_get(js, (size_t)d);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > ((json_int_t)1 << 40)) {
                t5_set_err(err, errlen, "corrupt safetensors header in %s: tensor '%s' has an invalid shape", p, key);
                goto out;
            }
            info.shape[d] = (int64_t)json_integer_value(e);
        }
        // element and byte counts with overflow checks (the crate's ValidationOverflow): [2^32, 2^32, 2]
        // must not wrap to 0 elements and pass as an empty tensor
        bool overflow = false;
        for (int d = 0; d < info.ndim; d++)
            overflow |= __builtin_mul_overflow(info.numel, (size_t)info.shape[d], &info.numel);
        overflow |= __builtin_mul_overflow(info.numel, dtype_size(info.dtype), &info.nbytes);
        if (overflow) {
            char sh[256];
            shape_str(sh, sizeof sh, info.ndim, info.shape);
            t5_set_err(err, errlen, "corrupt safetensors header in %s: tensor '%s' has shape %s, whose size overflows",
                       p, key, sh);
            goto out;
        }
        json_t* j0 = json_array_get(jo, 0);
        json_t* j1 = json_array_get(jo, 1);
        if (!json_is_integer(j0) || !json_is_integer(j1) || json_integer_value(j0) < 0 ||
            json_integer_value(j1) < json_integer_value(j0)) {
            t5_set_err(err, errlen, "corrupt safetensors header in %s: tensor '%s' has invalid data_offsets", p, key);
            goto out;
        }
        size_t b = (size_t)json_integer_value(j0), e = (size_t)json_integer_value(j1);
        if (e - b != info.nbytes) {
            char sh[256];
            shape_str(sh, sizeof sh, info.ndim, info.shape);
            t5_set_err(err, errlen,
                   "corrupt safetensors header in %s: tensor '%s' data_offsets [%zu, %zu] hold %zu bytes but %s %s "
                   "needs %zu",
                   p, key, b, e, e - b, st_dtype_str(info.dtype), sh, info.nbytes);
            goto out;
        }
        if (e > data_len) {
            t5_set_err(err, errlen,
                   "truncated safetensors file %s: tensor '%s' ends at data byte %zu but the file holds only %zu "
                   "data bytes (%zu bytes in all)",
                   p, key, e, data_len, size);
            goto out;
        }
        ranges[nr].begin = b;
        ranges[nr].end = e;
        ranges[nr].name = key;
        nr++;
        int idx = st_find(st, key);
        if (add_all) {
            if (idx >= 0) {
                t5_set_err(err, errlen, "corrupt safetensors header in %s: tensor '%s' appears twice", p, key);
                goto out;
            }
            st->t = realloc_check(st->t, (size_t)(st->n + 1) * sizeof(StEntry));
            idx = st->n++;
            st->t[idx].info.name = strdup_check(key);
            st->t[idx].file = fi;
        }
        if (idx >= 0 && st->t[idx].file == fi) {
            StEntry* en = &st->t[idx];
            const char* nm = en->info.name;
            en->info = info;
            en->info.name = nm;
            en->info.file = f->path;
            en->loaded = true;
            en->offset = data_start + b;
        }
    }
    // the crate's layout rule: sorted by offsets, the tensors tile the data area exactly, from byte 0 to
    // the end of the file: every tensor begins where the previous one ended (no gap, no overlap, no two
    // names for one range; empty tensors sit at the current end) and nothing follows the last one
    qsort(ranges, nr, sizeof(StRange), cmp_range);
    size_t at = 0;
    const char* prev = NULL;
    for (size_t i = 0; i < nr; i++) {
        if (ranges[i].begin != at) {
            if (ranges[i].begin < at)
                t5_set_err(err, errlen, "corrupt safetensors header in %s: tensors '%s' and '%s' overlap", p,
                           prev ? prev : "?", ranges[i].name);
            else
                t5_set_err(err, errlen,
                           "corrupt safetensors header in %s: %zu unused bytes before tensor '%s' (data byte %zu)", p,
                           ranges[i].begin - at, ranges[i].name, at);
            goto out;
        }
        at = ranges[i].end;
        if (ranges[i].end > ranges[i].begin) prev = ranges[i].name;
    }
    if (at != data_len) {
        t5_set_err(err, errlen,
                   "corrupt safetensors file %s: %zu bytes after the last tensor (the tensors end at data byte %zu of "
                   "%zu)",
                   p, data_len - at, at, data_len);
        goto out;
    }
    // for a shard, every tensor the index maps here must be present
    for (int i = 0; i < st->n; i++) {
        if (st->t[i].file == fi && !st->t[i].loaded) {
            t5_set_err(err, errlen, "missing tensor '%s' in %s (the index maps it to this shard)", st->t[i].info.name, p);
            goto out;
        }
    }
    f->map = map;
    f->size = size;
    f->data_start = data_start;
    f->opened = true;
    map = NULL;
    rc = 0;
out:
    free(ranges);
    json_decref(root);
    if (map) munmap(map, size);
    return rc;
}

static bool ends_with(const char* s, const char* suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int st_open_index(SafeTensors* st, const char* path, char* err, size_t errlen) {
    json_error_t jerr;
    json_t* root = json_load_file(path, 0, &jerr);
    if (!root) {
        if (!t5_path_exists(path)) return t5_set_err(err, errlen, "cannot open %s: %s", path, strerror(ENOENT));
        return t5_set_err(err, errlen, "corrupt safetensors index %s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    }
    int rc = -1;
    char* dir = strdup_check(path);
    char* slash = strrchr(dir, '/');
    if (slash) slash[1] = 0;
    else dir[0] = 0;
    json_t* wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        t5_set_err(err, errlen, "corrupt safetensors index %s: no \"weight_map\" object", path);
        goto out;
    }
    json_t* md = json_object_get(root, "metadata");
    if (json_is_object(md)) {
        const char* k;
        json_t* v;
        json_object_foreach(md, k, v) {
            char buf[64];
            if (json_is_string(v)) st_add_meta(st, k, json_string_value(v));
            else if (json_is_integer(v)) {
                snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
                st_add_meta(st, k, buf);
            }
        }
    }
    const char* name;
    json_t* v;
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v) || strchr(json_string_value(v), '/')) {
            t5_set_err(err, errlen, "corrupt safetensors index %s: weight_map entry '%s' is not a file name in this folder",
                   path, name);
            goto out;
        }
        const char* fn = json_string_value(v);
        int fi = -1;
        size_t need = strlen(dir) + strlen(fn) + 1;
        char* full = malloc_check(need);
        snprintf(full, need, "%s%s", dir, fn);
        for (int i = 0; i < st->nfiles; i++)
            if (strcmp(st->files[i].path, full) == 0) fi = i;
        if (fi < 0) {
            if (!t5_is_file(full)) {
                t5_set_err(err, errlen, "missing shard %s (named in %s for tensor '%s')", full, path, name);
                free(full);
                goto out;
            }
            st->files = realloc_check(st->files, (size_t)(st->nfiles + 1) * sizeof(StFile));
            memset(&st->files[st->nfiles], 0, sizeof(StFile));
            st->files[st->nfiles].path = full;
            fi = st->nfiles++;
        } else {
            free(full);
        }
        st->t = realloc_check(st->t, (size_t)(st->n + 1) * sizeof(StEntry));
        memset(&st->t[st->n], 0, sizeof(StEntry));
        st->t[st->n].info.name = strdup_check(name);
        st->t[st->n].info.file = st->files[fi].path;
        st->t[st->n].file = fi;
        st->n++;
    }
    st->sharded = true;
    rc = 0;
out:
    free(dir);
    json_decref(root);
    return rc;
}

int safetensors_open(SafeTensors** out, const char* path, char* err, size_t errlen) {
    *out = NULL;
    SafeTensors* st = calloc_check(1, sizeof(SafeTensors));
    st->path = strdup_check(path);
    char* target = NULL;
    if (t5_is_dir(path)) {
        char* idx = t5_path_join(path, "model.safetensors.index.json");
        char* one = t5_path_join(path, "model.safetensors");
        if (t5_is_file(one)) {
            target = one;
            free(idx);
        } else if (t5_is_file(idx)) {
            target = idx;
            free(one);
        } else {
            t5_set_err(err, errlen, "no model.safetensors or model.safetensors.index.json in %s", path);
            free(idx);
            free(one);
            safetensors_close(st);
            return -1;
        }
    } else {
        target = strdup_check(path);
    }
    int rc;
    if (ends_with(target, ".index.json")) {
        rc = st_open_index(st, target, err, errlen);
    } else {
        st->files = calloc_check(1, sizeof(StFile));
        st->files[0].path = target;
        st->nfiles = 1;
        target = NULL;
        rc = st_open_file(st, 0, true, err, errlen);
    }
    free(target);
    if (rc != 0) {
        safetensors_close(st);
        return -1;
    }
    *out = st;
    return 0;
}

void safetensors_close(SafeTensors* st) {
    if (!st) return;
    for (int i = 0; i < st->nfiles; i++) {
        if (st->files[i].map) munmap(st->files[i].map, st->files[i].size);
        free(st->files[i].path);
    }
    for (int i = 0; i < st->n; i++) free((char*)st->t[i].info.name);
    for (int i = 0; i < st->nmeta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_vals[i]);
    }
    free(st->meta_keys);
    free(st->meta_vals);
    free(st->files);
    free(st->t);
    free(st->path);
    free(st);
}

int safetensors_count(const SafeTensors* st) { return st->n; }
const char* safetensors_name(const SafeTensors* st, int i) { return i >= 0 && i < st->n ? st->t[i].info.name : NULL; }
bool safetensors_has(const SafeTensors* st, const char* name) { return st_find(st, name) >= 0; }

const char* safetensors_metadata(const SafeTensors* st, const char* key) {
    for (int i = 0; i < st->nmeta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_vals[i];
    return NULL;
}

static int st_entry(SafeTensors* st, const char* name, StEntry** out, char* err, size_t errlen) {
    int i = st_find(st, name);
    if (i < 0) return t5_set_err(err, errlen, "missing tensor '%s' in %s", name, st->path);
    StEntry* e = &st->t[i];
    if (!st->files[e->file].opened && st_open_file(st, e->file, false, err, errlen) != 0) return -1;
    *out = e;
    return 0;
}

int safetensors_info(SafeTensors* st, const char* name, const SafeTensorInfo** info, char* err, size_t errlen) {
    StEntry* e;
    if (st_entry(st, name, &e, err, errlen) != 0) return -1;
    *info = &e->info;
    return 0;
}

int safetensors_data(SafeTensors* st, const char* name, const void** data, char* err, size_t errlen) {
    StEntry* e;
    if (st_entry(st, name, &e, err, errlen) != 0) return -1;
    *data = st->files[e->file].map + e->offset;
    return 0;
}

int safetensors_check_dtype(SafeTensors* st, const char* name, DType dt, char* err, size_t errlen) {
    StEntry* e;
    if (st_entry(st, name, &e, err, errlen) != 0) return -1;
    if (e->info.dtype != dt)
        return t5_set_err(err, errlen, "tensor '%s' in %s has dtype %s, expected %s", name, e->info.file,
                      st_dtype_str(e->info.dtype), st_dtype_str(dt));
    return 0;
}

// converts n elements starting at element `first` of entry e into dst, in chunks (streaming from the map)
static void st_copy(SafeTensors* st, StEntry* e, size_t first, size_t n, void* dst, DType ddt) {
    const uint8_t* src = st->files[e->file].map + e->offset + first * dtype_size(e->info.dtype);
    uint8_t* d = dst;
    size_t ss = dtype_size(e->info.dtype), ds = dtype_size(ddt);
    if (ddt == e->info.dtype) {
        memcpy(d, src, n * ss);
        return;
    }
    // chunks are independent: convert them in parallel for the big matrices (t5-11b's FF weights)
    long nchunks = (long)CEIL_DIV(n, (size_t)ST_CHUNK_ELEMS);
#pragma omp parallel for schedule(static) if (nchunks > 64)
    for (long c = 0; c < nchunks; c++) {
        size_t i = (size_t)c * ST_CHUNK_ELEMS;
        size_t m = T5_MIN((size_t)ST_CHUNK_ELEMS, n - i);
        safetensors_convert(d + i * ds, ddt, src + i * ss, e->info.dtype, m);
    }
}

int safetensors_read(SafeTensors* st, const char* name, void* dst, DType dst_dtype, const int64_t* expect_shape,
                     int expect_ndim, char* err, size_t errlen) {
    StEntry* e;
    if (st_entry(st, name, &e, err, errlen) != 0) return -1;
    if (expect_ndim >= 0) {
        bool same = expect_ndim == e->info.ndim;
        for (int d = 0; same && d < expect_ndim; d++) same = expect_shape[d] == e->info.shape[d];
        if (!same) {
            char a[256], b[256];
            shape_str(a, sizeof a, e->info.ndim, e->info.shape);
            shape_str(b, sizeof b, expect_ndim, expect_shape);
            return t5_set_err(err, errlen, "tensor '%s' in %s has shape %s, expected %s", name, e->info.file, a, b);
        }
    }
    st_copy(st, e, 0, e->info.numel, dst, dst_dtype);
    e->info.consumed = true;
    return 0;
}

int safetensors_read_slice(SafeTensors* st, const char* name, size_t elem_offset, size_t n, void* dst,
                           DType dst_dtype, char* err, size_t errlen) {
    StEntry* e;
    if (st_entry(st, name, &e, err, errlen) != 0) return -1;
    if (elem_offset > e->info.numel || n > e->info.numel - elem_offset)
        return t5_set_err(err, errlen, "slice [%zu, %zu) is out of range for tensor '%s' in %s (%zu elements)",
                      elem_offset, elem_offset + n, name, e->info.file, e->info.numel);
    st_copy(st, e, elem_offset, n, dst, dst_dtype);
    e->info.consumed = true;
    return 0;
}

int safetensors_unconsumed(const SafeTensors* st, char* buf, size_t buflen) {
    int count = 0;
    size_t used = 0;
    bool cut = false;
    if (buf && buflen) buf[0] = 0;
    for (int i = 0; i < st->n; i++) {
        if (st->t[i].info.consumed) continue;
        count++;
        if (!buf || !buflen || cut) continue;
        const char* nm = st->t[i].info.name;
        size_t need = strlen(nm) + (used ? 2 : 0);
        if (used + need + 5 + 1 <= buflen) {  // keep room for a final ", ..."
            used += (size_t)snprintf(buf + used, buflen - used, "%s%s", used ? ", " : "", nm);
        } else {
            cut = true;
            snprintf(buf + used, buflen - used, "%s...", used ? ", " : "");
        }
    }
    return count;
}

// ---------------------------------------------------------------------------------------------
// writer

typedef struct {
    char* name;
    DType dt;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    size_t nbytes;
    const void* data;
    SafeTensorsProduceFn fn;
    void* ctx;
} WEntry;

struct SafeTensorsWriter {
    WEntry* e;
    int n;
    char** mk;
    char** mv;
    int nmeta;
};

SafeTensorsWriter* safetensors_writer_new(void) {
    SafeTensorsWriter* w = calloc_check(1, sizeof(SafeTensorsWriter));
    safetensors_writer_set_metadata(w, "format", "pt");
    return w;
}

void safetensors_writer_free(SafeTensorsWriter* w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    for (int i = 0; i < w->nmeta; i++) {
        free(w->mk[i]);
        free(w->mv[i]);
    }
    free(w->e);
    free(w->mk);
    free(w->mv);
    free(w);
}

void safetensors_writer_set_metadata(SafeTensorsWriter* w, const char* key, const char* value) {
    for (int i = 0; i < w->nmeta; i++) {
        if (strcmp(w->mk[i], key) == 0) {
            free(w->mv[i]);
            w->mv[i] = strdup_check(value);
            return;
        }
    }
    w->mk = realloc_check(w->mk, (size_t)(w->nmeta + 1) * sizeof(char*));
    w->mv = realloc_check(w->mv, (size_t)(w->nmeta + 1) * sizeof(char*));
    w->mk[w->nmeta] = strdup_check(key);
    w->mv[w->nmeta] = strdup_check(value);
    w->nmeta++;
}

static int writer_add(SafeTensorsWriter* w, const char* name, DType dt, int ndim, const int64_t* shape,
                      const void* data, SafeTensorsProduceFn fn, void* ctx, char* err, size_t errlen) {
    if (!name || !name[0] || strcmp(name, "__metadata__") == 0)
        return t5_set_err(err, errlen, "invalid tensor name '%s'", name ? name : "(null)");
    if (ndim < 0 || ndim > SAFETENSORS_MAX_DIMS)
        return t5_set_err(err, errlen, "tensor '%s': %d dimensions (0..%d supported)", name, ndim, SAFETENSORS_MAX_DIMS);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0) return t5_set_err(err, errlen, "tensor '%s' added twice", name);
    WEntry e = {0};
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return t5_set_err(err, errlen, "tensor '%s': negative dimension %lld", name, (long long)shape[d]);
        e.shape[d] = shape[d];
        numel *= (size_t)shape[d];
    }
    if (!data && !fn && numel) return t5_set_err(err, errlen, "tensor '%s': no data", name);
    e.name = strdup_check(name);
    e.dt = dt;
    e.ndim = ndim;
    e.nbytes = numel * dtype_size(dt);
    e.data = data;
    e.fn = fn;
    e.ctx = ctx;
    w->e = realloc_check(w->e, (size_t)(w->n + 1) * sizeof(WEntry));
    w->e[w->n++] = e;
    return 0;
}

int safetensors_writer_add(SafeTensorsWriter* w, const char* name, DType dt, int ndim, const int64_t* shape,
                           const void* data, char* err, size_t errlen) {
    return writer_add(w, name, dt, ndim, shape, data, NULL, NULL, err, errlen);
}

int safetensors_writer_add_fn(SafeTensorsWriter* w, const char* name, DType dt, int ndim, const int64_t* shape,
                              SafeTensorsProduceFn fn, void* ctx, char* err, size_t errlen) {
    if (!fn) return t5_set_err(err, errlen, "tensor '%s': no producer callback", name);
    return writer_add(w, name, dt, ndim, shape, NULL, fn, ctx, err, errlen);
}

// a per-process temporary name, registered so that a SIGINT/SIGTERM outside the training loop removes the
// file (signals.h); tmp_done unregisters and frees it once it is renamed or removed
static char* tmp_name(const char* path) {
    size_t n = strlen(path) + 32;
    char* t = malloc_check(n);
    snprintf(t, n, "%s.tmp.%d", path, (int)getpid());
    signals_track_tmp(t);
    return t;
}

static void tmp_done(char* t) {
    if (!t) return;
    signals_untrack_tmp(t);
    free(t);
}

// writes tensors [i0, i1) to `tmp` (the caller renames it)
static int write_one(SafeTensorsWriter* w, int i0, int i1, const char* tmp, const char* final_path, char* err,
                     size_t errlen) {
    json_t* h = json_object();
    json_t* md = json_object();
    for (int i = 0; i < w->nmeta; i++) json_object_set_new(md, w->mk[i], json_string(w->mv[i]));
    json_object_set_new(h, "__metadata__", md);
    size_t off = 0;
    for (int i = i0; i < i1; i++) {
        WEntry* e = &w->e[i];
        json_t* t = json_object();
        json_object_set_new(t, "dtype", json_string(st_dtype_str(e->dt)));
        json_t* sh = json_array();
        for (int d = 0; d < e->ndim; d++) json_array_append_new(sh, json_integer((json_int_t)e->shape[d]));
        json_object_set_new(t, "shape", sh);
        json_object_set_new(t, "data_offsets", json_pack("[II]", (json_int_t)off, (json_int_t)(off + e->nbytes)));
        json_object_set_new(h, e->name, t);
        off += e->nbytes;
    }
    char* text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (!text) return t5_set_err(err, errlen, "cannot serialise the safetensors header for %s", final_path);
    size_t tl = strlen(text);
    size_t hl = (tl + 7) / 8 * 8;  // pad with spaces so the data begins 8-byte aligned (8 + hl)
    int rc = -1;
    uint8_t* chunk = NULL;
    FILE* f = fopen(tmp, "wb");
    if (!f) {
        t5_set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        free(text);
        return -1;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(text, 1, tl, f) == tl;
    for (size_t i = tl; ok && i < hl; i++) ok = fputc(' ', f) != EOF;
    for (int i = i0; ok && i < i1; i++) {
        WEntry* e = &w->e[i];
        if (e->data) {
            ok = fwrite(e->data, 1, e->nbytes, f) == e->nbytes;
            continue;
        }
        free(chunk);
        chunk = malloc_check(T5_MAX(T5_MIN(ST_WRITE_CHUNK, e->nbytes), (size_t)1));
        for (size_t o = 0; ok && o < e->nbytes; o += ST_WRITE_CHUNK) {
            size_t m = T5_MIN(ST_WRITE_CHUNK, e->nbytes - o);
            char perr[512] = "";
            if (e->fn(e->ctx, e->name, o, chunk, m, perr, sizeof perr) != 0) {
                t5_set_err(err, errlen, "writing %s: producing tensor '%s' failed: %s", final_path, e->name, perr);
                fclose(f);
                remove(tmp);
                goto out;
            }
            ok = fwrite(chunk, 1, m, f) == m;
        }
    }
    if (ok) ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        t5_set_err(err, errlen, "cannot write %s: %s", tmp, strerror(saved ? saved : errno));
        remove(tmp);
        goto out;
    }
    rc = 0;
out:
    free(chunk);
    free(text);
    return rc;
}

int safetensors_writer_write_file(SafeTensorsWriter* w, const char* path, char* err, size_t errlen) {
    char* tmp = tmp_name(path);
    int rc = write_one(w, 0, w->n, tmp, path, err, errlen);
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = t5_set_err(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        remove(tmp);
    }
    tmp_done(tmp);
    return rc;
}

// true for "model-NNNNN-of-NNNNN.safetensors"
static bool is_shard_name(const char* s) {
    unsigned a, b;
    char tail[32];
    return strlen(s) == strlen("model-00001-of-00002.safetensors") &&
           sscanf(s, "model-%5u-of-%5u.%31s", &a, &b, tail) == 3 && strcmp(tail, "safetensors") == 0;
}

int safetensors_writer_write_dir(SafeTensorsWriter* w, const char* dir, size_t max_shard_bytes, int* nshards,
                                 char* err, size_t errlen) {
    if (max_shard_bytes == 0) max_shard_bytes = SAFETENSORS_DEFAULT_SHARD_BYTES;
    if (t5_mkdir_p(dir) != 0) return t5_set_err(err, errlen, "cannot create directory %s: %s", dir, strerror(errno));
    // HF's greedy split: a tensor goes to the current shard unless it would push it over the limit
    int* start = calloc_check((size_t)w->n + 2, sizeof(int));
    int ns = 0;
    size_t cur = 0, total = 0;
    start[0] = 0;
    for (int i = 0; i < w->n; i++) {
        if (i > start[ns] && cur + w->e[i].nbytes > max_shard_bytes) {
            start[++ns] = i;
            cur = 0;
        }
        cur += w->e[i].nbytes;
        total += w->e[i].nbytes;
    }
    ns++;
    start[ns] = w->n;
    int rc = -1;
    char** finals = calloc_check((size_t)ns, sizeof(char*));
    char** tmps = calloc_check((size_t)ns, sizeof(char*));
    char* index_path = t5_path_join(dir, "model.safetensors.index.json");
    char* single_path = t5_path_join(dir, "model.safetensors");
    int written = 0;
    for (int s = 0; s < ns; s++) {
        char fn[64];
        if (ns == 1) snprintf(fn, sizeof fn, "model.safetensors");
        else snprintf(fn, sizeof fn, "model-%05d-of-%05d.safetensors", s + 1, ns);
        finals[s] = t5_path_join(dir, fn);
        tmps[s] = tmp_name(finals[s]);
        if (write_one(w, start[s], start[s + 1], tmps[s], finals[s], err, errlen) != 0) goto out;
        written++;
    }
    char* index_tmp = NULL;
    if (ns > 1) {
        json_t* idx = json_object();
        json_t* wm = json_object();
        for (int s = 0; s < ns; s++) {
            const char* base = strrchr(finals[s], '/') ? strrchr(finals[s], '/') + 1 : finals[s];
            for (int i = start[s]; i < start[s + 1]; i++) json_object_set_new(wm, w->e[i].name, json_string(base));
        }
        json_t* md = json_pack("{sI}", "total_size", (json_int_t)total);
        for (int i = 0; i < w->nmeta; i++)  // our own keys (step, ...) also go to the index; "format" stays per file
            if (strcmp(w->mk[i], "format") != 0) json_object_set_new(md, w->mk[i], json_string(w->mv[i]));
        json_object_set_new(idx, "metadata", md);
        json_object_set_new(idx, "weight_map", wm);
        index_tmp = tmp_name(index_path);
        int drc = json_dump_file(idx, index_tmp, JSON_INDENT(2) | JSON_SORT_KEYS);
        json_decref(idx);
        if (drc != 0) {
            t5_set_err(err, errlen, "cannot write %s: %s", index_tmp, strerror(errno));
            remove(index_tmp);
            tmp_done(index_tmp);
            goto out;
        }
    }
    // all files are complete: move them into place, the index last
    for (int s = 0; s < ns; s++) {
        if (rename(tmps[s], finals[s]) != 0) {
            t5_set_err(err, errlen, "cannot rename %s to %s: %s", tmps[s], finals[s], strerror(errno));
            tmp_done(index_tmp);
            goto out;
        }
    }
    written = 0;
    if (index_tmp) {
        if (rename(index_tmp, index_path) != 0) {
            t5_set_err(err, errlen, "cannot rename %s to %s: %s", index_tmp, index_path, strerror(errno));
            remove(index_tmp);
            tmp_done(index_tmp);
            goto out;
        }
        tmp_done(index_tmp);
    }
    // remove what an earlier save with another layout left behind, so transformers cannot load a mix
    if (ns == 1) remove(index_path);
    else remove(single_path);
    DIR* dp = opendir(dir);
    if (dp) {
        struct dirent* de;
        while ((de = readdir(dp))) {
            if (!is_shard_name(de->d_name)) continue;
            bool ours = false;
            for (int s = 0; s < ns && ns > 1; s++) ours |= strcmp(strrchr(finals[s], '/') + 1, de->d_name) == 0;
            if (!ours) {
                char* p = t5_path_join(dir, de->d_name);
                remove(p);
                free(p);
            }
        }
        closedir(dp);
    }
    if (nshards) *nshards = ns;
    rc = 0;
out:
    for (int s = 0; s < written; s++) remove(tmps[s]);
    for (int s = 0; s < ns; s++) {
        free(finals[s]);
        tmp_done(tmps[s]);
    }
    free(finals);
    free(tmps);
    free(index_path);
    free(single_path);
    free(start);
    return rc;
}
