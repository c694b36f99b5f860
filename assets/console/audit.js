// The audit trail (`#/audit`, admin keys only): every change made through the API and
// every export of data, newest first, 25 at a time with "Load more"
// (`auditEntries(first, after)`). Entries committed while the page is open arrive live
// (`auditEntryAdded`) and go on top; since the server sends those live only, every
// (re)connection of the socket reads the newest pages again until it meets an entry
// already shown, which covers whatever committed meanwhile. The changes are the server's
// JSON, with its secrets and personal values already redacted by the server, shown as
// text.

import { graphql, session } from "./api.js";
import { h, replace, throttle, time } from "./dom.js";
import { AUDIT_FIELDS, subscribeAudit } from "./live.js";
import { listProjects, projectLabel } from "./projects.js";
import { explain } from "./words.js";

const PAGE_SIZE = 25;
// How many pages a reconnection reads back at most, looking for the entries it missed.
const CATCH_UP_PAGES = 8;
const PAGE = `query Audit($first: Int, $after: String) {
  auditEntries(first: $first, after: $after) {
    nodes { ${AUDIT_FIELDS} }
    pageInfo { hasNextPage endCursor }
  }
}`;

// Entry ids are a sequence: the newest is the greatest.
function newestFirst(a, b) {
  try {
    const x = BigInt(a.id);
    const y = BigInt(b.id);
    return x < y ? 1 : x > y ? -1 : 0;
  } catch {
    return a.at < b.at ? 1 : a.at > b.at ? -1 : 0;
  }
}

// The changes on one line per entry, as the server stored them (already redacted).
function compact(changes) {
  if (changes === null || changes === undefined) return "—";
  return typeof changes === "string" ? changes : JSON.stringify(changes);
}

export function render(view) {
  if (!session.canChange()) {
    replace(
      view,
      h("h1", {}, "Audit trail"),
      h("p", { class: "hint read-only" }, "This key is read-only: it cannot read the audit trail. Sign in with an admin key to do so."),
    );
    return () => {};
  }
  let stopped = false;
  let projects = [];
  const entries = new Map();
  // Ids that arrived live or in a catch-up, marked until the page is left.
  const arrived = new Set();
  // The oldest page read so far: "Load more" continues after it.
  let cursor = null;
  let hasMore = false;
  let loaded = false;

  const error = h("p", { class: "error", role: "alert", id: "audit-error" });
  const body = h("tbody", {});
  const more = h("button", { type: "button", class: "secondary", id: "audit-more", hidden: true }, "Load more");
  const table = h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { id: "audit" },
      h("thead", {}, h("tr", {}, ["Time", "Key", "Operation", "Targets", "Project", "Changes"].map((t) => h("th", {}, t)))),
      body,
    ),
  );
  const narrowed = session.project();
  replace(
    view,
    h("h1", {}, "Audit trail"),
    h(
      "p",
      { class: "hint" },
      "Every change made through the API, and every export of data, newest first; new entries appear at the top as they commit. ",
      "Secrets and personal values were replaced by \"[redacted]\" by the server before the entry was written. ",
      narrowed ? "Only the entries of the project chosen in the header are listed: choose All projects there to see every entry." : "",
    ),
    error,
    table,
    h("div", { class: "pager" }, more),
  );

  function row(entry) {
    return h(
      "tr",
      { "data-entry": entry.id, "data-operation": entry.operation, class: arrived.has(entry.id) ? "arrived" : null },
      h("td", { class: "audit-at" }, time(entry.at)),
      h(
        "td",
        { class: "audit-key", title: entry.addressDigest ? `Key ${entry.keyId}; client address digest ${entry.addressDigest}` : `Key ${entry.keyId}` },
        entry.keyName,
      ),
      h("td", { class: "audit-operation mono" }, entry.operation),
      h("td", { class: "audit-targets mono wrap" }, entry.targets.length ? entry.targets.join(", ") : "—"),
      h("td", { class: "audit-project" }, entry.projectId ? projectLabel(entry.projectId, projects) : "—"),
      h("td", { class: "audit-changes" }, h("pre", { class: "changes" }, compact(entry.changes))),
    );
  }

  function paint() {
    const sorted = [...entries.values()].sort(newestFirst);
    replace(
      body,
      sorted.length ? sorted.map(row) : h("tr", {}, h("td", { colspan: 6, class: "empty", id: "audit-none" }, "No entries yet.")),
    );
    more.hidden = !hasMore;
  }

  const page = (after) => graphql(PAGE, { first: PAGE_SIZE, after });

  // The first page; after a (re)connection, the newest pages until one holds an entry
  // already shown (or the trail ends).
  async function refresh() {
    try {
      if (!loaded) {
        const [{ auditEntries }, seen] = await Promise.all([page(null), listProjects()]);
        if (stopped) return;
        projects = seen;
        for (const entry of auditEntries.nodes) entries.set(entry.id, entry);
        cursor = auditEntries.pageInfo.endCursor;
        hasMore = auditEntries.pageInfo.hasNextPage;
        loaded = true;
      } else {
        let after = null;
        for (let n = 0; n < CATCH_UP_PAGES; n += 1) {
          const { auditEntries } = await page(after);
          if (stopped) return;
          let met = false;
          for (const entry of auditEntries.nodes) {
            if (entries.has(entry.id)) met = true;
            else {
              entries.set(entry.id, entry);
              arrived.add(entry.id);
            }
          }
          if (met || !auditEntries.pageInfo.hasNextPage) break;
          after = auditEntries.pageInfo.endCursor;
        }
      }
      error.textContent = "";
      paint();
    } catch (failure) {
      if (!stopped) error.textContent = explain(failure);
    }
  }

  more.addEventListener("click", async () => {
    more.disabled = true;
    try {
      const { auditEntries } = await page(cursor);
      if (stopped) return;
      for (const entry of auditEntries.nodes) entries.set(entry.id, entry);
      cursor = auditEntries.pageInfo.endCursor;
      hasMore = auditEntries.pageInfo.hasNextPage;
      paint();
    } catch (failure) {
      error.textContent = explain(failure);
    } finally {
      more.disabled = false;
    }
  });

  const reload = throttle(300, refresh);
  reload();
  const unsubscribe = subscribeAudit({
    onEvent: (entry) => {
      if (stopped || entries.has(entry.id)) return;
      entries.set(entry.id, entry);
      arrived.add(entry.id);
      // A project made meanwhile is named once the list knows it.
      if (entry.projectId && !projects.some((project) => project.id === entry.projectId)) {
        listProjects()
          .then((seen) => {
            projects = seen;
            if (!stopped) paint();
          })
          .catch(() => {});
      }
      if (loaded) paint();
    },
    onReset: reload,
    onError: (failure) => {
      error.textContent = explain(failure);
    },
  });
  return () => {
    stopped = true;
    unsubscribe();
  };
}
