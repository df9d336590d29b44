/*
 * version.h: what this binary is and what it runs on: t5train's version and git commit, the GPU
 * architecture it was built for, and the versions of the CUDA runtime and driver, cuBLASLt, NCCL and MPI
 * (found at run time, beside those it was built with). `t5train --version` prints them; `t5train env`
 * (env_cmd.c) starts with the same items.
 */
#pragma once
#include <stdio.h>

#define T5TRAIN_VERSION "0.1.0"

// One line of a report: "name ....... value" as text, "name": "value" in JSON.
typedef struct {
    char name[40];
    char value[512];
} ReportItem;

// "0.1.0 (git <describe>)": the commit is the build's `git describe --always --dirty` ("unknown" outside a checkout)
const char* version_string(void);

// Appends the version items to items[*n..cap). Never fails: a component that cannot be asked (no driver, no GPU)
// says so in its value.
void version_items(ReportItem* items, int* n, int cap);

// The model card's "### Framework versions" lines (src/report/model_card.h): "- t5train <version>", "- CUDA runtime
// <version>", "- NCCL <version>", each with its newline, as the version items say them.
void version_card_lines(char* out, size_t cap);

// Appends one item (printf-style value); ignored when the array is full.
void report_add(ReportItem* items, int* n, int cap, const char* name, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

// The items as "name ......... value" lines, the dots up to a fixed column (the layout of ds_report).
void report_print(FILE* f, const ReportItem* items, int n);
