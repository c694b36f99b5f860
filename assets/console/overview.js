// Overview: how many deliveries are in each state, overall and per endpoint, and how many
// ended delivered or failed in each minute of the last hour. It loads with one query and
// follows every delivery event; events only schedule a reload of that query (at most one
// a second), so the figures are always the server's, never a count kept in the page.

import { graphql, session } from "./api.js";
import { h, replace, svg, throttle } from "./dom.js";
import { subscribe } from "./live.js";
import { explain } from "./words.js";

const QUERY = `query Overview {
  deliveryCounts { pending processing delivered failed }
  endpoints(first: 50) {
    nodes { id name isActive deliveryCounts { pending processing delivered failed } }
    pageInfo { hasNextPage }
  }
  deliveryActivity(minutes: 60) { minute delivered failed }
}`;

const STATES = ["pending", "processing", "delivered", "failed"];

function countCards(counts) {
  return h(
    "div",
    { class: "counts", id: "counts" },
    STATES.map((state) =>
      h(
        "a",
        { class: `count count-${state}`, href: `#/deliveries?state=${state.toUpperCase()}`, "data-state": state },
        h("span", { class: "count-value", id: `count-${state}` }, String(counts[state])),
        h("span", { class: "count-label" }, state),
      ),
    ),
  );
}

function endpointTable(endpoints) {
  if (!endpoints.nodes.length) {
    return session.canChange()
      ? h("p", { class: "empty" }, "No endpoints yet. ", h("a", { href: "#/endpoints/new" }, "Create one"), ".")
      : h("p", { class: "empty" }, "No endpoints yet.");
  }
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { id: "endpoint-counts" },
      h("thead", {}, h("tr", {}, h("th", {}, "Endpoint"), STATES.map((s) => h("th", { class: "num" }, s)))),
      h(
        "tbody",
        {},
        endpoints.nodes.map((endpoint) =>
          h(
            "tr",
            { "data-endpoint": endpoint.id },
            h(
              "td",
              {},
              h("a", { href: `#/deliveries?endpoint=${encodeURIComponent(endpoint.id)}` }, endpoint.name),
              " ",
              h("span", { class: "muted" }, endpoint.id),
              endpoint.isActive ? null : h("span", { class: "tag" }, "inactive"),
            ),
            STATES.map((state) => h("td", { class: "num", "data-state": state }, String(endpoint.deliveryCounts[state]))),
          ),
        ),
      ),
    ),
    endpoints.pageInfo.hasNextPage ? h("p", { class: "muted" }, "The 50 newest endpoints are shown.") : null,
  );
}

// Sixty bars, delivered stacked under failed, drawn with attributes only (the page's
// Content-Security-Policy allows no inline style).
function chart(minutes) {
  const width = 600;
  const height = 150;
  const top = Math.max(1, ...minutes.map((m) => m.delivered + m.failed));
  const slot = width / minutes.length;
  const scale = (n) => (n / top) * (height - 20);
  const bars = minutes.flatMap((m, index) => {
    const x = index * slot + 1;
    const w = Math.max(1, slot - 2);
    const delivered = scale(m.delivered);
    const failed = scale(m.failed);
    const label = `${new Date(m.minute).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}: ${m.delivered} delivered, ${m.failed} failed`;
    return [
      svg("rect", { class: "bar-delivered", x, y: height - delivered, width: w, height: delivered }, svg("title", {}, label)),
      svg("rect", { class: "bar-failed", x, y: height - delivered - failed, width: w, height: failed }, svg("title", {}, label)),
    ];
  });
  const delivered = minutes.reduce((sum, m) => sum + m.delivered, 0);
  const failed = minutes.reduce((sum, m) => sum + m.failed, 0);
  return h(
    "figure",
    { class: "chart", id: "activity" },
    svg(
      "svg",
      { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img", "aria-label": `Deliveries per minute over the last hour: ${delivered} delivered, ${failed} failed` },
      svg("line", { class: "axis", x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5 }),
      bars,
    ),
    h(
      "figcaption",
      {},
      h("span", { class: "key key-delivered" }, `${delivered} delivered`),
      " · ",
      h("span", { class: "key key-failed" }, `${failed} failed`),
      ` in the last hour, per minute (60 min ago → now; the tallest bar is ${top})`,
    ),
  );
}

export function render(view) {
  const body = h("div", { class: "loading" }, "Loading…");
  replace(view, h("h1", {}, "Overview"), body);
  let stopped = false;

  async function load() {
    try {
      const data = await graphql(QUERY);
      if (stopped) return;
      replace(
        body,
        h("section", {}, h("h2", {}, "All endpoints"), countCards(data.deliveryCounts)),
        h("section", {}, h("h2", {}, "Deliveries ended per minute"), chart(data.deliveryActivity)),
        h("section", {}, h("h2", {}, "Per endpoint"), endpointTable(data.endpoints)),
      );
      body.className = "";
    } catch (error) {
      if (!stopped) replace(body, h("p", { class: "error", role: "alert" }, explain(error)));
    }
  }

  const reload = throttle(1000, load);
  reload();
  const unsubscribe = subscribe({}, { onEvent: reload, onReset: reload });
  // The chart moves on with the clock even when nothing happens.
  const tick = setInterval(reload, 30000);
  return () => {
    stopped = true;
    clearInterval(tick);
    unsubscribe();
  };
}
