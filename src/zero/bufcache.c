/*
 * bufcache.c: size classes with a quarantined FIFO of free buffers (bufcache.h).
 */
#include "bufcache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"

void bufcache_init(BufCache* C, int nclass, const size_t* bytes, int quarantine) {
    memset(C, 0, sizeof *C);
    C->nclass = nclass;
    C->quarantine = quarantine;
    const size_t n = (size_t)T5_MAX(nclass, 1);
    C->bytes = malloc_check(n * sizeof *C->bytes);
    if (nclass > 0) memcpy(C->bytes, bytes, (size_t)nclass * sizeof *bytes);
    C->made = calloc_check(n, sizeof *C->made);
    C->fifo_id = calloc_check(n, sizeof *C->fifo_id);
    C->fifo_serial = calloc_check(n, sizeof *C->fifo_serial);
    C->head = calloc_check(n, sizeof *C->head);
    C->len = calloc_check(n, sizeof *C->len);
    C->cap = calloc_check(n, sizeof *C->cap);
}

void bufcache_free(BufCache* C) {
    for (int c = 0; c < C->nclass; c++) {
        free(C->fifo_id[c]);
        free(C->fifo_serial[c]);
    }
    free(C->bytes);
    free(C->made);
    free(C->fifo_id);
    free(C->fifo_serial);
    free(C->head);
    free(C->len);
    free(C->cap);
    memset(C, 0, sizeof *C);
}

void bufcache_reset(BufCache* C) {
    for (int c = 0; c < C->nclass; c++) C->made[c] = C->head[c] = C->len[c] = 0;
    C->serial = 0;
}

int bufcache_take(BufCache* C, int c, bool* fresh) {
    if (C->len[c] > 0) {
        const int h = C->head[c];
        if (C->serial - C->fifo_serial[c][h] >= C->quarantine) {
            const int id = C->fifo_id[c][h];
            C->head[c] = (h + 1) % C->cap[c];
            C->len[c]--;
            *fresh = false;
            return id;
        }
    }
    *fresh = true;
    return C->made[c]++;
}

void bufcache_give(BufCache* C, int c, int id) {
    C->serial++;
    if (C->len[c] == C->cap[c]) {  // grow the ring, unrolled from head
        const int nc = C->cap[c] ? 2 * C->cap[c] : 8;
        int* ids = malloc_check((size_t)nc * sizeof *ids);
        int64_t* ser = malloc_check((size_t)nc * sizeof *ser);
        for (int i = 0; i < C->len[c]; i++) {
            ids[i] = C->fifo_id[c][(C->head[c] + i) % C->cap[c]];
            ser[i] = C->fifo_serial[c][(C->head[c] + i) % C->cap[c]];
        }
        free(C->fifo_id[c]);
        free(C->fifo_serial[c]);
        C->fifo_id[c] = ids;
        C->fifo_serial[c] = ser;
        C->head[c] = 0;
        C->cap[c] = nc;
    }
    const int t = (C->head[c] + C->len[c]) % C->cap[c];
    C->fifo_id[c][t] = id;
    C->fifo_serial[c][t] = C->serial;
    C->len[c]++;
}

size_t bufcache_bytes(const BufCache* C) {
    size_t b = 0;
    for (int c = 0; c < C->nclass; c++) b += (size_t)C->made[c] * C->bytes[c];
    return b;
}

int bufcache_classes(const size_t* sizes, int n, int* class_of, size_t* bytes_out) {
    for (int i = 0; i < n; i++) class_of[i] = -1;
    int nc = 0;
    size_t prev = SIZE_MAX;  // sizes are taken largest first
    for (;;) {
        size_t s = 0;  // the largest size below prev
        for (int i = 0; i < n; i++)
            if (sizes[i] < prev && sizes[i] > s) s = sizes[i];
        if (s == 0) break;
        if (nc == 0 || (double)s < BUFCACHE_MERGE * (double)bytes_out[nc - 1]) bytes_out[nc++] = s;
        for (int i = 0; i < n; i++)
            if (sizes[i] == s) class_of[i] = nc - 1;
        prev = s;
    }
    return nc;
}

void bufunits_init(BufUnits* U, int num_units, const size_t* unit_bytes, int quarantine) {
    const size_t n = (size_t)T5_MAX(num_units, 1);
    U->num_units = num_units;
    U->class_of = malloc_check(n * sizeof *U->class_of);
    U->id_of = malloc_check(n * sizeof *U->id_of);
    size_t* cb = malloc_check(n * sizeof *cb);
    bufcache_init(&U->C, bufcache_classes(unit_bytes, num_units, U->class_of, cb), cb, quarantine);
    free(cb);
    for (int u = 0; u < num_units; u++) U->id_of[u] = -1;
}

void bufunits_free(BufUnits* U) {
    bufcache_free(&U->C);
    free(U->class_of);
    free(U->id_of);
    memset(U, 0, sizeof *U);
}

int bufunits_take(BufUnits* U, int u, bool* fresh) {
    *fresh = false;
    if (U->class_of[u] < 0) return -1;
    return U->id_of[u] = bufcache_take(&U->C, U->class_of[u], fresh);
}

int bufunits_give(BufUnits* U, int u) {
    const int id = U->id_of[u];
    if (id < 0) return -1;
    bufcache_give(&U->C, U->class_of[u], id);
    U->id_of[u] = -1;
    return id;
}
