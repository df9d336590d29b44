/*
 * common.c: one-line errors and checked I/O (see common.h for the contract).
 */
#include "common.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int t5_rank = 0;
int t5_error_reported = 0;

static void vprint_line(const char* tag, const char* fmt, va_list ap) {
    if (strcmp(tag, "error") == 0) t5_error_reported = 1;
    fflush(stdout);
    fprintf(stderr, "t5train: %s: ", tag);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void t5_die(int code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprint_line("error", fmt, ap);
    va_end(ap);
    exit(code);
}

void t5_die_hint(int code, const char* hint, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprint_line("error", fmt, ap);
    va_end(ap);
    fprintf(stderr, "HINT: %s\n", hint);
    exit(code);
}

static int log_level = T5_LOG_PASSIVE;
void t5_set_log_level(int level) { log_level = level; }
int t5_log_level(void) { return log_level; }
bool t5_log_info(void) { return log_level <= T5_LOG_INFO; }

void t5_warn(const char* fmt, ...) {
    if (log_level >= T5_LOG_ERROR) return;
    va_list ap;
    va_start(ap, fmt);
    vprint_line("warning", fmt, ap);
    va_end(ap);
}

int t5_set_err(char* err, size_t errlen, const char* fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int t5_errf(char* err, size_t errlen, int code, const char* fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

void (*t5_check_failed_hook)(const char* kind, const char* stmt, const char* msg, const char* file, int line);

void t5_check_failed(const char* kind, const char* stmt, const char* msg, const char* file, int line,
                     const char* func) {
    if (t5_check_failed_hook) t5_check_failed_hook(kind, stmt, msg, file, line);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    fflush(stdout);
    fprintf(stderr, "[%s ERROR] rank %d host %s %s:%d %s: %s -> %s\n", kind, t5_rank, host, file, line, func,
            stmt, msg ? msg : "(no message)");
    abort();
}

FILE* fopen_check_(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (!f) {
        int e = errno;
        fflush(stdout);
        fprintf(stderr, "t5train: error: cannot open %s for %s: %s (%s:%d)\n", path,
                mode[0] == 'r' ? "reading" : "writing", strerror(e), file, line);
        if (e == ENOENT && mode[0] == 'r') fprintf(stderr, "HINT: check the path; relative paths are taken from the current directory\n");
        t5_error_reported = 1;
        exit(T5_EXIT_FAILURE);
    }
    return f;
}

void fread_check_(void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        fflush(stdout);
        fprintf(stderr, "t5train: error: short read from %s: wanted %zu items of %zu bytes, got %zu%s (%s:%d)\n",
                path, n, size, got, feof(f) ? " (file truncated?)" : "", file, line);
        t5_error_reported = 1;
        exit(T5_EXIT_FAILURE);
    }
}

void fwrite_check_(const void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* file, int line) {
    size_t put = fwrite(ptr, size, n, f);
    if (put != n) {
        int e = errno;
        fflush(stdout);
        fprintf(stderr, "t5train: error: short write to %s: %s (%s:%d)\n", path, strerror(e), file, line);
        fprintf(stderr, "HINT: is the disk full?\n");
        t5_error_reported = 1;
        exit(T5_EXIT_FAILURE);
    }
}

void fclose_check_(FILE* f, const char* path, const char* file, int line) {
    if (fclose(f) != 0) {
        int e = errno;
        fflush(stdout);
        fprintf(stderr, "t5train: error: closing %s failed: %s (%s:%d)\n", path, strerror(e), file, line);
        t5_error_reported = 1;
        exit(T5_EXIT_FAILURE);
    }
}

static void oom(size_t size, const char* file, int line) {
    fflush(stdout);
    fprintf(stderr, "t5train: error: out of host memory allocating %zu bytes (%s:%d)\n", size, file, line);
    t5_error_reported = 1;
    exit(T5_EXIT_FAILURE);
}

void* malloc_check_(size_t size, const char* file, int line) {
    void* p = malloc(size ? size : 1);
    if (!p) oom(size, file, line);
    return p;
}

void* calloc_check_(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size, file, line);
    return p;
}

void* realloc_check_(void* q, size_t size, const char* file, int line) {
    void* p = realloc(q, size ? size : 1);
    if (!p) oom(size, file, line);
    return p;
}

char* strdup_check_(const char* s, const char* file, int line) {
    size_t n = strlen(s) + 1;
    char* p = (char*)malloc_check_(n, file, line);
    memcpy(p, s, n);
    return p;
}

char* t5_read_file(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char* buf = (char*)malloc_check(cap);
    for (;;) {
        if (n + 1 >= cap) buf = (char*)realloc_check(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

bool t5_path_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

bool t5_is_dir(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool t5_is_file(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int t5_mkdir_p(const char* path) {
    char* p = strdup_check(path);
    for (char* s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = mkdir(p, 0755);
    if (rc != 0 && errno == EEXIST && t5_is_dir(p)) rc = 0;
    free(p);
    return rc;
}

char* t5_path_join(const char* a, const char* b) {
    size_t na = strlen(a), nb = strlen(b);
    char* p = (char*)malloc_check(na + nb + 2);
    memcpy(p, a, na);
    size_t k = na;
    if (na && a[na - 1] != '/') p[k++] = '/';
    memcpy(p + k, b, nb + 1);
    return p;
}
