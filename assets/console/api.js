// The console's whole contact with the server: GraphQL over HTTP (`/graphql`), the
// submissions export (`/submissions/export`), and the key they carry. A dashboard of
// your own needs nothing else. The key lives in this tab's sessionStorage only: never in
// a URL, never in localStorage, gone when the tab or browser closes. So does the project
// the header's switcher narrowed the view to, sent as `Hymical-Project` on every request.

import { saveFile } from "./dom.js";
import { ApiError, fromGraphqlErrors, fromRestError, isKeyRefused } from "./words.js";

const STORAGE = "hymical-console-key";
// The key's role (`ADMIN` or `READ`), as the server said at sign-in. It only decides what
// the console offers: the server refuses a read key's mutations and exports whatever the
// page shows.
const ROLE = "hymical-console-role";
// The key's own project as the server said at sign-in: "" for a key of every project.
const KEY_PROJECT = "hymical-console-key-project";
// The one project a key of every project is narrowed to (the switcher); none: all.
const PROJECT = "hymical-console-project";
// The header (and `connection_init` member) naming it.
export const PROJECT_HEADER = "Hymical-Project";
let onKeyRefused = () => {};

export const session = {
  key: () => sessionStorage.getItem(STORAGE),
  role: () => sessionStorage.getItem(ROLE),
  // Whether the key may change things (mutations, exports): only an admin key may.
  canChange: () => sessionStorage.getItem(ROLE) === "ADMIN",
  // The key's own project; null for a key of every project (and before it is known).
  keyProject: () => sessionStorage.getItem(KEY_PROJECT) || null,
  // Whether the key's role and project scope are known (a tab signed in by an older
  // console knows neither of the second).
  described: () => sessionStorage.getItem(ROLE) !== null && sessionStorage.getItem(KEY_PROJECT) !== null,
  // Whether the key sees every project, and may so narrow its view to one.
  everyProject: () => sessionStorage.getItem(KEY_PROJECT) === "",
  // The project the switcher narrowed the view to; null: every project the key sees.
  project: () => sessionStorage.getItem(PROJECT),
  setProject: (id) => {
    if (id) sessionStorage.setItem(PROJECT, id);
    else sessionStorage.removeItem(PROJECT);
  },
  signIn: (key, role, projectId) => {
    sessionStorage.setItem(STORAGE, key);
    sessionStorage.setItem(ROLE, role);
    sessionStorage.setItem(KEY_PROJECT, projectId || "");
  },
  signOut: () => {
    for (const name of [STORAGE, ROLE, KEY_PROJECT, PROJECT]) sessionStorage.removeItem(name);
  },
  // Called with the error when the server refuses the key (revoked, say).
  whenRefused: (handler) => (onKeyRefused = handler),
};

// Only the signed-in key's refusal signs out; a key being tried at sign-in is just wrong.
function refused(error, key = session.key()) {
  if (isKeyRefused(error) && key && key === session.key()) onKeyRefused(error);
  return error;
}

// The headers every request carries: the key and, when the view is narrowed to one
// project, that project.
function authorization(key, project) {
  const headers = { Authorization: `Bearer ${key}` };
  if (project) headers[PROJECT_HEADER] = project;
  return headers;
}

// Runs one GraphQL operation; resolves to `data`, rejects with an ApiError in words.
// `project: null` asks about every project the key sees, whatever the switcher says (the
// switcher's own list of projects, say).
export async function graphql(query, variables = {}, key = session.key(), { project = session.project() } = {}) {
  let response;
  try {
    response = await fetch("/graphql", {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        Accept: "application/graphql-response+json, application/json",
        ...authorization(key, project),
      },
      body: JSON.stringify({ query, variables }),
      cache: "no-store",
      credentials: "omit",
    });
  } catch (error) {
    throw error instanceof TypeError ? error : new TypeError(String(error));
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    throw refused(new ApiError(`HTTP_${response.status}`, `The server answered ${response.status}.`), key);
  }
  if (body.errors && body.errors.length) throw refused(fromGraphqlErrors(body.errors), key);
  if (!response.ok || !body.data) throw refused(fromRestError(response.status, body), key);
  return body.data;
}

// Downloads the export of `params` (endpoint_id, format, bounds) as a file named `name`.
export async function downloadExport(params, name) {
  const query = new URLSearchParams(params).toString();
  const response = await fetch(`/submissions/export?${query}`, {
    headers: authorization(session.key(), session.project()),
    cache: "no-store",
    credentials: "omit",
  });
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      // Not JSON: the status says it.
    }
    throw refused(fromRestError(response.status, body));
  }
  const blob = await response.blob();
  saveFile(blob, name);
  return blob.size;
}
