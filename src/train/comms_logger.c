/*
 * comms_logger.c: DeepSpeed's comms_logger in the trainer (comms_logger.h).
 */
#include "comms_logger.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "../base/common.h"
#include "../launch/comms_log.h"
#include "../report/comms_summary.h"

struct CommsLogger {
    CommsSummary sum;
    bool verbose;
    TrainerLog* log;
};

// each timed collective, in issue order (comms_log.h's sink)
static void sink(void* ctx, const CommsRecord* r) {
    CommsLogger* c = ctx;
    const char* name = comms_summary_add(&c->sum, r);
    if (!c->verbose || c->log->rank != 0) return;
    double algbw, busbw;
    comms_bandwidth(r->op, r->bytes, r->ms, c->sum.world, &algbw, &busbw);
    char line[512];
    comms_format_op(line, sizeof line, name, r->ms, r->bytes, algbw, busbw);
    trainer_log_line(c->log, line);  // DeepSpeed's log_dist: an info line
}

CommsLogger* comms_logger_start(const CommsLoggerArgs* a, int world, TrainerLog* log) {
    if (!a->ops) return NULL;
    CommsLogger* c = calloc_check(1, sizeof *c);
    comms_summary_init(&c->sum, world, a->debug);
    c->verbose = a->verbose;
    c->log = log;
    comms_log_configure(a->ops, sink, c);
    return c;
}

void comms_logger_poll(CommsLogger* c) {
    if (c) comms_log_poll();
}

void comms_logger_end(CommsLogger* c, int64_t step) {
    if (!c) return;
    comms_log_finish();
    if (c->log->rank == 0) {
        fflush(stdout);
        comms_summary_print(&c->sum, stdout);  // DeepSpeed's print(): at every log level
        fflush(stdout);
        json_t* e = json_pack("{sI ss si so}", "step", (json_int_t)step, "event", "comms_summary", "world_size",
                              c->sum.world, "summary", comms_summary_json(&c->sum));
        char* line = json_dumps(e, JSON_COMPACT);
        if (line) trainer_log_event(c->log, line);
        free(line);
        json_decref(e);
    }
    comms_summary_free(&c->sum);
    free(c);
}
