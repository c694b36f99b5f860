// Live delivery state and audit entries over `/graphql/ws` (the graphql-transport-ws
// protocol), one socket for every subscription of the page. The key goes in
// `connection_init`, never in the URL, and beside it the project the view is narrowed to
// (`Hymical-Project`), which holds for the socket's life: switching projects ends every
// subscription (`endAll`) and the next view's open a new socket.
//
// After a dropped connection, a subscription that had received events resumes with
// `afterEventId` (the id of the last one), so nothing is missed and nothing arrives twice.
// One that had received none, or whose events the server no longer has
// (EVENT_HISTORY_EXPIRED), starts again from now and tells its view to reload (`onReset`),
// which covers whatever happened meanwhile. Audit entries cannot be resumed (the server
// sends them live only), so their view reloads after every (re)connection.

import { PROJECT_HEADER, session } from "./api.js";
import { ApiError, fromGraphqlErrors } from "./words.js";

const DELIVERIES = `subscription Live($endpointId: ID, $deliveryId: ID, $states: [DeliveryState!], $afterEventId: ID) {
  deliveryStateChanged(endpointId: $endpointId, deliveryId: $deliveryId, states: $states, afterEventId: $afterEventId) {
    id kind state previousState attempts cycleAttempts outcome occurredAt endpointId
    delivery { id createdAt nextAttemptAt completedAt destinationUrl }
  }
}`;

export const AUDIT_FIELDS = "id at keyId keyName projectId operation targets changes addressDigest";
const AUDIT = `subscription Audit { auditEntryAdded { ${AUDIT_FIELDS} } }`;

// The server closes with this when the key is refused or revoked; reconnecting cannot help.
const KEY_REFUSED = 4403;

let socket = null;
let acknowledged = false;
let connections = 0;
let nextId = 1;
let retryDelay = 500;
let retryTimer = null;
let lingerTimer = null;
const subscriptions = new Map(); // operation id → subscription
const statusListeners = new Set();
let currentStatus = "off";
let onKeyRefused = () => {};

export function whenKeyRefused(handler) {
  onKeyRefused = handler;
}

// `listener(status)` with "off", "connecting", "live" or "reconnecting", now and on change.
export function onStatus(listener) {
  statusListeners.add(listener);
  listener(currentStatus);
  return () => statusListeners.delete(listener);
}

function status(value) {
  currentStatus = value;
  for (const listener of statusListeners) listener(value);
}

function send(message) {
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
}

function start(subscription) {
  const variables = { ...subscription.filter };
  if (subscription.afterEventId) variables.afterEventId = subscription.afterEventId;
  send({ id: subscription.id, type: "subscribe", payload: { query: subscription.query, variables } });
}

// Starts a subscription again from now under a new operation id (the server refuses an
// id it has seen on this socket) and has its view reload.
function restart(subscription) {
  subscriptions.delete(subscription.id);
  subscription.id = String(nextId++);
  subscription.afterEventId = null;
  subscriptions.set(subscription.id, subscription);
  if (acknowledged) start(subscription);
  subscription.onReset();
}

function connect() {
  clearTimeout(retryTimer);
  if (socket || !session.key()) return;
  status(connections === 0 ? "connecting" : "reconnecting");
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}/graphql/ws`, "graphql-transport-ws");
  socket = ws;
  acknowledged = false;
  ws.addEventListener("open", () => {
    const payload = { Authorization: `Bearer ${session.key()}` };
    if (session.project()) payload[PROJECT_HEADER] = session.project();
    send({ type: "connection_init", payload });
  });
  ws.addEventListener("message", (message) => {
    // A socket being closed may still deliver; only the current one counts.
    if (socket !== ws) return;
    let data;
    try {
      data = JSON.parse(message.data);
    } catch {
      return;
    }
    receive(data);
  });
  ws.addEventListener("close", (event) => {
    if (socket !== ws) return;
    socket = null;
    acknowledged = false;
    if (event.code === KEY_REFUSED) {
      status("off");
      onKeyRefused(new ApiError("INVALID_API_KEY", event.reason || "The key was refused."));
      return;
    }
    if (subscriptions.size === 0) {
      status("off");
      return;
    }
    status("reconnecting");
    retryTimer = setTimeout(connect, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 15000);
  });
}

function expired(errors) {
  return errors.some((e) => e && e.extensions && e.extensions.code === "EVENT_HISTORY_EXPIRED");
}

function receive(message) {
  switch (message.type) {
    case "connection_ack":
      acknowledged = true;
      connections += 1;
      retryDelay = 500;
      status("live");
      for (const subscription of [...subscriptions.values()]) {
        start(subscription);
        // It has nothing to resume from: whatever happened before now is the view's to
        // reload (on a first connection this closes the gap since the view's first load).
        if (!subscription.afterEventId) subscription.onReset();
      }
      break;
    case "ping":
      send({ type: "pong" });
      break;
    case "next": {
      const subscription = subscriptions.get(message.id);
      if (!subscription) break;
      const payload = message.payload || {};
      if (payload.errors && payload.errors.length) {
        if (expired(payload.errors)) {
          subscription.expired = true;
        } else {
          subscription.onError(fromGraphqlErrors(payload.errors));
        }
        break;
      }
      const event = payload.data && payload.data[subscription.field];
      if (!event) break;
      if (subscription.resumable) subscription.afterEventId = event.id;
      subscription.onEvent(event);
      break;
    }
    case "error": {
      const subscription = subscriptions.get(message.id);
      if (!subscription) break;
      const errors = Array.isArray(message.payload) ? message.payload : [];
      if (expired(errors)) restart(subscription);
      else subscription.onError(fromGraphqlErrors(errors));
      break;
    }
    case "complete": {
      // The server ended a subscription the view still wants: start it again.
      const subscription = subscriptions.get(message.id);
      if (!subscription) break;
      if (subscription.expired) {
        subscription.expired = false;
        restart(subscription);
      } else {
        setTimeout(() => subscriptions.has(subscription.id) && restart(subscription), 1000);
      }
      break;
    }
    default:
      break;
  }
}

// Follows `filter` (endpointId, deliveryId, states: the subscription's arguments).
// Returns the function that ends it.
export function subscribe(filter, handlers) {
  return follow({ query: DELIVERIES, field: "deliveryStateChanged", filter, resumable: true }, handlers);
}

// Follows the audit trail (`auditEntryAdded`, admin keys only): each entry as it commits.
// `onReset` runs after every (re)connection, since entries are not resumable.
export function subscribeAudit(handlers) {
  return follow({ query: AUDIT, field: "auditEntryAdded", filter: {}, resumable: false }, handlers);
}

function follow({ query, field, filter, resumable }, { onEvent, onReset = () => {}, onError = () => {} }) {
  const subscription = { id: String(nextId++), query, field, filter, resumable, onEvent, onReset, onError, afterEventId: null, expired: false };
  subscriptions.set(subscription.id, subscription);
  clearTimeout(lingerTimer);
  if (!socket) connect();
  else if (acknowledged) start(subscription);
  return () => {
    if (!subscriptions.delete(subscription.id)) return;
    send({ id: subscription.id, type: "complete" });
    if (subscriptions.size === 0) {
      // A view change subscribes again at once; keep the socket for that.
      lingerTimer = setTimeout(closeSocket, 5000);
    }
  };
}

function closeSocket() {
  clearTimeout(retryTimer);
  clearTimeout(lingerTimer);
  if (socket) {
    const closing = socket;
    socket = null;
    closing.close(1000, "Normal Closure");
  }
  status("off");
}

// Forgets every subscription and closes the socket (sign-out).
export function endAll() {
  subscriptions.clear();
  connections = 0;
  closeSocket();
}
