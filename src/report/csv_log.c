/*
 * csv_log.c: --report_to csv (contract in csv_log.h).
 */
#include "csv_log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "results.h"
#include "trainer_log.h"

void csv_log_format_value(char* buf, size_t cap, const json_t* v) {
    if (!v || json_is_null(v)) {
        snprintf(buf, cap, "%s", "");
    } else if (json_is_integer(v)) {
        snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        py_float_repr(buf, cap, json_real_value(v));
    } else if (json_is_boolean(v)) {
        snprintf(buf, cap, "%s", json_is_true(v) ? "True" : "False");
    } else if (json_is_string(v)) {
        const char* s = json_string_value(v);
        if (!strpbrk(s, ",\"\r\n")) {
            snprintf(buf, cap, "%s", s);
            return;
        }
        size_t o = 0;
        if (cap < 3) {
            if (cap) buf[0] = 0;
            return;
        }
        buf[o++] = '"';
        for (; *s && o + 3 < cap; s++) {
            if (*s == '"') buf[o++] = '"';
            buf[o++] = *s;
        }
        buf[o++] = '"';
        buf[o] = 0;
    } else {
        char* t = results_dumps(v, -1, true);  // a list or dict: its JSON text, quoted
        json_t* s = json_string(t);
        csv_log_format_value(buf, cap, s);
        json_decref(s);
        free(t);
    }
}

static bool has_col(const json_t* cols, const char* k) {
    size_t i;
    json_t* c;
    json_array_foreach(cols, i, c) if (strcmp(json_string_value(c), k) == 0) return true;
    return false;
}

// adds row's new keys to the columns; true when there were any
static bool add_cols(json_t* cols, const json_t* row) {
    bool added = false;
    if (json_array_size(cols) == 0) {
        json_array_append_new(cols, json_string("step"));
        added = true;
    }
    const char* k;
    json_t* v;
    json_object_foreach((json_t*)row, k, v) if (!has_col(cols, k)) {
        json_array_append_new(cols, json_string(k));
        added = true;
    }
    return added;
}

static void put_line(char** text, size_t* len, size_t* cap, const char* s) {
    size_t n = strlen(s);
    if (*len + n + 2 > *cap) {
        *cap = (*len + n + 2) * 2;
        *text = (char*)realloc_check(*text, *cap);
    }
    memcpy(*text + *len, s, n);
    *len += n;
    (*text)[(*len)++] = '\n';
    (*text)[*len] = 0;
}

static char* format_row(const CsvLog* c, const json_t* row) {  // NULL row: the header
    size_t cap = 256, len = 0;
    char* out = (char*)malloc_check(cap);
    out[0] = 0;
    char field[1024];
    size_t i;
    json_t* col;
    json_array_foreach(c->cols, i, col) {
        const char* k = json_string_value(col);
        if (row) csv_log_format_value(field, sizeof field, json_object_get(row, k));
        else {
            json_t* s = json_string(k);
            csv_log_format_value(field, sizeof field, s);
            json_decref(s);
        }
        size_t n = strlen(field);
        if (len + n + 2 > cap) {
            cap = (len + n + 2) * 2;
            out = (char*)realloc_check(out, cap);
        }
        if (i) out[len++] = ',';
        memcpy(out + len, field, n + 1);
        len += n;
    }
    return out;
}

static int rewrite(CsvLog* c, char* err, size_t errcap) {
    size_t len = 0, cap = 0;
    char* text = NULL;
    char* line = format_row(c, NULL);
    put_line(&text, &len, &cap, line);
    free(line);
    size_t i;
    json_t* row;
    json_array_foreach(c->rows, i, row) {
        line = format_row(c, row);
        put_line(&text, &len, &cap, line);
        free(line);
    }
    int rc = results_write_atomic(c->path, text, len, err, errcap);
    free(text);
    return rc;
}

int csv_log_open(CsvLog* c, const char* path, const json_t* history, char* err, size_t errcap) {
    memset(c, 0, sizeof *c);
    c->path = strdup_check(path);
    c->rows = json_array();
    c->cols = json_array();
    json_array_append_new(c->cols, json_string("step"));
    if (history && json_is_array(history)) {
        size_t i;
        json_t* row;
        json_array_foreach(history, i, row) if (json_is_object(row)) {
            add_cols(c->cols, row);
            json_array_append_new(c->rows, json_deep_copy(row));
        }
    }
    return rewrite(c, err, errcap);
}

int csv_log_append(CsvLog* c, const json_t* row, char* err, size_t errcap) {
    if (!json_is_object(row)) {
        snprintf(err, errcap, "%s: a logged row must be a dict", c->path);
        return -1;
    }
    json_array_append_new(c->rows, json_deep_copy(row));
    if (add_cols(c->cols, row)) return rewrite(c, err, errcap);
    char* line = format_row(c, row);
    FILE* f = fopen(c->path, "a");
    int rc = 0;
    bool ok = f && fprintf(f, "%s\n", line) >= 0;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) {
        snprintf(err, errcap, "appending to %s failed: %s", c->path, strerror(errno));
        rc = -1;
    }
    free(line);
    return rc;
}

void csv_log_close(CsvLog* c) {
    free(c->path);
    json_decref(c->rows);
    json_decref(c->cols);
    memset(c, 0, sizeof *c);
}
