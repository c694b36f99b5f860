// Destinations: where an endpoint delivers (webhooks and email address lists). Naming one
// in words wherever a delivery is shown, and the endpoint page's section listing them with
// pause, resume and remove, and the forms adding a webhook or an email destination.

import { graphql, session } from "./api.js";
import { confirmation, h, time } from "./dom.js";
import { editable, settingsForm } from "./receivers.js";
import { explain } from "./words.js";

// What the endpoint page asks of each destination.
export const DESTINATION_FIELDS = `id kind position url recipients replyToField replySubject replyWindowSeconds state pauseReason pausedAt
  consecutiveFailedDeliveries maxInFlight maxRequestsPerSecond format ordered headers { name value secret } auth { kind username tokenUrl clientId scope audience }
  ed25519PublicKey retryPolicy { maxAttempts firstWaitSeconds maxWaitSeconds } bodyTemplate emailTemplate { subject text }
  clientCertificate { fingerprintSha256 } hasClientCa`;

const PAUSE = `mutation PauseDestination($id: ID!) { pauseDestination(id: $id) { destination { id state } } }`;
const RESUME = `mutation ResumeDestination($id: ID!) { resumeDestination(id: $id) { heldDeliveries destination { id state } } }`;
const REMOVE = `mutation RemoveDestination($id: ID!, $cancel: Boolean) {
  removeDestination(id: $id, cancelDeliveries: $cancel) { cancelledDeliveries destination { id state } }
}`;
const ADD_EMAIL = `mutation AddEmailDestination($input: AddEmailDestinationInput!) {
  addEmailDestination(input: $input) { destination { id recipients } }
}`;
const ADD_WEBHOOK = `mutation AddWebhookDestination($input: AddWebhookDestinationInput!) {
  addWebhookDestination(input: $input) { destination { id url } webhookSecret }
}`;

// Why deliveries are paused, in words (an endpoint's or one destination's).
export const PAUSE_REASONS = {
  GONE: "its receiver answered 410 Gone",
  FAILURE_THRESHOLD: "its deliveries failed too many times in a row",
  OPERATOR: "an operator paused it",
};

const KINDS = { WEBHOOK: "webhook", EMAIL: "email", AUTORESPONDER: "autoresponder" };

// What a webhook is sent, in words, in the add form's order.
const FORMATS = { STANDARD: "Standard", SLACK: "Slack", DISCORD: "Discord", TEAMS: "Teams", MATTERMOST: "Mattermost", GOOGLE_CHAT: "Google Chat" };
const AUTH_KINDS = { BASIC: "Basic", BEARER: "Bearer token", OAUTH2: "OAuth2" };

// Where a delivery went: the address it captured when it was accepted (a webhook's URL,
// or `mailto:` and the recipients), which stays true when its destination changes later.
// Live events carry only that capture, so the kind is read from it when the delivery's
// destination was not asked for.
export function deliveryTarget(delivery) {
  const captured = delivery.destinationUrl || "";
  const destination = delivery.destination || null;
  const kind = destination ? destination.kind : captured.startsWith("mailto:") ? "EMAIL" : captured.startsWith("autoresponder:") ? "AUTORESPONDER" : "WEBHOOK";
  if (kind === "AUTORESPONDER") {
    // The capture names the field, never the submitter's address.
    const field = captured.startsWith("autoresponder:") ? captured.slice("autoresponder:".length) : (destination && destination.replyToField) || "";
    return { kind, where: `the address in the field ${field}` };
  }
  const email = kind === "EMAIL";
  let where;
  if (email) {
    where = captured.startsWith("mailto:")
      ? captured.slice("mailto:".length).split(",").filter(Boolean).join(", ")
      : (destination && destination.recipients.join(", ")) || "";
  } else {
    where = captured || (destination && destination.url) || "";
  }
  return { kind: email ? "EMAIL" : "WEBHOOK", where };
}

// A delivery's destination as a kind tag and its address, both text nodes.
export function targetLabel(delivery) {
  const { kind, where } = deliveryTarget(delivery);
  return [h("span", { class: `kind kind-${kind.toLowerCase()}`, "data-kind": kind }, KINDS[kind]), " ", h("span", { class: "mono wrap target" }, where || "—")];
}

// Its state in words; a paused one's text follows a "paused" tag.
function stateText(destination) {
  if (destination.state === "PAUSED") {
    return `since ${time(destination.pausedAt)}: ${PAUSE_REASONS[destination.pauseReason] || destination.pauseReason}`;
  }
  if (destination.state === "REMOVED") return "removed";
  const run = destination.consecutiveFailedDeliveries;
  return run > 0 ? `active; the last ${run} finished deliveries failed` : "active";
}

function where(destination) {
  if (destination.kind === "AUTORESPONDER") {
    return [
      h("span", { class: "wrap target" }, `“${destination.replySubject || ""}” to the address in the field ${destination.replyToField || ""}`),
      h("span", { class: "hint block" }, `at most once per address every ${Math.round((destination.replyWindowSeconds || 0) / 60)} minutes`),
    ];
  }
  if (destination.kind === "EMAIL") {
    return [
      h("span", { class: "mono wrap target" }, destination.recipients.join(", ")),
      h("span", { class: "hint block" }, destination.replyToField ? `Reply-To from the field ${destination.replyToField}` : "no Reply-To"),
      destination.emailTemplate ? h("span", { class: "hint block", "data-option": "email-template" }, "its own subject or text template") : null,
    ];
  }
  return [h("span", { class: "mono wrap target" }, destination.url || "—"), webhookOptions(destination)];
}

// A webhook's options that are not the defaults, one hint line each, all text nodes. A
// secret header is named and marked, its value never shown (the API answers none).
function webhookOptions(destination) {
  const line = (name, ...text) => h("span", { class: "hint block", "data-option": name }, ...text);
  const lines = [];
  if (destination.format && destination.format !== "STANDARD") lines.push(line("format", `format: ${FORMATS[destination.format] || destination.format}`));
  if (destination.ordered) lines.push(line("ordered", "ordered: one delivery at a time, in the order accepted"));
  const auth = destination.auth;
  if (auth) lines.push(line("auth", `auth: ${AUTH_KINDS[auth.kind] || auth.kind}`, auth.kind === "BASIC" && auth.username ? ` as ${auth.username}` : ""));
  const headers = destination.headers || [];
  if (headers.length) {
    lines.push(line("headers", "headers: ", headers.map((header, i) => [i ? ", " : "", h("span", { class: "mono" }, header.name), header.secret ? " (secret)" : ""])));
  }
  if (destination.bodyTemplate) lines.push(line("template", "body: its own template"));
  if (destination.clientCertificate) {
    lines.push(line("certificate", "TLS client certificate: SHA-256 ", h("span", { class: "mono wrap" }, destination.clientCertificate.fingerprintSha256)));
  }
  if (destination.hasClientCa) lines.push(line("ca", "trusts an extra CA"));
  if (destination.ed25519PublicKey) lines.push(line("ed25519", "Ed25519: ", h("span", { class: "mono wrap" }, destination.ed25519PublicKey)));
  const retry = destination.retryPolicy;
  if (retry) {
    lines.push(line("retry", `retries: at most ${retry.maxAttempts} attempts, waiting ${retry.firstWaitSeconds} s at first and at most ${retry.maxWaitSeconds} s`));
  }
  return lines;
}

const errorLine = (id) => h("p", { class: "error", role: "alert", id });

const recipientList = (text) =>
  text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);

// The endpoint page's "Destinations" section. `refresh(secret, what)` reloads the page
// (a change to a destination can change the endpoint's own facts: its webhook URL, its
// delivery state), showing a new signing secret once when there is one; `shell.flash`
// says what an action did. A read key, or a deleted endpoint, gets the list alone.
export function destinationsSection(endpoint, { shell, refresh }) {
  const changes = session.canChange() && endpoint.deliveryState !== "DELETED";
  const actionError = errorLine("destination-error");
  const failed = (failure) => {
    actionError.textContent = explain(failure);
  };
  const table = h("table", { id: "destinations" });
  // Where the settings form of the destination being edited opens, one at a time.
  const editor = h("div", { id: "destination-editor" });

  const rows = endpoint.destinations.map((destination) => {
    const actions = h("td", { class: "row-actions" });
    const row = h(
      "tr",
      { "data-destination": destination.id, "data-kind": destination.kind, "data-state": destination.state },
      h("td", { class: "num" }, String(destination.position)),
      h("td", {}, h("span", { class: `kind kind-${destination.kind.toLowerCase()}` }, KINDS[destination.kind] || destination.kind)),
      h("td", {}, where(destination)),
      h("td", { class: "destination-state" }, destination.state === "PAUSED" ? [h("span", { class: "tag paused" }, "paused"), " "] : null, stateText(destination)),
      actions,
    );
    if (changes) {
      const paused = destination.state === "PAUSED";
      const toggle = h("button", { type: "button", class: "secondary toggle-destination" }, paused ? "Resume" : "Pause");
      toggle.addEventListener("click", async () => {
        toggle.disabled = true;
        actionError.textContent = "";
        try {
          if (paused) {
            const { resumeDestination } = await graphql(RESUME, { id: destination.id });
            const n = resumeDestination.heldDeliveries;
            shell.flash(`Resumed: ${n} held ${n === 1 ? "delivery is" : "deliveries are"} due now.`, "ok");
          } else {
            await graphql(PAUSE, { id: destination.id });
            shell.flash("Paused: its deliveries wait until you resume it; the other destinations go on.", "ok");
          }
          await refresh();
        } catch (failure) {
          toggle.disabled = false;
          failed(failure);
        }
      });
      const remove = h("button", { type: "button", class: "secondary remove-destination" }, "Remove…");
      remove.addEventListener("click", () => {
        const cancelOwed = h("input", { type: "checkbox", id: "cancel-destination-deliveries" });
        confirmation({
          anchor: table.parentNode,
          trigger: remove,
          label: "Remove the destination",
          text: `Remove this ${KINDS[destination.kind]} destination: submissions accepted from now on are not delivered to it. Its history is kept.`,
          extra: [h("label", { class: "choice" }, cancelOwed, " Cancel its deliveries still waiting or in flight")],
          confirmLabel: "Remove",
          confirmId: "confirm-remove-destination",
          confirmed: async () => {
            const { removeDestination } = await graphql(REMOVE, { id: destination.id, cancel: cancelOwed.checked });
            const n = removeDestination.cancelledDeliveries;
            const cancelled = n ? ` ${n} owed ${n === 1 ? "delivery was" : "deliveries were"} cancelled.` : "";
            shell.flash(`Destination removed; its history is kept.${cancelled}`, "ok");
            await refresh();
          },
          failed,
        });
      });
      actions.append(toggle, " ", remove);
      if (editable(destination) && destination.state !== "REMOVED") {
        const edit = h("button", { type: "button", class: "secondary edit-destination" }, "Edit…");
        edit.addEventListener("click", () => {
          const closed = () => {
            editor.replaceChildren();
            edit.focus();
          };
          const form = settingsForm(destination, {
            closed,
            saved: async (secret, url) => {
              shell.flash("Destination saved.", "ok");
              await refresh(secret, secret ? `The webhook destination ${url} signs its requests with this new secret.` : "");
            },
          });
          editor.replaceChildren(form);
          form.querySelector("input, select, textarea").focus();
        });
        actions.append(" ", edit);
      }
    }
    return row;
  });

  table.append(
    h("thead", {}, h("tr", {}, ["#", "Kind", "Where", "Status", ""].map((t) => h("th", {}, t)))),
    h("tbody", {}, rows),
  );

  return h(
    "section",
    { class: "destinations" },
    h("h2", {}, "Destinations"),
    h("p", { class: "hint" }, "Each submission is delivered to every destination, each on its own: a paused or failing one holds up no other."),
    endpoint.destinations.length
      ? h("div", { class: "table-wrap" }, table)
      : h("p", { class: "empty", id: "no-destinations" }, "None: submissions are only stored."),
    actionError,
    editor,
    changes ? addForms(endpoint, { shell, refresh }) : endpoint.deliveryState === "DELETED" ? null : readOnly("add, pause or remove destinations"),
  );
}

// The two forms adding a destination at the end of the list.
function addForms(endpoint, { shell, refresh }) {
  const emailError = errorLine("email-destination-error");
  const email = h(
    "form",
    { id: "email-destination-form", class: "card form" },
    h("h3", {}, "Add an email destination"),
    h(
      "div",
      { class: "field" },
      h("label", { for: "field-recipients" }, "Recipients"),
      h("input", { id: "field-recipients", name: "recipients", required: true, autocomplete: "off", spellcheck: "false", placeholder: "owner@example.com, team@example.com" }),
      h("p", { class: "hint" }, "1 to 10 plain addresses, separated by commas. Each submission is sent to them as an email listing its fields."),
    ),
    h(
      "div",
      { class: "field" },
      h("label", { for: "field-replyToField" }, "Reply-To field"),
      h("input", { id: "field-replyToField", name: "replyToField", value: "email", autocomplete: "off", spellcheck: "false" }),
      h("p", { class: "hint" }, "The form field whose value, when it is one plain address, becomes the email's Reply-To, so answering the email answers the submitter. Empty: no Reply-To."),
    ),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Add email destination")),
    emailError,
  );
  email.addEventListener("submit", async (event) => {
    event.preventDefault();
    emailError.textContent = "";
    const replyTo = email.elements.replyToField.value.trim();
    const input = {
      endpointId: endpoint.id,
      recipients: recipientList(email.elements.recipients.value),
      // Sent as null when emptied: left out, the API would use `email`.
      replyToField: replyTo === "" ? null : replyTo,
    };
    try {
      const { addEmailDestination } = await graphql(ADD_EMAIL, { input });
      shell.flash(`Email destination added: ${addEmailDestination.destination.recipients.join(", ")}.`, "ok");
      await refresh();
    } catch (failure) {
      emailError.textContent = explain(failure);
    }
  });

  const webhookError = errorLine("webhook-destination-error");
  const webhook = h(
    "form",
    { id: "webhook-destination-form", class: "card form" },
    h("h3", {}, "Add a webhook destination"),
    h(
      "div",
      { class: "field" },
      h("label", { for: "field-destinationUrl" }, "Webhook URL"),
      h("input", { id: "field-destinationUrl", name: "url", type: "url", required: true, placeholder: "https://example.com/hooks/forms" }),
      h("p", { class: "hint" }, "Each submission is also delivered here, signed with a secret of its own, shown once."),
    ),
    h(
      "div",
      { class: "field" },
      h("label", { for: "field-destinationFormat" }, "Format"),
      h("select", { id: "field-destinationFormat", name: "format" }, Object.entries(FORMATS).map(([value, text]) => h("option", { value }, text))),
      h("p", { class: "hint" }, "Standard: this service's signed JSON. A chat platform: a message its incoming webhook takes."),
    ),
    h(
      "div",
      { class: "field checkbox" },
      h("input", { id: "field-destinationOrdered", name: "ordered", type: "checkbox" }),
      h("label", { for: "field-destinationOrdered" }, "Ordered: one delivery at a time, in the order submissions were accepted"),
    ),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Add webhook destination")),
    webhookError,
  );
  webhook.addEventListener("submit", async (event) => {
    event.preventDefault();
    webhookError.textContent = "";
    try {
      const { addWebhookDestination } = await graphql(ADD_WEBHOOK, {
        input: { endpointId: endpoint.id, url: webhook.elements.url.value.trim(), format: webhook.elements.format.value, ordered: webhook.elements.ordered.checked },
      });
      shell.flash("Webhook destination added.", "ok");
      await refresh(addWebhookDestination.webhookSecret, `The webhook destination ${addWebhookDestination.destination.url} signs its requests with this secret.`);
    } catch (failure) {
      webhookError.textContent = explain(failure);
    }
  });

  return h("div", { class: "add-destinations" }, email, webhook);
}

// What a read-only key sees where an admin key would find a form or a button.
export function readOnly(what) {
  return h("p", { class: "hint read-only" }, `This key is read-only: it cannot ${what}. Sign in with an admin key to do so.`);
}
