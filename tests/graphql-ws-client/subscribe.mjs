// Subscribes with the graphql-ws client (the reference implementation of the
// graphql-transport-ws protocol) and prints one JSON line per message:
//   {"connected":true}            once the server acknowledged connection_init
//   {"next":<execution result>}   for every result
//   {"complete":true}             when the server completes the operation
//   {"error":...}                 on an error (then exits 2)
// Configuration comes from the environment: WS_URL, WS_KEY, WS_QUERY, WS_VARIABLES (JSON).
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const client = createClient({
  url: process.env.WS_URL,
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: `Bearer ${process.env.WS_KEY}` },
  lazy: false,
  retryAttempts: 0,
  on: {
    connected: () => console.log(JSON.stringify({ connected: true })),
    closed: (event) => console.log(JSON.stringify({ closed: { code: event.code, reason: event.reason } })),
  },
});

client.subscribe(
  { query: process.env.WS_QUERY, variables: JSON.parse(process.env.WS_VARIABLES || '{}') },
  {
    next: (result) => console.log(JSON.stringify({ next: result })),
    error: (error) => {
      // graphql-ws reports a close as the CloseEvent, GraphQL errors as an array.
      const detail = error instanceof Error
        ? error.message
        : (error && typeof error.code === 'number' ? { code: error.code, reason: error.reason } : error);
      console.log(JSON.stringify({ error: detail }));
      process.exit(2);
    },
    complete: () => {
      console.log(JSON.stringify({ complete: true }));
      client.dispose();
      process.exit(0);
    },
  },
);
