/*
 * checkpoint.c: checkpoint directory protocol and the t5train_state.bin format (contract in checkpoint.h).
 *
 * Why this order: the completion marker is written into the temporary directory after every other file,
 * and the directory gets its final name only after every byte in it (marker included) is on disk (fsync),
 * so "checkpoint-N with t5train_done" always means complete. A re-save of a step that already has a
 * complete checkpoint (resume, then a save at that step) swaps the two directories' names in one
 * renameat2(RENAME_EXCHANGE), so checkpoint-N is complete at every instant; only then is the old one
 * removed. A complete checkpoint is never removed before its replacement is complete and in place
 * (issue 14); checkpoint_remove_stale puts a complete leftover back where checkpoint-N is missing or
 * incomplete instead of deleting it. Anything else (a .tmp- directory without marker, a directory without
 * marker, a truncated or corrupted state file) is reported and skipped on resume, falling back to the
 * previous complete checkpoint.
 * Deleting (rotation) removes the marker first, so an interrupted delete leaves an incomplete checkpoint,
 * never a false complete one.
 */
#include "checkpoint.h"
#include "../base/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/common.h"
#include "../report/results.h"

// ---------------------------------------------------------------------------------------------
// CRC32C


// ---------------------------------------------------------------------------------------------
// names

char* checkpoint_dir_path(const char* output_dir, int64_t step) {
    char name[64];
    snprintf(name, sizeof name, CHECKPOINT_PREFIX "-%lld", (long long)step);
    return t5_path_join(output_dir, name);
}

void checkpoint_state_filename(char* buf, size_t cap, int rank, int world_size) {
    if (world_size <= 1)
        snprintf(buf, cap, "t5train_state.bin");
    else
        snprintf(buf, cap, "t5train_state_r%05d.bin", rank);
}

int64_t checkpoint_parse_name(const char* name) {
    const char* pre = CHECKPOINT_PREFIX "-";
    size_t pl = strlen(pre);
    if (strncmp(name, pre, pl) != 0 || !name[pl]) return -1;
    int64_t v = 0;
    for (const char* p = name + pl; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

// "checkpoint-<digits>.<kind>-..." (a temporary or moved-aside directory of ours)
static bool is_leftover_name(const char* name, const char* kind) {
    const char* pre = CHECKPOINT_PREFIX "-";
    size_t pl = strlen(pre);
    if (strncmp(name, pre, pl) != 0) return false;
    const char* p = name + pl;
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') p++;
    return strncmp(p, kind, strlen(kind)) == 0;
}

// the step of a leftover name ("checkpoint-<N>.tmp-..." / ".old-..."), or -1
static int64_t leftover_step(const char* name) {
    if (!is_leftover_name(name, ".tmp-") && !is_leftover_name(name, ".old-")) return -1;
    const char* p = name + strlen(CHECKPOINT_PREFIX "-");
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int validate_dir(const char* dir, int64_t step, bool verify_checksums, char* err, size_t errcap);

// ---------------------------------------------------------------------------------------------
// filesystem helpers

static int fsync_path(const char* path, bool dir) {
    int fd = open(path, dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    // some filesystems refuse fsync on directories (EINVAL): nothing more can be done there
    if (rc != 0 && dir && (errno == EINVAL || errno == EBADF)) rc = 0;
    close(fd);
    return rc;
}

static int fsync_walk_rc;
static int fsync_walk_cb(const char* path, const struct stat* st, int type, struct FTW* ftw) {
    (void)st;
    (void)ftw;
    if (type == FTW_F || type == FTW_DP || type == FTW_D)
        if (fsync_path(path, type != FTW_F) != 0) fsync_walk_rc = -1;
    return 0;
}

static int remove_cb(const char* path, const struct stat* st, int type, struct FTW* ftw) {
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

int checkpoint_remove_tree(const char* path) {
    if (!t5_path_exists(path)) return 0;
    return nftw(path, remove_cb, 32, FTW_DEPTH | FTW_PHYS);
}

// ---------------------------------------------------------------------------------------------
// directory protocol

int checkpoint_begin(CheckpointWriter* w, const char* output_dir, int64_t step, int world_size, long nonce,
                     char* err, size_t errcap) {
    memset(w, 0, sizeof *w);
    if (step < 0) {
        snprintf(err, errcap, "checkpoint step must be >= 0 (got %lld)", (long long)step);
        return -1;
    }
    if (nonce <= 0) nonce = (long)getpid();
    w->output_dir = strdup_check(output_dir);
    w->final_dir = checkpoint_dir_path(output_dir, step);
    size_t n = strlen(w->final_dir) + 32;
    w->tmp_dir = (char*)malloc_check(n);
    snprintf(w->tmp_dir, n, "%s.tmp-%ld", w->final_dir, nonce);
    w->step = step;
    w->world_size = world_size < 1 ? 1 : world_size;
    if (t5_mkdir_p(w->tmp_dir) != 0) {
        snprintf(err, errcap, "cannot create checkpoint directory %s: %s", w->tmp_dir, strerror(errno));
        return -1;
    }
    return 0;
}

// the two paths swap names atomically; -1 with errno (EINVAL/ENOSYS/ENOTSUP: not supported there)
static int rename_exchange(const char* a, const char* b) {
#ifdef RENAME_EXCHANGE
    return renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
#else
    (void)a;
    (void)b;
    errno = ENOSYS;
    return -1;
#endif
}

static bool exchange_unsupported(int e) { return e == EINVAL || e == ENOSYS || e == ENOTSUP || e == EOPNOTSUPP; }

int checkpoint_commit(CheckpointWriter* w, char* err, size_t errcap) {
    // 1. the completion marker, last of the files, into the temporary directory
    char text[128];
    int len = snprintf(text, sizeof text, "t5train checkpoint\nstep %lld\nworld_size %d\n", (long long)w->step,
                       w->world_size);
    char* marker = t5_path_join(w->tmp_dir, CHECKPOINT_MARKER);
    int rc = results_write_atomic(marker, text, (size_t)len, err, errcap);
    free(marker);
    if (rc) return -1;
    // 2. every file of it reaches the disk: from here the temporary directory is a complete checkpoint
    fsync_walk_rc = 0;
    if (nftw(w->tmp_dir, fsync_walk_cb, 32, FTW_DEPTH | FTW_PHYS) != 0 || fsync_walk_rc != 0) {
        snprintf(err, errcap, "cannot flush checkpoint %s to disk: %s", w->tmp_dir, strerror(errno));
        return -1;
    }
    // 3a. a new step: the final name, durable
    if (!t5_path_exists(w->final_dir)) {
        if (rename(w->tmp_dir, w->final_dir) != 0) {
            snprintf(err, errcap, "cannot rename %s to %s: %s", w->tmp_dir, w->final_dir, strerror(errno));
            return -1;
        }
        fsync_path(w->output_dir, true);
        return 0;
    }
    // 3b. a re-save of this step: the new and the old directory swap names in one step, so checkpoint-N is
    //     complete at every instant; the old one, now under the temporary name, is removed after
    if (rename_exchange(w->tmp_dir, w->final_dir) == 0) {
        fsync_path(w->output_dir, true);
        checkpoint_remove_tree(w->tmp_dir);
        fsync_path(w->output_dir, true);
        return 0;
    }
    if (!exchange_unsupported(errno)) {
        snprintf(err, errcap, "cannot swap %s into %s: %s", w->tmp_dir, w->final_dir, strerror(errno));
        return -1;
    }
    // 3c. a filesystem without RENAME_EXCHANGE: the old one aside, the new one in. Between the two renames
    //     both are complete under leftover names; checkpoint_remove_stale puts one back at the next start
    size_t n = strlen(w->final_dir) + 32;
    char* aside = (char*)malloc_check(n);
    snprintf(aside, n, "%s.old-%d", w->final_dir, (int)getpid());
    checkpoint_remove_tree(aside);
    if (rename(w->final_dir, aside) != 0) {
        snprintf(err, errcap, "cannot move the existing %s aside: %s", w->final_dir, strerror(errno));
        free(aside);
        return -1;
    }
    if (rename(w->tmp_dir, w->final_dir) != 0) {
        int e = errno;
        if (rename(aside, w->final_dir) != 0) {}  // the old one back; if even that fails, remove_stale will
        snprintf(err, errcap, "cannot rename %s to %s: %s", w->tmp_dir, w->final_dir, strerror(e));
        free(aside);
        return -1;
    }
    fsync_path(w->output_dir, true);
    checkpoint_remove_tree(aside);
    fsync_path(w->output_dir, true);
    free(aside);
    return 0;
}

void checkpoint_abort(CheckpointWriter* w) {
    if (w->tmp_dir) checkpoint_remove_tree(w->tmp_dir);
}

void checkpoint_writer_free(CheckpointWriter* w) {
    free(w->output_dir);
    free(w->final_dir);
    free(w->tmp_dir);
    memset(w, 0, sizeof *w);
}

// ---------------------------------------------------------------------------------------------
// state file: writing

struct CheckpointStateWriter {
    char* path;
    FILE* f;
    int32_t header[CHECKPOINT_HEADER_INTS];
    int nblobs;
    bool in_blob;
    off_t record_at;  // offset of the open blob's record
    int64_t blob_bytes;
    uint32_t blob_crc;
    char tag[CHECKPOINT_TAG_MAX];
};

typedef struct {
    char tag[CHECKPOINT_TAG_MAX];
    int64_t nbytes;
    uint32_t crc;
    uint32_t magic;
    int64_t reserved;
} BlobRecord;
_Static_assert(sizeof(BlobRecord) == CHECKPOINT_RECORD_BYTES, "blob record is 64 bytes");
#define BLOB_MAGIC 0x424F4C42u  // "BLOB"

static void put_i64(int32_t* h, int at, int64_t v) { memcpy(&h[at], &v, 8); }
static int64_t get_i64(const int32_t* h, int at) {
    int64_t v;
    memcpy(&v, &h[at], 8);
    return v;
}

CheckpointStateWriter* checkpoint_state_create(const char* dir, int64_t step, int rank, int world_size, char* err,
                                               size_t errcap) {
    char name[64];
    checkpoint_state_filename(name, sizeof name, rank, world_size);
    CheckpointStateWriter* w = (CheckpointStateWriter*)calloc_check(1, sizeof *w);
    w->path = t5_path_join(dir, name);
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        snprintf(err, errcap, "cannot create %s: %s", w->path, strerror(errno));
        free(w->path);
        free(w);
        return NULL;
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 22);
    w->header[0] = CHECKPOINT_STATE_MAGIC;
    w->header[1] = CHECKPOINT_STATE_VERSION;
    w->header[2] = CHECKPOINT_HEADER_INTS;
    w->header[3] = rank;
    w->header[4] = world_size < 1 ? 1 : world_size;
    put_i64(w->header, 6, step);
    w->header[10] = CHECKPOINT_RECORD_BYTES;
    int32_t zero[CHECKPOINT_HEADER_INTS] = {0};  // placeholder until finish
    if (fwrite(zero, sizeof zero, 1, w->f) != 1) {
        snprintf(err, errcap, "writing %s failed: %s (disk full?)", w->path, strerror(errno));
        checkpoint_state_discard(w);
        return NULL;
    }
    return w;
}

static int werr(CheckpointStateWriter* w, char* err, size_t errcap) {
    snprintf(err, errcap, "writing %s failed: %s (disk full?)", w->path, strerror(errno));
    return -1;
}

int checkpoint_state_blob_begin(CheckpointStateWriter* w, const char* tag, char* err, size_t errcap) {
    if (w->in_blob) {
        snprintf(err, errcap, "%s: blob '%s' started before '%s' was ended", w->path, tag, w->tag);
        return -1;
    }
    if (!tag[0] || strlen(tag) >= CHECKPOINT_TAG_MAX) {
        snprintf(err, errcap, "%s: blob tag '%s' must have 1 to %d characters", w->path, tag, CHECKPOINT_TAG_MAX - 1);
        return -1;
    }
    snprintf(w->tag, sizeof w->tag, "%s", tag);
    w->record_at = ftello(w->f);
    BlobRecord r = {0};
    if (fwrite(&r, sizeof r, 1, w->f) != 1) return werr(w, err, errcap);
    w->in_blob = true;
    w->blob_bytes = 0;
    w->blob_crc = 0;
    return 0;
}

int checkpoint_state_blob_write(CheckpointStateWriter* w, const void* data, size_t n, char* err, size_t errcap) {
    if (!w->in_blob) {
        snprintf(err, errcap, "%s: blob data written outside a blob", w->path);
        return -1;
    }
    if (n && fwrite(data, 1, n, w->f) != n) return werr(w, err, errcap);
    w->blob_crc = checkpoint_crc32c(w->blob_crc, data, n);
    w->blob_bytes += (int64_t)n;
    return 0;
}

int checkpoint_state_blob_end(CheckpointStateWriter* w, char* err, size_t errcap) {
    if (!w->in_blob) {
        snprintf(err, errcap, "%s: blob_end without blob_begin", w->path);
        return -1;
    }
    BlobRecord r = {0};
    memcpy(r.tag, w->tag, sizeof r.tag);
    r.nbytes = w->blob_bytes;
    r.crc = w->blob_crc;
    r.magic = BLOB_MAGIC;
    off_t end = ftello(w->f);
    if (fseeko(w->f, w->record_at, SEEK_SET) != 0 || fwrite(&r, sizeof r, 1, w->f) != 1 ||
        fseeko(w->f, end, SEEK_SET) != 0)
        return werr(w, err, errcap);
    w->in_blob = false;
    w->nblobs++;
    return 0;
}

int checkpoint_state_add(CheckpointStateWriter* w, const char* tag, const void* data, size_t n, char* err,
                         size_t errcap) {
    if (checkpoint_state_blob_begin(w, tag, err, errcap)) return -1;
    if (checkpoint_state_blob_write(w, data, n, err, errcap)) return -1;
    return checkpoint_state_blob_end(w, err, errcap);
}

int checkpoint_state_finish(CheckpointStateWriter* w, char* err, size_t errcap) {
    int rc = 0;
    if (w->in_blob) {
        snprintf(err, errcap, "%s: blob '%s' was not ended", w->path, w->tag);
        checkpoint_state_discard(w);
        return -1;
    }
    off_t size = ftello(w->f);
    w->header[5] = w->nblobs;
    put_i64(w->header, 8, (int64_t)size);
    w->header[255] = (int32_t)checkpoint_crc32c(0, w->header, 255 * sizeof(int32_t));
    if (fseeko(w->f, 0, SEEK_SET) != 0 || fwrite(w->header, sizeof w->header, 1, w->f) != 1 || fflush(w->f) != 0 ||
        fsync(fileno(w->f)) != 0)
        rc = werr(w, err, errcap);
    if (fclose(w->f) != 0 && rc == 0) rc = werr(w, err, errcap);
    w->f = NULL;
    if (rc) unlink(w->path);
    free(w->path);
    free(w);
    return rc;
}

void checkpoint_state_discard(CheckpointStateWriter* w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    unlink(w->path);
    free(w->path);
    free(w);
}

// ---------------------------------------------------------------------------------------------
// state file: reading

int checkpoint_state_open(CheckpointState* s, const char* path, char* err, size_t errcap) {
    memset(s, 0, sizeof *s);
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errcap, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    fstat(fileno(f), &st);
    int64_t actual = (int64_t)st.st_size;
    int32_t h[CHECKPOINT_HEADER_INTS];
    const char* why = NULL;
    char detail[256];
    if (actual < (int64_t)sizeof h || fread(h, sizeof h, 1, f) != 1) {
        snprintf(detail, sizeof detail, "truncated: %lld bytes, smaller than the %zu-byte header", (long long)actual,
                 sizeof h);
        why = detail;
    } else if (h[0] != CHECKPOINT_STATE_MAGIC) {
        snprintf(detail, sizeof detail, "not a t5train state file (magic 0x%08x, expected 0x%08x)", (unsigned)h[0],
                 CHECKPOINT_STATE_MAGIC);
        why = detail;
    } else if (h[1] != CHECKPOINT_STATE_VERSION) {
        snprintf(detail, sizeof detail, "state file version %d, this t5train reads version %d", h[1],
                 CHECKPOINT_STATE_VERSION);
        why = detail;
    } else if ((uint32_t)h[255] != checkpoint_crc32c(0, h, 255 * sizeof(int32_t))) {
        why = "header checksum mismatch (corrupt header)";
    } else if (h[2] != CHECKPOINT_HEADER_INTS || h[10] != CHECKPOINT_RECORD_BYTES || h[5] < 0 || h[4] < 1 ||
               h[3] < 0 || h[3] >= h[4]) {
        why = "inconsistent header fields";
    } else if (get_i64(h, 8) != actual) {
        snprintf(detail, sizeof detail, "truncated or padded: the header says %lld bytes, the file has %lld",
                 (long long)get_i64(h, 8), (long long)actual);
        why = detail;
    } else if ((int64_t)h[5] * CHECKPOINT_RECORD_BYTES > actual) {
        why = "blob count larger than the file can hold";
    }
    if (why) {
        snprintf(err, errcap, "%s: %s", path, why);
        fclose(f);
        return -1;
    }
    s->path = strdup_check(path);
    s->f = f;
    s->rank = h[3];
    s->world_size = h[4];
    s->nblobs = h[5];
    s->step = get_i64(h, 6);
    s->file_size = actual;
    s->blobs = (CheckpointBlobInfo*)calloc_check((size_t)(s->nblobs ? s->nblobs : 1), sizeof(CheckpointBlobInfo));
    int64_t off = (int64_t)sizeof h;
    for (int i = 0; i < s->nblobs; i++) {
        BlobRecord r;
        if (off + (int64_t)sizeof r > actual || fseeko(f, off, SEEK_SET) != 0 || fread(&r, sizeof r, 1, f) != 1) {
            snprintf(err, errcap, "%s: blob record %d lies beyond the end of the file", path, i);
            checkpoint_state_close(s);
            return -1;
        }
        if (r.magic != BLOB_MAGIC || memchr(r.tag, 0, sizeof r.tag) == NULL || r.nbytes < 0 ||
            r.nbytes > actual - off - (int64_t)sizeof r) {
            snprintf(err, errcap, "%s: blob record %d is corrupt", path, i);
            checkpoint_state_close(s);
            return -1;
        }
        memcpy(s->blobs[i].tag, r.tag, sizeof r.tag);
        s->blobs[i].offset = off + (int64_t)sizeof r;
        s->blobs[i].nbytes = r.nbytes;
        s->blobs[i].crc = r.crc;
        off = s->blobs[i].offset + r.nbytes;
    }
    if (off != actual) {
        snprintf(err, errcap, "%s: %lld bytes after the last blob (corrupt blob table)", path,
                 (long long)(actual - off));
        checkpoint_state_close(s);
        return -1;
    }
    return 0;
}

const CheckpointBlobInfo* checkpoint_state_find(const CheckpointState* s, const char* tag) {
    for (int i = 0; i < s->nblobs; i++)
        if (strcmp(s->blobs[i].tag, tag) == 0) return &s->blobs[i];
    return NULL;
}

static int read_into(void* ctx, const void* data, size_t off, size_t n) {
    memcpy((char*)ctx + off, data, n);
    return 0;
}

int checkpoint_state_read(CheckpointState* s, const char* tag, void* dst, size_t nbytes, char* err, size_t errcap) {
    return checkpoint_state_read_stream(s, tag, nbytes, T5_MAX(nbytes, (size_t)1), read_into, dst, err, errcap);
}

int checkpoint_state_read_stream(CheckpointState* s, const char* tag, size_t nbytes, size_t chunk,
                                 int (*consume)(void* ctx, const void* data, size_t byte_offset, size_t n), void* ctx,
                                 char* err, size_t errcap) {
    const CheckpointBlobInfo* b = checkpoint_state_find(s, tag);
    if (!b) {
        snprintf(err, errcap, "%s: no '%s' state in this checkpoint", s->path, tag);
        return -1;
    }
    if ((int64_t)nbytes != b->nbytes) {
        snprintf(err, errcap, "%s: '%s' state has %lld bytes, this run expects %zu (different model or config?)",
                 s->path, tag, (long long)b->nbytes, nbytes);
        return -1;
    }
    if (chunk == 0) chunk = (size_t)1 << 26;
    unsigned char* buf = (unsigned char*)malloc_check(T5_MIN(chunk, T5_MAX(nbytes, (size_t)1)));
    uint32_t crc = 0;
    int rc = 0;
    if (fseeko(s->f, b->offset, SEEK_SET) != 0) {
        snprintf(err, errcap, "%s: reading '%s' state failed: %s", s->path, tag, strerror(errno));
        rc = -1;
    }
    for (size_t done = 0; rc == 0 && done < nbytes;) {
        size_t want = T5_MIN(chunk, nbytes - done);
        if (fread(buf, 1, want, s->f) != want) {
            snprintf(err, errcap, "%s: reading '%s' state failed: %s", s->path, tag,
                     feof(s->f) ? "unexpected end of file" : strerror(errno));
            rc = -1;
            break;
        }
        crc = checkpoint_crc32c(crc, buf, want);
        if (consume(ctx, buf, done, want) != 0) {
            snprintf(err, errcap, "%s: '%s' state could not be restored", s->path, tag);
            rc = -1;
            break;
        }
        done += want;
    }
    free(buf);
    if (rc == 0 && crc != b->crc) {
        snprintf(err, errcap, "%s: checksum mismatch in '%s' state (stored %08x, computed %08x): the file is corrupt",
                 s->path, tag, b->crc, crc);
        rc = -1;
    }
    return rc;
}

int checkpoint_state_verify(CheckpointState* s, char* err, size_t errcap) {
    size_t cap = 1 << 22;
    unsigned char* buf = (unsigned char*)malloc_check(cap);
    int rc = 0;
    for (int i = 0; i < s->nblobs && rc == 0; i++) {
        const CheckpointBlobInfo* b = &s->blobs[i];
        uint32_t crc = 0;
        int64_t left = b->nbytes;
        if (fseeko(s->f, b->offset, SEEK_SET) != 0) left = -1;
        while (left > 0) {
            size_t want = (size_t)T5_MIN((int64_t)cap, left);
            if (fread(buf, 1, want, s->f) != want) {
                left = -1;
                break;
            }
            crc = checkpoint_crc32c(crc, buf, want);
            left -= (int64_t)want;
        }
        if (left < 0) {
            snprintf(err, errcap, "%s: reading '%s' state failed", s->path, b->tag);
            rc = -1;
        } else if (crc != b->crc) {
            snprintf(err, errcap, "%s: checksum mismatch in '%s' state (stored %08x, computed %08x): the file is corrupt",
                     s->path, b->tag, b->crc, crc);
            rc = -1;
        }
    }
    free(buf);
    return rc;
}

void checkpoint_state_close(CheckpointState* s) {
    if (s->f) fclose(s->f);
    free(s->path);
    free(s->blobs);
    memset(s, 0, sizeof *s);
}

// ---------------------------------------------------------------------------------------------
// finding, resuming, rotating

// basename without modifying the argument (trailing slashes ignored)
static void base_name(const char* path, char* out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    size_t len = T5_MIN(n - b, cap - 1);
    memcpy(out, path + b, len);
    out[len] = 0;
}

static int read_marker(const char* dir, int64_t* step, int* world, char* err, size_t errcap) {
    char* mp = t5_path_join(dir, CHECKPOINT_MARKER);
    char* text = t5_read_file(mp, NULL);
    free(mp);
    if (!text) {
        snprintf(err, errcap, "no completion marker %s (the save did not finish)", CHECKPOINT_MARKER);
        return -1;
    }
    long long s = -1;
    int w = -1;
    const char* p = strstr(text, "\nstep ");
    const char* q = strstr(text, "\nworld_size ");
    if (strncmp(text, "t5train checkpoint\n", 19) != 0 || !p || !q || sscanf(p, "\nstep %lld", &s) != 1 ||
        sscanf(q, "\nworld_size %d", &w) != 1 || s < 0 || w < 1) {
        snprintf(err, errcap, "unreadable completion marker %s", CHECKPOINT_MARKER);
        free(text);
        return -1;
    }
    free(text);
    *step = s;
    *world = w;
    return 0;
}

int checkpoint_world_size(const char* dir, int* world, char* err, size_t errcap) {
    int64_t step;
    return read_marker(dir, &step, world, err, errcap);
}

int checkpoint_validate(const char* dir, bool verify_checksums, int64_t* step_out, char* err, size_t errcap) {
    char name[256];
    base_name(dir, name, sizeof name);
    int64_t step = checkpoint_parse_name(name);
    if (step < 0) {
        snprintf(err, errcap, "%s is not named checkpoint-<step>", dir);
        return -1;
    }
    if (validate_dir(dir, step, verify_checksums, err, errcap)) return -1;
    if (step_out) *step_out = step;
    return 0;
}

// dir holds a complete checkpoint of `step` (whatever its name: a leftover is checked the same way)
static int validate_dir(const char* dir, int64_t step, bool verify_checksums, char* err, size_t errcap) {
    if (!t5_is_dir(dir)) {
        snprintf(err, errcap, "%s is not a directory", dir);
        return -1;
    }
    int64_t mstep;
    int world;
    char why[512];
    if (read_marker(dir, &mstep, &world, why, sizeof why)) {
        snprintf(err, errcap, "%s: %s", dir, why);
        return -1;
    }
    if (mstep != step) {
        snprintf(err, errcap, "%s: the completion marker is for step %lld", dir, (long long)mstep);
        return -1;
    }
    for (int r = 0; r < world; r++) {
        char fn[64];
        checkpoint_state_filename(fn, sizeof fn, r, world);
        char* sp = t5_path_join(dir, fn);
        CheckpointState s;
        int rc = checkpoint_state_open(&s, sp, err, errcap);
        free(sp);
        if (rc) return -1;
        if (s.step != step || s.rank != r || s.world_size != world) {
            snprintf(err, errcap, "%s: holds step %lld rank %d of %d, expected step %lld rank %d of %d", s.path,
                     (long long)s.step, s.rank, s.world_size, (long long)step, r, world);
            checkpoint_state_close(&s);
            return -1;
        }
        if (verify_checksums && checkpoint_state_verify(&s, err, errcap)) {
            checkpoint_state_close(&s);
            return -1;
        }
        checkpoint_state_close(&s);
    }
    // the weights, when the checkpoint holds them: the safetensors header must parse and the file must be as
    // long as the header says (a truncated or overwritten model.safetensors is caught here, not at load time)
    static const char* const WEIGHTS[] = {"model.safetensors", "model.safetensors.index.json"};
    for (size_t i = 0; i < T5_ARRAY_LEN(WEIGHTS); i++) {
        char* wp = t5_path_join(dir, WEIGHTS[i]);
        if (t5_is_file(wp)) {
            SafeTensors* st = NULL;
            char why2[512];
            if (safetensors_open(&st, wp, why2, sizeof why2)) {
                snprintf(err, errcap, "%s: %s", dir, why2);
                free(wp);
                return -1;
            }
            safetensors_close(st);
        }
        free(wp);
    }
    return 0;
}

typedef struct {
    int64_t step;
    char* path;
    bool leftover;  // a complete checkpoint-N.tmp-* / .old-* directory
} Candidate;

// newest step first; for one step checkpoint-N first, then leftovers (.tmp- before .old-: the newer save)
static int cmp_cand_desc(const void* a, const void* b) {
    const Candidate *x = (const Candidate*)a, *y = (const Candidate*)b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1;
    if (x->leftover != y->leftover) return x->leftover ? 1 : -1;
    int r = strcmp(x->path, y->path);  // descending: ".tmp-" sorts before ".old-"
    return r > 0 ? -1 : r < 0 ? 1 : 0;
}

// checkpoint-<N> directories of output_dir, newest first; leftovers reported
static Candidate* list_checkpoints(const char* output_dir, int* n_out, FILE* report) {
    *n_out = 0;
    DIR* d = opendir(output_dir);
    if (!d) return NULL;
    int n = 0, cap = 16;
    Candidate* c = (Candidate*)malloc_check(cap * sizeof *c);
    struct dirent* e;
    while ((e = readdir(d))) {
        char* p = t5_path_join(output_dir, e->d_name);
        int64_t step = checkpoint_parse_name(e->d_name);
        if (step >= 0 && t5_is_dir(p)) {
            if (n == cap) c = (Candidate*)realloc_check(c, (cap *= 2) * sizeof *c);
            c[n].step = step;
            c[n].path = p;
            c[n].leftover = false;
            n++;
            continue;
        }
        int64_t lstep = leftover_step(e->d_name);
        if (lstep >= 0 && t5_is_dir(p)) {
            // a complete leftover (a crash between a re-save's renames) is a candidate after checkpoint-N of
            // the same step: checkpoint_remove_stale puts it back under its name at the next start
            int64_t ms;
            int mw;
            char why[256];
            if (read_marker(p, &ms, &mw, why, sizeof why) == 0 && ms == lstep) {
                if (n == cap) c = (Candidate*)realloc_check(c, (cap *= 2) * sizeof *c);
                c[n].step = lstep;
                c[n].path = p;
                c[n].leftover = true;
                n++;
                continue;
            }
            if (report && is_leftover_name(e->d_name, ".tmp-"))
                fprintf(report, "t5train: warning: skipping %s: temporary directory of a save that did not finish\n",
                        p);
        }
        free(p);
    }
    closedir(d);
    qsort(c, n, sizeof *c, cmp_cand_desc);
    *n_out = n;
    return c;
}

static void free_candidates(Candidate* c, int n) {
    for (int i = 0; i < n; i++) free(c[i].path);
    free(c);
}

char* checkpoint_find_latest(const char* output_dir, bool verify_checksums, FILE* report) {
    int n;
    Candidate* c = list_checkpoints(output_dir, &n, report);
    char* found = NULL;
    for (int i = 0; i < n && !found; i++) {
        char err[1024];
        if (validate_dir(c[i].path, c[i].step, verify_checksums, err, sizeof err) == 0)
            found = strdup_check(c[i].path);
        else if (report)
            fprintf(report, "t5train: warning: skipping incomplete or corrupt checkpoint: %s\n", err);
    }
    if (found && report && n > 0 && strcmp(found, c[0].path) != 0)
        fprintf(report, "t5train: warning: using the previous complete checkpoint %s\n", found);
    free_candidates(c, n);
    return found;
}

char* checkpoint_resolve_resume(const char* arg, const char* output_dir, FILE* report, char* err, size_t errcap) {
    if (strcmp(arg, "last") == 0 || strcmp(arg, "latest") == 0) {
        if (!t5_is_dir(output_dir)) {
            snprintf(err, errcap, "--resume_from_checkpoint %s: output_dir %s does not exist", arg, output_dir);
            return NULL;
        }
        char* p = checkpoint_find_latest(output_dir, true, report);
        if (!p) snprintf(err, errcap, "--resume_from_checkpoint %s: no complete checkpoint in %s", arg, output_dir);
        return p;
    }
    if (!t5_is_dir(arg)) {
        snprintf(err, errcap, "--resume_from_checkpoint %s: no such directory", arg);
        return NULL;
    }
    char why[1024];
    if (checkpoint_validate(arg, true, NULL, why, sizeof why)) {
        snprintf(err, errcap, "--resume_from_checkpoint: %s", why);
        return NULL;
    }
    return strdup_check(arg);
}

// one complete checkpoint deleted, marker first (an interrupted delete leaves an incomplete checkpoint)
static int delete_checkpoint(const char* path, FILE* report, char* err, size_t errcap) {
    char* mp = t5_path_join(path, CHECKPOINT_MARKER);
    int rc = unlink(mp);
    free(mp);
    fsync_path(path, true);
    if (rc != 0 || checkpoint_remove_tree(path) != 0) {
        snprintf(err, errcap, "cannot delete old checkpoint %s: %s", path, strerror(errno));
        return -1;
    }
    if (report) fprintf(report, "Deleting older checkpoint [%s] due to args.save_total_limit\n", path);
    return 0;
}

int checkpoint_keep_only(const char* output_dir, int64_t keep_step, FILE* report, char* err, size_t errcap) {
    int n;
    Candidate* c = list_checkpoints(output_dir, &n, NULL);
    int deleted = 0;
    for (int i = 0; i < n; i++) {
        int64_t s;
        int w;
        char why[256];
        if (c[i].leftover || c[i].step == keep_step || read_marker(c[i].path, &s, &w, why, sizeof why) != 0 ||
            s != c[i].step)
            continue;
        if (delete_checkpoint(c[i].path, report, err, errcap)) {
            free_candidates(c, n);
            return -1;
        }
        deleted++;
    }
    free_candidates(c, n);
    return deleted;
}

int checkpoint_rotate(const char* output_dir, int limit, int64_t keep_step, int64_t best_step, FILE* report,
                      char* err, size_t errcap) {
    return checkpoint_rotate_sparing(output_dir, limit, keep_step, best_step, -1, report, err, errcap);
}

int checkpoint_rotate_sparing(const char* output_dir, int limit, int64_t keep_step, int64_t best_step,
                              int64_t spare_step, FILE* report, char* err, size_t errcap) {
    if (limit <= 0) return 0;
    int n;
    Candidate* c = list_checkpoints(output_dir, &n, NULL);
    // complete ones only (marker present and naming the same step), oldest first; paths stay owned by c
    Candidate* done = (Candidate*)malloc_check((size_t)(n ? n : 1) * sizeof *done);
    int m = 0;
    for (int i = n - 1; i >= 0; i--) {
        int64_t s;
        int w;
        char why[256];
        if (!c[i].leftover && read_marker(c[i].path, &s, &w, why, sizeof why) == 0 && s == c[i].step)
            done[m++] = c[i];
    }
    int deleted = 0, remaining = m;
    for (int i = 0; i < m && remaining > limit; i++) {
        int64_t s = done[i].step;
        if (s == keep_step || s == best_step || (spare_step >= 0 && s == spare_step) || i == m - 1) continue;
        if (delete_checkpoint(done[i].path, report, err, errcap)) {
            free(done);
            free_candidates(c, n);
            return -1;
        }
        deleted++;
        remaining--;
    }
    free(done);
    free_candidates(c, n);
    return deleted;
}

// one leftover: removed when checkpoint-N is complete or the leftover is not; otherwise (checkpoint-N missing
// or incomplete, the leftover complete) it is put back as checkpoint-N
static int settle_leftover(const char* output_dir, const char* name, FILE* report) {
    int64_t step = leftover_step(name);
    char* p = t5_path_join(output_dir, name);
    char* final_dir = checkpoint_dir_path(output_dir, step);
    int done = 0;
    char why[1024];
    if (!t5_is_dir(p)) goto out;
    bool final_complete = t5_is_dir(final_dir) && validate_dir(final_dir, step, false, why, sizeof why) == 0;
    if (!final_complete && validate_dir(p, step, true, why, sizeof why) == 0) {
        int rc;
        if (!t5_path_exists(final_dir)) {
            rc = rename(p, final_dir);
        } else {  // an incomplete checkpoint-N (no marker): the complete one takes its name, then it goes
            rc = rename_exchange(p, final_dir);
            if (rc != 0 && exchange_unsupported(errno) && checkpoint_remove_tree(final_dir) == 0)
                rc = rename(p, final_dir);
        }
        fsync_path(output_dir, true);
        if (rc == 0) {
            if (t5_path_exists(p)) checkpoint_remove_tree(p);  // the incomplete one, swapped out
            if (report) fprintf(report, "t5train: restored %s from %s left by an interrupted save\n", final_dir, p);
            done = 1;
        } else if (report) {
            fprintf(report, "t5train: warning: cannot restore %s from %s: %s\n", final_dir, p, strerror(errno));
        }
        goto out;
    }
    if (checkpoint_remove_tree(p) == 0) {
        if (report) fprintf(report, "t5train: removed %s left by an interrupted save\n", p);
        done = 1;
    }
out:
    free(final_dir);
    free(p);
    return done;
}

int checkpoint_remove_stale(const char* output_dir, FILE* report) {
    // .tmp- first: where both a .tmp- and an .old- of one step are complete, the .tmp- holds the newer save
    static const char* const KINDS[2] = {".tmp-", ".old-"};
    int settled = 0;
    for (int k = 0; k < 2; k++) {
        DIR* d = opendir(output_dir);
        if (!d) return 0;
        char** names = NULL;
        int n = 0, cap = 0;
        struct dirent* e;
        while ((e = readdir(d))) {
            if (!is_leftover_name(e->d_name, KINDS[k])) continue;
            if (n == cap) names = (char**)realloc_check(names, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *names);
            names[n++] = strdup_check(e->d_name);
        }
        closedir(d);
        for (int i = 0; i < n; i++) {
            settled += settle_leftover(output_dir, names[i], report);
            free(names[i]);
        }
        free(names);
    }
    return settled;
}
