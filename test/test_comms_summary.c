/*
 * test_comms_summary.c: DeepSpeed's comms_logger text (src/report/comms_summary.h), on the CPU. The expected strings
 * were printed by DeepSpeed 0.19.8's own code (deepspeed/utils/comms_logging.py convert_size, calc_bw_log, the
 * CommsLogger.append verbose f-string and log_all's table, trim_mean of deepspeed/utils/timer.py) run in Python on the
 * same records, with one change: reduce_scatter_tensor's size is not multiplied by the world size a second time
 * (comms_summary.h). Also: the op names and prof_ops aliases (src/launch/comms_log.h), the bus factors, the trimmed
 * mean, debug's record names, and the JSON summary.
 */
#include "t5test.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "../src/launch/comms_log.h"
#include "../src/report/comms_summary.h"

static void test_size_text(void** state) {
    (void)state;
    const struct {
        uint64_t b;
        const char* s;
    } cases[] = {{0, "0B"},
                 {4, "4.0 B"},
                 {1023, "1023.0 B"},
                 {1024, "1.0 KB"},
                 {1536, "1.5 KB"},
                 {1048575, "1024.0 KB"},  // round(1023.999, 2): DeepSpeed picks the unit before rounding
                 {711834460, "678.86 MB"},
                 {3221225477ull, "3.0 GB"}};
    char b[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        comms_size_text(b, sizeof b, cases[i].b);
        assert_string_equal(b, cases[i].s);
    }
}

static void test_op_names(void** state) {
    (void)state;
    assert_string_equal(comms_op_name(COMMS_ALL_REDUCE), "all_reduce");
    assert_string_equal(comms_op_name(COMMS_REDUCE_SCATTER), "reduce_scatter_tensor");
    assert_string_equal(comms_op_name(COMMS_ALL_GATHER), "all_gather_into_tensor");
    assert_string_equal(comms_op_name(COMMS_BROADCAST), "broadcast");
    assert_string_equal(comms_op_name(COMMS_BARRIER), "barrier");
    for (int op = 0; op < COMMS_NUM_OPS; op++) assert_int_equal(comms_op_from_name(comms_op_name(op)), op);
    assert_int_equal(comms_op_from_name("all_gather"), COMMS_ALL_GATHER);
    assert_int_equal(comms_op_from_name("reduce_scatter"), COMMS_REDUCE_SCATTER);
    assert_int_equal(comms_op_from_name("all_to_all_single"), -1);
    assert_int_equal(comms_op_from_name("All_Reduce"), -1);
    char list[256];
    comms_op_list(list, sizeof list);
    for (int op = 0; op < COMMS_NUM_OPS; op++) assert_non_null(strstr(list, comms_op_name(op)));
}

static void test_bandwidth(void** state) {
    (void)state;
    // nccl-tests' bus factors
    assert_true(fabs(comms_bus_factor(COMMS_ALL_REDUCE, 4) - 1.5) < 1e-15);
    assert_true(fabs(comms_bus_factor(COMMS_ALL_GATHER, 4) - 0.75) < 1e-15);
    assert_true(fabs(comms_bus_factor(COMMS_REDUCE_SCATTER, 8) - 0.875) < 1e-15);
    assert_true(comms_bus_factor(COMMS_BROADCAST, 8) == 1.0);
    assert_true(comms_bus_factor(COMMS_ALL_REDUCE, 1) == 0.0);
    // DeepSpeed's calc_bw_log (Python): (33.554432, 25.165824) (67.108864, 50.331648) (0.016, 0.016); the reduce-scatter
    // of the whole 4 MiB input as nccl-tests counts it
    const struct {
        CommsOp op;
        uint64_t bytes;
        double alg, bus;
    } cases[] = {{COMMS_ALL_REDUCE, 1048576, 33.554432, 25.165824},
                 {COMMS_ALL_GATHER, 1048576, 67.108864, 50.331648},
                 {COMMS_REDUCE_SCATTER, 4194304, 67.108864, 50.331648},
                 {COMMS_BROADCAST, 1000, 0.016, 0.016},
                 {COMMS_BARRIER, 0, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double a, b;
        comms_bandwidth(cases[i].op, cases[i].bytes, 0.5, 4, &a, &b);
        if (fabs(a - cases[i].alg) > 1e-9 * fmax(1, cases[i].alg) || fabs(b - cases[i].bus) > 1e-9 * fmax(1, cases[i].bus))
            fail_msg("%s: algbw %.9g busbw %.9g, want %.9g %.9g", comms_op_name(cases[i].op), a, b, cases[i].alg,
                     cases[i].bus);
    }
    double a = 1, b = 1;
    comms_bandwidth(COMMS_ALL_REDUCE, 4, 0.0, 2, &a, &b);  // a zero time (DeepSpeed divides by zero): 0
    assert_true(a == 0 && b == 0);
}

static void test_verbose_line(void** state) {
    (void)state;
    double a, b;
    comms_bandwidth(COMMS_ALL_REDUCE, 1048576, 0.5, 4, &a, &b);
    char line[512];
    comms_format_op(line, sizeof line, "all_reduce", 0.5, 1048576, a, b);
    assert_string_equal(line, "[Rank 0] comm op: all_reduce | time (ms): 0.50 | msg size: 1.0 MB | algbw (Gbps): 33.55 | "
                              "busbw (Gbps): 25.17");
}

static void add(CommsSummary* s, CommsOp op, uint64_t bytes, double ms, const char* caller) {
    CommsRecord r = {.op = op, .bytes = bytes, .ms = ms, .caller = caller};
    comms_summary_add(s, &r);
}

// the records of the table test, in issue order (latencies exact in float, as cudaEventElapsedTime's)
static void fill(CommsSummary* s) {
    for (int i = 0; i < 18; i++) add(s, COMMS_ALL_REDUCE, 4, (i + 1) / 64.0, "the overflow all-reduce");
    add(s, COMMS_ALL_REDUCE, 4, 10.0, "the gradient norm all-reduce");
    add(s, COMMS_ALL_REDUCE, 4, 12.5, "the gradient norm all-reduce");
    add(s, COMMS_ALL_GATHER, 1048576, 0.5, "the parameter all-gather");
    add(s, COMMS_ALL_GATHER, 1048576, 0.25, "the parameter all-gather");
    add(s, COMMS_ALL_GATHER, 4096, 0.015625, "the parameter all-gather");
    add(s, COMMS_ALL_REDUCE, 2, 100.0, "an all-reduce of the step's statistics");
    add(s, COMMS_REDUCE_SCATTER, 4194304, 0.75, "the gradient reduce-scatter");
    add(s, COMMS_BROADCAST, 1536, 0.125, "the fp32 views' broadcasts");
    add(s, COMMS_BARRIER, 0, 0.0625, "a barrier");
}

static char* print_to_string(const CommsSummary* s) {
    static char* buf;  // static: open_memstream keeps their addresses until fclose
    static size_t len;
    buf = NULL;
    len = 0;
    FILE* f = open_memstream(&buf, &len);
    assert_non_null(f);
    comms_summary_print(s, f);
    fclose(f);
    return buf;
}

static void test_table(void** state) {
    (void)state;
    CommsSummary s;
    comms_summary_init(&s, 4, false);
    fill(&s);
    assert_int_equal(comms_summary_total(&s), 27);
    char* got = print_to_string(&s);
    const char* want =
        "Comm. Op            Message Size        Count               Total Latency(ms)   Avg Latency(ms)     tput_avg (Gbps)     busbw_avg (Gbps)    \n"
        "all_reduce\n"
        "                    2.0 B               1                   100.00              100.00              0.00                0.00                \n"
        "                    4.0 B               20                  25.17               0.16                0.00                0.00                \n"
        "all_gather_into_tensor\n"
        "                    4.0 KB              1                   0.02                0.02                8.39                6.29                \n"
        "                    1.0 MB              2                   0.75                0.38                100.66              75.50               \n"
        "reduce_scatter_tensor\n"
        "                    4.0 MB              1                   0.75                0.75                44.74               33.55               \n"
        "broadcast\n"
        "                    1.5 KB              1                   0.12                0.12                0.10                0.10                \n"
        "barrier\n"
        "                    0B                  1                   0.06                0.06                0.00                0.00                \n";
    if (strcmp(got, want) != 0) fail_msg("table differs:\n%s\nwant:\n%s", got, want);
    free(got);
    // the trimmed means (Python: 0.1640625 0.0005107476680182563 0.0003830607510136922, total 25.171875): round(0.1 x 20)
    // = 2 dropped at each end, the two slow outliers among them
    const CommsRecordRows* ar = &s.recs[0];
    assert_string_equal(ar->name, "all_reduce");
    const CommsRow* row = ar->rows[0].bytes == 4 ? &ar->rows[0] : &ar->rows[1];
    CommsRowStats st;
    comms_summary_row_stats(&s, ar, row, &st);
    assert_int_equal(st.count, 20);
    assert_true(st.total_ms == 25.171875);
    assert_true(st.avg_ms == 0.1640625);
    assert_true(fabs(st.algbw - 0.0005107476680182563) < 1e-15);
    assert_true(fabs(st.busbw - 0.0003830607510136922) < 1e-15);
    comms_summary_free(&s);
}

static void test_debug_names_and_json(void** state) {
    (void)state;
    CommsSummary s;
    comms_summary_init(&s, 4, true);
    fill(&s);
    // DeepSpeed's get_debug_log_name: one record per (op, caller), in first-seen order
    assert_int_equal(s.nrecs, 7);
    assert_string_equal(s.recs[0].name, "all_reduce | [Caller Func: the overflow all-reduce]");
    assert_string_equal(s.recs[1].name, "all_reduce | [Caller Func: the gradient norm all-reduce]");
    assert_string_equal(s.recs[2].name, "all_gather_into_tensor | [Caller Func: the parameter all-gather]");
    char* got = print_to_string(&s);
    assert_non_null(strstr(got, "\nall_reduce | [Caller Func: the gradient norm all-reduce]\n"
                                "                    4.0 B               2                   22.50               11.25 "));
    free(got);
    comms_summary_free(&s);

    comms_summary_init(&s, 4, false);
    fill(&s);
    json_t* j = comms_summary_json(&s);
    assert_int_equal(json_object_size(j), 5);
    json_t* ag = json_object_get(json_object_get(j, "all_gather_into_tensor"), "1048576");
    assert_non_null(ag);
    assert_int_equal(json_integer_value(json_object_get(ag, "count")), 2);
    assert_true(json_real_value(json_object_get(ag, "total_latency_ms")) == 0.75);
    assert_true(json_real_value(json_object_get(ag, "avg_latency_ms")) == 0.375);
    assert_true(fabs(json_real_value(json_object_get(ag, "tput_avg_gbps")) - 100.663296) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(ag, "busbw_avg_gbps")) - 75.497472) < 1e-9);
    assert_int_equal(json_integer_value(json_object_get(ag, "msg_size_bytes")), 1048576);
    assert_string_equal(json_string_value(json_object_get(ag, "msg_size_str")), "1.0 MB");
    // sizes ascending inside an op, as the table
    const char* first = json_object_iter_key(json_object_iter(json_object_get(j, "all_reduce")));
    assert_string_equal(first, "2");
    json_decref(j);
    comms_summary_free(&s);
}

// an empty summary (one rank: no collectives): the header alone, as DeepSpeed's log_summary with nothing logged
static void test_empty(void** state) {
    (void)state;
    CommsSummary s;
    comms_summary_init(&s, 1, false);
    char* got = print_to_string(&s);
    assert_non_null(strstr(got, "Comm. Op            Message Size"));
    assert_int_equal(strchr(got, '\n') - got + 1, (long)strlen(got));  // one line
    free(got);
    json_t* j = comms_summary_json(&s);
    assert_int_equal(json_object_size(j), 0);
    json_decref(j);
    comms_summary_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_text),   cmocka_unit_test(test_op_names),
        cmocka_unit_test(test_bandwidth),   cmocka_unit_test(test_verbose_line),
        cmocka_unit_test(test_table),       cmocka_unit_test(test_debug_names_and_json),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
