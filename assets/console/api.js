// The console's whole contact with the server: GraphQL over HTTP (`/graphql`), the
// submissions export (`/submissions/export`), and the key they carry. A dashboard of
// your own needs nothing else. The key lives in this tab's sessionStorage only: never in
// a URL, never in localStorage, gone when the tab or browser closes.

import { saveFile } from "./dom.js";
import { ApiError, fromGraphqlErrors, fromRestError, isKeyRefused } from "./words.js";

const STORAGE = "hymical-console-key";
// The key's role (`ADMIN` or `READ`), as the server said at sign-in. It only decides what
// the console offers: the server refuses a read key's mutations and exports whatever the
// page shows.
const ROLE = "hymical-console-role";
let onKeyRefused = () => {};

export const session = {
  key: () => sessionStorage.getItem(STORAGE),
  role: () => sessionStorage.getItem(ROLE),
  // Whether the key may change things (mutations, exports): only an admin key may.
  canChange: () => sessionStorage.getItem(ROLE) === "ADMIN",
  signIn: (key, role) => {
    sessionStorage.setItem(STORAGE, key);
    sessionStorage.setItem(ROLE, role);
  },
  signOut: () => {
    sessionStorage.removeItem(STORAGE);
    sessionStorage.removeItem(ROLE);
  },
  // Called with the error when the server refuses the key (revoked, say).
  whenRefused: (handler) => (onKeyRefused = handler),
};

// Only the signed-in key's refusal signs out; a key being tried at sign-in is just wrong.
function refused(error, key = session.key()) {
  if (isKeyRefused(error) && key && key === session.key()) onKeyRefused(error);
  return error;
}

// Runs one GraphQL operation; resolves to `data`, rejects with an ApiError in words.
export async function graphql(query, variables = {}, key = session.key()) {
  let response;
  try {
    response = await fetch("/graphql", {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        Accept: "application/graphql-response+json, application/json",
        Authorization: `Bearer ${key}`,
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
    headers: { Authorization: `Bearer ${session.key()}` },
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
