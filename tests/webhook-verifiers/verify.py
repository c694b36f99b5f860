"""Verifies webhook requests with the Standard Webhooks reference library (PyPI
`standardwebhooks`), as a receiver would. One JSON object per line on stdin: {"secret",
"body_base64", "headers"}; one line per case on stdout: {"ok": true} or {"ok": false,
"error"}."""

import base64
import json
import sys

from standardwebhooks.webhooks import Webhook

for line in sys.stdin:
    if not line.strip():
        continue
    case = json.loads(line)
    body = base64.b64decode(case["body_base64"])
    try:
        Webhook(case["secret"]).verify(body, case["headers"])
        print(json.dumps({"ok": True}), flush=True)
    except Exception as error:  # noqa: BLE001 - every refusal is an answer here
        print(json.dumps({"ok": False, "error": f"{type(error).__name__}: {error}"}), flush=True)
