/*
 * flops_profile.c: DeepSpeed's flops_profiler text for a T5 micro-batch (what is printed and why: flops_profile.h).
 *
 * Sections: number formatting (DeepSpeed's *_to_string) | the module tree (HF's T5 modules with params, MACs and
 * the segments that time them) | torch's repr of the tree | the aggregated profile | the summary.
 */
#include "flops_profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "trainer_log.h"

// ----------------------------------------------------------------------------
// number formatting (profiler.py number_to_string and friends: 2 digits, then Python's :g)

static int fmt_g2(char* buf, size_t cap, double x) { return snprintf(buf, cap, "%g", py_round(x, 2)); }

int flops_profile_number(char* buf, size_t cap, double num) {
    double mag = 1;
    const char* u = "";
    if (num >= 1e12) mag = 1e12, u = "T";
    else if (num >= 1e9) mag = 1e9, u = "G";
    else if (num >= 1e6) mag = 1e6, u = "M";
    else if (num >= 1e3) mag = 1e3, u = "K";
    else if (num >= 1 || num == 0) mag = 1, u = "";
    else if (num >= 1e-3) mag = 1e-3, u = "m";
    else mag = 1e-6, u = "u";
    char v[64];
    fmt_g2(v, sizeof v, num / mag);
    return snprintf(buf, cap, "%s %s", v, u);
}

int flops_profile_params(char* buf, size_t cap, double x) {
    char t[80];
    flops_profile_number(t, sizeof t, x);
    size_t n = strlen(t);
    while (n > 0 && t[n - 1] == ' ') t[--n] = 0;
    for (char* p = t; *p; p++)
        if (*p == 'G') *p = 'B';
    return snprintf(buf, cap, "%s", t);
}

static void fmt_unit(char* buf, size_t cap, double x, const char* unit) {
    char t[48];
    flops_profile_number(t, sizeof t, x);
    snprintf(buf, cap, "%s%s", t, unit);
}

// ----------------------------------------------------------------------------
// the module tree

typedef struct {
    char key[24];        // the name in its parent: "q", "0", "SelfAttention"
    const char* cls;     // torch class name
    char extra[96];      // the module's own extra_repr ("in_features=512, out_features=512, bias=False")
    double params;       // its parameters (children included)
    double own_macs;     // MACs of its own forward code (not its children's)
    double macs;         // own + children
    int seg[2][2];       // up to two ranges of timed segments [a, b); -1: none
    bool timed;
    bool is_list;        // ModuleList: torch prints no extra_repr for it, and groups repeated children
    double ms;
    int parent, first, last, next;
} Mod;

typedef struct {
    Mod* m;
    int n, cap;
    int nseg;
} Tree;

static int add(Tree* t, int parent, const char* key, const char* cls, const char* extra, double params, double macs) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        t->m = realloc_check(t->m, (size_t)t->cap * sizeof(Mod));
    }
    Mod* m = &t->m[t->n];
    memset(m, 0, sizeof *m);
    snprintf(m->key, sizeof m->key, "%s", key);
    m->cls = cls;
    snprintf(m->extra, sizeof m->extra, "%s", extra ? extra : "");
    m->params = params;
    m->own_macs = macs;
    m->seg[0][0] = m->seg[1][0] = -1;
    m->parent = parent;
    m->first = m->last = m->next = -1;
    if (parent >= 0) {
        Mod* p = &t->m[parent];
        if (p->last >= 0) t->m[p->last].next = t->n;
        else p->first = t->n;
        p->last = t->n;
    }
    return t->n++;
}

static void timed(Tree* t, int i, int a, int b) {
    int k = t->m[i].seg[0][0] < 0 ? 0 : 1;
    t->m[i].seg[k][0] = a;
    t->m[i].seg[k][1] = b;
}

static int linear(Tree* t, int parent, const char* key, double in, double out, double rows) {
    char e[96];
    snprintf(e, sizeof e, "in_features=%.0f, out_features=%.0f, bias=False", in, out);
    return add(t, parent, key, "Linear", e, in * out, rows * in * out);
}

static void dropout(Tree* t, int parent, float p) {
    char e[64];
    snprintf(e, sizeof e, "p=%g, inplace=False", (double)p);
    add(t, parent, "dropout", "Dropout", e, 0, 0);
}

// T5Attention over Tq queries and Tk keys (the k, v projections read Tk rows); rel: block 0 of its stack holds the
// relative_attention_bias table
static void attention(Tree* t, int parent, const char* key, const T5Config* c, double B, double Tq, double Tk, bool rel) {
    const double D = c->d_model, I = (double)c->num_heads * c->d_kv;
    // own MACs: scores Q K^T and probabilities x V (torch.matmul in T5Attention.forward), every head
    int a = add(t, parent, key, "T5Attention", "", 0, 2 * B * Tq * Tk * I);
    linear(t, a, "q", D, I, B * Tq);
    linear(t, a, "k", D, I, B * Tk);
    linear(t, a, "v", D, I, B * Tk);
    linear(t, a, "o", I, D, B * Tq);
    if (rel) {
        char e[64];
        snprintf(e, sizeof e, "%d, %d", c->relative_attention_num_buckets, c->num_heads);
        add(t, a, "relative_attention_bias", "Embedding", e, (double)c->relative_attention_num_buckets * c->num_heads, 0);
    }
}

static int layer_norm(Tree* t, int parent, const char* key, double D) { return add(t, parent, key, "T5LayerNorm", "", D, 0); }

static void feed_forward(Tree* t, int parent, const T5Config* c, double N) {
    const double D = c->d_model, F = c->d_ff;
    const bool gated = c->feed_forward == T5_FF_GATED_GELU;
    int ff = add(t, parent, "DenseReluDense", gated ? "T5DenseGatedActDense" : "T5DenseActDense", "", 0, 0);
    if (gated) {
        linear(t, ff, "wi_0", D, F, N);
        linear(t, ff, "wi_1", D, F, N);
    } else {
        linear(t, ff, "wi", D, F, N);
    }
    linear(t, ff, "wo", F, D, N);
    dropout(t, ff, c->dropout_rate);
    add(t, ff, "act", gated ? "NewGELUActivation" : "ReLU", "", 0, 0);
}

int flops_profile_num_segments(const T5Config* c) {
    const int Ld = c->num_decoder_layers > 0 ? c->num_decoder_layers : c->num_layers;
    return 2 * c->num_layers + 3 * Ld + 6;
}

// sums params and MACs bottom-up (children come after their parent in the array), then the times
static void finish(Tree* t, const double* seg_ms) {
    for (int i = t->n - 1; i >= 0; i--) {
        Mod* m = &t->m[i];
        m->macs = m->own_macs;
        double p = 0;
        for (int k = m->first; k >= 0; k = t->m[k].next) {
            m->macs += t->m[k].macs;
            p += t->m[k].params;
        }
        if (m->first >= 0) m->params += p;
    }
    if (!seg_ms) return;
    for (int i = t->n - 1; i >= 0; i--) {
        Mod* m = &t->m[i];
        if (m->seg[0][0] >= 0) {
            m->timed = true;
            for (int r = 0; r < 2; r++)
                for (int s = m->seg[r][0]; s >= 0 && s < m->seg[r][1]; s++) m->ms += seg_ms[s];
        } else if (m->is_list) {  // DeepSpeed: a module without its own duration (ModuleList) sums its children's
            m->timed = m->first >= 0;
            for (int k = m->first; k >= 0; k = t->m[k].next) {
                m->timed = m->timed && t->m[k].timed;
                m->ms += t->m[k].ms;
            }
        }
    }
}

static int build(const FlopsProfileInput* in, Tree* t) {
    const T5Config* c = &in->cfg;
    if (c->d_model <= 0 || c->d_ff <= 0 || c->num_heads <= 0 || c->d_kv <= 0 || c->num_layers <= 0 || in->B <= 0 ||
        in->S <= 0 || in->T <= 0)
        return -1;
    memset(t, 0, sizeof *t);
    const int L = c->num_layers, Ld = c->num_decoder_layers > 0 ? c->num_decoder_layers : c->num_layers;
    const double B = (double)in->B, S = (double)in->S, T = (double)in->T, D = c->d_model, V = c->vocab_size;
    t->nseg = flops_profile_num_segments(c);
    char e[64], key[24];
    snprintf(e, sizeof e, "%d, %d", c->vocab_size, c->d_model);
    const int top = add(t, -1, "", "T5ForConditionalGeneration", "", 0, 0);
    timed(t, top, 0, t->nseg);
    // the shared embedding is one module in HF, listed as shared and as each stack's embed_tokens: DeepSpeed
    // accumulates one duration for it, both lookups, and shows it at every place
    const int embed_segs[2] = {0, 2 + 2 * L};
    const int shared = add(t, top, "shared", "Embedding", e, V * D, 0);
    timed(t, shared, embed_segs[0], embed_segs[0] + 1);
    timed(t, shared, embed_segs[1], embed_segs[1] + 1);
    for (int st = 0; st < 2; st++) {
        const bool dec = st == 1;
        const int first_seg = dec ? 2 + 2 * L : 0, nl = dec ? Ld : L;
        const int stack = add(t, top, dec ? "decoder" : "encoder", "T5Stack", "", 0, 0);
        timed(t, stack, first_seg, first_seg + (dec ? 2 + 3 * Ld : 2 + 2 * L));
        const int emb = add(t, stack, "embed_tokens", "Embedding", e, V * D, 0);
        timed(t, emb, embed_segs[0], embed_segs[0] + 1);
        timed(t, emb, embed_segs[1], embed_segs[1] + 1);
        const int blocks = add(t, stack, "block", "ModuleList", "", 0, 0);
        t->m[blocks].is_list = true;
        const double Tq = dec ? T : S;
        for (int l = 0; l < nl; l++) {
            snprintf(key, sizeof key, "%d", l);
            const int blk = add(t, blocks, key, "T5Block", "", 0, 0);
            const int s0 = dec ? 3 + 2 * L + 3 * l : 1 + 2 * l;
            timed(t, blk, s0, s0 + (dec ? 3 : 2));
            const int layers = add(t, blk, "layer", "ModuleList", "", 0, 0);
            t->m[layers].is_list = true;
            int ly = add(t, layers, "0", "T5LayerSelfAttention", "", 0, 0);
            timed(t, ly, s0, s0 + 1);
            attention(t, ly, "SelfAttention", c, B, Tq, Tq, l == 0);
            layer_norm(t, ly, "layer_norm", D);
            dropout(t, ly, c->dropout_rate);
            int next = 1;
            if (dec) {
                ly = add(t, layers, "1", "T5LayerCrossAttention", "", 0, 0);
                timed(t, ly, s0 + 1, s0 + 2);
                attention(t, ly, "EncDecAttention", c, B, T, S, false);
                layer_norm(t, ly, "layer_norm", D);
                dropout(t, ly, c->dropout_rate);
                next = 2;
            }
            snprintf(key, sizeof key, "%d", next);
            ly = add(t, layers, key, "T5LayerFF", "", 0, 0);
            timed(t, ly, s0 + next, s0 + next + 1);
            feed_forward(t, ly, c, B * Tq);
            layer_norm(t, ly, "layer_norm", D);
            dropout(t, ly, c->dropout_rate);
        }
        const int fin = dec ? 3 + 2 * L + 3 * Ld : 1 + 2 * L;
        timed(t, layer_norm(t, stack, "final_layer_norm", D), fin, fin + 1);
        dropout(t, stack, c->dropout_rate);
    }
    char le[96];
    snprintf(le, sizeof le, "in_features=%d, out_features=%d, bias=False", c->d_model, c->vocab_size);
    // a tied lm_head's weight is shared.weight: torch still lists it under lm_head (DeepSpeed counts it there)
    const int lm = add(t, top, "lm_head", "Linear", le, D * V, B * T * D * V);
    timed(t, lm, 4 + 2 * L + 3 * Ld, 5 + 2 * L + 3 * Ld);
    finish(t, in->seg_ms);
    // the model's parameters are unique ones (the tied embedding once): t5_config_num_params
    t->m[top].params = (double)t5_config_num_params(c);
    return 0;
}

int flops_profile_totals(const FlopsProfileInput* in, FlopsProfileTotals* o) {
    Tree t;
    if (build(in, &t)) return -1;
    memset(o, 0, sizeof *o);
    o->macs_top = t.m[0].macs;
    for (int i = 0; i < t.n; i++) o->macs_leaves += t.m[i].own_macs;
    o->params_top = t.m[0].params;
    o->num_modules = t.n;
    free(t.m);
    return 0;
}

// ----------------------------------------------------------------------------
// torch's Module.__repr__ (ModuleList's groups repeated children: "(1-5): 5 x T5Block(...)")

typedef struct {
    double params, macs, ms;
    bool timed;
} Totals;

static void items(FILE* f, const Mod* m, const Totals* tot) {
    char p[96], mc[96], d[96], fl[96], g1[32], g2[32], g3[32];
    flops_profile_params(p, sizeof p, m->params);
    fmt_unit(mc, sizeof mc, m->macs, "MACs");
    fmt_g2(g1, sizeof g1, tot->params ? 100 * m->params / tot->params : 0);
    fmt_g2(g2, sizeof g2, tot->macs ? 100 * m->macs / tot->macs : 0);
    fprintf(f, "%s = %s%% Params, %s = %s%% MACs, ", p, g1, mc, g2);
    if (m->timed) {
        const double s = m->ms / 1e3;
        fmt_unit(d, sizeof d, s, "s");
        fmt_g2(g3, sizeof g3, tot->ms ? 100 * m->ms / tot->ms : 0);
        fmt_unit(fl, sizeof fl, s > 0 ? py_round(2 * m->macs / s, 2) : 0, "FLOPS");
        fprintf(f, "%s = %s%% latency, %s", d, g3, fl);
    } else {
        fprintf(f, tot->timed ? "latency not timed (inside its parent's)" : "latency not timed");
    }
    if (m->extra[0]) fprintf(f, ", %s", m->extra);
}

static char* add_indent(const char* s) {  // torch's _addindent(s, 2)
    size_t n = strlen(s), lines = 0;
    for (size_t i = 0; i < n; i++) lines += s[i] == '\n';
    char* o = malloc_check(n + 2 * lines + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        o[k++] = s[i];
        if (s[i] == '\n') o[k++] = ' ', o[k++] = ' ';
    }
    o[k] = 0;
    return o;
}

static char* repr(const Tree* t, int i, const Totals* tot) {
    const Mod* m = &t->m[i];
    char* out = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&out, &len);
    if (!f) t5_die(T5_EXIT_FAILURE, "out of host memory (flops profile)");
    if (m->is_list) {
        fprintf(f, "%s(", m->cls);
        int idx = 0;
        int k = m->first;
        bool any = false;
        while (k >= 0) {
            char* r = repr(t, k, tot);
            int start = idx, end = idx, kk = t->m[k].next;
            while (kk >= 0) {
                char* r2 = repr(t, kk, tot);
                const bool same = strcmp(r, r2) == 0;
                free(r2);
                if (!same) break;
                end++;
                kk = t->m[kk].next;
            }
            char* ind = add_indent(r);
            if (start == end) fprintf(f, "\n  (%d): %s", start, ind);
            else fprintf(f, "\n  (%d-%d): %d x %s", start, end, end - start + 1, ind);
            free(ind);
            free(r);
            any = true;
            idx = end + 1;
            k = kk;
        }
        fprintf(f, any ? "\n)" : ")");
    } else if (m->first < 0) {
        fprintf(f, "%s(", m->cls);
        items(f, m, tot);
        fprintf(f, ")");
    } else {
        fprintf(f, "%s(\n  ", m->cls);
        items(f, m, tot);
        for (int k = m->first; k >= 0; k = t->m[k].next) {
            char* r = repr(t, k, tot);
            char* ind = add_indent(r);
            fprintf(f, "\n  (%s): %s", t->m[k].key, ind);
            free(ind);
            free(r);
        }
        fprintf(f, "\n)");
    }
    fclose(f);
    return out;
}

// ----------------------------------------------------------------------------
// the aggregated profile (print_model_aggregated_profile): per depth, each class's summed MACs, params and time

typedef struct {
    const char* cls;
    double macs, params, ms;
    bool timed;
} Agg;

typedef struct {
    Agg* a;
    int n;
} Depth;

static void walk(const Tree* t, int i, int d, Depth* depths, int* ndepth, int cap) {
    if (d >= cap) return;
    if (d + 1 > *ndepth) *ndepth = d + 1;
    Depth* D = &depths[d];
    const Mod* m = &t->m[i];
    int k = 0;
    while (k < D->n && strcmp(D->a[k].cls, m->cls) != 0) k++;
    if (k == D->n) {
        D->a = realloc_check(D->a, (size_t)(D->n + 1) * sizeof(Agg));
        D->a[k] = (Agg){.cls = m->cls, .timed = false};
        D->n++;
    }
    D->a[k].macs += m->macs;
    D->a[k].params += m->params;
    if (m->timed) {
        D->a[k].ms += m->ms;
        D->a[k].timed = true;
    }
    for (int c = m->first; c >= 0; c = t->m[c].next) walk(t, c, d + 1, depths, ndepth, cap);
}

// sorted(info.items(), key, reverse=True)[:top] (stable: equal values keep their first-seen order), as a dict repr
static void print_top(FILE* f, const Agg* a, int n, int top, int what) {
    int* ord = malloc_check((size_t)(n > 0 ? n : 1) * sizeof(int));
    int m = 0;
    for (int i = 0; i < n; i++)
        if (what != 2 || a[i].timed) ord[m++] = i;
    #define VAL(j) (what == 0 ? a[j].params : what == 1 ? a[j].macs : a[j].ms)
    for (int i = 1; i < m; i++) {
        int x = ord[i], j = i;
        while (j > 0 && VAL(ord[j - 1]) < VAL(x)) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = x;
    }
    #undef VAL
    if (top < m) m = top;
    fputc('{', f);
    for (int i = 0; i < m; i++) {
        const Agg* x = &a[ord[i]];
        char v[64];
        if (what == 0) flops_profile_params(v, sizeof v, x->params);
        else if (what == 1) fmt_unit(v, sizeof v, x->macs, "MACs");
        else fmt_unit(v, sizeof v, x->ms / 1e3, "s");
        fprintf(f, "%s'%s': '%s'", i ? ", " : "", x->cls, v);
    }
    fputc('}', f);
    free(ord);
}

static void aggregated(FILE* f, const Tree* t, int module_depth, int top) {
    enum { CAP = 32 };
    Depth depths[CAP];
    memset(depths, 0, sizeof depths);
    int nd = 0;
    walk(t, 0, 0, depths, &nd, CAP);
    int depth = module_depth == -1 ? nd - 1 : (module_depth < nd ? module_depth : nd);
    fprintf(f, "Top %d modules in terms of params, MACs or fwd latency at different model depths:\n", top);
    for (int d = 0; d < depth; d++) {
        fprintf(f, "depth %d:\n    params      - ", d);
        print_top(f, depths[d].a, depths[d].n, top, 0);
        fprintf(f, "\n    MACs        - ");
        print_top(f, depths[d].a, depths[d].n, top, 1);
        bool any = false;
        for (int i = 0; i < depths[d].n; i++) any = any || depths[d].a[i].timed;
        fprintf(f, "\n    fwd latency - ");
        if (any) print_top(f, depths[d].a, depths[d].n, top, 2);
        else if (!t->m[0].timed) fprintf(f, "not timed");
        else fprintf(f, "not timed at this depth (t5train times the T5Layer* modules and those above them)");
        fputc('\n', f);
    }
    for (int d = 0; d < CAP; d++) free(depths[d].a);
}

// ----------------------------------------------------------------------------
// the summary (print_model_profile)

static void line(FILE* f, const char* k, const char* v) { fprintf(f, "%-70s  %-8s\n", k, v); }

int flops_profile_write(FILE* f, const FlopsProfileInput* in) {
    Tree t;
    if (build(in, &t)) return -1;
    const Mod* top = &t.m[0];
    const double fwd_flops = 2 * top->macs;  // flops_t5_forward
    const bool have_fwd = in->seg_ms != NULL, have_bwd = in->bwd_ms >= 0, have_step = in->step_ms >= 0;
    const double fwd_s = top->ms / 1e3, bwd_s = in->bwd_ms / 1e3, step_s = in->step_ms / 1e3;
    char k[160], v[160], a[96];
    fprintf(f, "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n");
    fprintf(f, "Profile Summary at step %lld:\n", (long long)in->profile_step);
    fprintf(f, "Notations:\n"
               "data parallel size (dp_size), model parallel size(mp_size),\n"
               "number of parameters (params), number of multiply-accumulate operations(MACs),\n"
               "number of floating-point operations (flops), floating-point operations per second (FLOPS),\n"
               "fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
               "step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n\n");
    snprintf(v, sizeof v, "%d", in->world_size);
    line(f, "world size: ", v);
    line(f, "data parallel size: ", v);
    line(f, "model parallel size: ", "1");
    snprintf(v, sizeof v, "%lld", (long long)in->B);
    line(f, "batch size per GPU: ", v);
    flops_profile_params(v, sizeof v, top->params);
    line(f, "params per GPU: ", v);
    line(f, "params of model = params per GPU * mp_size: ", v);
    fmt_unit(v, sizeof v, top->macs, "MACs");
    line(f, "fwd MACs per GPU: ", v);
    flops_profile_number(v, sizeof v, fwd_flops);
    line(f, "fwd flops per GPU: ", v);
    line(f, "fwd flops of model = fwd flops per GPU * mp_size: ", v);
    const char* nt = "not timed";
    if (have_fwd) fmt_unit(v, sizeof v, fwd_s, "s");
    line(f, "fwd latency: ", have_fwd ? v : nt);
    if (have_fwd) fmt_unit(v, sizeof v, fwd_s > 0 ? fwd_flops / fwd_s : 0, "FLOPS");
    line(f, "fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ", have_fwd ? v : nt);
    const double bf = 2 + in->recompute_fwd_factor;
    if (have_bwd) fmt_unit(v, sizeof v, bwd_s, "s");
    line(f, "bwd latency: ", have_bwd ? v : nt);
    snprintf(k, sizeof k, "bwd FLOPS per GPU = %g * fwd flops per GPU / bwd latency: ", bf);
    if (have_bwd) fmt_unit(v, sizeof v, bwd_s > 0 ? bf * fwd_flops / bwd_s : 0, "FLOPS");
    line(f, k, have_bwd ? v : nt);
    snprintf(k, sizeof k, "fwd+bwd FLOPS per GPU = %g * fwd flops per GPU / (fwd+bwd latency): ", bf + 1);
    if (have_fwd && have_bwd) fmt_unit(v, sizeof v, (bf + 1) * fwd_flops / (fwd_s + bwd_s), "FLOPS");
    line(f, k, have_fwd && have_bwd ? v : nt);
    if (have_step) fmt_unit(v, sizeof v, step_s, "s");
    line(f, "step latency: ", have_step ? v : nt);
    const bool have_iter = have_fwd && have_bwd && have_step;
    const double iter_s = fwd_s + bwd_s + step_s;
    if (have_iter) fmt_unit(v, sizeof v, iter_s, "s");
    line(f, "iter latency: ", have_iter ? v : nt);
    snprintf(k, sizeof k, "FLOPS per GPU = %g * fwd flops per GPU / iter latency: ", bf + 1);
    if (have_iter) fmt_unit(v, sizeof v, (bf + 1) * fwd_flops / iter_s, "FLOPS");
    line(f, k, have_iter ? v : nt);
    if (have_iter) py_float_repr(v, sizeof v, py_round((double)in->B * in->world_size / iter_s, 2));
    line(f, "samples/second: ", have_iter ? v : nt);
    // t5train's line: model FLOPs (3 x forward: recomputation is not model work) against the GPU's peak
    if (in->peak_flops > 0 && have_iter) {
        fmt_unit(a, sizeof a, in->peak_flops, "FLOPS");
        snprintf(v, sizeof v, "%.2f%% of %s (%s)", 100 * 3 * fwd_flops / iter_s / in->peak_flops, a,
                 in->peak_what ? in->peak_what : "peak");
        line(f, "MFU (t5train) = 3 * fwd flops per GPU / iter latency / peak: ", v);
    }
    fprintf(f, "\n----------------------------- Aggregated Profile per GPU -----------------------------\n");
    aggregated(f, &t, in->module_depth, in->top_modules);
    if (in->detailed) {
        fprintf(f, "\n------------------------------ Detailed Profile per GPU ------------------------------\n");
        fprintf(f, "Each module profile is listed after its name in the following order: \nparams, percentage of "
                   "total params, MACs, percentage of total MACs, fwd latency, percentage of total fwd latency, fwd "
                   "FLOPS\n");
        fprintf(f, "\nNote: 1. A module can have torch.nn.module or torch.nn.functional to compute logits (e.g. "
                   "CrossEntropyLoss). They are not counted as submodules, thus not to be printed out. However they "
                   "make up the difference between a parent's MACs (or latency) and the sum of its submodules'.\n2. "
                   "Number of floating-point operations is a theoretical estimation, thus FLOPS computed using that "
                   "could be larger than the maximum system throughput.\n3. The fwd latency listed in the top "
                   "module's profile is the sum of its timed segments (CUDA events on the compute stream), the fwd "
                   "latency shown above.\n\n");
        const Totals tot = {.params = top->params, .macs = top->macs, .ms = top->ms, .timed = top->timed};
        char* r = repr(&t, 0, &tot);
        fprintf(f, "%s\n", r);
        free(r);
    }
    fprintf(f, "------------------------------------------------------------------------------\n");
    free(t.m);
    return 0;
}
