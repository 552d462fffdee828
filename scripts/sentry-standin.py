#!/usr/bin/env python3
"""A stand-in for the two Sentry endpoints a symbolication server asks, over a directory:

- the artifact lookup of /symbolicate-js: any request for `.../lookup` gets the file
  DIR/lookup (a JSON list of bundles, whatever the query);
- the debug-file search of a `sentry` source (JVM mappings, native files): a request with
  `?debug_id=ID` lists the files of DIR/difs/ID/ (each named after its Sentry symbol type,
  such as `proguard`) as `[{"id": "ID/TYPE", "symbolType": "TYPE", "debugId": "ID"}]`, and
  `?id=ID/TYPE` downloads one of them;
- anything else is a file under DIR (DIR/files/bundle.zip, ...).

Usage: sentry-standin.py DIR PORT (binds 127.0.0.1). scripts/load-common.sh starts it.
"""
import http.server
import json
import os
import sys
import urllib.parse


class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path.endswith("/lookup"):
            return self.send_file(os.path.join(self.directory, "lookup"))
        difs = os.path.join(self.directory, "difs")
        if "id" in query:
            name = os.path.normpath(query["id"][0])
            if name.startswith("..") or os.path.isabs(name):
                return self.send_error(404)
            return self.send_file(os.path.join(difs, name))
        if "debug_id" in query:
            debug_id = os.path.basename(query["debug_id"][0].lower())
            folder = os.path.join(difs, debug_id)
            types = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
            body = json.dumps([{"id": f"{debug_id}/{t}", "symbolType": t, "debugId": debug_id}
                               for t in types]).encode()
            return self.send_bytes(body, "application/json")
        return super().do_GET()

    def send_file(self, path):
        if not os.path.isfile(path):
            return self.send_error(404)
        with open(path, "rb") as f:
            self.send_bytes(f.read(), "application/octet-stream")

    def send_bytes(self, body, content_type):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        if os.environ.get("SENTRY_STANDIN_LOG"):
            super().log_message(*args)


def main():
    directory, port = sys.argv[1], int(sys.argv[2])
    handler = lambda *a, **kw: Handler(*a, directory=directory, **kw)  # noqa: E731
    http.server.ThreadingHTTPServer(("127.0.0.1", port), handler).serve_forever()


if __name__ == "__main__":
    main()
