// One person's data (`#/people`): every submission holding a value whole (an email
// address, say), in any folder of any endpoint, with their files and delivery history;
// downloaded as one JSON file (the answer to a request for a person's data), and, to an
// admin key, erased in one operation after a confirmation. The value stays out of the
// page's address: it is personal data, and addresses end up in browser history.

import { graphql, session } from "./api.js";
import { confirmation, h, replace, saveFile, time } from "./dom.js";
import { explain } from "./words.js";

const PERSON = `query PersonData($value: String!) {
  personData(value: $value) {
    id receivedAt spam endpoint { id name }
    fields { name values }
    files { id field name size contentType downloadUrl }
    deliveries { id state destinationUrl createdAt completedAt
      attemptHistory { number attemptedAt outcome httpStatus smtpReplyCode error } }
  }
}`;

const ERASE = `mutation ErasePersonData($value: String!) { erasePersonData(value: $value) { erasedSubmissionIds } }`;

export function render(view, route, shell) {
  const input = h("input", { id: "person-value", type: "search", maxlength: 200, autocomplete: "off", spellcheck: "false", placeholder: "ada@example.com" });
  const form = h(
    "form",
    { id: "person-form", class: "filters-row", role: "search" },
    h("div", { class: "field" }, h("label", { for: "person-value" }, "A value the person's submissions hold"), input),
    h("div", { class: "field actions" }, h("button", { type: "submit" }, "Find")),
  );
  const result = h("div", { id: "person-result" });
  replace(
    view,
    h("h1", {}, "A person's data"),
    h("p", { class: "hint" }, "Every submission, in any folder of any endpoint, with a field holding this value whole (letter case aside): to answer a person who asks what is held about them, or to erase it."),
    form,
    result,
  );

  async function find(value) {
    replace(result, h("p", { class: "loading" }, "Looking…"));
    try {
      const { personData } = await graphql(PERSON, { value });
      show(value, personData);
    } catch (failure) {
      replace(result, h("p", { class: "error", role: "alert" }, explain(failure)));
    }
  }

  function show(value, submissions) {
    if (!submissions.length) {
      replace(result, h("p", { class: "empty", id: "person-none" }, "No submission holds this value."));
      return;
    }
    const download = h("button", { type: "button", class: "secondary", id: "person-download" }, "Download JSON");
    download.addEventListener("click", () => {
      const file = { value, exportedAt: new Date().toISOString(), submissions };
      saveFile(new Blob([JSON.stringify(file, null, 2)], { type: "application/json" }), "person-data.json");
    });
    const actions = h("div", { class: "actions" }, download);
    if (session.canChange()) {
      const erase = h("button", { type: "button", class: "danger", id: "person-erase" }, "Erase all…");
      erase.addEventListener("click", () => {
        confirmation({
          anchor: actions,
          trigger: erase,
          label: "Erase this person's data",
          text: `Erase these ${submissions.length} submissions, their files and what their deliveries recorded of the answers. Their delivery history stays, without them. This cannot be undone.`,
          confirmLabel: "Erase",
          confirmId: "confirm-person-erase",
          confirmed: async () => {
            const { erasePersonData } = await graphql(ERASE, { value });
            const n = erasePersonData.erasedSubmissionIds.length;
            shell.flash(`Erased ${n} ${n === 1 ? "submission" : "submissions"}.`, "ok");
            replace(result, h("p", { class: "empty", id: "person-erased" }, "Nothing of this value is held any more."));
          },
          failed: (failure) => replace(result, h("p", { class: "error", role: "alert" }, explain(failure))),
        });
      });
      actions.append(" ", erase);
    }
    replace(
      result,
      h("p", { id: "person-count" }, `${submissions.length} ${submissions.length === 1 ? "submission holds" : "submissions hold"} this value.`),
      actions,
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { id: "person-submissions" },
          h("thead", {}, h("tr", {}, ["Submission", "Endpoint", "Received", "Files", "Deliveries"].map((t) => h("th", {}, t)))),
          h(
            "tbody",
            {},
            submissions.map((s) =>
              h(
                "tr",
                { "data-submission": s.id },
                h("td", { class: "mono" }, h("a", { href: `#/submissions/${encodeURIComponent(s.id)}` }, s.id), s.spam ? " (spam)" : ""),
                h("td", {}, s.endpoint ? s.endpoint.name : "—"),
                h("td", {}, time(s.receivedAt)),
                h("td", { class: "num" }, String(s.files.length)),
                h("td", { class: "num" }, String(s.deliveries.length)),
              ),
            ),
          ),
        ),
      ),
    );
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (value) find(value);
  });
  input.focus();
  return () => {};
}
