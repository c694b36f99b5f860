// A destination's receiver settings, edited: a webhook's URL, format, ordering, headers,
// authentication, Ed25519 signing, retry schedule, body template and TLS client
// certificate; an email destination's own subject and text. One `updateDestination`
// saves the whole form, so a refused value (the API names it) changes nothing.
//
// Secrets are write-only here as in the API: a secret header, a password, a token, a
// client secret or a private key is typed in to set it and never filled back in. A secret
// header left empty keeps its value; authentication and certificates offer "keep" for
// what is set, so saving other changes never needs them typed again.

import { graphql } from "./api.js";
import { h } from "./dom.js";
import { explain } from "./words.js";

const UPDATE = `mutation UpdateDestination($input: UpdateDestinationInput!) {
  updateDestination(input: $input) { destination { id url } webhookSecret }
}`;

// The API's limit, so the form stops offering rows where the API would refuse them.
const MAX_HEADERS = 20;

const FORMATS = { STANDARD: "Standard", SLACK: "Slack", DISCORD: "Discord", TEAMS: "Teams", MATTERMOST: "Mattermost", GOOGLE_CHAT: "Google Chat" };
const AUTH_CHOICES = { NONE: "None", BASIC: "Basic", BEARER: "Bearer token", OAUTH2: "OAuth2 client credentials" };

const field = (id, label, input, hint) =>
  h("div", { class: "field" }, h("label", { for: id }, label), input, hint ? h("p", { class: "hint" }, hint) : null);

const checkbox = (id, label, checked) =>
  h("div", { class: "field checkbox" }, h("input", { id, type: "checkbox", checked }), h("label", { for: id }, label));

const text = (id, value, extra = {}) => h("input", { id, value: value ?? "", autocomplete: "off", spellcheck: "false", ...extra });

const area = (id, value, extra = {}) => {
  const node = h("textarea", { id, rows: 6, class: "mono", spellcheck: "false", ...extra });
  node.value = value ?? "";
  return node;
};

// A select of `choices` ({value: label}), `keep` first when something is set now.
function choice(id, choices, selected) {
  return h("select", { id }, Object.entries(choices).map(([value, label]) => h("option", { value, selected: value === selected }, label)));
}

// Parts of the form shown only for one value of a select.
function showFor(select, parts) {
  const update = () => {
    for (const [value, part] of Object.entries(parts)) part.hidden = select.value !== value;
  };
  select.addEventListener("change", update);
  update();
}

// The header rows: name, value, secret. A secret one's value is never filled in; left
// empty it is sent without a value, which keeps the one stored under that name.
function headersEditor(headers) {
  const rows = h("div", { class: "header-rows" });
  const add = h("button", { type: "button", class: "secondary", id: "add-header" }, "Add a header");
  const row = (header = { name: "", value: "", secret: false }) => {
    const remove = h("button", { type: "button", class: "secondary", "aria-label": "Remove this header" }, "Remove");
    const node = h(
      "div",
      { class: "header-row", "data-header-row": "" },
      h("input", { "aria-label": "Header name", "data-header": "name", value: header.name, autocomplete: "off", spellcheck: "false", placeholder: "X-Api-Key" }),
      h("input", {
        "aria-label": "Header value",
        "data-header": "value",
        value: header.secret ? "" : header.value,
        autocomplete: "off",
        spellcheck: "false",
        placeholder: header.secret && header.name ? "set; left empty it is kept" : "value",
      }),
      h("label", { class: "choice" }, h("input", { type: "checkbox", "data-header": "secret", checked: header.secret }), " secret"),
      remove,
    );
    remove.addEventListener("click", () => {
      node.remove();
      add.disabled = false;
    });
    rows.append(node);
    add.disabled = rows.children.length >= MAX_HEADERS;
  };
  headers.forEach(row);
  add.addEventListener("click", () => row());
  const read = () =>
    [...rows.querySelectorAll("[data-header-row]")]
      .map((node) => ({
        name: node.querySelector("[data-header='name']").value.trim(),
        value: node.querySelector("[data-header='value']").value,
        secret: node.querySelector("[data-header='secret']").checked,
      }))
      .filter((header) => header.name !== "" || header.value !== "")
      .map((header) => (header.secret && header.value === "" ? { name: header.name, secret: true } : header));
  const node = h(
    "fieldset",
    { id: "settings-headers" },
    h("legend", {}, "Headers"),
    h("p", { class: "hint" }, `Up to ${MAX_HEADERS}, sent with every request to this URL. A secret value is never shown again.`),
    rows,
    add,
  );
  return { node, read };
}

// Authentication: keep what is set (never shown), none, or a new one of a kind.
function authEditor(auth) {
  const choices = auth ? { KEEP: `Keep: ${AUTH_CHOICES[auth.kind] || auth.kind}`, ...AUTH_CHOICES } : AUTH_CHOICES;
  const select = choice("settings-auth", choices, auth ? "KEEP" : "NONE");
  const oauth = auth && auth.kind === "OAUTH2" ? auth : {};
  const basic = h(
    "div",
    { class: "subfields" },
    field("settings-basic-username", "Username", text("settings-basic-username", auth && auth.username)),
    field("settings-basic-password", "Password", text("settings-basic-password", "", { type: "password", autocomplete: "new-password" })),
  );
  const bearer = h("div", { class: "subfields" }, field("settings-bearer-token", "Token", text("settings-bearer-token", "", { type: "password", autocomplete: "new-password" })));
  const oauth2 = h(
    "div",
    { class: "subfields" },
    field("settings-oauth-token-url", "Token URL", text("settings-oauth-token-url", oauth.tokenUrl, { type: "url" })),
    field("settings-oauth-client-id", "Client id", text("settings-oauth-client-id", oauth.clientId)),
    field("settings-oauth-client-secret", "Client secret", text("settings-oauth-client-secret", "", { type: "password", autocomplete: "new-password" })),
    field("settings-oauth-scope", "Scope", text("settings-oauth-scope", oauth.scope), "Space-separated; empty: none asked for."),
    field("settings-oauth-audience", "Audience", text("settings-oauth-audience", oauth.audience), "Empty: none sent."),
  );
  showFor(select, { BASIC: basic, BEARER: bearer, OAUTH2: oauth2 });
  const value = (id) => document.getElementById(id).value;
  const optional = (id) => value(id).trim() || null;
  // `undefined`: leave it out (unchanged).
  const read = () => {
    switch (select.value) {
      case "KEEP":
        return undefined;
      case "NONE":
        return auth ? null : undefined;
      case "BASIC":
        return { basic: { username: value("settings-basic-username"), password: value("settings-basic-password") } };
      case "BEARER":
        return { bearer: { token: value("settings-bearer-token") } };
      default:
        return {
          oauth2: {
            tokenUrl: value("settings-oauth-token-url").trim(),
            clientId: value("settings-oauth-client-id"),
            clientSecret: value("settings-oauth-client-secret"),
            scope: optional("settings-oauth-scope"),
            audience: optional("settings-oauth-audience"),
          },
        };
    }
  };
  const node = h("fieldset", { id: "settings-auth-set" }, h("legend", {}, "Authentication"), field("settings-auth", "Requests authenticate with", select), basic, bearer, oauth2);
  return { node, read };
}

// The retry schedule: the server's, or its own three numbers.
function retryEditor(policy) {
  const own = h("input", { id: "settings-retry-own", type: "checkbox", checked: Boolean(policy) });
  const number = (id, value, step) => h("input", { id, type: "number", min: 0, step, value: value ?? "" });
  const numbers = h(
    "div",
    { class: "subfields three" },
    field("settings-retry-attempts", "Attempts at most", number("settings-retry-attempts", policy && policy.maxAttempts, 1)),
    field("settings-retry-first", "First wait (s)", number("settings-retry-first", policy && policy.firstWaitSeconds, "any")),
    field("settings-retry-max", "Longest wait (s)", number("settings-retry-max", policy && policy.maxWaitSeconds, "any")),
  );
  const update = () => (numbers.hidden = !own.checked);
  own.addEventListener("change", update);
  update();
  const read = () =>
    own.checked
      ? {
          maxAttempts: Number(document.getElementById("settings-retry-attempts").value),
          firstWaitSeconds: Number(document.getElementById("settings-retry-first").value),
          maxWaitSeconds: Number(document.getElementById("settings-retry-max").value),
        }
      : null;
  const node = h(
    "fieldset",
    { id: "settings-retries" },
    h("legend", {}, "Retries"),
    h("div", { class: "field checkbox" }, own, h("label", { for: "settings-retry-own" }, "Its own schedule (unticked: the server's)")),
    h("p", { class: "hint" }, "Waits double from the first to the longest; a replay starts the schedule again."),
    numbers,
  );
  return { node, read };
}

// A PEM secret that is set or not: keep it (never shown), remove it, or paste a new one.
function pemEditor({ id, legend, isSet, setLabel, parts, hint }) {
  const choices = isSet ? { KEEP: `Keep: ${setLabel}`, NONE: "None", NEW: "A new one" } : { NONE: "None", NEW: "A new one" };
  const select = choice(id, choices, isSet ? "KEEP" : "NONE");
  const fresh = h("div", { class: "subfields" }, parts.map(([partId, label]) => field(partId, label, area(partId, "", { placeholder: "-----BEGIN …-----" }))));
  showFor(select, { NEW: fresh });
  const node = h("div", { class: "field-group", id: `${id}-set` }, field(id, legend, select, hint), fresh);
  const read = () => (select.value === "KEEP" ? undefined : select.value === "NONE" ? (isSet ? null : undefined) : parts.map(([partId]) => document.getElementById(partId).value));
  return { node, read };
}

function webhookFields(destination) {
  const url = text("settings-url", destination.url, { type: "url", required: true });
  const format = choice("settings-format", FORMATS, destination.format || "STANDARD");
  const headers = headersEditor(destination.headers || []);
  const auth = authEditor(destination.auth);
  const retries = retryEditor(destination.retryPolicy);
  const template = area("settings-body-template", destination.bodyTemplate, { rows: 8, placeholder: '{"text": {{ values.message }}}' });
  const certificate = pemEditor({
    id: "settings-client-certificate",
    legend: "TLS client certificate",
    isSet: Boolean(destination.clientCertificate),
    setLabel: destination.clientCertificate ? `SHA-256 ${destination.clientCertificate.fingerprintSha256}` : "",
    parts: [
      ["settings-certificate-pem", "Certificate (PEM, then any intermediates)"],
      ["settings-certificate-key", "Private key (PEM)"],
    ],
    hint: "For a receiver that asks for one (mTLS). The key must be the certificate's own.",
  });
  const ca = pemEditor({
    id: "settings-client-ca",
    legend: "Extra CA",
    isSet: destination.hasClientCa,
    setLabel: "the CA set now",
    parts: [["settings-client-ca-pem", "CA certificates (PEM)"]],
    hint: "For a receiver whose certificate a private CA signed; the public roots are trusted as well.",
  });
  const nodes = [
    field("settings-url", "Webhook URL", url, "A new URL gets a new signing secret; its headers and authentication go only to the URL they were set for."),
    field("settings-format", "Format", format),
    checkbox("settings-ordered", "Ordered: one delivery at a time, in the order submissions were accepted", destination.ordered),
    checkbox("settings-ed25519", "Also sign with Ed25519 (Standard Webhooks v1a), beside HMAC", Boolean(destination.ed25519PublicKey)),
    headers.node,
    auth.node,
    retries.node,
    field("settings-body-template", "Body template", template, "Empty: the format's body. A template's values are printed as JSON; it must make one JSON document."),
    certificate.node,
    ca.node,
  ];
  const read = () => {
    const input = {
      format: format.value,
      ordered: document.getElementById("settings-ordered").checked,
      signWithEd25519: document.getElementById("settings-ed25519").checked,
      headers: headers.read(),
      retryPolicy: retries.read(),
      bodyTemplate: template.value.trim() === "" ? null : template.value,
    };
    // The URL only when changed: the same one sent again is no change, but saying so
    // keeps the request to what the operator did.
    if (url.value.trim() !== destination.url) input.url = url.value.trim();
    const authInput = auth.read();
    if (authInput !== undefined) input.auth = authInput;
    const pair = certificate.read();
    if (pair !== undefined) input.clientCertificate = pair && { certificate: pair[0], key: pair[1] };
    const caInput = ca.read();
    if (caInput !== undefined) input.clientCa = caInput && caInput[0];
    return input;
  };
  return { nodes, read };
}

function emailFields(destination) {
  const template = destination.emailTemplate || {};
  const subject = text("settings-email-subject", template.subject, { placeholder: "New message from {{ values.name }}" });
  const body = area("settings-email-text", template.text, { rows: 8 });
  const nodes = [
    field("settings-email-subject", "Subject template", subject, "One line; empty: the standard subject."),
    field("settings-email-text", "Text template", body, "Plain text over the submission (submission, fields, values, files); empty: the standard list of fields."),
  ];
  const read = () => {
    const parts = { subject: subject.value.trim() || null, text: body.value.trim() === "" ? null : body.value };
    return { emailTemplate: parts.subject === null && parts.text === null ? null : parts };
  };
  return { nodes, read };
}

// Whether the console edits this destination's settings (an autoresponder's are its
// subject and text, set through the API).
export const editable = (destination) => destination.kind === "WEBHOOK" || destination.kind === "EMAIL";

// The form editing `destination`; `saved(webhookSecret, url)` runs after a save,
// `closed()` on cancel.
export function settingsForm(destination, { saved, closed }) {
  const fields = destination.kind === "WEBHOOK" ? webhookFields(destination) : emailFields(destination);
  const error = h("p", { class: "error", role: "alert", id: "destination-settings-error" });
  const save = h("button", { type: "submit" }, "Save");
  const cancel = h("button", { type: "button", class: "secondary" }, "Cancel");
  const form = h(
    "form",
    { id: "destination-settings-form", class: "card form", "data-destination": destination.id },
    h("h3", {}, destination.kind === "WEBHOOK" ? "Webhook settings" : "Email settings"),
    fields.nodes,
    h("div", { class: "actions" }, save, cancel),
    error,
  );
  cancel.addEventListener("click", closed);
  form.addEventListener("keydown", (event) => event.key === "Escape" && closed());
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    save.disabled = true;
    try {
      const { updateDestination } = await graphql(UPDATE, { input: { id: destination.id, ...fields.read() } });
      await saved(updateDestination.webhookSecret, updateDestination.destination.url);
    } catch (failure) {
      save.disabled = false;
      error.textContent = explain(failure);
    }
  });
  return form;
}
