// Runs graphql-http's audit suite against a running server, with the management key
// injected into every request. Prints every result; exits 1 when any MUST fails.
//
//   GRAPHQL_URL=http://127.0.0.1:8080/graphql GRAPHQL_KEY=hym_live_… node audit.mjs
import { auditServer } from 'graphql-http';

const url = process.env.GRAPHQL_URL;
const key = process.env.GRAPHQL_KEY;
if (!url || !key) {
  console.error('set GRAPHQL_URL and GRAPHQL_KEY');
  process.exit(2);
}

const results = await auditServer({
  url,
  fetchFn: (input, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set('authorization', `Bearer ${key}`);
    return fetch(input, { ...init, headers });
  },
});

let mustFailures = 0;
for (const result of results) {
  const level = result.name.split(' ')[0];
  if (result.status === 'error') mustFailures += 1;
  const reason = result.status === 'ok' ? '' : ` (${result.reason})`;
  console.log(`${result.status.padEnd(6)} ${level.padEnd(6)} ${result.id} ${result.name}${reason}`);
}
const count = (status) => results.filter((r) => r.status === status).length;
console.log(`audit: ${count('ok')} ok, ${count('warn')} warn, ${count('notice')} notice, ${count('error')} error`);
process.exit(mustFailures > 0 ? 1 : 0);
