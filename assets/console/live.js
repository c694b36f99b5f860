// Live delivery state over `/graphql/ws` (the graphql-transport-ws protocol), one socket
// for every subscription of the page. The key goes in `connection_init`, never in the URL.
// After a dropped connection each subscription resumes with `afterEventId` (the id of the
// last event it received), so nothing is missed and nothing arrives twice; when the
// server no longer has those events (EVENT_HISTORY_EXPIRED) the view is told to reload.

import { session } from "./api.js";
import { ApiError, fromGraphqlErrors } from "./words.js";

const DOCUMENT = `subscription Live($endpointId: ID, $deliveryId: ID, $states: [DeliveryState!], $afterEventId: ID) {
  deliveryStateChanged(endpointId: $endpointId, deliveryId: $deliveryId, states: $states, afterEventId: $afterEventId) {
    id kind state previousState attempts cycleAttempts outcome occurredAt endpointId
    delivery { id createdAt nextAttemptAt completedAt destinationUrl }
  }
}`;

// Close codes after which reconnecting cannot help.
const KEY_REFUSED = 4403;
const UNAUTHORIZED = 4401;

let socket = null;
let acknowledged = false;
let nextId = 1;
let retryDelay = 500;
let retryTimer = null;
let lingerTimer = null;
const subscriptions = new Map();
const statusListeners = new Set();
let onKeyRefused = () => {};

export function whenKeyRefused(handler) {
  onKeyRefused = handler;
}

// `listener(status)` with "connecting", "live" or "reconnecting".
let currentStatus = "off";

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
  send({ id: subscription.id, type: "subscribe", payload: { query: DOCUMENT, variables } });
}

function connect() {
  clearTimeout(retryTimer);
  if (socket || !session.key()) return;
  status("connecting");
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}/graphql/ws`, "graphql-transport-ws");
  socket = ws;
  acknowledged = false;
  ws.addEventListener("open", () => {
    send({ type: "connection_init", payload: { Authorization: `Bearer ${session.key()}` } });
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
    if (event.code === KEY_REFUSED || event.code === UNAUTHORIZED) {
      onKeyRefused(new ApiError("INVALID_API_KEY", event.reason || "The key was refused."));
      return;
    }
    if (subscriptions.size === 0) return;
    status("reconnecting");
    retryTimer = setTimeout(connect, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 15000);
  });
}

function receive(message) {
  switch (message.type) {
    case "connection_ack":
      acknowledged = true;
      retryDelay = 500;
      status("live");
      for (const subscription of subscriptions.values()) start(subscription);
      break;
    case "ping":
      send({ type: "pong" });
      break;
    case "next": {
      const subscription = subscriptions.get(message.id);
      if (!subscription) break;
      const payload = message.payload || {};
      if (payload.errors && payload.errors.length) {
        subscription.onError(fromGraphqlErrors(payload.errors));
        break;
      }
      const event = payload.data && payload.data.deliveryStateChanged;
      if (!event) break;
      subscription.afterEventId = event.id;
      subscription.onEvent(event);
      break;
    }
    case "error": {
      const subscription = subscriptions.get(message.id);
      if (!subscription) break;
      const error = fromGraphqlErrors(Array.isArray(message.payload) ? message.payload : []);
      if (error.code === "EVENT_HISTORY_EXPIRED") {
        // Start again from now; the view reloads what it shows.
        subscription.afterEventId = null;
        subscription.onReset();
        start(subscription);
      } else {
        subscription.onError(error);
      }
      break;
    }
    default:
      break;
  }
}

// Follows `filter` (endpointId, deliveryId, states: the subscription's arguments).
// Returns the function that ends it.
export function subscribe(filter, { onEvent, onReset = () => {}, onError = () => {} }) {
  const id = String(nextId++);
  const subscription = { id, filter, onEvent, onReset, onError, afterEventId: null };
  subscriptions.set(id, subscription);
  clearTimeout(lingerTimer);
  if (!socket) connect();
  else if (acknowledged) start(subscription);
  return () => {
    if (!subscriptions.delete(id)) return;
    send({ id, type: "complete" });
    if (subscriptions.size === 0) {
      // A view change subscribes again at once; keep the socket for that.
      lingerTimer = setTimeout(disconnect, 5000);
    }
  };
}

function disconnect() {
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
  disconnect();
}
