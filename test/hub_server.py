#!/usr/bin/env python3
"""hub_server.py: a loopback HTTP server with the HuggingFace Hub's file API, for the download tests.

    python3 test/hub_server.py --root DIR --port-file F [--log L] [--faults J] [--token T]

Serves DIR/<repo id>/<file> ("DIR/org/name/config.json" is repo "org/name"):
  HEAD|GET /<repo>/resolve/<rev>/<file>
      rev: "main" or the repo's commit (sha1 of its sorted file names and contents), else 404 RevisionNotFound.
      Small files (not *.safetensors, *.bin, *.model): 200, ETag "<git blob sha1>", X-Repo-Commit, body.
      LFS files: 302, Location http://<other host name>/lfs/<sha256> (as the Hub's CDN), X-Linked-Etag "<sha256>", X-Linked-Size, X-Repo-Commit.
      Unknown file: 404 X-Error-Code EntryNotFound (with X-Repo-Commit); unknown repo: 401 RepoNotFound.
      Repos under "private/" need "Authorization: Bearer <token>" (else 401 RepoNotFound, as the Hub).
  GET /lfs/<sha256>: the LFS content, with Range support (206).
  GET /files/<path>: any file under DIR (the dataset archives), with Range support.
Every request is appended to the log as "METHOD PATH STATUS BYTES".
Faults (a JSON list in --faults, re-read when it changes), each {"match": substring of the path,
  "method": "GET"|"HEAD" (optional), "times": N (default 1), and one of
  "status": S (answer S), "truncate": N (announce the full length, send N bytes, close),
  "corrupt": true (flip the body's first byte), "delay": seconds per 64 KiB chunk}, and/or "hold": a file path: the
  request (a push call) is held, its body read, until that file exists (at most 60 s); the server creates
  "<hold>.waiting" first, so that a test knows the client is inside the call (a push deterministically "still running").
The server writes its port to --port-file once it listens (port 0: any free port).

Pushes (huggingface_hub's upload protocol; every call needs "Authorization: Bearer <token>", else 401):
  POST /api/repos/create {"name", "organization", "visibility"}: makes DIR/<org or --user>/<name>; 409 (with "url")
      when it exists; answers {"url": "http://host/<id>"}.
  GET  /api/models/<repo>: {"id"} of an existing repo (with the token), else 401 (repo_info).
  POST /api/models/<repo>/preupload/main {"files": [{"path", "sample", "size"}]}: uploadMode "lfs" for the Hub's
      default .gitattributes patterns (*.safetensors, *.bin, *.model, *tfevents*, ...) and files above
      --lfs-threshold bytes (the Hub: 10 MB), else "regular"; "oid" of the file the repo holds (sha256 for LFS, the
      git blob id else), or null.
  POST /<repo>.git/info/lfs/objects/batch: an object already stored gets no "actions"; else upload + verify hrefs on
      the other host name (as the Hub's storage), multipart ({"chunk_size", "1": url, ...}) above
      --multipart-threshold bytes.
  PUT  /lfs-upload/<repo key>/<oid>[/part/<n>] (refused with an Authorization header, as pre-signed storage URLs are; the
      content's sha256 and size checked), POST /lfs-upload/<key>/<oid>/complete {"oid", "parts"}, POST /lfs-verify/<key>/<oid>
      (key: the repo id with '~' for '/': each repo has its own LFS objects, as on the Hub).
  POST /api/models/<repo>/commit/main (NDJSON: header, file (base64), lfsFile (the object must be stored)): writes the
      files into DIR/<repo>/ and answers {"commitOid", "commitUrl"}.
  A path under /mirror/ is served as the path without it, the URLs answered keeping it (an endpoint with a path).
  Each push call is appended to --record (JSON lines: method, path, auth, and for commits the summary and the
  operations). LFS objects are kept in DIR.lfs/.
"""
import argparse
import base64
import fnmatch
import hashlib
import http.server
import json
import os
import socketserver
import threading
import time

LFS_EXT = (".safetensors", ".bin", ".model", ".gz", ".zip", ".tgz")
# the Hub's default .gitattributes for a new model repo (filter=lfs patterns)
GITATTRIBUTES_LFS = ["*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*",
                     "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb",
                     "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*",
                     "*.tar", "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*"]


class State:
    def __init__(self, args):
        self.root = os.path.abspath(args.root)
        self.log = args.log
        self.faults_path = args.faults
        self.token = args.token
        self.user = args.user
        self.lfs_threshold = args.lfs_threshold
        self.multipart_threshold = args.multipart_threshold
        self.record = args.record
        self.store = self.root + ".lfs"
        os.makedirs(os.path.join(self.store, "parts"), exist_ok=True)
        self.lock = threading.Lock()
        self.faults = []
        self.faults_mtime = None
        self.used = {}

    def load_faults(self):
        if not self.faults_path or not os.path.exists(self.faults_path):
            self.faults, self.faults_mtime = [], None
            return
        m = os.stat(self.faults_path).st_mtime_ns
        if m != self.faults_mtime:
            with open(self.faults_path) as f:
                self.faults = json.load(f)
            self.faults_mtime = m
            self.used = {}

    def take_fault(self, method, path):
        with self.lock:
            self.load_faults()
            for i, r in enumerate(self.faults):
                if r.get("match", "") not in path:
                    continue
                if r.get("method") and r["method"] != method:
                    continue
                if self.used.get(i, 0) >= r.get("times", 1):
                    continue
                self.used[i] = self.used.get(i, 0) + 1
                return r
        return None

    def write_record(self, obj):
        if self.record:
            with self.lock, open(self.record, "a") as f:
                f.write(json.dumps(obj) + "\n")

    def write_log(self, line):
        if self.log:
            with self.lock, open(self.log, "a") as f:
                f.write(line + "\n")


def hold_request(gate):
    """Holds a request until the file gate exists (at most 60 s); gate.waiting says the request is held."""
    open(gate + ".waiting", "w").close()
    deadline = time.time() + 60
    while not os.path.exists(gate) and time.time() < deadline:
        time.sleep(0.01)


def cdn_host(host):
    """The LFS redirect goes to another host name for the same server, as the Hub's goes to its CDN: clients
    (huggingface_hub, t5train) follow only same-host redirects while reading a file's metadata."""
    name, _, port = host.rpartition(":")
    other = "localhost" if name == "127.0.0.1" else "127.0.0.1"
    return "%s:%s" % (other, port) if port else other


def repo_files(repo_dir):
    out = {}
    for dp, _, fns in os.walk(repo_dir):
        for fn in fns:
            full = os.path.join(dp, fn)
            out[os.path.relpath(full, repo_dir)] = full
    return out


def commit_of(files):
    h = hashlib.sha1()
    for name in sorted(files):
        h.update(name.encode())
        with open(files[name], "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, headers=None, body=b"", fault=None, head=False, total_len=None):
        self.send_response(status)
        headers = dict(headers or {})
        headers.setdefault("Content-Length", str(total_len if total_len is not None else len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        sent = 0
        if not head:
            if fault and fault.get("corrupt") and body:
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            limit = fault.get("truncate") if fault else None
            delay = fault.get("delay", 0) if fault else 0
            for off in range(0, len(body), 65536):
                chunk = body[off:off + 65536]
                if limit is not None and sent + len(chunk) > limit:
                    chunk = chunk[:max(0, limit - sent)]
                try:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent += len(chunk)
                if limit is not None and sent >= limit:
                    self.close_connection = True
                    break
                if delay:
                    time.sleep(delay)
        self.state.write_log("%s %s %d %d" % (self.command, self.path, status, sent))
        if fault and fault.get("truncate") is not None:
            self.close_connection = True

    def send_content(self, data, extra, fault, head):
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0] or 0)
            if start >= len(data):
                return self.reply(416, {"Content-Range": "bytes */%d" % len(data)}, head=head)
            part = data[start:]
            h = dict(extra)
            h["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
            return self.reply(206, h, part, fault, head)
        return self.reply(200, extra, data, fault, head)

    def handle_any(self, head):
        st = self.state
        path = self.path.split("?")[0]
        fault = st.take_fault(self.command, path)
        if fault and "status" in fault:
            return self.reply(fault["status"], {"X-Error-Message": "injected"}, b'{"error":"injected"}', head=head)
        if path.startswith("/lfs/"):
            sha = path[5:]
            for dp, _, fns in os.walk(st.root):
                for fn in fns:
                    with open(os.path.join(dp, fn), "rb") as f:
                        data = f.read()
                    if hashlib.sha256(data).hexdigest() == sha:
                        return self.send_content(data, {"ETag": '"%s"' % sha}, fault, head)
            return self.reply(404, head=head)
        if path.startswith("/files/"):
            full = os.path.normpath(os.path.join(st.root, path[7:]))
            if not full.startswith(st.root) or not os.path.isfile(full):
                return self.reply(404, head=head)
            with open(full, "rb") as f:
                return self.send_content(f.read(), {}, fault, head)
        if path.startswith("/api/models/") and "/revision/" in path:  # model_info (huggingface_hub after a no-op)
            repo = path[len("/api/models/"):].split("/revision/", 1)[0]
            if not os.path.isdir(os.path.join(st.root, repo)):
                return self.reply(404, head=head)
            sha = commit_of(repo_files(os.path.join(st.root, repo)))
            return self.reply(200, {"Content-Type": "application/json"},
                              json.dumps({"id": repo, "sha": sha}).encode(), head=head)
        if path.startswith("/api/models/"):  # repo_info (huggingface_hub's create_repo after a 401/403)
            repo = path[len("/api/models/"):]
            authed = self.headers.get("Authorization") == "Bearer %s" % st.token
            if not authed or not os.path.isdir(os.path.join(st.root, repo)):
                return self.reply(401, {"X-Error-Code": "RepoNotFound"}, head=head)
            return self.reply(200, {"Content-Type": "application/json"}, json.dumps({"id": repo}).encode(),
                              head=head)
        if "/resolve/" not in path:
            return self.reply(404, head=head)
        repo, rest = path[1:].split("/resolve/", 1)
        rev, _, fname = rest.partition("/")
        repo_dir = os.path.join(st.root, repo)
        authed = self.headers.get("Authorization") == "Bearer %s" % st.token
        if not os.path.isdir(repo_dir) or (repo.startswith("private/") and not authed):
            return self.reply(401, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
                              head=head)
        files = repo_files(repo_dir)
        commit = commit_of(files)
        if rev not in ("main", commit):
            return self.reply(404, {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "Invalid rev id"}, head=head)
        if fname not in files:
            return self.reply(404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit,
                                    "X-Error-Message": "Entry not found"}, head=head)
        with open(files[fname], "rb") as f:
            data = f.read()
        if fname.endswith(LFS_EXT):
            sha = hashlib.sha256(data).hexdigest()
            h = {"X-Repo-Commit": commit, "X-Linked-Etag": '"%s"' % sha, "X-Linked-Size": str(len(data)),
                 "ETag": '"%s"' % sha, "Location": "http://%s/lfs/%s" % (cdn_host(self.headers.get("Host", "")), sha)}
            return self.reply(302, h, b"", head=head)
        h = {"X-Repo-Commit": commit, "ETag": '"%s"' % git_blob_sha1(data)}
        return self.send_content(data, h, fault, head)

    # ---- pushes
    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def json_reply(self, status, obj):
        return self.reply(status, {"Content-Type": "application/json"}, json.dumps(obj).encode())

    def is_lfs(self, path, size):
        name = path.rsplit("/", 1)[-1]
        return size > self.state.lfs_threshold or any(
            fnmatch.fnmatch(path, p) or fnmatch.fnmatch(name, p) for p in GITATTRIBUTES_LFS)

    def store_path(self, key, oid):
        """LFS objects are kept per repo (key: the repo id with '~' for '/'), as the Hub's storage is"""
        os.makedirs(os.path.join(self.state.store, key), exist_ok=True)
        return os.path.join(self.state.store, key, oid)

    def host_url(self, other=False):
        host = self.headers.get("Host", "")
        return "http://%s%s" % (cdn_host(host) if other else host, self.prefix)

    def strip_prefix(self):
        """an endpoint with a path (HF_ENDPOINT=http://host/mirror, as a proxy serves the Hub): /mirror/... is /..."""
        self.prefix = ""
        if self.path.startswith("/mirror/"):
            self.prefix, self.path = "/mirror", self.path[len("/mirror"):]

    def handle_write(self):
        st = self.state
        path = self.path.split("?")[0]
        body = self.read_body()
        authed = self.headers.get("Authorization") == "Bearer %s" % st.token
        fault = st.take_fault(self.command, path)
        if fault and fault.get("hold"):
            hold_request(fault["hold"])
        rec = {"method": self.command, "path": path, "auth": authed, "bytes": len(body)}
        if fault and "status" in fault:
            st.write_record(dict(rec, status=fault["status"]))
            return self.json_reply(fault["status"], {"error": "injected"})
        if path.startswith("/lfs-upload/"):
            return self.lfs_upload(path, body, rec)
        if not authed:
            st.write_record(dict(rec, status=401))
            return self.reply(401, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Invalid credentials"},
                              b'{"error":"Invalid credentials in Authorization header"}')
        if path == "/api/repos/create":
            req = json.loads(body)
            ns = req.get("organization") or st.user
            repo = "%s/%s" % (ns, req["name"])
            st.write_record(dict(rec, request=req, repo=repo))
            url = "%s/%s" % (self.host_url(), repo)
            d = os.path.join(st.root, repo)
            if os.path.isdir(d):
                return self.json_reply(409, {"error": "You already created this model repo", "url": url})
            os.makedirs(d)
            return self.json_reply(200, {"url": url, "name": repo, "id": repo})
        if path.startswith("/lfs-verify/"):
            key, oid = path[len("/lfs-verify/"):].split("/")
            req = json.loads(body)
            sp = self.store_path(key, oid)
            ok = os.path.isfile(sp) and os.path.getsize(sp) == req.get("size") and req.get("oid") == oid
            st.write_record(dict(rec, oid=oid, ok=ok))
            return self.json_reply(200 if ok else 404, {} if ok else {"error": "object not found"})
        if path.endswith(".git/info/lfs/objects/batch"):
            repo = path[1:-len(".git/info/lfs/objects/batch")]
            if not os.path.isdir(os.path.join(st.root, repo)):
                return self.json_reply(404, {"error": "Repository not found"})
            req = json.loads(body)
            key = repo.replace("/", "~")
            objs = []
            for o in req["objects"]:
                oid, size = o["oid"], o["size"]
                if os.path.isfile(self.store_path(key, oid)):
                    objs.append({"oid": oid, "size": size})
                    continue
                up = "%s/lfs-upload/%s/%s" % (self.host_url(True), key, oid)
                actions = {"verify": {"href": "%s/lfs-verify/%s/%s" % (self.host_url(), key, oid)}}
                if size > st.multipart_threshold:
                    chunk = max(1, st.multipart_threshold)
                    n = (size + chunk - 1) // chunk
                    header = {"chunk_size": str(chunk)}
                    for k in range(1, n + 1):
                        header[str(k)] = "%s/part/%d" % (up, k)
                    actions["upload"] = {"href": up + "/complete", "header": header}
                else:
                    actions["upload"] = {"href": up}
                objs.append({"oid": oid, "size": size, "authenticated": True, "actions": actions})
            st.write_record(dict(rec, request=req))
            return self.reply(200, {"Content-Type": "application/vnd.git-lfs+json"},
                              json.dumps({"transfer": "basic", "objects": objs}).encode())
        if path.startswith("/api/models/") and ("/preupload/" in path or "/commit/" in path):
            rest = path[len("/api/models/"):]
            kind = "preupload" if "/preupload/" in rest else "commit"
            repo, rev = rest.split("/%s/" % kind, 1)
            repo_dir = os.path.join(st.root, repo)
            if not os.path.isdir(repo_dir):
                st.write_record(dict(rec, status=404))
                return self.reply(404, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
                                  b'{"error":"Repository not found"}')
            if rev != "main":
                st.write_record(dict(rec, status=404))
                return self.reply(404, {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "Invalid rev id"},
                                  b'{"error":"Invalid rev id"}')
            if kind == "preupload":
                req = json.loads(body)
                out = []
                for f in req["files"]:
                    sample = base64.b64decode(f["sample"])
                    lfs = self.is_lfs(f["path"], f["size"])
                    if len(sample) > 512:
                        return self.json_reply(400, {"error": "sample longer than 512 bytes"})
                    full = os.path.join(repo_dir, f["path"])
                    oid = None
                    if os.path.isfile(full):
                        with open(full, "rb") as fh:
                            data = fh.read()
                        oid = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
                    out.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False,
                                "oid": oid})
                st.write_record(dict(rec, request=req))
                return self.json_reply(200, {"files": out, "commitOid": commit_of(repo_files(repo_dir))})
            if self.headers.get("Content-Type") != "application/x-ndjson":
                return self.json_reply(400, {"error": "the commit API takes application/x-ndjson"})
            lines = [json.loads(x) for x in body.decode().splitlines() if x.strip()]
            if not lines or lines[0].get("key") != "header":
                return self.json_reply(400, {"error": "the first line must be the header"})
            ops = []
            writes = []
            for ln in lines[1:]:
                v = ln["value"]
                if ln["key"] == "file":
                    if v.get("encoding") != "base64":
                        return self.json_reply(400, {"error": "unknown encoding"})
                    data = base64.b64decode(v["content"])
                    if self.is_lfs(v["path"], len(data)) and len(data) > 0:
                        return self.json_reply(400, {"error": "%s must be uploaded as LFS" % v["path"]})
                    writes.append((v["path"], data))
                    ops.append({"key": "file", "path": v["path"], "size": len(data)})
                elif ln["key"] == "lfsFile":
                    sp = self.store_path(repo.replace("/", "~"), v["oid"])
                    if not os.path.isfile(sp):
                        return self.json_reply(422, {"error": "LFS object %s of %s not found" % (v["oid"], v["path"])})
                    with open(sp, "rb") as fh:
                        writes.append((v["path"], fh.read()))
                    ops.append({"key": "lfsFile", "path": v["path"], "oid": v["oid"], "size": v.get("size")})
                else:
                    return self.json_reply(400, {"error": "unknown key %s" % ln["key"]})
            for pth, data in writes:
                full = os.path.normpath(os.path.join(repo_dir, pth))
                if not full.startswith(repo_dir + "/"):
                    return self.json_reply(400, {"error": "bad path %s" % pth})
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full + ".tmp", "wb") as fh:
                    fh.write(data)
                os.rename(full + ".tmp", full)
            commit = commit_of(repo_files(repo_dir))
            st.write_record(dict(rec, summary=lines[0]["value"].get("summary"), ops=ops, commit=commit))
            return self.json_reply(200, {"commitOid": commit, "commitUrl": "%s/%s/commit/%s" % (
                self.host_url(), repo, commit)})
        st.write_record(dict(rec, status=404))
        return self.json_reply(404, {"error": "no such endpoint"})

    def lfs_upload(self, path, body, rec):
        st = self.state
        key, _, rest = path[len("/lfs-upload/"):].partition("/")
        parts = rest.split("/")
        oid = parts[0]
        if self.headers.get("Authorization"):
            st.write_record(dict(rec, status=400))
            return self.json_reply(400, {"error": "Only one auth mechanism allowed"})
        if self.command == "PUT" and len(parts) == 3 and parts[1] == "part":
            pp = os.path.join(st.store, "parts", "%s.%s.%s" % (key, oid, parts[2]))
            with open(pp, "wb") as fh:
                fh.write(body)
            st.write_record(dict(rec, oid=oid, part=int(parts[2])))
            return self.reply(200, {"ETag": '"%s"' % hashlib.md5(body).hexdigest()})
        if self.command == "POST" and len(parts) == 2 and parts[1] == "complete":
            req = json.loads(body)
            data = b""
            for i, p in enumerate(req["parts"]):
                pp = os.path.join(st.store, "parts", "%s.%s.%d" % (key, oid, p["partNumber"]))
                if p["partNumber"] != i + 1 or not os.path.isfile(pp):
                    return self.json_reply(400, {"error": "bad part list"})
                with open(pp, "rb") as fh:
                    chunk = fh.read()
                if hashlib.md5(chunk).hexdigest() != p["etag"].strip('"'):
                    return self.json_reply(400, {"error": "etag mismatch for part %d" % p["partNumber"]})
                data += chunk
            rec = dict(rec, oid=oid, parts=len(req["parts"]))
            body = data
        elif not (self.command == "PUT" and len(parts) == 1):
            return self.json_reply(404, {"error": "no such endpoint"})
        if hashlib.sha256(body).hexdigest() != oid:
            st.write_record(dict(rec, status=400, oid=oid))
            return self.json_reply(400, {"error": "content does not match its sha256"})
        sp = self.store_path(key, oid)
        with open(sp + ".tmp", "wb") as fh:
            fh.write(body)
        os.rename(sp + ".tmp", sp)
        st.write_record(dict(rec, oid=oid, stored=len(body)))
        return self.reply(200)

    def do_POST(self):
        self.strip_prefix()
        self.handle_write()

    def do_PUT(self):
        self.strip_prefix()
        self.handle_write()

    def do_HEAD(self):
        self.handle_any(True)

    def do_GET(self):
        self.handle_any(False)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log")
    ap.add_argument("--faults")
    ap.add_argument("--token", default="secret-token")
    ap.add_argument("--user", default="t5user", help="the token's user: the namespace of a repo created without one")
    ap.add_argument("--lfs-threshold", type=int, default=10 * 1000 * 1000)
    ap.add_argument("--multipart-threshold", type=int, default=5 * 1000 * 1000 * 1000)
    ap.add_argument("--record")
    args = ap.parse_args()
    Handler.state = State(args)
    srv = Server(("127.0.0.1", args.port), Handler)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
