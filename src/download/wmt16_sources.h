/*
 * wmt16_sources.h: WMT16 ro-en from the files HF's wmt16 builder reads, prepared into the splits HF's
 * `load_dataset("wmt16", "ro-en")` yields, same examples, same order:
 *
 *   train       europarl_v8_16: training-parallel-ep-v8.zip, training-parallel-ep-v8/europarl-v8.ro-en.{ro,en}
 *                  (parallel lines, each right-stripped), then
 *               setimes_2: en-ro.tmx.gz (TMX: each <tu>'s <tuv xml:lang> <seg> text, entities decoded)
 *   validation  newsdev2016: dev.zip, dev/newsdev2016-roen-src.ro.sgm + dev/newsdev2016-roen-ref.en.sgm
 *   test        newstest2016: dev.zip, dev/newstest2016-roen-src.ro.sgm + dev/newstest2016-roen-ref.en.sgm
 *                  (SGML: a line matching <seg id="N">TEXT</seg> gives TEXT as is, entities kept)
 * An example with an empty side is dropped, as the builder does (610,320 / 1,999 / 1,999 examples).
 * URLs and sha256 checksums are the builder's recorded ones (WMT16_RO_EN_SOURCES).
 *
 * Output: <data_dir>/wmt16-ro-en/{train,validation,test}.jsonl, one {"translation": {"en": .., "ro": ..}}
 * per line (what dataset.c reads for --dataset wmt16-ro-en), each written to a temp name and renamed; the
 * archives are kept in <data_dir>/downloads/ (resumed, verified, locked against other ranks). The token
 * cache is then built from the jsonl files by dataset_open as for any local copy.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char* name;    // local file name in downloads/
    const char* url;
    const char* sha256;  // 64 hex
    int64_t size;        // bytes
} Wmt16Source;

enum { WMT16_SRC_EUROPARL = 0, WMT16_SRC_SETIMES = 1, WMT16_SRC_DEV = 2, WMT16_NSRC = 3 };

// The builder's three downloads for ro-en.
extern const Wmt16Source WMT16_RO_EN_SOURCES[WMT16_NSRC];

typedef struct {
    const Wmt16Source* sources;  // NULL: WMT16_RO_EN_SOURCES (tests pass their own)
    const char* mirror;          // NULL: $T5TRAIN_WMT16_MIRROR; set: each file is fetched from <mirror>/<name>
    bool quiet;
} Wmt16Options;

// Downloads (or reuses), verifies, extracts and writes the three splits under data_dir. 0, or -1 + err.
int wmt16_prepare(const char* data_dir, const Wmt16Options* opt, char* err, size_t errlen);

// The default data folder the splits go to when --data_dir is not given: ~/.cache/t5train/data (the last place
// dataset.c looks).
int wmt16_default_data_dir(char* out, size_t len, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
