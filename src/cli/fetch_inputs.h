/*
 * fetch_inputs.h: what the run front end (run.c) calls so that the main job works on a fresh machine, the way
 * run_translation.py's from_pretrained / load_dataset do: a Hub model name missing from the HF cache is
 * downloaded into it (src/download/hub.h), a missing WMT16 ro-en split is prepared from its sources
 * (src/download/wmt16_sources.h). Local directories and files are never replaced by a download.
 *
 * Model (run_model_source):
 *   - --init random, a local directory, or a name that is not a Hub repo id: the name as given (model_lookup
 *     reports what is wrong with it);
 *   - no --cache_dir and revision "main": model_lookup in the HF cache roots (models--t5-small,
 *     models--google-t5--t5-small, ...); found -> the name as given, nothing is requested;
 *   - otherwise hub_fetch_model(name, revision = --model_revision, cache_dir = --cache_dir), which uses a snapshot
 *     already complete for the revision without any request, honours HF_HUB_OFFLINE / HF_ENDPOINT / HF_TOKEN,
 *     and returns the snapshot folder that the run then reads as a local directory.
 * Dataset (run_fetch_dataset): for --dataset wmt16-ro-en (or wmt16 + ro-en) with en/ro languages, each split the
 *   run uses (train with do_train, validation with do_eval, test with do_predict) that has no --<split>_file and
 *   that dataset.c cannot find is prepared with wmt16_prepare into --data_dir, else ~/.cache/t5train/data.
 *   HF_DATASETS_OFFLINE=1 or HF_HUB_OFFLINE=1: no download, dataset.c's "not found" error.
 * --dry_run downloads nothing (an HF user expects a dry run to leave the machine as it was): the model's cache
 *   is checked and the Hub asked which files it would send (HEAD requests only; HF_HUB_OFFLINE=1: none, and a
 *   model missing from the cache is the usual error), each missing file is listed with its size and the cache
 *   folder it would go to, and nothing is written into the cache; a missing WMT16 split lists the three archives
 *   (the builder's recorded sizes, those already in <data_dir>/downloads counted as there) and the folder.
 * Every failure dies with one `t5train: error:` sentence (then HINT lines) and a non-zero exit.
 */
#pragma once
#include <stdbool.h>

#include "../../data/dataset.h"
#include "config.h"

// The model to read: c->model_name_or_path, or the HF-cache snapshot folder it was downloaded into.
// The returned string stays valid for the process. Dies on a failed download.
// --dry_run: returns the name as given when the model would be downloaded; run_model_pending() then says so.
const char* run_model_source(const RunConfig* c);

// true after run_model_source found, in a dry run, that the model is not in the cache (its files are listed)
bool run_model_pending(void);

// Makes the wmt16-ro-en splits the run needs present (see above). Dies on a failed download. Returns 0, or in a
// dry run the splits that would be downloaded and prepared (bit 1 << DataSplit), after listing what.
int run_fetch_dataset(const RunConfig* c, const DataOptions* o);

// "12.3 MB" (decimal units, as huggingface_hub's progress bars); n < 0: "size unknown"
void run_format_bytes(long long n, char* out, size_t len);

