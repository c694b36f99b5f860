// Management keys (`#/keys`, admin keys only): every key this key manages, revoked and
// expired ones too, with its role, project, prefix, times and state; making one, renaming
// one, changing its expiry and revoking one. A new key is shown once, in this page's one
// display, until "I have copied it" or the next navigation: never in the address, never
// in any storage, never in a flash message, and the API never answers it again.

import { graphql, session } from "./api.js";
import { confirmation, copyButton, h, replace, time, toIso, toLocal } from "./dom.js";
import { listProjects, projectLabel } from "./projects.js";
import { explain } from "./words.js";

const KEY_FIELDS = "id name role projectId displayPrefix createdAt expiresAt revokedAt lastUsedAt";
const LIST = `query Keys { apiKey { id } apiKeys { ${KEY_FIELDS} } }`;
const CREATE = `mutation CreateKey($input: CreateApiKeyInput!) { createApiKey(input: $input) { key apiKey { ${KEY_FIELDS} } } }`;
const UPDATE = `mutation UpdateKey($input: UpdateApiKeyInput!) { updateApiKey(input: $input) { ${KEY_FIELDS} } }`;
const REVOKE = `mutation RevokeKey($id: ID!) { revokeApiKey(id: $id) { ${KEY_FIELDS} } }`;

const ROLES = { ADMIN: "Admin: everything", READ: "Read: queries and live updates only" };

// "active", "expired" or "revoked", as the server will treat the key's next request.
function keyState(key, now = Date.now()) {
  if (key.revokedAt) return "revoked";
  if (key.expiresAt && new Date(key.expiresAt).getTime() <= now) return "expired";
  return "active";
}

function field(id, label, input, hint = null) {
  return h("div", { class: "field" }, h("label", { for: id }, label), input, hint ? h("p", { class: "hint" }, hint) : null);
}

export function render(view, _route, shell) {
  if (!session.canChange()) {
    replace(
      view,
      h("h1", {}, "Keys"),
      h("p", { class: "hint read-only" }, "This key is read-only: it cannot see or manage keys. Sign in with an admin key to do so."),
    );
    return () => {};
  }
  let stopped = false;
  let projects = [];
  let signedInWith = null;
  // The one place a new key is ever shown.
  const fresh = h("div", { id: "new-key-area" });
  const actionError = h("p", { class: "error", role: "alert", id: "key-action-error" });
  const list = h("div", { class: "loading" }, "Loading…");
  const formArea = h("section", {});
  const narrowed = session.project();
  replace(
    view,
    h("h1", {}, "Keys"),
    h(
      "p",
      { class: "hint" },
      "Management keys for the API and this console. A key is shown once, when made; the server keeps only its digest. ",
      narrowed ? "Only the keys of the project chosen in the header are listed: choose All projects there to see every key." : "",
    ),
    fresh,
    actionError,
    list,
    formArea,
  );
  // A refusal is said above the list, which is read again: what was refused may be
  // about a key changed meanwhile.
  const failed = (failure) => {
    actionError.textContent = explain(failure);
    load();
  };

  async function load() {
    try {
      const [data, seen] = await Promise.all([graphql(LIST), listProjects()]);
      if (stopped) return;
      projects = seen;
      signedInWith = data.apiKey.id;
      showList(data.apiKeys);
      if (!formArea.firstChild) formArea.append(createForm());
    } catch (failure) {
      if (!stopped) replace(list, h("p", { class: "error", role: "alert" }, explain(failure)));
    }
  }

  function showList(keys) {
    list.className = "";
    if (!keys.length) {
      replace(list, h("p", { class: "empty", id: "keys-none" }, "No keys here."));
      return;
    }
    replace(
      list,
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { id: "keys" },
          h(
            "thead",
            {},
            h("tr", {}, ["Name", "Role", "Project", "Prefix", "Created", "Last used", "Expires", "State", ""].map((t) => h("th", {}, t))),
          ),
          h("tbody", {}, keys.map(row)),
        ),
      ),
    );
  }

  function row(key) {
    const state = keyState(key);
    const actions = h("div", { class: "row-actions" });
    if (state !== "revoked") {
      const button = (kind, label) => {
        const b = h("button", { type: "button", class: `secondary ${kind}-key` }, label);
        b.addEventListener("click", () => ask[kind](key, b, actions));
        return b;
      };
      actions.append(button("rename", "Rename…"), " ", button("expiry", "Expiry…"), " ", button("revoke", "Revoke…"));
    }
    return h(
      "tr",
      { "data-key": key.id, "data-state": state },
      h("td", { class: "key-name" }, key.name, key.id === signedInWith ? h("span", { class: "tag" }, "this console's key") : null),
      h("td", {}, key.role === "ADMIN" ? "admin" : "read"),
      h("td", { class: "key-project" }, projectLabel(key.projectId, projects)),
      h("td", { class: "mono" }, `${key.displayPrefix}…`),
      h("td", {}, time(key.createdAt)),
      h("td", {}, key.lastUsedAt ? time(key.lastUsedAt) : "never"),
      h("td", { class: "key-expires" }, key.expiresAt ? time(key.expiresAt) : "never"),
      h("td", {}, h("span", { class: `key-state key-state-${state}`, "data-state": state }, state)),
      h("td", {}, actions),
    );
  }

  // Enter in a box's field confirms it, as in a form.
  const confirmOnEnter = (input, confirm) =>
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        confirm.click();
      }
    });

  const ask = {
    rename(key, trigger, anchor) {
      actionError.textContent = "";
      const input = h("input", { id: "rename-key-name", maxlength: 200, autocomplete: "off", value: key.name });
      const confirm = confirmation({
        anchor,
        trigger,
        label: "Rename the key",
        text: `A new name for the key ${key.displayPrefix}…: who or what holds it.`,
        extra: [h("div", { class: "field" }, h("label", { for: "rename-key-name" }, "Name"), input)],
        confirmLabel: "Rename",
        confirmId: "confirm-rename-key",
        confirmed: async () => {
          const { updateApiKey } = await graphql(UPDATE, { input: { id: key.id, name: input.value.trim() } });
          shell.flash(`The key ${updateApiKey.displayPrefix}… is now called “${updateApiKey.name}”.`, "ok");
          await load();
        },
        failed,
      });
      confirm.className = "";
      confirmOnEnter(input, confirm);
      input.focus();
      input.select();
    },
    expiry(key, trigger, anchor) {
      actionError.textContent = "";
      const at = h("input", { id: "expiry-key-at", type: "datetime-local", value: toLocal(key.expiresAt) });
      const never = h("input", { id: "expiry-key-never", type: "checkbox", checked: !key.expiresAt });
      at.addEventListener("input", () => {
        never.checked = !at.value;
      });
      const confirm = confirmation({
        anchor,
        trigger,
        label: "Change the key's expiry",
        text: `When the key “${key.name}” stops working (in your browser's time zone). From then on it is refused as an unknown key is.`,
        extra: [
          h("div", { class: "field" }, h("label", { for: "expiry-key-at" }, "Expires at"), at),
          h("label", { class: "choice" }, never, " Never expires"),
        ],
        confirmLabel: "Save expiry",
        confirmId: "confirm-expiry-key",
        confirmed: async () => {
          const expiresAt = never.checked ? null : toIso(at.value);
          if (!never.checked && !expiresAt) throw new Error("Choose when the key expires, or tick “Never expires”.");
          const { updateApiKey } = await graphql(UPDATE, { input: { id: key.id, expiresAt } });
          shell.flash(updateApiKey.expiresAt ? `“${updateApiKey.name}” expires ${time(updateApiKey.expiresAt)}.` : `“${updateApiKey.name}” never expires.`, "ok");
          await load();
        },
        failed,
      });
      confirm.className = "";
      confirmOnEnter(at, confirm);
      at.focus();
    },
    revoke(key, trigger, anchor) {
      actionError.textContent = "";
      const own = key.id === signedInWith;
      confirmation({
        anchor,
        trigger,
        label: "Revoke the key",
        text:
          `Revoke “${key.name}” (${key.displayPrefix}…): every request made with it is refused from now on, in every process, ` +
          "and its live connections close within a second. This cannot be undone." +
          (own ? " It is the key this console is signed in with: the console signs out." : ""),
        confirmLabel: "Revoke",
        confirmId: "confirm-revoke-key",
        confirmed: async () => {
          const { revokeApiKey } = await graphql(REVOKE, { id: key.id });
          shell.flash(`“${revokeApiKey.name}” is revoked.`, "ok");
          await load();
        },
        failed,
      });
    },
  };

  function projectChoice() {
    const own = session.keyProject();
    // A project's key makes keys of its project only; a view narrowed to one project
    // lists that project's keys only, so it makes those too.
    const only = own || narrowed;
    const select = h(
      "select",
      { id: "new-key-project", name: "project" },
      only
        ? h("option", { value: only }, projectLabel(only, projects))
        : [h("option", { value: "" }, "All projects"), projects.map((project) => h("option", { value: project.id }, project.name))],
    );
    const hint = own
      ? "A key of this console's project."
      : narrowed
        ? "Choose All projects in the header to make a key of another project or of every project."
        : "All projects: a key that sees every project (and, as an admin key, manages projects and every key).";
    return field("new-key-project", "Project", select, hint);
  }

  function createForm() {
    const error = h("p", { class: "error", role: "alert", id: "new-key-error" });
    const name = h("input", { id: "new-key-name", name: "name", required: true, maxlength: 200, autocomplete: "off", spellcheck: "false" });
    const role = h(
      "select",
      { id: "new-key-role", name: "role" },
      Object.entries(ROLES).map(([value, label]) => h("option", { value }, label)),
    );
    const expires = h("input", { id: "new-key-expires", name: "expires", type: "datetime-local" });
    const form = h(
      "form",
      { id: "new-key-form", class: "card form" },
      h("h2", {}, "New key"),
      field("new-key-name", "Name", name, "Who or what holds it: 1 to 200 characters."),
      field("new-key-role", "Role", role),
      projectChoice(),
      field("new-key-expires", "Expires", expires, "Optional, in your browser's time zone; left empty, it never expires."),
      h("div", { class: "actions" }, h("button", { type: "submit" }, "Create key")),
      error,
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      error.textContent = "";
      const input = {
        name: name.value.trim(),
        role: role.value,
        projectId: form.elements.project.value || null,
        expiresAt: toIso(expires.value),
      };
      try {
        const { createApiKey } = await graphql(CREATE, { input });
        if (stopped) return;
        showOnce(createApiKey.key, createApiKey.apiKey);
        form.reset();
        await load();
      } catch (failure) {
        error.textContent = explain(failure);
      }
    });
    return form;
  }

  // The key, once: a copy button, and a button that takes it off the page.
  function showOnce(key, described) {
    const code = h("code", { id: "new-key-value" });
    code.textContent = key;
    const done = h("button", { type: "button", id: "new-key-done" }, "I have copied it");
    done.addEventListener("click", () => {
      replace(fresh);
      const name = document.getElementById("new-key-name");
      if (name) name.focus();
    });
    replace(
      fresh,
      h(
        "div",
        { class: "secret card", id: "new-key", role: "status" },
        h("h2", {}, `Key “${described.name}” created`),
        h(
          "p",
          {},
          `A ${described.role === "ADMIN" ? "admin" : "read"} key of ${described.projectId ? projectLabel(described.projectId, projects) : "every project"}. `,
          h("strong", {}, "Copy it now: it will not be shown again."),
          " The server keeps only its digest, so a lost key cannot be recovered, only revoked and replaced. It is sent as ",
          h("code", {}, "Authorization: Bearer …"),
          ".",
        ),
        h("pre", {}, code),
        h("div", { class: "actions" }, copyButton("Copy key", () => key), done),
      ),
    );
    done.focus();
  }

  load();
  return () => {
    stopped = true;
  };
}
