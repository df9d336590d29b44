/*
 * tb_writer.c: TensorBoard event files through protobuf-c (contract in tb_writer.h).
 */
#include "tb_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/common.h"
#include "tb_record.h"

#ifdef T5_HAVE_PROTOBUF_C
#include "tb_event.pb-c.h"

struct TbWriter {
    FILE* f;
    char* path;
};

bool tb_writer_available(void) { return true; }

const char* tb_writer_path(const TbWriter* w) { return w->path; }

// serializes ev, frames it and writes + flushes it
static int write_event(TbWriter* w, const T5tb__Event* ev, char* err, size_t errcap) {
    size_t n = t5tb__event__get_packed_size(ev);
    unsigned char* buf = (unsigned char*)malloc_check(n + TB_RECORD_OVERHEAD);
    unsigned char* msg = (unsigned char*)malloc_check(n ? n : 1);
    t5tb__event__pack(ev, msg);
    tb_record_frame(buf, msg, n);
    free(msg);
    size_t wrote = fwrite(buf, 1, n + TB_RECORD_OVERHEAD, w->f);
    free(buf);
    if (wrote != n + TB_RECORD_OVERHEAD || fflush(w->f) != 0) {
        snprintf(err, errcap, "writing %s failed: %s", w->path, strerror(errno));
        return -1;
    }
    return 0;
}

TbWriter* tb_writer_open(const char* logdir, double wall_time, char* err, size_t errcap) {
    if (t5_mkdir_p(logdir) != 0) {
        snprintf(err, errcap, "cannot create logging_dir %s: %s", logdir, strerror(errno));
        return NULL;
    }
    static int uid;  // SummaryWriter's per-process counter, so two writers of one process get two files
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    char name[512];
    snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d.%d", (long long)wall_time, host, (int)getpid(),
             uid++);
    TbWriter* w = (TbWriter*)calloc_check(1, sizeof *w);
    w->path = t5_path_join(logdir, name);
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        snprintf(err, errcap, "cannot create %s: %s", w->path, strerror(errno));
        free(w->path);
        free(w);
        return NULL;
    }
    T5tb__Event ev = T5TB__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.what_case = T5TB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char*)"brain.Event:2";
    if (write_event(w, &ev, err, errcap)) {
        tb_writer_close(w);
        return NULL;
    }
    return w;
}

int tb_writer_scalar(TbWriter* w, const char* tag, double value, int64_t step, double wall_time, char* err,
                     size_t errcap) {
    T5tb__Summary__Value v = T5TB__SUMMARY__VALUE__INIT;
    v.tag = (char*)tag;
    v.value_case = T5TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)value;
    T5tb__Summary__Value* vs[1] = {&v};
    T5tb__Summary s = T5TB__SUMMARY__INIT;
    s.n_value = 1;
    s.value = vs;
    T5tb__Event ev = T5TB__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = T5TB__EVENT__WHAT_SUMMARY;
    ev.summary = &s;
    return write_event(w, &ev, err, errcap);
}

int tb_writer_text(TbWriter* w, const char* tag, const char* text, int64_t step, double wall_time, char* err,
                   size_t errcap) {
    T5tb__SummaryMetadata__PluginData pd = T5TB__SUMMARY_METADATA__PLUGIN_DATA__INIT;
    pd.plugin_name = (char*)"text";
    T5tb__SummaryMetadata md = T5TB__SUMMARY_METADATA__INIT;
    md.plugin_data = &pd;
    T5tb__TensorShapeProto__Dim dim = T5TB__TENSOR_SHAPE_PROTO__DIM__INIT;
    dim.size = 1;
    T5tb__TensorShapeProto__Dim* dims[1] = {&dim};
    T5tb__TensorShapeProto shape = T5TB__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 1;
    shape.dim = dims;
    ProtobufCBinaryData sv = {.len = strlen(text), .data = (uint8_t*)text};
    T5tb__TensorProto t = T5TB__TENSOR_PROTO__INIT;
    t.dtype = 7;  // DT_STRING
    t.tensor_shape = &shape;
    t.n_string_val = 1;
    t.string_val = &sv;
    T5tb__Summary__Value v = T5TB__SUMMARY__VALUE__INIT;
    v.tag = (char*)tag;
    v.metadata = &md;
    v.value_case = T5TB__SUMMARY__VALUE__VALUE_TENSOR;
    v.tensor = &t;
    T5tb__Summary__Value* vs[1] = {&v};
    T5tb__Summary s = T5TB__SUMMARY__INIT;
    s.n_value = 1;
    s.value = vs;
    T5tb__Event ev = T5TB__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = T5TB__EVENT__WHAT_SUMMARY;
    ev.summary = &s;
    return write_event(w, &ev, err, errcap);
}

void tb_writer_close(TbWriter* w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    free(w->path);
    free(w);
}

#else  // built without protobuf-c

struct TbWriter {
    int unused;
};

bool tb_writer_available(void) { return false; }
const char* tb_writer_path(const TbWriter* w) {
    (void)w;
    return "";
}
TbWriter* tb_writer_open(const char* logdir, double wall_time, char* err, size_t errcap) {
    (void)logdir, (void)wall_time;
    snprintf(err, errcap,
             "this t5train was built without protobuf-c, so it cannot write TensorBoard event files (run "
             "scripts/install_deps.sh: libprotobuf-c-dev, then rebuild)");
    return NULL;
}
int tb_writer_scalar(TbWriter* w, const char* tag, double value, int64_t step, double wall_time, char* err,
                     size_t errcap) {
    (void)w, (void)tag, (void)value, (void)step, (void)wall_time;
    snprintf(err, errcap, "built without protobuf-c");
    return -1;
}
int tb_writer_text(TbWriter* w, const char* tag, const char* text, int64_t step, double wall_time, char* err,
                   size_t errcap) {
    (void)w, (void)tag, (void)text, (void)step, (void)wall_time;
    snprintf(err, errcap, "built without protobuf-c");
    return -1;
}
void tb_writer_close(TbWriter* w) { (void)w; }
#endif
