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
 * Every failure dies with one `t5train: error:` sentence (then HINT lines) and a non-zero exit.
 */
#pragma once
#include <stdbool.h>

#include "../../data/dataset.h"
#include "config.h"

// The model to read: c->model_name_or_path, or the HF-cache snapshot folder it was downloaded into.
// The returned string stays valid for the process. Dies on a failed download.
const char* run_model_source(const RunConfig* c);

// Makes the wmt16-ro-en splits the run needs present (see above). Dies on a failed download.
void run_fetch_dataset(const RunConfig* c, const DataOptions* o);

