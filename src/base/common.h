/*
 * common.h: what every host C file needs: exit codes, one-line errors, checked I/O
 * (llm.c's fopen_check family) and the generic check macro behind CUDA_CHECK & co.
 *
 * Error contract (DESIGN.md invariant 8): every failure is one clear sentence on stderr,
 * "t5train: error: <what> (<where>)", optionally followed by a "HINT:" line, then a
 * non-zero exit. Configuration / command-line errors exit with T5_EXIT_USAGE (2), other
 * failures with T5_EXIT_FAILURE (1).
 */
#pragma once
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { T5_EXIT_OK = 0, T5_EXIT_FAILURE = 1, T5_EXIT_USAGE = 2 };

// rank of this process, for error messages (0 until the NCCL bootstrap sets it)
extern int t5_rank;
// set once a "t5train: error:" line has been printed (the exit-time stdout check adds no second one)
extern int t5_error_reported;

// Prints "t5train: error: <msg>" to stderr and exits with `code`.
__attribute__((noreturn, format(printf, 2, 3))) void t5_die(int code, const char* fmt, ...);
// Same, with a second line "HINT: <hint>".
__attribute__((noreturn, format(printf, 3, 4))) void t5_die_hint(int code, const char* hint, const char* fmt, ...);
// Prints "t5train: warning: <msg>" to stderr (not at log level error / critical).
__attribute__((format(printf, 1, 2))) void t5_warn(const char* fmt, ...);

// HF's log levels (TrainingArguments.log_level / log_level_replica), in the order of the config's choices.
// passive: what run_translation makes of it, info. The process's level gates t5_warn (error, critical: off) and
// the info lines (t5_log_info: warning and above drop them; the step and eval metric lines, which HF prints through
// its progress callback rather than its logger, are not info lines). Errors always print.
typedef enum { T5_LOG_PASSIVE = 0, T5_LOG_DEBUG, T5_LOG_INFO, T5_LOG_WARNING, T5_LOG_ERROR, T5_LOG_CRITICAL } T5LogLevel;
void t5_set_log_level(int level);
int t5_log_level(void);
// true when info lines print (passive, debug, info)
bool t5_log_info(void);

// The error-return idiom of library code: writes the formatted message into err (when err and
// errlen are non-zero) and returns -1 (t5_set_err) or `code` (t5_errf); the command-line layer turns
// it into t5_die. Tests call the library and read the message.
int t5_set_err(char* err, size_t errlen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
int t5_errf(char* err, size_t errlen, int code, const char* fmt, ...) __attribute__((format(printf, 4, 5)));

// Generic check failure: "[KIND ERROR] rank R host H file:line func: <stmt> -> <msg>", then abort().
// t5_check_failed_hook, when set (oom.c: CUDA's out of memory explained), is called first and may exit.
extern void (*t5_check_failed_hook)(const char* kind, const char* stmt, const char* msg, const char* file, int line);
__attribute__((noreturn)) void t5_check_failed(const char* kind, const char* stmt, const char* msg,
                                               const char* file, int line, const char* func);

// One generic check macro (ggml's CUDA_CHECK_GEN): `stmt` evaluates to a status, `ok` is the
// success value, `msgfn` turns a status into a string.
#define T5_CHECK_GEN(kind, stmt, ok, msgfn)                                                    \
    do {                                                                                       \
        __typeof__(stmt) t5_check_status_ = (stmt);                                            \
        if (t5_check_status_ != (ok))                                                          \
            t5_check_failed(kind, #stmt, msgfn(t5_check_status_), __FILE__, __LINE__, __func__); \
    } while (0)

// ---- checked C I/O: on failure, an error naming the file and the reason, exit 1
FILE* fopen_check_(const char* path, const char* mode, const char* file, int line);
void fread_check_(void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* file, int line);
void fwrite_check_(const void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* file, int line);
void fclose_check_(FILE* f, const char* path, const char* file, int line);
void* malloc_check_(size_t size, const char* file, int line);
void* calloc_check_(size_t n, size_t size, const char* file, int line);
void* realloc_check_(void* p, size_t size, const char* file, int line);
char* strdup_check_(const char* s, const char* file, int line);
#define fopen_check(path, mode) fopen_check_(path, mode, __FILE__, __LINE__)
#define fread_check(ptr, size, n, f, path) fread_check_(ptr, size, n, f, path, __FILE__, __LINE__)
#define fwrite_check(ptr, size, n, f, path) fwrite_check_(ptr, size, n, f, path, __FILE__, __LINE__)
#define fclose_check(f, path) fclose_check_(f, path, __FILE__, __LINE__)
#define malloc_check(size) malloc_check_(size, __FILE__, __LINE__)
#define calloc_check(n, size) calloc_check_(n, size, __FILE__, __LINE__)
#define realloc_check(p, size) realloc_check_(p, size, __FILE__, __LINE__)
#define strdup_check(s) strdup_check_(s, __FILE__, __LINE__)

// Reads a whole file into a NUL-terminated malloc'd buffer; NULL and errno set on failure.
char* t5_read_file(const char* path, size_t* len);
// Directory helpers: true if path exists / is a directory / is a regular file.
bool t5_path_exists(const char* path);
bool t5_is_dir(const char* path);
bool t5_is_file(const char* path);
// mkdir -p; returns 0 or -1 with errno set.
int t5_mkdir_p(const char* path);
// Joins a and b with '/' into a malloc'd string.
char* t5_path_join(const char* a, const char* b);

#define T5_MIN(a, b) ((a) < (b) ? (a) : (b))
#define T5_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define T5_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#ifdef __cplusplus
}
#endif
