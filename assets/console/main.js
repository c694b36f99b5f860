// The console's shell: sign-in, the navigation, the project switcher, the live-connection
// status, and the router that renders one view at a time from the URL's fragment
// (`#/deliveries?state=FAILED`). Views are modules with `render(container, route, shell)`
// returning their cleanup.

import { graphql, session } from "./api.js";
import { h, replace } from "./dom.js";
import { endAll, onStatus, whenKeyRefused } from "./live.js";
import { explain } from "./words.js";
import * as overview from "./overview.js";
import * as endpoints from "./endpoints.js";
import * as deliveries from "./deliveries.js";
import * as submissions from "./submissions.js";
import * as people from "./people.js";
import * as keys from "./keys.js";
import * as audit from "./audit.js";
import { switcher } from "./projects.js";

const root = document.getElementById("app");
// The key being signed in with: its role decides which actions the console offers, its
// project whether the header offers a choice of projects. Asked about every project.
const WHO = "query Who { apiKey { name role projectId } }";
const whoIs = (key) => graphql(WHO, {}, key, { project: null });
let cleanup = () => {};

const ROUTES = [
  [/^$|^overview$/, overview.render],
  [/^endpoints$/, endpoints.list],
  [/^endpoints\/new$/, endpoints.create],
  [/^endpoints\/([^/]+)$/, endpoints.detail],
  [/^deliveries$/, deliveries.list],
  [/^deliveries\/([^/]+)$/, deliveries.detail],
  [/^submissions$/, submissions.list],
  [/^submissions\/([^/]+)$/, submissions.detail],
  [/^people$/, people.render],
  [/^keys$/, keys.render],
  [/^audit$/, audit.render],
];

const NAV = [
  ["overview", "Overview"],
  ["endpoints", "Endpoints"],
  ["deliveries", "Deliveries"],
  ["submissions", "Submissions"],
  ["people", "A person's data"],
  // Admin keys only: a read key manages no key and reads no audit trail.
  ["keys", "Keys", true],
  ["audit", "Audit trail", true],
];

// The path stays encoded: an id is decoded once, where it is matched.
function parseRoute() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = hash.split("?");
  return { path, params: new URLSearchParams(query) };
}

function decodeId(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

// What an action did ("Saved.", "3 deliveries replayed."), above the view until the next
// navigation.
function flash(message, kind = "info") {
  const area = document.getElementById("flash");
  if (!area) return;
  replace(area, message ? h("p", { class: `flash flash-${kind}` }, message) : null);
}

// A flash to show on the page a navigation leads to (the next render replaces the area).
let carried = null;

const shell = {
  go: (hash, message = null, kind = "ok") => {
    carried = message ? [message, kind] : null;
    if (location.hash === hash) render();
    else location.hash = hash;
  },
  flash,
};

function signInPage(message) {
  cleanup();
  cleanup = () => {};
  const error = h("p", { id: "sign-in-error", class: "error", role: "alert" }, message || "");
  const input = h("input", {
    id: "key",
    name: "key",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "hym_live_…",
    required: true,
    "aria-describedby": "key-hint sign-in-error",
  });
  const button = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    { id: "sign-in", class: "sign-in card" },
    h("h1", {}, "Hymical Forms"),
    h("label", { for: "key" }, "Management key"),
    input,
    h(
      "p",
      { id: "key-hint", class: "hint" },
      "The key `serve` printed when it first started, or one from `hymical-forms keys create`. ",
      "It stays in this tab only and is forgotten when the tab closes.",
    ),
    button,
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    button.disabled = true;
    error.textContent = "";
    try {
      const { apiKey } = await whoIs(key);
      session.signIn(key, apiKey.role, apiKey.projectId);
      render();
    } catch (failure) {
      error.textContent = explain(failure);
      input.focus();
    } finally {
      button.disabled = false;
    }
  });
  replace(root, h("main", { class: "signed-out" }, form));
  input.focus();
}

function signOut(message) {
  session.signOut();
  endAll();
  signInPage(message);
}

function header(active) {
  const status = h("span", { id: "live-status", class: "live-status", role: "status" }, "");
  const unlisten = onStatus((value) => {
    status.dataset.status = value;
    status.textContent = { connecting: "Connecting…", live: "Live", reconnecting: "Reconnecting…", off: "" }[value] || "";
  });
  const nav = h(
    "nav",
    { "aria-label": "Sections" },
    NAV.filter(([, , admin]) => !admin || session.canChange()).map(([path, label]) =>
      h("a", { href: `#/${path}`, class: active === path ? "active" : null, "aria-current": active === path ? "page" : null }, label),
    ),
  );
  const signOutButton = h("button", { type: "button", class: "secondary", id: "sign-out" }, "Sign out");
  const role = session.canChange()
    ? null
    : h("span", { id: "key-role", class: "key-role", title: "This key can read everything and change nothing." }, "Read-only key");
  signOutButton.addEventListener("click", () => signOut(""));
  const projects = switcher({ switched, gone: projectGone });
  return {
    node: h("header", { class: "top" }, h("a", { href: "#/overview", class: "brand" }, "Hymical Forms"), nav, projects, status, role, signOutButton),
    unlisten,
  };
}

// Another project chosen (api.js keeps it): the live connection, opened with the old
// one, ends, and the page is drawn again for the new one (its subscriptions open a new
// connection).
function switched(label) {
  endAll();
  carried = [`Showing ${label}.`, "ok"];
  render();
  const select = document.getElementById("project-select");
  if (select) select.focus();
}

// The project chosen earlier is gone (deleted): back to every project.
function projectGone() {
  session.setProject(null);
  endAll();
  carried = ["The project chosen before is no longer there; showing all projects.", "info"];
  render();
}

function render() {
  if (!session.key()) {
    signInPage("");
    return;
  }
  // A tab signed in before roles (or projects) were read asks once.
  if (!session.described()) {
    whoIs(session.key())
      .then(({ apiKey }) => {
        session.signIn(session.key(), apiKey.role, apiKey.projectId);
        render();
      })
      .catch((error) => signInPage(explain(error)));
    return;
  }
  cleanup();
  const route = parseRoute();
  const section = route.path.split("/")[0] || "overview";
  const top = header(section);
  const view = h("main", { id: "view", tabindex: "-1" });
  replace(root, top.node, h("div", { id: "flash", "aria-live": "polite" }), view);
  if (carried) {
    flash(...carried);
    carried = null;
  }
  let viewCleanup = () => {};
  const match = ROUTES.map(([pattern, handler]) => [route.path.match(pattern), handler]).find(([m]) => m);
  if (match) {
    const [found, handler] = match;
    try {
      viewCleanup = handler(view, { ...route, id: found[1] && decodeId(found[1]) }, shell) || (() => {});
    } catch (error) {
      replace(view, h("p", { class: "error" }, explain(error)));
    }
  } else {
    replace(view, h("h1", {}, "Not found"), h("p", {}, "No page has this address. "), h("a", { href: "#/overview" }, "Go to the overview"));
  }
  cleanup = () => {
    viewCleanup();
    top.unlisten();
  };
}

// A key the server stops accepting (revoked while the console is open) signs it out,
// whether an HTTP request or the live connection noticed first.
const refused = () => signOut("Your key is no longer accepted (it may have been revoked). Sign in with another key.");
session.whenRefused(refused);
// The socket is refused the same way when the project it was narrowed to is gone: with
// a project chosen, the key is asked about once more, over HTTP and for every project.
whenKeyRefused(async () => {
  if (session.project()) {
    try {
      await whoIs(session.key());
      projectGone();
      return;
    } catch {
      // Refused (api.js has signed out already) or unreachable.
    }
  }
  if (session.key()) refused();
});

// After a navigation the focus goes to the new view, not back to the top of the page.
window.addEventListener("hashchange", () => {
  render();
  const view = document.getElementById("view");
  if (view && !view.contains(document.activeElement)) view.focus();
});
render();
