// Verifies webhook requests with the Standard Webhooks reference library (npm
// `standardwebhooks`) or Svix's own (`svix`), as a receiver would. One JSON object per
// line on stdin: {"library": "standardwebhooks" | "svix", "secret", "body_base64",
// "headers"}; one line per case on stdout: {"ok": true} or {"ok": false, "error"}.
import { createInterface } from "node:readline";
import { Webhook as StandardWebhook } from "standardwebhooks";
import { Webhook as SvixWebhook } from "svix";

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const c = JSON.parse(line);
  const body = Buffer.from(c.body_base64, "base64").toString("utf8");
  try {
    const webhook =
      c.library === "svix" ? new SvixWebhook(c.secret) : new StandardWebhook(c.secret);
    webhook.verify(body, c.headers);
    console.log(JSON.stringify({ ok: true }));
  } catch (error) {
    console.log(JSON.stringify({ ok: false, error: String(error?.message ?? error) }));
  }
}
