/*
 * hub.c: which files of a T5 model, and fetching each into the HF cache (see hub.h).
 */
#include "hub.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../base/common.h"
#include "http.h"
#include "hub_cache.h"
#include "sha256.h"

#define ERRLEN 2048

void hub_options_default(HubOptions* o) { memset(o, 0, sizeof *o); }

static bool env_true(const char* name) {
    const char* e = getenv(name);
    if (!e) return false;
    return strcmp(e, "1") == 0 || strcasecmp(e, "true") == 0 || strcasecmp(e, "yes") == 0 || strcasecmp(e, "on") == 0;
}

bool hub_offline_from_env(void) { return env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE"); }

bool hub_is_repo_id(const char* name) {
    if (!name || !*name || name[0] == '/' || name[0] == '~' || name[0] == '.') return false;
    int slashes = 0;
    size_t part = 0;
    for (const char* p = name; *p; p++) {
        if (*p == '/') {
            if (part == 0 || ++slashes > 1) return false;
            part = 0;
            continue;
        }
        if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.')) return false;
        part++;
    }
    return part > 0 && !strstr(name, "..");
}

typedef struct {
    HubOptions o;
    const char* repo_id;
    const char* revision;
    char root[HUB_PATHLEN];
    char folder[512];
    char repo_dir[HUB_PATHLEN + 520];
    char endpoint[1024];
    char* token;
    char commit[128];
    HttpOptions http;
    int n_downloaded;
} Ctx;

char* hub_token_read(void) {
    const char* e;
    if ((e = getenv("HF_TOKEN")) && *e) return strdup_check(e);
    if ((e = getenv("HUGGING_FACE_HUB_TOKEN")) && *e) return strdup_check(e);
    char path[HUB_PATHLEN];
    if ((e = getenv("HF_TOKEN_PATH")) && *e) snprintf(path, sizeof path, "%s", e);
    else if ((e = getenv("HF_HOME")) && *e) snprintf(path, sizeof path, "%s/token", e);
    else if ((e = getenv("HOME")) && *e) snprintf(path, sizeof path, "%s/.cache/huggingface/token", e);
    else return NULL;
    size_t n = 0;
    char* s = t5_read_file(path, &n);
    if (!s) return NULL;
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    if (n == 0) {
        free(s);
        return NULL;
    }
    return s;
}

void hub_endpoint(const char* given, char* out, size_t len) {
    const char* ep = given && *given ? given : getenv("HF_ENDPOINT");
    snprintf(out, len, "%s", ep && *ep ? ep : "https://huggingface.co");
    size_t el = strlen(out);
    while (el && out[el - 1] == '/') out[--el] = 0;
}

// percent-encodes everything but unreserved characters (a revision may hold '/')
void hub_url_quote(const char* s, char* out, size_t len) {
    size_t n = 0;
    for (const unsigned char* p = (const unsigned char*)s; *p && n + 4 < len; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~') out[n++] = (char)*p;
        else n += (size_t)snprintf(out + n, len - n, "%%%02X", *p);
    }
    out[n] = 0;
}

static void file_url(const Ctx* c, const char* filename, char* out, size_t len) {
    char rev[512];
    hub_url_quote(c->revision, rev, sizeof rev);
    snprintf(out, len, "%s/%s/resolve/%s/%s", c->endpoint, c->repo_id, rev, filename);
}

static bool snapshot_has(const Ctx* c, const char* commit, const char* filename) {
    char p[HUB_PATHLEN];
    hub_cache_snapshot_path(c->repo_dir, commit, filename, p, sizeof p);
    return t5_is_file(p);  // stat follows the link: a dangling link does not count
}

// ---------------------------------------------------------------------------------------------
// one file

enum { FETCH_OK = 0, FETCH_MISSING = 1, FETCH_ERROR = -1 };

static int download_blob(Ctx* c, const char* url, const char* filename, const char* etag, int64_t size, char* err,
                         size_t errlen) {
    char blob[HUB_PATHLEN], part[HUB_PATHLEN + 16];
    hub_cache_blob_path(c->repo_dir, etag, blob, sizeof blob);
    snprintf(part, sizeof part, "%s.incomplete", blob);
    int fd = -1;
    if (hub_cache_lock(c->root, c->folder, etag, c->o.quiet, &fd, err, errlen) != 0) return FETCH_ERROR;
    int rc = FETCH_OK;
    if (!t5_is_file(blob)) {  // another process may have finished it while we waited
        char* d = strdup_check(blob);
        *strrchr(d, '/') = 0;
        t5_mkdir_p(d);
        free(d);
        bool lfs = strlen(etag) == 64;  // the Hub's LFS etags are sha256; small files carry a git sha1
        for (int attempt = 0; attempt < 2; attempt++) {
            HttpOptions h = c->http;
            h.label = filename;
            long status = 0;
            if (http_download(url, part, size, &h, &status, err, errlen) != 0) {
                rc = FETCH_ERROR;
                break;
            }
            if (lfs) {
                char hex[65];
                if (sha256_file_hex(part, hex) != 0) {
                    rc = t5_set_err(err, errlen, "cannot read %s back: %s", part, strerror(errno));
                    break;
                }
                if (strcmp(hex, etag) != 0) {
                    unlink(part);
                    if (attempt == 0) {
                        if (!c->o.quiet)
                            fprintf(stderr, "%s: sha256 %s does not match the Hub's %s; downloading again\n",
                                    filename, hex, etag);
                        continue;
                    }
                    rc = t5_set_err(err, errlen, "%s of %s: downloaded twice, its sha256 is %s but the Hub says %s "
                                    "(a proxy altering the transfer?); nothing was placed in the cache",
                                    filename, c->repo_id, hex, etag);
                    break;
                }
            }
            if (hub_cache_place(part, blob, err, errlen) != 0) rc = FETCH_ERROR;
            else c->n_downloaded++;
            break;
        }
    }
    hub_cache_unlock(fd);
    return rc;
}

static int fetch_file(Ctx* c, const char* filename, char* err, size_t errlen) {
    if (c->o.offline) {
        if (c->commit[0] && snapshot_has(c, c->commit, filename)) return FETCH_OK;
        if (c->commit[0] && hub_cache_is_missing(c->repo_dir, c->commit, filename)) return FETCH_MISSING;
        return t5_set_err(err, errlen, "HF_HUB_OFFLINE is set and %s of %s (revision %s) is not in the cache %s.\n"
                          "HINT: run once with network access (unset HF_HUB_OFFLINE), or pass a local directory",
                          filename, c->repo_id, c->revision, c->root);
    }
    char url[4096];
    file_url(c, filename, url, sizeof url);
    HttpMeta m;
    char herr[ERRLEN];
    if (http_head(url, &c->http, &m, herr, sizeof herr) != 0) {
        // no connection: what the cache holds still serves (as huggingface_hub does)
        if (c->commit[0] && snapshot_has(c, c->commit, filename)) return FETCH_OK;
        if (c->commit[0] && hub_cache_is_missing(c->repo_dir, c->commit, filename)) return FETCH_MISSING;
        return t5_set_err(err, errlen, "%s.\nHINT: check the network / proxy (https_proxy), HF_ENDPOINT (%s), or set "
                          "HF_HUB_OFFLINE=1 to use only the cache", herr, c->endpoint);
    }
    if (m.status == 401 || m.status == 403 || (m.status == 404 && (!strcmp(m.error_code, "RepoNotFound") ||
                                                                    !strcmp(m.error_code, "RevisionNotFound")))) {
        if (!strcmp(m.error_code, "RevisionNotFound"))
            return t5_set_err(err, errlen, "revision '%s' of %s does not exist on the Hub (%s)", c->revision,
                              c->repo_id, c->endpoint);
        if (!strcmp(m.error_code, "GatedRepo") || m.status == 403)
            return t5_set_err(err, errlen, "access to %s is restricted (HTTP %ld%s%s).\nHINT: accept its terms on "
                              "the Hub and set HF_TOKEN to a token that may read it", c->repo_id, m.status,
                              m.error_message[0] ? ": " : "", m.error_message);
        return t5_set_err(err, errlen, "%s is not a model on the Hub (%s answered %ld%s%s), or it is private and needs "
                          "a token.\nHINT: check the name (e.g. t5-small, google/flan-t5-base); for a private repo set "
                          "HF_TOKEN%s", c->repo_id, c->endpoint, m.status, m.error_code[0] ? " " : "", m.error_code,
                          c->token ? " (a token was sent: does it have access?)" : "");
    }
    if (m.status == 404) {
        if (m.repo_commit[0] && !c->o.dry) hub_cache_mark_missing(c->repo_dir, m.repo_commit, filename);
        if (!c->commit[0] && m.repo_commit[0]) snprintf(c->commit, sizeof c->commit, "%s", m.repo_commit);
        return FETCH_MISSING;
    }
    if (!(m.status == 200 || (m.status >= 301 && m.status <= 308)))
        return t5_set_err(err, errlen, "the Hub answered HTTP %ld for %s%s%s", m.status, url,
                          m.error_message[0] ? ": " : "", m.error_message);
    if (!m.repo_commit[0])
        return t5_set_err(err, errlen, "%s answered without an X-Repo-Commit header: is HF_ENDPOINT (%s) a "
                          "HuggingFace Hub?", url, c->endpoint);
    const char* etag = m.linked_etag[0] ? m.linked_etag : m.etag;
    if (!etag[0] || strchr(etag, '/'))
        return t5_set_err(err, errlen, "%s answered without a usable ETag: is HF_ENDPOINT (%s) a HuggingFace Hub?",
                          url, c->endpoint);
    if (!c->commit[0]) snprintf(c->commit, sizeof c->commit, "%s", m.repo_commit);
    else if (strcmp(c->commit, m.repo_commit) != 0)
        return t5_set_err(err, errlen, "%s changed on the Hub while it was being downloaded (commit %s, then %s); run "
                          "again", c->repo_id, c->commit, m.repo_commit);
    if (snapshot_has(c, c->commit, filename)) {
        if (c->o.dry) c->o.dry->n_cached++;
        return FETCH_OK;
    }
    int64_t size = m.linked_size >= 0 ? m.linked_size : m.content_length;
    char blob[HUB_PATHLEN];
    hub_cache_blob_path(c->repo_dir, etag, blob, sizeof blob);
    if (c->o.dry) {  // what a run would do: link a blob already there, else download it
        HubDryRun* d = c->o.dry;
        if (t5_is_file(blob)) {
            d->n_cached++;
        } else if (d->n_files < HUB_DRY_MAX) {
            snprintf(d->files[d->n_files], sizeof d->files[0], "%s", filename);
            d->sizes[d->n_files++] = size;
            if (size > 0) d->bytes += size;
        }
        return FETCH_OK;
    }
    if (!t5_is_file(blob) && download_blob(c, url, filename, etag, size, err, errlen) != FETCH_OK) return FETCH_ERROR;
    if (hub_cache_link(c->repo_dir, c->commit, filename, etag, err, errlen) != 0) return FETCH_ERROR;
    return FETCH_OK;
}

// ---------------------------------------------------------------------------------------------
// the model's files

// shard names of an index file (malloc'd, NULL-terminated), or NULL + err
static char** index_shards(const char* path, char* err, size_t errlen) {
    json_error_t je;
    json_t* root = json_load_file(path, 0, &je);
    if (!root) {
        t5_set_err(err, errlen, "%s is not valid JSON (line %d: %s)", path, je.line, je.text);
        return NULL;
    }
    json_t* wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(root);
        t5_set_err(err, errlen, "%s has no \"weight_map\" object", path);
        return NULL;
    }
    char** list = calloc_check(1, sizeof(char*));
    int n = 0;
    const char* key;
    json_t* v;
    json_object_foreach(wm, key, v) {
        const char* s = json_string_value(v);
        if (!s || strchr(s, '/') || strstr(s, "..")) continue;
        bool dup = false;
        for (int i = 0; i < n && !dup; i++) dup = strcmp(list[i], s) == 0;
        if (dup) continue;
        list = realloc_check(list, (size_t)(n + 2) * sizeof(char*));
        list[n++] = strdup_check(s);
        list[n] = NULL;
    }
    json_decref(root);
    return list;
}

static void free_list(char** l) {
    if (!l) return;
    for (char** p = l; *p; p++) free(*p);
    free(l);
}

static const char* const OPTIONAL_FILES[] = {"generation_config.json", "spiece.model", "tokenizer.json",
                                             "tokenizer_config.json", "special_tokens_map.json", NULL};

// A snapshot counts as complete when config.json and the weights are there and every optional file is there
// or known missing (.no_exist). Offline, the optional files do not matter.
static bool cache_complete(Ctx* c, bool need_optional) {
    if (!c->commit[0] || !snapshot_has(c, c->commit, "config.json")) return false;
    if (!snapshot_has(c, c->commit, "model.safetensors")) {
        if (!snapshot_has(c, c->commit, "model.safetensors.index.json")) return false;
        char p[HUB_PATHLEN], e[256];
        hub_cache_snapshot_path(c->repo_dir, c->commit, "model.safetensors.index.json", p, sizeof p);
        char** shards = index_shards(p, e, sizeof e);
        if (!shards) return false;
        bool ok = true;
        for (char** s = shards; *s && ok; s++) ok = snapshot_has(c, c->commit, *s);
        free_list(shards);
        if (!ok) return false;
    }
    if (need_optional)
        for (const char* const* f = OPTIONAL_FILES; *f; f++)
            if (!snapshot_has(c, c->commit, *f) && !hub_cache_is_missing(c->repo_dir, c->commit, *f)) return false;
    return true;
}

static int fetch_all(Ctx* c, char* err, size_t errlen) {
    int r = fetch_file(c, "config.json", err, errlen);
    if (r == FETCH_ERROR) return -1;
    if (r == FETCH_MISSING)
        return t5_set_err(err, errlen, "%s has no config.json at revision %s: not a transformers model", c->repo_id,
                          c->revision);
    r = fetch_file(c, "model.safetensors", err, errlen);
    if (r == FETCH_ERROR) return -1;
    if (r == FETCH_MISSING) {
        r = fetch_file(c, "model.safetensors.index.json", err, errlen);
        if (r == FETCH_ERROR) return -1;
        if (r == FETCH_MISSING) {
            // only PyTorch weights? say so, without downloading them
            int b = fetch_file(c, "pytorch_model.bin.index.json", err, errlen);
            if (b == FETCH_MISSING && !c->o.offline) {
                char url[4096], herr[ERRLEN];
                HttpMeta m;
                file_url(c, "pytorch_model.bin", url, sizeof url);
                if (http_head(url, &c->http, &m, herr, sizeof herr) == 0 && m.status != 404) b = FETCH_OK;
            }
            if (b == FETCH_OK)
                return t5_set_err(err, errlen, "%s has only PyTorch weights (pytorch_model.bin), which t5train does "
                                  "not read.\nHINT: T5_ALLOW_BIN=1 bash scripts/download_model.sh %s DIR, then "
                                  "python3 scripts/convert_bin_to_safetensors.py DIR, then --model DIR",
                                  c->repo_id, c->repo_id);
            return t5_set_err(err, errlen, "%s has no model.safetensors and no model.safetensors.index.json at "
                              "revision %s", c->repo_id, c->revision);
        }
        char p[HUB_PATHLEN];
        hub_cache_snapshot_path(c->repo_dir, c->commit, "model.safetensors.index.json", p, sizeof p);
        if (c->o.dry && !t5_is_file(p)) {
            c->o.dry->shards_unknown = true;  // the index is not downloaded in a dry run: its shards are unknown
        } else {
            char** shards = index_shards(p, err, errlen);
            if (!shards) return -1;
            int rc = 0;
            for (char** s = shards; *s && rc == 0; s++) {
                r = fetch_file(c, *s, err, errlen);
                if (r == FETCH_MISSING) rc = t5_set_err(err, errlen, "%s lists the shard %s, which the Hub does not have",
                                                        p, *s);
                else if (r == FETCH_ERROR) rc = -1;
            }
            free_list(shards);
            if (rc != 0) return -1;
        }
    }
    for (const char* const* f = OPTIONAL_FILES; *f; f++) {
        if (c->o.offline && !snapshot_has(c, c->commit, *f)) continue;
        if (fetch_file(c, *f, err, errlen) == FETCH_ERROR) return -1;
    }
    return 0;
}

int hub_fetch_model(const char* repo_id, const HubOptions* opt, char* dir, size_t dirlen, char* err, size_t errlen) {
    if (!hub_is_repo_id(repo_id))
        return t5_set_err(err, errlen, "'%s' is neither a local directory nor a Hub model name (org/name)",
                          repo_id ? repo_id : "");
    Ctx c;
    memset(&c, 0, sizeof c);
    if (opt) c.o = *opt;
    c.o.offline = c.o.offline || hub_offline_from_env();
    c.repo_id = repo_id;
    c.revision = c.o.revision && *c.o.revision ? c.o.revision : "main";
    if (hub_cache_root(c.o.cache_dir, c.root, sizeof c.root, err, errlen) != 0) return -1;
    hub_cache_repo_folder("model", repo_id, c.folder, sizeof c.folder);
    snprintf(c.repo_dir, sizeof c.repo_dir, "%s/%s", c.root, c.folder);
    hub_endpoint(c.o.endpoint, c.endpoint, sizeof c.endpoint);
    c.token = c.o.token && *c.o.token ? strdup_check(c.o.token) : hub_token_read();
    http_options_default(&c.http);
    c.http.token = c.token;
    c.http.quiet = c.o.quiet;
    hub_cache_read_ref(c.repo_dir, c.revision, c.commit, sizeof c.commit);

    int rc = 0;
    if (c.o.dry) {
        memset(c.o.dry, 0, sizeof *c.o.dry);
        snprintf(c.o.dry->repo_dir, sizeof c.o.dry->repo_dir, "%s", c.repo_dir);
    }
    if (cache_complete(&c, !c.o.offline)) {
        // complete for this revision: no request at all (start-up time; a new commit on the Hub is picked up by
        // --revision or by deleting refs/<revision>)
    } else {
        if (c.o.offline && !c.commit[0]) {
            rc = t5_set_err(err, errlen, "HF_HUB_OFFLINE is set and %s (revision %s) is not in the cache %s.\n"
                            "HINT: run once with network access (unset HF_HUB_OFFLINE), or pass a local directory",
                            repo_id, c.revision, c.repo_dir);
        } else {
            if (!c.o.quiet && !c.o.offline && !c.o.dry)
                fprintf(stderr, "fetching %s (revision %s) from %s into %s\n", repo_id, c.revision, c.endpoint,
                        c.repo_dir);
            char saved[128];
            snprintf(saved, sizeof saved, "%s", c.commit);
            if (!c.o.offline) c.commit[0] = 0;  // the Hub says which commit the revision is now
            rc = fetch_all(&c, err, errlen);
            if (rc != 0 && !c.commit[0]) snprintf(c.commit, sizeof c.commit, "%s", saved);
            if (rc == 0 && !c.o.offline && !c.o.dry)
                rc = hub_cache_write_ref(c.repo_dir, c.revision, c.commit, err, errlen);
            if (rc == 0 && !c.o.quiet && !c.o.offline && !c.o.dry)
                fprintf(stderr, "%s: %d file%s downloaded, snapshot %s\n", repo_id, c.n_downloaded,
                        c.n_downloaded == 1 ? "" : "s", c.commit);
        }
    }
    if (rc == 0) snprintf(dir, dirlen, "%s/snapshots/%s", c.repo_dir, c.commit);
    if (rc == 0 && c.o.dry) snprintf(c.o.dry->commit, sizeof c.o.dry->commit, "%s", c.commit);
    free(c.token);
    return rc;
}
