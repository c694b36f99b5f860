// Submissions: the list per endpoint, folder and search words (the inbox, the spam folder; no values:
// when and how many fields), one submission's fields (the only view with submitted values,
// each a text node, so markup in a value shows as text), its uploaded files with download
// links, its deliveries, one per destination, its spam verdict with "Not spam" / "Mark as
// spam", and the export of the filtered list as CSV or JSON.

import { downloadExport, graphql, session } from "./api.js";
import { targetLabel } from "./destinations.js";
import { h, replace, stateBadge, time } from "./dom.js";
import { explain } from "./words.js";

const PAGE_SIZE = 25;

const LIST = `query Submissions($filter: SubmissionFilter, $first: Int, $after: String) {
  submissions(filter: $filter, first: $first, after: $after) {
    edges { cursor node { id receivedAt fieldCount idempotent spam spamReasons endpoint { id name } delivery { id state } } }
    pageInfo { hasNextPage endCursor }
  }
  endpoints(first: 50) { nodes { id name } }
}`;
const ONE = `query Submission($id: ID!) {
  submission(id: $id) {
    id receivedAt fieldCount idempotent spam spamReasons spamReviewedAt
    endpoint { id name }
    deliveries { id state destinationUrl destination { id kind } }
    fields { name values }
    files { id field name size contentType sha256 downloadUrl }
  }
}`;

const NOT_SPAM = `mutation NotSpam($id: ID!) { markSubmissionNotSpam(id: $id) { queuedDeliveries } }`;
const MARK_SPAM = `mutation Spam($id: ID!) { markSubmissionSpam(id: $id) { submission { id } } }`;

const FOLDERS = [
  ["INBOX", "Inbox"],
  ["SPAM", "Spam folder"],
  ["ALL", "Both"],
];

// A download link on this page's own origin: the API's link starts with FORMS_PUBLIC_URL,
// which may name a proxy the operator's browser does not go through; its path and
// signature work on any address of the service.
function sameOriginLink(url) {
  const parsed = new URL(url, window.location.href);
  return `${parsed.pathname}${parsed.search}`;
}

function bytes(size) {
  if (size < 1024) return `${size} B`;
  if (size < 1024 * 1024) return `${(size / 1024).toFixed(1)} KiB`;
  return `${(size / (1024 * 1024)).toFixed(1)} MiB`;
}

function filesSection(files) {
  if (!files.length) return null;
  return [
    h("h2", {}, `Files (${files.length})`),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { id: "submission-files" },
        h("thead", {}, h("tr", {}, ["File", "Field", "Type", "Size", "SHA-256"].map((t) => h("th", {}, t)))),
        h(
          "tbody",
          {},
          files.map((file) =>
            h(
              "tr",
              { "data-file": file.id },
              // `download`: saved, never opened as a page of the console's origin.
              h("td", {}, h("a", { href: sameOriginLink(file.downloadUrl), download: file.name || "file" }, file.name || "(no name)")),
              h("td", { class: "mono" }, file.field),
              h("td", { class: "mono" }, file.contentType),
              h("td", { class: "num" }, bytes(file.size)),
              h("td", { class: "mono" }, file.sha256 || ""),
            ),
          ),
        ),
      ),
    ),
  ];
}

export function list(view, route, shell) {
  const endpointId = route.params.get("endpoint") || null;
  const folder = (route.params.get("folder") || "inbox").toUpperCase();
  const cursor = route.params.get("cursor");
  // Words the values hold (the API's `search`: "a phrase", -excluded, or).
  const search = route.params.get("search") || null;
  const body = h("div", { class: "loading" }, "Loading…");
  const controls = h("div", { class: "filters-row" });
  replace(view, h("h1", {}, folder === "SPAM" ? "Spam folder" : "Submissions"), controls, body);
  const status = h("p", { id: "export-status", role: "status" });

  function exportButton(format) {
    const button = h("button", { type: "button", class: "secondary", id: `export-${format}` }, `Export ${format.toUpperCase()}`);
    button.addEventListener("click", async () => {
      status.textContent = "Exporting…";
      const params = { format, folder: folder.toLowerCase() };
      if (endpointId) params.endpoint_id = endpointId;
      if (search) params.search = search;
      try {
        const bytes = await downloadExport(params, `submissions-${endpointId || "all"}.${format}`);
        status.textContent = `Exported ${format.toUpperCase()} (${bytes} bytes).`;
      } catch (error) {
        status.textContent = explain(error);
      }
    });
    return button;
  }

  graphql(LIST, { filter: { endpointId, folder, search }, first: PAGE_SIZE, after: cursor })
    .then((data) => {
      const folderSelect = h(
        "select",
        { id: "filter-folder" },
        FOLDERS.map(([value, label]) => h("option", { value, selected: value === folder ? true : null }, label)),
      );
      const select = h(
        "select",
        { id: "filter-endpoint" },
        h("option", { value: "" }, "All endpoints"),
        data.endpoints.nodes.map((e) => h("option", { value: e.id, selected: e.id === endpointId ? true : null }, `${e.name} (${e.id})`)),
      );
      // A form with a button, not navigation on `change`: arrowing through the options
      // with the keyboard must not load a page per option.
      const form = h(
        "form",
        { id: "submission-filter", class: "filters-row", role: "search" },
        h("div", { class: "field" }, h("label", { for: "filter-endpoint" }, "Endpoint"), select),
        h("div", { class: "field" }, h("label", { for: "filter-folder" }, "Folder"), folderSelect),
        h(
          "div",
          { class: "field" },
          h("label", { for: "filter-search" }, "Search"),
          h("input", { id: "filter-search", type: "search", value: search || "", maxlength: 200, placeholder: "ada \"a phrase\" -excluded", autocomplete: "off", spellcheck: "false" }),
        ),
        h("div", { class: "field actions" }, h("button", { type: "submit" }, "Show")),
      );
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        const query = new URLSearchParams();
        if (select.value) query.set("endpoint", select.value);
        if (folderSelect.value !== "INBOX") query.set("folder", folderSelect.value.toLowerCase());
        const words = form.querySelector("#filter-search").value.trim();
        if (words) query.set("search", words);
        const text = query.toString();
        shell.go(text ? `#/submissions?${text}` : "#/submissions");
      });
      replace(
        controls,
        form,
        // An export takes every submission out at once: offered to an admin key only.
        session.canChange() ? h("div", { class: "field actions" }, exportButton("csv"), exportButton("json")) : null,
        status,
      );
      const edges = data.submissions.edges;
      const kept = new URLSearchParams();
      if (endpointId) kept.set("endpoint", endpointId);
      if (folder !== "INBOX") kept.set("folder", folder.toLowerCase());
      if (search) kept.set("search", search);
      const base = kept.toString() ? `#/submissions?${kept}&` : "#/submissions?";
      replace(
        body,
        edges.length
          ? h(
              "div",
              { class: "table-wrap" },
              h(
                "table",
                { id: "submissions" },
                h("thead", {}, h("tr", {}, ["Submission", "Endpoint", "Received", "Values", "Delivery"].map((t) => h("th", {}, t)))),
                h(
                  "tbody",
                  {},
                  edges.map(({ node }) =>
                    h(
                      "tr",
                      { "data-submission": node.id },
                      h("td", { class: "mono" }, h("a", { href: `#/submissions/${encodeURIComponent(node.id)}` }, node.id)),
                      h("td", {}, node.endpoint ? node.endpoint.name : "—"),
                      h("td", {}, time(node.receivedAt)),
                      h("td", { class: "num" }, String(node.fieldCount)),
                      h(
                        "td",
                        {},
                        node.spam
                          ? h("span", { class: "state state-spam", title: node.spamReasons.join("; ") }, "spam: not delivered")
                          : node.delivery
                            ? h("a", { href: `#/deliveries/${encodeURIComponent(node.delivery.id)}` }, stateBadge(node.delivery.state))
                            : "none",
                      ),
                    ),
                  ),
                ),
              ),
            )
          : h("p", { class: "empty" }, search ? "No submission holds these words." : folder === "SPAM" ? "The spam folder is empty." : "No submissions yet."),
        h(
          "nav",
          { class: "pager", "aria-label": "Pages" },
          cursor ? h("a", { href: base.slice(0, -1) }, "← First page") : null,
          data.submissions.pageInfo.hasNextPage ? h("a", { href: `${base}cursor=${encodeURIComponent(data.submissions.pageInfo.endCursor)}`, id: "older-page" }, "Older →") : null,
        ),
      );
      body.className = "";
    })
    .catch((error) => {
      // A search the API refused: said in its words, with the way back to the list.
      const without = new URLSearchParams(route.params);
      without.delete("search");
      without.delete("cursor");
      const back = without.toString() ? `#/submissions?${without}` : "#/submissions";
      replace(
        body,
        h("p", { class: "error", role: "alert" }, explain(error)),
        search ? h("p", {}, h("a", { href: back, id: "clear-search" }, "Show the list without the search")) : null,
      );
    });
}

// The spam verdict, and for an admin key the button that changes it.
function verdict(submission, shell, reload) {
  const error = h("p", { class: "error", role: "alert" });
  let button = null;
  if (session.canChange()) {
    button = submission.spam
      ? h("button", { type: "button", id: "mark-not-spam" }, "Not spam: deliver it")
      : h("button", { type: "button", class: "secondary", id: "mark-spam" }, "Mark as spam");
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        if (submission.spam) {
          const { markSubmissionNotSpam } = await graphql(NOT_SPAM, { id: submission.id });
          const n = markSubmissionNotSpam.queuedDeliveries;
          shell.flash(`Moved to the inbox: ${n} ${n === 1 ? "delivery" : "deliveries"} queued.`, "ok");
        } else {
          await graphql(MARK_SPAM, { id: submission.id });
          shell.flash("Marked as spam. What was delivered stays delivered.", "ok");
        }
        reload();
      } catch (failure) {
        error.textContent = explain(failure);
        button.disabled = false;
      }
    });
  }
  const reasons = submission.spamReasons.length ? ` (${submission.spamReasons.join("; ")})` : "";
  const text = submission.spam
    ? `in the spam folder, not delivered${reasons}`
    : submission.spamReasons.length
      ? `not spam${submission.spamReviewedAt ? `, so marked ${time(submission.spamReviewedAt)}` : ""}; it was judged spam${reasons}`
      : "accepted";
  return h("div", { id: "spam-verdict", "data-spam": String(submission.spam) }, h("span", {}, text), button ? " " : null, button, error);
}

export function detail(view, route, shell) {
  const id = route.id;
  const body = h("div", { class: "loading" }, "Loading…");
  replace(view, h("p", {}, h("a", { href: "#/submissions" }, "← Submissions")), h("h1", { class: "mono" }, id), body);
  const reload = () => detail(view, route, shell);
  graphql(ONE, { id })
    .then(({ submission }) => {
      if (!submission) {
        replace(body, h("p", { class: "error" }, "No submission has this id (it may have been erased)."));
        return;
      }
      replace(
        body,
        h(
          "dl",
          { class: "facts" },
          h("dt", {}, "Endpoint"),
          h("dd", {}, submission.endpoint ? h("a", { href: `#/endpoints/${encodeURIComponent(submission.endpoint.id)}` }, submission.endpoint.name) : "—"),
          h("dt", {}, "Received"),
          h("dd", {}, time(submission.receivedAt)),
          h("dt", {}, "Idempotency key"),
          h("dd", {}, submission.idempotent ? "sent (not shown)" : "none"),
          h("dt", {}, "Spam"),
          h("dd", {}, verdict(submission, shell, reload)),
          h("dt", {}, "Deliveries"),
          h(
            "dd",
            {},
            submission.deliveries.length
              ? h(
                  "ul",
                  { class: "plain", id: "submission-deliveries" },
                  submission.deliveries.map((delivery) =>
                    h(
                      "li",
                      { "data-delivery": delivery.id },
                      h("a", { href: `#/deliveries/${encodeURIComponent(delivery.id)}` }, stateBadge(delivery.state)),
                      " ",
                      targetLabel(delivery),
                    ),
                  ),
                )
              : "none",
          ),
        ),
        h("h2", {}, `Fields (${submission.fieldCount} values)`),
        h(
          "dl",
          { class: "fields", id: "fields" },
          submission.fields.map((field) => [
            h("dt", { class: "mono" }, field.name),
            h("dd", {}, field.values.map((value) => h("div", { class: "value" }, value))),
          ]),
        ),
        filesSection(submission.files),
      );
      body.className = "";
    })
    .catch((error) => replace(body, h("p", { class: "error", role: "alert" }, explain(error))));
}
