// A Hymical Forms webhook receiver: verifies the signature over the raw bytes, then
// processes each submission once, however many times it is delivered.
//
//     WEBHOOK_SECRET=whsec_... PORT=9000 node receiver.mjs
//
// Node.js built-ins only. Each request is reported as one JSON line on standard output.
// A real receiver keeps the processed ids in its database, in the transaction that does
// the work; a set in memory shows the rule.

import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";

const secret = process.env.WEBHOOK_SECRET;
const port = Number(process.env.PORT ?? "9000");
const processed = new Set();

function verify(rawBody, header) {
  const [version, digest] = (header ?? "").split("=", 2);
  if (version !== "v1" || !digest) return false;
  const expected = createHmac("sha256", secret).update(rawBody).digest("hex");
  const given = Buffer.from(digest);
  const wanted = Buffer.from(expected);
  return given.length === wanted.length && timingSafeEqual(given, wanted);
}

const report = (event) => console.log(JSON.stringify(event));

createServer((request, response) => {
  const chunks = [];
  request.on("data", (chunk) => chunks.push(chunk));
  request.on("end", () => {
    const rawBody = Buffer.concat(chunks);
    if (!verify(rawBody, request.headers["hymical-signature"])) {
      report({ event: "rejected" });
      response.writeHead(401).end();
      return;
    }
    const { submission } = JSON.parse(rawBody.toString("utf8"));
    if (processed.has(submission.id)) {
      report({ event: "duplicate", submission_id: submission.id });
    } else {
      processed.add(submission.id);
      // The work: here, only a report of what arrived.
      report({ event: "processed", submission_id: submission.id, fields: submission.fields });
    }
    response.writeHead(200).end();
  });
}).listen(port, "127.0.0.1");
