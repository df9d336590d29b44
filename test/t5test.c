/*
 * t5test.c: helpers shared by the test programs (see t5test.h).
 */
#include "t5test.h"

#include "../src/base/common.h"
#include "../src/base/safetensors.h"

#include <cuda_runtime.h>
#include <math.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char* t5test_data_dir(void) {
    static char buf[4096];
    static int done = 0;
    if (done) return buf[0] ? buf : NULL;
    done = 1;
    const char* env = getenv("T5TRAIN_DATA");
    const char* cands[] = {env, "../shared/data", "../../shared/data"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        struct stat st;
        if (cands[i] && cands[i][0] && stat(cands[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            if (!realpath(cands[i], buf)) snprintf(buf, sizeof buf, "%s", cands[i]);
            return buf;
        }
    }
    buf[0] = 0;
    return NULL;
}

const char* t5test_bin(void) {
    const char* b = getenv("T5TRAIN_BIN");
    return b && b[0] ? b : "./t5train";
}

const char* t5test_repo_dir(void) {
    static char buf[4096];
    if (!buf[0] && !getcwd(buf, sizeof buf)) snprintf(buf, sizeof buf, ".");
    return buf;
}

static char tmpdir_path[256];
static int rm_one(const char* p, const struct stat* st, int flag, struct FTW* ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}
static void rm_tmpdir(void) {
    if (tmpdir_path[0]) nftw(tmpdir_path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char* t5test_tmpdir(void) {
    if (!tmpdir_path[0]) {
        snprintf(tmpdir_path, sizeof tmpdir_path, "/tmp/t5test.XXXXXX");
        if (!mkdtemp(tmpdir_path)) fail_msg("mkdtemp failed");
        atexit(rm_tmpdir);
    }
    return tmpdir_path;
}

int t5test_run(char* out, size_t cap, const char* fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[8300];
    snprintf(full, sizeof full, "( %s ) 2>&1 </dev/null", cmd);
    FILE* p = popen(full, "r");
    if (!p) fail_msg("popen failed: %s", cmd);
    // Output longer than cap keeps its head (cap/2) and its tail (a ring of the rest), with a marker between: a
    // failed run's last lines (its error) survive a long start (several ranks' config tables)
    const size_t head_cap = cap / 2, ring_cap = cap > 256 ? cap - head_cap - 64 : 0;
    char* ring = ring_cap ? malloc(ring_cap) : NULL;
    size_t n = 0, rn = 0, total = 0;  // bytes in out, bytes written to the ring in all, bytes read
    char tmp[4096];
    size_t got;
    while ((got = fread(tmp, 1, sizeof tmp, p)) > 0) {
        total += got;
        if (!out || !cap) continue;
        size_t i = 0;
        if (n + 1 < cap) {
            i = got < cap - 1 - n ? got : cap - 1 - n;
            memcpy(out + n, tmp, i);
            n += i;
        }
        for (; i < got && ring; i++) ring[rn++ % ring_cap] = tmp[i];
    }
    if (out && cap && total > n) {  // the buffer filled: its head, a marker, then the ring's last bytes
        const size_t keep = rn < ring_cap ? rn : ring_cap;
        n = n < head_cap ? n : head_cap;
        const int m = snprintf(out + n, cap - n, "\n[... t5test_run: %zu bytes of output cut ...]\n",
                               total - n - keep);
        if (m > 0) n += (size_t)m < cap - n ? (size_t)m : cap - 1 - n;
        for (size_t j = rn - keep; j < rn && n + 1 < cap; j++) out[n++] = ring[j % ring_cap];
    }
    if (out && cap) out[n] = 0;
    free(ring);
    int st = pclose(p);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

void t5test_write_file(const char* path, const char* text) {
    FILE* f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

bool t5test_have_gpu(void) {
    static int have = -1;
    if (have < 0) {
        int n = 0;
        have = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
        cudaGetLastError();
    }
    return have;
}

int t5test_gpu_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

int t5test_argv(const char* line, char** argv, int cap) {
    static char buf[4096];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    argv[argc++] = "t5train";
    for (char* tok = strtok(buf, " "); tok && argc < cap - 1; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    return argc;
}

int t5test_jsonl_doubles(const char* out, const char* key, double* v, int cap) {
    char* p = t5_path_join(out, "trainer_log.jsonl");
    char* text = t5_read_file(p, NULL);
    free(p);
    if (!text) fail_msg("no trainer_log.jsonl in %s", out);
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    int n = 0;
    for (char* line = strtok(text, "\n"); line && n < cap; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"max_steps\"")) continue;
        char* k = strstr(line, pat);
        if (!k) continue;
        k += strlen(pat);
        v[n++] = strncmp(k, "null", 4) == 0 ? NAN : atof(k);
    }
    free(text);
    return n;
}

size_t t5test_weights_compare(const char* a, const char* b, double* rel_l2) {
    char err[1024];
    char* pa = t5_path_join(a, "model.safetensors");
    char* pb = t5_path_join(b, "model.safetensors");
    SafeTensors *sa = NULL, *sb = NULL;
    if (safetensors_open(&sa, pa, err, sizeof err) || safetensors_open(&sb, pb, err, sizeof err)) fail_msg("%s", err);
    double num = 0, den = 0;
    size_t diff = 0;
    for (int i = 0; i < safetensors_count(sa); i++) {
        const char* name = safetensors_name(sa, i);
        const SafeTensorInfo* ia = NULL;
        if (safetensors_info(sa, name, &ia, err, sizeof err)) fail_msg("%s", err);
        float* x = malloc_check(ia->numel * sizeof(float) + 1);
        float* y = malloc_check(ia->numel * sizeof(float) + 1);
        if (safetensors_read(sa, name, x, DT_F32, NULL, -1, err, sizeof err) ||
            safetensors_read(sb, name, y, DT_F32, NULL, -1, err, sizeof err))
            fail_msg("%s", err);
        for (size_t k = 0; k < ia->numel; k++) {
            const double d = (double)x[k] - (double)y[k];
            num += d * d;
            den += (double)x[k] * (double)x[k];
            diff += memcmp(&x[k], &y[k], sizeof(float)) != 0;
        }
        free(x);
        free(y);
    }
    safetensors_close(sa);
    safetensors_close(sb);
    free(pa);
    free(pb);
    if (rel_l2) *rel_l2 = sqrt(num / (den > 0 ? den : 1));
    return diff;
}

const char* t5test_tail(const char* text, size_t n) {
    const size_t len = strlen(text);
    if (len <= n) return text;
    const char* p = text + len - n;
    const char* nl = strchr(p, '\n');
    return nl && nl[1] ? nl + 1 : p;
}
