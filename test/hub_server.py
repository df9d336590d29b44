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
  "corrupt": true (flip the body's first byte), "delay": seconds per 64 KiB chunk}.
The server writes its port to --port-file once it listens (port 0: any free port).
"""
import argparse
import hashlib
import http.server
import json
import os
import socketserver
import threading
import time

LFS_EXT = (".safetensors", ".bin", ".model", ".gz", ".zip", ".tgz")


class State:
    def __init__(self, args):
        self.root = os.path.abspath(args.root)
        self.log = args.log
        self.faults_path = args.faults
        self.token = args.token
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

    def write_log(self, line):
        if self.log:
            with self.lock, open(self.log, "a") as f:
                f.write(line + "\n")


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
