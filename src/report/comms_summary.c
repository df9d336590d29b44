/*
 * comms_summary.c: DeepSpeed's comms_logger aggregation and text (comms_summary.h).
 */
#include "comms_summary.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "trainer_log.h"

int comms_size_text(char* buf, size_t cap, uint64_t bytes) {
    if (bytes == 0) return snprintf(buf, cap, "0B");
    static const char* const UNITS[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
    // math.log(size, 1024) is log(size) / log(1024) in Python too: the same double, the same floor
    int i = (int)floor(log((double)bytes) / log(1024.0));
    if (i < 0) i = 0;
    if (i > 8) i = 8;
    char num[64];
    py_float_repr(num, sizeof num, py_round((double)bytes / pow(1024.0, i), 2));
    return snprintf(buf, cap, "%s %s", num, UNITS[i]);
}

double comms_bus_factor(CommsOp op, int n) {
    const double nd = n > 0 ? n : 1;
    switch (op) {
        case COMMS_ALL_REDUCE: return 2.0 * (nd - 1) / nd;
        case COMMS_ALL_GATHER:
        case COMMS_REDUCE_SCATTER: return (nd - 1) / nd;
        default: return 1.0;
    }
}

void comms_bandwidth(CommsOp op, uint64_t bytes, double ms, int n, double* algbw, double* busbw) {
    *algbw = *busbw = 0;
    if (!(ms > 0)) return;  // DeepSpeed divides by zero here
    const double gbps = 8.0 / 1e6;  // bytes per ms -> Gbps
    double size = (double)bytes;
    if (op == COMMS_ALL_GATHER) size *= n;  // S is one rank's piece; the output is n pieces
    const double bw = size / ms * gbps;
    *busbw = bw * comms_bus_factor(op, n);
    *algbw = op == COMMS_ALL_REDUCE ? 2 * bw : bw;  // DeepSpeed's all_reduce "tput": 2S/t
}

int comms_format_op(char* buf, size_t cap, const char* record, double ms, uint64_t bytes, double algbw, double busbw) {
    char size[64];
    comms_size_text(size, sizeof size, bytes);
    return snprintf(buf, cap, "[Rank 0] comm op: %s | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f | busbw "
                    "(Gbps): %.2f", record, ms, size, algbw, busbw);
}

void comms_summary_init(CommsSummary* s, int world, bool debug) {
    memset(s, 0, sizeof *s);
    s->world = world > 0 ? world : 1;
    s->debug = debug;
}

void comms_summary_free(CommsSummary* s) {
    for (int i = 0; i < s->nrecs; i++) {
        for (int j = 0; j < s->recs[i].nrows; j++) free(s->recs[i].rows[j].ms);
        free(s->recs[i].rows);
    }
    free(s->recs);
    memset(s, 0, sizeof *s);
}

static CommsRecordRows* find_record(CommsSummary* s, CommsOp op, const char* caller) {
    char name[sizeof s->recs[0].name];
    // DeepSpeed's get_debug_log_name: log_name + ' | [Caller Func: ' + caller + ']'
    if (s->debug && caller) snprintf(name, sizeof name, "%s | [Caller Func: %s]", comms_op_name(op), caller);
    else snprintf(name, sizeof name, "%s", comms_op_name(op));
    for (int i = 0; i < s->nrecs; i++)
        if (strcmp(s->recs[i].name, name) == 0) return &s->recs[i];
    if (s->nrecs == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->recs = realloc_check(s->recs, (size_t)s->cap * sizeof *s->recs);
    }
    CommsRecordRows* r = &s->recs[s->nrecs++];
    memset(r, 0, sizeof *r);
    memcpy(r->name, name, sizeof name);
    r->op = op;
    return r;
}

const char* comms_summary_add(CommsSummary* s, const CommsRecord* x) {
    CommsRecordRows* rec = find_record(s, x->op, x->caller);
    CommsRow* row = NULL;
    for (int j = 0; j < rec->nrows && !row; j++)
        if (rec->rows[j].bytes == x->bytes) row = &rec->rows[j];
    if (!row) {
        if (rec->nrows == rec->cap) {
            rec->cap = rec->cap ? 2 * rec->cap : 4;
            rec->rows = realloc_check(rec->rows, (size_t)rec->cap * sizeof *rec->rows);
        }
        row = &rec->rows[rec->nrows++];
        memset(row, 0, sizeof *row);
        row->bytes = x->bytes;
    }
    if (row->count == row->cap) {
        row->cap = row->cap ? 2 * row->cap : 16;
        row->ms = realloc_check(row->ms, (size_t)row->cap * sizeof *row->ms);
    }
    row->ms[row->count++] = (float)x->ms;
    row->total_ms += x->ms;
    return rec->name;
}

static int cmp_double(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

// DeepSpeed's trim_mean(v, 0.1): sorted, k = round(0.1 n) (Python's round: half to even, as nearbyint) dropped at
// each end. Sorts v.
static double trim_mean(double* v, int64_t n) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    const int64_t k = (int64_t)nearbyint((double)n * 0.1);
    double sum = 0;
    for (int64_t i = k; i < n - k; i++) sum += v[i];
    return n - 2 * k > 0 ? sum / (double)(n - 2 * k) : 0;
}

void comms_summary_row_stats(const CommsSummary* s, const CommsRecordRows* rec, const CommsRow* row,
                             CommsRowStats* out) {
    const int64_t n = row->count;
    double* lat = malloc_check((size_t)T5_MAX(n, (int64_t)1) * sizeof *lat);
    double* alg = malloc_check((size_t)T5_MAX(n, (int64_t)1) * sizeof *alg);
    double* bus = malloc_check((size_t)T5_MAX(n, (int64_t)1) * sizeof *bus);
    for (int64_t i = 0; i < n; i++) {
        lat[i] = row->ms[i];
        comms_bandwidth(rec->op, row->bytes, lat[i], s->world, &alg[i], &bus[i]);
    }
    // DeepSpeed trims each list on its own (sorted independently)
    *out = (CommsRowStats){.count = n, .total_ms = row->total_ms, .avg_ms = trim_mean(lat, n),
                           .algbw = trim_mean(alg, n), .busbw = trim_mean(bus, n)};
    free(lat);
    free(alg);
    free(bus);
}

static int cmp_row(const void* a, const void* b) {
    const uint64_t x = (*(const CommsRow* const*)a)->bytes, y = (*(const CommsRow* const*)b)->bytes;
    return (x > y) - (x < y);
}

// rec's rows by size (DeepSpeed's sorted(dict.items())); free() the result
static const CommsRow** sorted_rows(const CommsRecordRows* rec) {
    const CommsRow** v = malloc_check((size_t)T5_MAX(rec->nrows, 1) * sizeof *v);
    for (int j = 0; j < rec->nrows; j++) v[j] = &rec->rows[j];
    qsort(v, (size_t)rec->nrows, sizeof *v, cmp_row);
    return v;
}

void comms_summary_print(const CommsSummary* s, FILE* f) {
    fprintf(f, "%-20s%-20s%-20s%-20s%-20s%-20s%-20s\n", "Comm. Op", "Message Size", "Count", "Total Latency(ms)",
            "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)");
    for (int i = 0; i < s->nrecs; i++) {
        const CommsRecordRows* rec = &s->recs[i];
        fprintf(f, "%s\n", rec->name);
        const CommsRow** rows = sorted_rows(rec);
        for (int j = 0; j < rec->nrows; j++) {
            CommsRowStats st;
            comms_summary_row_stats(s, rec, rows[j], &st);
            char size[64];
            comms_size_text(size, sizeof size, rows[j]->bytes);
            fprintf(f, "%-20s%-20s%-20lld%-20.2f%-20.2f%-20.2f%-20.2f\n", " ", size, (long long)st.count, st.total_ms,
                    st.avg_ms, st.algbw, st.busbw);
        }
        free(rows);
    }
}

json_t* comms_summary_json(const CommsSummary* s) {
    json_t* root = json_object();
    for (int i = 0; i < s->nrecs; i++) {
        const CommsRecordRows* rec = &s->recs[i];
        json_t* op = json_object();
        const CommsRow** rows = sorted_rows(rec);
        for (int j = 0; j < rec->nrows; j++) {
            CommsRowStats st;
            comms_summary_row_stats(s, rec, rows[j], &st);
            char key[32], size[64];
            snprintf(key, sizeof key, "%llu", (unsigned long long)rows[j]->bytes);
            comms_size_text(size, sizeof size, rows[j]->bytes);
            json_object_set_new(op, key,
                                json_pack("{sI sf sf sf sf sI ss}", "count", (json_int_t)st.count, "total_latency_ms",
                                          st.total_ms, "avg_latency_ms", st.avg_ms, "tput_avg_gbps", st.algbw,
                                          "busbw_avg_gbps", st.busbw, "msg_size_bytes", (json_int_t)rows[j]->bytes,
                                          "msg_size_str", size));
        }
        free(rows);
        json_object_set_new(root, rec->name, op);
    }
    return root;
}

int64_t comms_summary_total(const CommsSummary* s) {
    int64_t n = 0;
    for (int i = 0; i < s->nrecs; i++)
        for (int j = 0; j < s->recs[i].nrows; j++) n += s->recs[i].rows[j].count;
    return n;
}
