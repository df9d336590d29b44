/*
 * bleu.h: corpus BLEU (and chrF) computed exactly as sacreBLEU 2.x with its defaults, on the CPU.
 *
 * BLEU = sacrebleu.corpus_bleu(hyps, [refs...]): tokenizer "13a", smooth_method "exp",
 * case-sensitive, max n-gram order 4, use_effective_order False, brevity penalty against the
 * closest reference length (ties -> the shorter one), n-gram clipping by the max count over the
 * references. chrF = sacrebleu CHRF(): char order 6, word order 0, beta 2, whitespace off,
 * eps_smoothing off. docs/bleu.md lists every detail that is matched and how it is tested.
 *
 * All text is UTF-8. Strings are validated as strictly as Python's utf-8 decoder (no overlongs,
 * no surrogates, nothing above U+10FFFF); "whitespace" means Python's str.isspace() set
 * (ASCII \t\n\v\f\r, \x1c-\x1f, space, plus U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028,
 * U+2029, U+202F, U+205F, U+3000), because sacreBLEU's rstrip()/split() see those.
 *
 * Two ways to use it:
 *   - one call: bleu_corpus(hyps, refs, n_refs, n, &result);
 *   - streaming (the evaluator): bleu_stats_init, bleu_stats_add per segment, bleu_stats_compute.
 * Library functions never exit on bad input: they return a BleuStatus and write a message.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BLEU_MAX_ORDER 4
#define CHRF_CHAR_ORDER 6
#define CHRF_BETA 2
// the sacreBLEU release whose semantics (and signature string) we reproduce
#define BLEU_SACREBLEU_VERSION "2.6.0"

typedef enum {
    BLEU_OK = 0,
    BLEU_ERR_UTF8 = 1,    // a segment is not valid UTF-8
    BLEU_ERR_NO_REF = 2,  // a segment has no reference at all (every ref NULL)
    BLEU_ERR_ARG = 3,     // bad arguments (NULL pointers, n < 0, n_refs < 1)
} BleuStatus;

typedef struct {
    double score;                        // BLEU in [0, 100]
    int64_t counts[BLEU_MAX_ORDER];      // clipped matching n-grams, order 1..4
    int64_t totals[BLEU_MAX_ORDER];      // hypothesis n-grams, order 1..4
    double precisions[BLEU_MAX_ORDER];   // percent, with "exp" smoothing as sacreBLEU reports them
    double bp;                           // brevity penalty
    double ratio;                        // sys_len / ref_len (0 when ref_len == 0)
    int64_t sys_len;                     // hypothesis tokens (13a)
    int64_t ref_len;                     // closest-reference tokens, summed over segments
    int nrefs;                           // references per segment; -1 when it varies ("var")
    int64_t n_segments;
    int64_t tok_period_lines;            // hyps ending in " ." (sacreBLEU warns at >= 100)
    char error[256];                     // message when bleu_corpus returned non-zero
} BleuResult;

// Running sufficient statistics for BLEU and chrF (plain sums, as sacreBLEU's sum_of_lists).
typedef struct {
    int64_t sys_len, ref_len;
    int64_t counts[BLEU_MAX_ORDER], totals[BLEU_MAX_ORDER];
    int64_t chrf[CHRF_CHAR_ORDER][3];  // per char order: hyp n-grams, ref n-grams, matches
    int64_t n_segments;
    int64_t tok_period_lines;
    int nrefs;                         // -2 before the first segment, -1 when it varies
    bool with_chrf;                    // also accumulate chrF statistics (off by default)
    void* scratch;                     // hash tables reused across segments (opaque)
} BleuStats;

// ---- building blocks (exposed for tests and the evaluator)

// Strict UTF-8 check of s[0..len). Returns true when valid; otherwise *bad_offset (if not NULL)
// is the byte offset of the first invalid sequence.
bool bleu_utf8_valid(const char* s, size_t len, size_t* bad_offset);
// sacreBLEU's 13a tokenizer (Tokenizer13a after BLEU's rstrip()) on valid UTF-8. Returns a
// malloc'd string (tokens joined by single spaces). Exits only when out of memory.
char* bleu_tokenize_13a(const char* line);
// run_translation.py's postprocess_text: Python str.strip() (Unicode whitespace) in place.
// Returns a pointer to the first kept byte inside s; the end is NUL-terminated in s.
char* bleu_strip(char* s);
// Python's str.rstrip() in place (what sacreBLEU's CLI does to every line it reads).
void bleu_rstrip(char* s);

// ---- streaming API
void bleu_stats_init(BleuStats* st, bool with_chrf);
void bleu_stats_free(BleuStats* st);
// Adds one segment: hyp and refs[0..n_refs) (a NULL ref is "no reference", as sacreBLEU's None).
// Returns BLEU_OK or an error with a message in err (may be NULL).
BleuStatus bleu_stats_add(BleuStats* st, const char* hyp, const char* const* refs, int n_refs,
                          char* err, size_t err_cap);
// Adds the statistics of `from` (segments scored apart, e.g. on another thread) into `into`: every count is a plain
// sum, so any split of the segments gives the same totals; nrefs as if from's segments had been added after into's.
void bleu_stats_merge(BleuStats* into, const BleuStats* from);
// Final BLEU from the statistics (sacreBLEU BLEU.compute_bleu with smooth "exp").
void bleu_stats_compute(const BleuStats* st, BleuResult* out);
// Final chrF2 from the statistics (sacreBLEU CHRF._compute_f_score, eps_smoothing off).
double bleu_stats_chrf(const BleuStats* st);

// ---- one-call API
// hyps[i], i < n; refs[r][i], r < n_refs (refs[r][i] may be NULL). Returns BLEU_OK or an error
// code with out->error set. n == 0 gives score 0 (sacreBLEU itself raises on an empty corpus).
int bleu_corpus(const char** hyps, const char*** refs, int n_refs, int n, BleuResult* out);
// Same for chrF2 (sacrebleu.corpus_chrf defaults); *score gets the value.
int chrf_corpus(const char** hyps, const char*** refs, int n_refs, int n, double* score, char* err,
                size_t err_cap);

// ---- formatting like sacreBLEU
// "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0" into buf.
void bleu_format_signature(const BleuResult* r, char* buf, size_t cap);
// "BLEU = 27.12 59.1/33.4/20.9/13.5 (BP = 1.000 ratio = 1.012 hyp_len = 100 ref_len = 99)" with
// `width` decimals for the score (str(BLEUScore) uses 2; the sacreBLEU CLI's -w defaults to 1).
void bleu_format_score(const BleuResult* r, int width, char* buf, size_t cap);
// The JSON object of `sacrebleu -f json -w width` (indent 1), without a trailing newline.
void bleu_format_json(const BleuResult* r, int width, char* buf, size_t cap);
// repr(float(f"{x:.{width}f}")): how sacreBLEU's JSON writes a score.
void bleu_format_py_float(double x, int width, char* buf, size_t cap);

#ifdef __cplusplus
}
#endif
