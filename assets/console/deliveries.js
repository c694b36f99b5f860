// Deliveries: the filterable list (endpoint, state, creation time), paged the Relay way
// and kept live by the delivery events; a delivery's page with its attempt history as a
// timeline and its events as they happen; replaying one, and replaying every failed
// delivery the filters match after confirming how many that is. Each delivery names its
// destination (a webhook's URL, an email's recipients).

import { graphql, session } from "./api.js";
import { PAUSE_REASONS, deliveryTarget, targetLabel } from "./destinations.js";
import { h, replace, stateBadge, throttle, time, toIso, toLocal } from "./dom.js";
import { subscribe } from "./live.js";
import { explain } from "./words.js";

const PAGE_SIZE = 25;
const STATES = ["PENDING", "PROCESSING", "DELIVERED", "FAILED"];

const LIST = `query Deliveries($filter: DeliveryFilter, $first: Int, $after: String) {
  deliveries(filter: $filter, first: $first, after: $after) {
    edges { cursor node { id state attempts createdAt nextAttemptAt completedAt destinationUrl endpoint { id name } destination { id kind } } }
    pageInfo { hasNextPage endCursor }
  }
  endpoints(first: 50) { nodes { id name } }
}`;
const ONE = `query Delivery($id: ID!) {
  delivery(id: $id) {
    id state destinationUrl attempts cycleAttempts nextAttemptAt claimExpiresAt createdAt completedAt
    endpoint { id name }
    destination { id kind url recipients state pauseReason }
    submission { id receivedAt }
    attemptHistory { number attemptedAt outcome httpStatus smtpReplyCode smtpReply error durationMs late }
  }
}`;
const REPLAY_ONE = `mutation Replay($id: ID!) { replayDelivery(id: $id) { delivery { id state } } }`;
const REPLAY_MATCHING = `mutation ReplayMatching($filter: ReplayFilter!, $dryRun: Boolean!) {
  replayDeliveries(filter: $filter, dryRun: $dryRun) { count }
}`;

function filterFrom(params) {
  return {
    endpointId: params.get("endpoint") || null,
    state: STATES.includes(params.get("state")) ? params.get("state") : null,
    createdAfter: params.get("after") || null,
    createdBefore: params.get("before") || null,
  };
}

// `prev`: the cursors of the pages before this one ("" for the first), so "← Newer" and
// the browser's Back agree.
function hashFor(filter, cursor, prev = []) {
  const params = new URLSearchParams();
  if (filter.endpointId) params.set("endpoint", filter.endpointId);
  if (filter.state) params.set("state", filter.state);
  if (filter.createdAfter) params.set("after", filter.createdAfter);
  if (filter.createdBefore) params.set("before", filter.createdBefore);
  if (cursor) params.set("cursor", cursor);
  for (const earlier of prev) params.append("prev", earlier);
  const query = params.toString();
  return `#/deliveries${query ? `?${query}` : ""}`;
}

function matches(filter, delivery, state) {
  if (filter.state && filter.state !== state) return false;
  const created = Date.parse(delivery.createdAt);
  if (filter.createdAfter && !(created > Date.parse(filter.createdAfter))) return false;
  if (filter.createdBefore && !(created < Date.parse(filter.createdBefore))) return false;
  return true;
}

function filterForm(filter, endpoints, shell) {
  const select = (id, label, options, value) =>
    h(
      "div",
      { class: "field" },
      h("label", { for: id }, label),
      h("select", { id, name: id }, options.map(([v, text]) => h("option", { value: v, selected: v === (value || "") ? true : null }, text))),
    );
  const form = h(
    "form",
    { id: "delivery-filter", class: "filters", role: "search" },
    select("filter-endpoint", "Endpoint", [["", "All endpoints"], ...endpoints.map((e) => [e.id, `${e.name} (${e.id})`])], filter.endpointId),
    select("filter-state", "State", [["", "Any state"], ...STATES.map((s) => [s, s.toLowerCase()])], filter.state),
    h("div", { class: "field" }, h("label", { for: "filter-after" }, "Created after"), h("input", { id: "filter-after", type: "datetime-local", value: toLocal(filter.createdAfter) })),
    h("div", { class: "field" }, h("label", { for: "filter-before" }, "Created before"), h("input", { id: "filter-before", type: "datetime-local", value: toLocal(filter.createdBefore) })),
    h("div", { class: "field actions" }, h("button", { type: "submit" }, "Apply"), h("a", { href: "#/deliveries" }, "Clear")),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    shell.go(
      hashFor({
        endpointId: form.elements["filter-endpoint"].value || null,
        state: form.elements["filter-state"].value || null,
        createdAfter: toIso(form.querySelector("#filter-after").value),
        createdBefore: toIso(form.querySelector("#filter-before").value),
      }),
    );
  });
  return form;
}

// Replays the filtered failed deliveries once the operator has seen how many.
function bulkReplay(filter, shell, reload) {
  const area = h("div", { id: "bulk-replay", class: "bulk" });
  const replayFilter = { endpointId: filter.endpointId, createdAfter: filter.createdAfter, createdBefore: filter.createdBefore };
  const start = h("button", { type: "button", class: "secondary", id: "bulk-replay-start" }, "Replay failed deliveries…");
  const message = h("p", { class: "error", role: "alert" });
  start.addEventListener("click", async () => {
    message.textContent = "";
    start.disabled = true;
    try {
      const { replayDeliveries } = await graphql(REPLAY_MATCHING, { filter: replayFilter, dryRun: true });
      const count = replayDeliveries.count;
      if (count === 0) {
        message.textContent = "No failed delivery matches these filters.";
        return;
      }
      const confirm = h("button", { type: "button", class: "danger", id: "bulk-replay-confirm" }, `Replay ${count}`);
      const cancel = h("button", { type: "button", class: "secondary" }, "Cancel");
      const box = h(
        "div",
        { class: "confirm", role: "alertdialog", "aria-label": "Confirm the replay" },
        h("p", { id: "bulk-replay-count" }, `${count} failed ${count === 1 ? "delivery matches" : "deliveries match"} these filters (endpoint and creation time). Each gets a fresh retry cycle.`),
        confirm,
        " ",
        cancel,
      );
      const close = () => {
        replace(area, start, message);
        start.focus();
      };
      cancel.addEventListener("click", close);
      box.addEventListener("keydown", (event) => event.key === "Escape" && close());
      confirm.addEventListener("click", async () => {
        confirm.disabled = true;
        cancel.disabled = true;
        try {
          const result = await graphql(REPLAY_MATCHING, { filter: replayFilter, dryRun: false });
          const n = result.replayDeliveries.count;
          shell.flash(`${n} ${n === 1 ? "delivery" : "deliveries"} replayed.`, "ok");
          replace(area, start, message);
          reload();
        } catch (failure) {
          message.textContent = explain(failure);
          replace(area, start, message);
        }
      });
      replace(area, box, message);
      confirm.focus();
    } catch (failure) {
      message.textContent = explain(failure);
    } finally {
      start.disabled = false;
    }
  });
  area.append(start, message);
  return area;
}

export function list(view, route, shell) {
  const filter = filterFrom(route.params);
  const cursor = route.params.get("cursor");
  const prev = route.params.getAll("prev");
  const body = h("div", { class: "loading" }, "Loading…");
  const controls = h("div");
  replace(view, h("h1", {}, "Deliveries"), controls, body);

  let stopped = false;
  let endpointNames = new Map();
  const rows = new Map(); // delivery id → its <tr>
  const trails = new Map(); // delivery id → states seen on this page, in order

  function note(id, state) {
    const trail = trails.get(id) || [];
    if (trail[trail.length - 1] !== state) trail.push(state);
    trails.set(id, trail.slice(-8));
    return trails.get(id);
  }

  function row(delivery) {
    const trail = note(delivery.id, delivery.state);
    const endpoint = delivery.endpoint || { id: delivery.endpointId, name: endpointNames.get(delivery.endpointId) || delivery.endpointId };
    const tr = h(
      "tr",
      { "data-delivery": delivery.id, "data-state": delivery.state },
      h("td", { class: "mono" }, h("a", { href: `#/deliveries/${encodeURIComponent(delivery.id)}` }, delivery.id)),
      h("td", {}, endpoint.name),
      h("td", { class: "destination-cell" }, targetLabel(delivery)),
      h("td", { class: "state-cell" }, stateBadge(delivery.state), trail.length > 1 ? h("span", { class: "trail", "data-trail": trail.join(" ") }, trail.join(" → ")) : null),
      h("td", { class: "num" }, String(delivery.attempts)),
      h("td", {}, time(delivery.createdAt)),
      h("td", {}, delivery.completedAt ? time(delivery.completedAt) : delivery.state === "PENDING" ? `next ${time(delivery.nextAttemptAt)}` : "—"),
    );
    rows.set(delivery.id, tr);
    return tr;
  }

  let tbody = null;
  async function load() {
    try {
      const data = await graphql(LIST, { filter, first: PAGE_SIZE, after: cursor });
      if (stopped) return;
      endpointNames = new Map(data.endpoints.nodes.map((e) => [e.id, e.name]));
      if (!controls.firstChild) {
        replace(
          controls,
          filterForm(filter, data.endpoints.nodes, shell),
          // Replays change state: offered to an admin key only.
          session.canChange() ? bulkReplay(filter, shell, () => reload()) : null,
        );
      }
      rows.clear();
      const edges = data.deliveries.edges;
      tbody = h("tbody", {}, edges.map((edge) => row(edge.node)));
      replace(
        body,
        h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { id: "deliveries" },
            h("thead", {}, h("tr", {}, ["Delivery", "Endpoint", "Destination", "State", "Attempts", "Created", "Completed / next"].map((t) => h("th", {}, t)))),
            tbody,
          ),
        ),
        edges.length ? null : h("p", { class: "empty", id: "no-deliveries" }, "No delivery matches these filters yet. New ones appear here as they are accepted."),
        h(
          "nav",
          { class: "pager", "aria-label": "Pages" },
          cursor
            ? h("a", { href: hashFor(filter, prev[prev.length - 1] || null, prev.slice(0, -1)), id: "newer-page" }, "← Newer")
            : null,
          data.deliveries.pageInfo.hasNextPage
            ? h("a", { href: hashFor(filter, data.deliveries.pageInfo.endCursor, [...prev, cursor || ""]), id: "older-page" }, "Older →")
            : null,
        ),
      );
      body.className = "";
    } catch (error) {
      if (!stopped) replace(body, h("p", { class: "error", role: "alert" }, explain(error)));
    }
  }
  const reload = throttle(500, load);
  reload();

  function onEvent(event) {
    const existing = rows.get(event.delivery.id);
    const delivery = { ...event.delivery, endpointId: event.endpointId, state: event.state, attempts: event.attempts };
    if (existing) {
      existing.replaceWith(row(delivery));
    } else if (event.kind === "CREATED" && !cursor && tbody && matches(filter, delivery, event.state)) {
      const empty = body.querySelector("#no-deliveries");
      if (empty) empty.remove();
      tbody.prepend(row(delivery));
    } else if (!cursor && matches(filter, delivery, event.state)) {
      // A delivery that now matches (replayed into the state shown, say): reload the page.
      reload();
    }
  }

  const unsubscribe = subscribe(filter.endpointId ? { endpointId: filter.endpointId } : {}, { onEvent, onReset: reload });
  return () => {
    stopped = true;
    unsubscribe();
  };
}

// What answered an attempt: a webhook's HTTP status, or a mail server's SMTP reply code
// (an email attempt has no HTTP status; the server's text follows on a line of its own).
function answer(attempt, email) {
  if (!email) return h("span", { class: "attempt-status" }, attempt.httpStatus ? `HTTP ${attempt.httpStatus}` : "no status");
  return h("span", { class: "attempt-status" }, attempt.smtpReplyCode ? `SMTP ${attempt.smtpReplyCode}` : "no reply");
}

function timeline(attempts, email) {
  if (!attempts.length) return h("p", { class: "empty" }, email ? "No email has been tried yet." : "No request has gone out yet.");
  return h(
    "ol",
    { class: "timeline", id: "attempts" },
    attempts.map((a) =>
      h(
        "li",
        { class: `attempt outcome-${a.outcome.toLowerCase()}`, "data-number": a.number, "data-outcome": a.outcome },
        h("span", { class: "attempt-number" }, `#${a.number}`),
        h("span", { class: "attempt-time" }, time(a.attemptedAt)),
        h("span", { class: "attempt-outcome" }, a.outcome.replace(/_/g, " ").toLowerCase()),
        answer(a, email),
        h("span", { class: "attempt-duration" }, `${a.durationMs} ms`),
        a.late ? h("span", { class: "tag late", title: "Recorded by a worker whose claim had been superseded" }, "late") : null,
        a.smtpReply ? h("span", { class: "attempt-reply mono" }, a.smtpReply) : null,
        a.error ? h("span", { class: "attempt-error" }, a.error) : null,
      ),
    ),
  );
}

// The destination as it is now, when that matters to this delivery: removed since, or
// paused (its deliveries held).
function destinationNote(destination) {
  if (!destination) return null;
  if (destination.state === "REMOVED") return h("span", { class: "tag" }, "destination removed since");
  if (destination.state === "PAUSED") {
    return h("span", { class: "tag paused", title: PAUSE_REASONS[destination.pauseReason] || destination.pauseReason }, "destination paused");
  }
  return null;
}

export function detail(view, route, shell) {
  const id = route.id;
  const body = h("div", { class: "loading" }, "Loading…");
  const events = h("ol", { class: "events", id: "events" });
  replace(view, h("p", {}, h("a", { href: "#/deliveries" }, "← Deliveries")), h("h1", { class: "mono" }, id), body);
  let stopped = false;

  async function load() {
    try {
      const { delivery } = await graphql(ONE, { id });
      if (stopped) return;
      // The page is rebuilt; the control that had the focus gets it back.
      const focused = document.activeElement && document.activeElement.id;
      if (!delivery) {
        replace(body, h("p", { class: "error" }, "No delivery has this id."));
        return;
      }
      const error = h("p", { class: "error", role: "alert" });
      let replay = null;
      if (delivery.state === "FAILED" && delivery.submission && session.canChange()) {
        replay = h("button", { type: "button", id: "replay" }, "Replay");
        replay.addEventListener("click", async () => {
          replay.disabled = true;
          try {
            await graphql(REPLAY_ONE, { id });
            shell.flash("Replayed: a new retry cycle has started.", "ok");
            reload();
          } catch (failure) {
            error.textContent = explain(failure);
            replay.disabled = false;
          }
        });
      }
      replace(
        body,
        h(
          "dl",
          { class: "facts" },
          h("dt", {}, "State"),
          h("dd", { id: "delivery-state", "data-state": delivery.state }, stateBadge(delivery.state)),
          h("dt", {}, "Endpoint"),
          h("dd", {}, delivery.endpoint ? h("a", { href: `#/endpoints/${encodeURIComponent(delivery.endpoint.id)}` }, delivery.endpoint.name) : "deleted"),
          h("dt", {}, "Destination"),
          h("dd", { id: "delivery-destination" }, targetLabel(delivery), destinationNote(delivery.destination)),
          h("dt", {}, "Attempts"),
          h("dd", { id: "delivery-attempts" }, `${delivery.attempts} in all, ${delivery.cycleAttempts} in this cycle`),
          h("dt", {}, "Created"),
          h("dd", {}, time(delivery.createdAt)),
          h("dt", {}, delivery.completedAt ? "Completed" : "Next attempt"),
          h("dd", {}, time(delivery.completedAt || delivery.nextAttemptAt)),
          h("dt", {}, "Submission"),
          h("dd", {}, delivery.submission ? h("a", { href: `#/submissions/${encodeURIComponent(delivery.submission.id)}` }, delivery.submission.id) : "erased"),
        ),
        replay ? h("div", { class: "actions" }, replay) : null,
        error,
        h("h2", {}, "Attempts"),
        timeline(delivery.attemptHistory, deliveryTarget(delivery).kind !== "WEBHOOK"),
        h("h2", {}, "Live events"),
        h("p", { class: "hint" }, "State changes of this delivery since the page opened."),
        events,
      );
      body.className = "";
      const again = focused && document.getElementById(focused);
      if (again) again.focus();
    } catch (error) {
      if (!stopped) replace(body, h("p", { class: "error", role: "alert" }, explain(error)));
    }
  }
  const reload = throttle(300, load);
  reload();
  const unsubscribe = subscribe(
    { deliveryId: id },
    {
      onEvent: (event) => {
        events.append(
          h(
            "li",
            { "data-kind": event.kind },
            h("span", { class: "attempt-time" }, time(event.occurredAt)),
            " ",
            event.kind.replace(/_/g, " ").toLowerCase(),
            " → ",
            stateBadge(event.state),
            event.outcome ? ` (${event.outcome.replace(/_/g, " ").toLowerCase()})` : "",
          ),
        );
        reload();
      },
      onReset: reload,
    },
  );
  return () => {
    stopped = true;
    unsubscribe();
  };
}
