"""A Hymical Forms webhook receiver: verifies the signature over the raw bytes, then
processes each submission once, however many times it is delivered.

    WEBHOOK_SECRET=whsec_... PORT=9000 python3 receiver.py

Standard library only. Each request is reported as one JSON line on standard output.
A real receiver keeps the processed ids in its database, in the transaction that does
the work; a set in memory shows the rule.
"""

import hashlib
import hmac
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Lock

SECRET = os.environ["WEBHOOK_SECRET"].encode()
PORT = int(os.environ.get("PORT", "9000"))

processed = set()
processed_lock = Lock()


def verify(raw_body: bytes, header: str) -> bool:
    version, _, digest = header.partition("=")
    if version != "v1":
        return False
    expected = hmac.new(SECRET, raw_body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(digest, expected)


def report(**event):
    print(json.dumps(event), flush=True)


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw_body = self.rfile.read(length)
        if not verify(raw_body, self.headers.get("Hymical-Signature", "")):
            report(event="rejected")
            self.answer(401)
            return
        submission = json.loads(raw_body)["submission"]
        with processed_lock:
            duplicate = submission["id"] in processed
            processed.add(submission["id"])
        if duplicate:
            report(event="duplicate", submission_id=submission["id"])
        else:
            # The work: here, only a report of what arrived.
            report(event="processed", submission_id=submission["id"], fields=submission["fields"])
        self.answer(200)

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Receiver).serve_forever()
