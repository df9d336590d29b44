/*
 * hub_push.c: repo creation and one commit (see hub_push.h).
 */
#include "hub_push.h"

#include <stdio.h>
#include <string.h>

#include "../base/common.h"
#include "../download/hub.h"
#include "hub_api.h"
#include "lfs_upload.h"

static int offline_refused(const char* what, char* err, size_t errlen) {
    return t5_set_err(err, errlen, "cannot %s: HF_HUB_OFFLINE is set (unset it to push to the Hub)", what);
}

int hub_push_create_repo(const HubPushOptions* o, const char* repo, bool private_repo, char* repo_id, size_t idlen,
                         char* err, size_t errlen) {
    if (hub_offline_from_env()) return offline_refused("create the Hub repo", err, errlen);
    HubConn h;
    int rc = hub_conn_init(&h, o->endpoint, o->token, o->revision, o->quiet, err, errlen);
    if (rc == 0) rc = hub_api_create_repo(&h, repo, private_repo, repo_id, idlen, err, errlen);
    hub_conn_free(&h);
    return rc;
}

int hub_push_files(const HubPushOptions* o, const char* repo_id, PushList* l, const char* message, PushResult* res,
                   char* err, size_t errlen) {
    memset(res, 0, sizeof *res);
    res->n_files = l->n;
    if (hub_offline_from_env()) return offline_refused("push to the Hub", err, errlen);
    HubConn h;
    int rc = hub_conn_init(&h, o->endpoint, o->token, o->revision, o->quiet, err, errlen);
    h.http.cancel = o->cancel;
    if (rc == 0) rc = hub_api_preupload(&h, repo_id, l, err, errlen);
    int changed = 0;
    for (int i = 0; rc == 0 && i < l->n; i++) {
        res->n_unchanged += l->v[i].unchanged && !l->v[i].ignore;
        res->n_ignored += l->v[i].ignore;
        changed += !l->v[i].unchanged && !l->v[i].ignore;
    }
    if (rc == 0 && changed > 0) rc = lfs_upload_files(&h, repo_id, l, res, err, errlen);
    if (rc == 0 && changed > 0) rc = hub_api_commit(&h, repo_id, l, message, res, err, errlen);
    hub_conn_free(&h);
    return rc;
}
