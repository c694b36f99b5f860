// Endpoints: the list, creating one (its signing secret shown once), and an endpoint's
// page: its settings to edit, rotating the secret (and ending the overlap), deactivating
// and activating, pausing and resuming its deliveries, its destinations (destinations.js),
// deleting it (history kept or erased), and the form snippet for a static site.

import { graphql, session } from "./api.js";
import { DESTINATION_FIELDS, PAUSE_REASONS, destinationsSection, readOnly } from "./destinations.js";
import { confirmation, copyButton, h, html, replace, time } from "./dom.js";
import { explain } from "./words.js";

const FIELDS = `id name isActive createdAt webhookUrl redirectUrl allowedOrigins honeypotField
  deliveryState pauseReason pausedAt consecutiveFailedDeliveries deletedAt
  webhookSecrets { role fingerprint liveUntil }
  spamProtection { captchaProvider minFillSeconds }`;
// The endpoint's page lists its destinations, and every mutation made from that page asks
// for them again (pausing the endpoint pauses each one); the list needs none.
const PAGE_FIELDS = `${FIELDS} destinations { ${DESTINATION_FIELDS} }`;
const PAGE_SIZE = 25;

const LIST = `query Endpoints($first: Int, $after: String) {
  endpoints(first: $first, after: $after) {
    nodes { ${FIELDS} }
    pageInfo { hasNextPage endCursor }
  }
}`;
const ONE = `query Endpoint($id: ID!) { endpoint(id: $id) { ${PAGE_FIELDS} deliveryCounts { pending processing delivered failed } } }`;
const CREATE = `mutation Create($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id } webhookSecret } }`;
const UPDATE = `mutation Update($input: UpdateEndpointInput!) { updateEndpoint(input: $input) { endpoint { ${PAGE_FIELDS} } webhookSecret } }`;
const ROTATE = `mutation Rotate($id: ID!) { rotateWebhookSecret(endpointId: $id) { endpoint { ${PAGE_FIELDS} } webhookSecret } }`;
const END_OVERLAP = `mutation EndOverlap($id: ID!) { endWebhookSecretOverlap(endpointId: $id) { endpoint { ${PAGE_FIELDS} } } }`;
const PAUSE = `mutation Pause($id: ID!) { pauseEndpoint(endpointId: $id) { endpoint { ${PAGE_FIELDS} } } }`;
const RESUME = `mutation Resume($id: ID!) { resumeEndpoint(endpointId: $id) { heldDeliveries endpoint { ${PAGE_FIELDS} } } }`;
const DELETE = `mutation Delete($input: DeleteEndpointInput!) { deleteEndpoint(input: $input) { deletedEndpointId history cancelledDeliveries } }`;

function deliveryStatus(endpoint) {
  if (endpoint.deliveryState === "DELETED") return `deleted ${time(endpoint.deletedAt)}; its history is kept`;
  if (endpoint.deliveryState === "PAUSED") {
    return `paused since ${time(endpoint.pausedAt)}: ${PAUSE_REASONS[endpoint.pauseReason] || endpoint.pauseReason}. Submissions are still accepted and held; nothing is sent until it is resumed.`;
  }
  const run = endpoint.consecutiveFailedDeliveries;
  const state = run > 0 ? `running; the last ${run} finished deliveries failed` : "running";
  // The endpoint is paused only when every destination is; some paused alone say so here.
  const destinations = endpoint.destinations || [];
  const paused = destinations.filter((d) => d.state === "PAUSED").length;
  return paused ? `${state}; ${paused} of its ${destinations.length} destinations ${paused === 1 ? "is" : "are"} paused (see Destinations)` : state;
}

const CAPTCHA_NAMES = { TURNSTILE: "Cloudflare Turnstile", HCAPTCHA: "hCaptcha", RECAPTCHA_V2: "reCAPTCHA v2", RECAPTCHA_V3: "reCAPTCHA v3" };

// What guards the form, in words; set through the API (setSpamProtection).
function spamSummary(protection) {
  if (!protection) return h("span", {}, "none (set with setSpamProtection; see the spam folder under Submissions)");
  const parts = [];
  if (protection.captchaProvider) parts.push(`captcha: ${CAPTCHA_NAMES[protection.captchaProvider] || protection.captchaProvider}`);
  if (protection.minFillSeconds) parts.push(`at least ${protection.minFillSeconds} s to fill in`);
  return h("span", {}, parts.length ? `${parts.join("; ")}; rules and spam folder on` : "rules and spam folder on");
}

function secretsList(endpoint) {
  if (!endpoint.webhookSecrets.length) return "none (no webhook)";
  return h(
    "ul",
    { class: "plain", id: "webhook-secrets" },
    endpoint.webhookSecrets.map((secret) =>
      h(
        "li",
        { "data-role": secret.role },
        h("span", { class: "mono" }, secret.fingerprint),
        secret.role === "CURRENT" ? " current" : ` previous, still signing until ${time(secret.liveUntil)}`,
      ),
    ),
  );
}

function errorLine(id) {
  return h("p", { class: "error", role: "alert", id });
}

// The captcha widgets as each provider documents them; the site key is the provider's
// public key, which this service never needs (only the secret), so the operator fills it in.
const CAPTCHA_WIDGETS = {
  TURNSTILE: ['  <div class="cf-turnstile" data-sitekey="YOUR_SITE_KEY"></div>', '<script src="https://challenges.cloudflare.com/turnstile/v0/api.js" async defer></script>'],
  HCAPTCHA: ['  <div class="h-captcha" data-sitekey="YOUR_SITE_KEY"></div>', '<script src="https://js.hcaptcha.com/1/api.js" async defer></script>'],
  RECAPTCHA_V2: ['  <div class="g-recaptcha" data-sitekey="YOUR_SITE_KEY"></div>', '<script src="https://www.google.com/recaptcha/api.js" async defer></script>'],
  // v3 has no widget: the page asks for a token as the form is sent and puts it in the
  // field intake reads.
  RECAPTCHA_V3: [
    '  <input type="hidden" name="g-recaptcha-response">',
    '<script src="https://www.google.com/recaptcha/api.js?render=YOUR_SITE_KEY"></script>\n' +
      "<script>\n" +
      '  document.currentScript.previousElementSibling.previousElementSibling.addEventListener("submit", function (event) {\n' +
      "    var form = event.target;\n" +
      "    if (form.dataset.ready) return;\n" +
      "    event.preventDefault();\n" +
      '    grecaptcha.ready(function () { grecaptcha.execute("YOUR_SITE_KEY", { action: "submit" }).then(function (token) {\n' +
      '      form.elements["g-recaptcha-response"].value = token; form.dataset.ready = "1"; form.submit();\n' +
      "    }); });\n" +
      "  });\n" +
      "</script>",
  ],
};

// The snippet an operator pastes into a static site: HTML source, so every value in it
// (the action URL with the endpoint id, the honeypot name) is written through the html
// tag's escaping. The API refuses honeypot names that need it, but an older release
// stored whatever it was given. With a minimum fill time, a script fetches the form stamp
// (the signed time the page was loaded) into its hidden field; with a captcha, the
// provider's widget.
export function formSnippet(endpoint) {
  const action = `${location.origin}/f/${encodeURIComponent(endpoint.id)}`;
  const protection = endpoint.spamProtection || {};
  const lines = [
    html`<form action="${action}" method="post">`,
    `  <label>Email <input name="email" type="email" required></label>`,
    `  <label>Message <textarea name="message"></textarea></label>`,
  ];
  if (endpoint.honeypotField) {
    lines.push(html`  <input name="${endpoint.honeypotField}" type="text" tabindex="-1" autocomplete="off" hidden>`);
  }
  const widget = CAPTCHA_WIDGETS[protection.captchaProvider];
  if (widget) lines.push(widget[0]);
  if (protection.minFillSeconds) {
    // A stamp vouches for one submission: after each submit, and when the page comes back
    // from the back/forward cache, the script asks for a new one that keeps the time the
    // first was served (`?renew=`), so a second submission or a retry from the same page
    // is neither "used before" nor "too soon".
    lines.push(
      `  <input type="hidden" name="_hymical_stamp">`,
      `  <script>`,
      `    (function (field) {`,
      `      function stamp() {`,
      html`        fetch("${action}/stamp" + (field.value ? "?renew=" + encodeURIComponent(field.value) : ""), { cache: "no-store" })`,
      `          .then(function (r) { return r.json(); }).then(function (s) { if (s.value) field.value = s.value; });`,
      `      }`,
      `      stamp();`,
      `      field.form.addEventListener("submit", function () { setTimeout(stamp, 0); });`,
      `      addEventListener("pageshow", function (event) { if (event.persisted) stamp(); });`,
      `    })(document.currentScript.previousElementSibling);`,
      `  </script>`,
    );
  }
  lines.push(`  <button type="submit">Send</button>`, `</form>`);
  if (widget) lines.push(widget[1]);
  return lines.join("\n");
}

function snippetBlock(endpoint) {
  const text = formSnippet(endpoint);
  // Shown as text, never parsed: the page displays the source the operator copies.
  const code = h("code");
  code.textContent = text;
  return h(
    "section",
    { class: "snippet" },
    h("h2", {}, "Form snippet"),
    h("p", { class: "hint" }, "Paste into any page; rename or add fields as you like. Every field is delivered."),
    h("pre", { id: "form-snippet" }, code),
    copyButton("Copy snippet", () => text),
  );
}

function secretBlock(secret, what) {
  return h(
    "div",
    { class: "secret card", id: "new-secret", role: "status" },
    h("h2", {}, "Signing secret"),
    h("p", {}, `${what} Copy it now: it is shown once and never again. Receivers verify the Hymical-Signature header with it.`),
    h("pre", {}, h("code", { id: "secret-value" }, secret)),
    copyButton("Copy secret", () => secret),
  );
}

const lines = (text) =>
  text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);
const orNull = (text) => (text.trim() === "" ? null : text.trim());

// The settings inputs shared by the create and edit forms.
function settingsInputs(endpoint = {}) {
  const input = (name, label, value, attributes = {}, hint = null) => {
    const id = `field-${name}`;
    return h(
      "div",
      { class: "field" },
      h("label", { for: id }, label),
      h("input", { id, name, value: value || "", ...attributes }),
      hint ? h("p", { class: "hint" }, hint) : null,
    );
  };
  const origins = h("textarea", { id: "field-allowedOrigins", name: "allowedOrigins", rows: 2 });
  origins.value = (endpoint.allowedOrigins || []).join("\n");
  const active = h("input", { id: "field-isActive", name: "isActive", type: "checkbox", checked: endpoint.isActive !== false });
  return [
    input("name", "Name", endpoint.name, { required: true, maxlength: 200 }),
    input("webhookUrl", "Webhook URL", endpoint.webhookUrl, { type: "url", placeholder: "https://example.com/hooks/forms" },
      "Where submissions are delivered. Empty: submissions are only stored (removing a URL also removes its secret)."),
    input("redirectUrl", "Redirect URL", endpoint.redirectUrl, { type: "url" }, "Where a browser goes after submitting. Empty: a plain thank-you answer."),
    h("div", { class: "field" }, h("label", { for: "field-allowedOrigins" }, "Allowed origins"), origins,
      h("p", { class: "hint" }, "One per line, such as https://example.com. Empty: any origin.")),
    input("honeypotField", "Honeypot field", endpoint.honeypotField, { maxlength: 128, pattern: "[A-Za-z][A-Za-z0-9_.\\[\\]\\-]*", autocomplete: "off", spellcheck: "false" },
      "A hidden field only bots fill in; such submissions are dropped quietly. A letter, then letters, digits, -, _, ., [ and ]."),
    h("div", { class: "field checkbox" }, active, h("label", { for: "field-isActive" }, "Accepting submissions")),
  ];
}

function readSettings(form) {
  const value = (name) => form.elements[name].value;
  return {
    name: value("name").trim(),
    webhookUrl: orNull(value("webhookUrl")),
    redirectUrl: orNull(value("redirectUrl")),
    allowedOrigins: lines(value("allowedOrigins")),
    honeypotField: orNull(value("honeypotField")),
    isActive: form.elements.isActive.checked,
  };
}

export function list(view, route) {
  const after = route.params.get("after");
  const body = h("div", { class: "loading" }, "Loading…");
  replace(
    view,
    h(
      "div",
      { class: "title-row" },
      h("h1", {}, "Endpoints"),
      session.canChange() ? h("a", { class: "button", href: "#/endpoints/new", id: "new-endpoint" }, "New endpoint") : null,
    ),
    body,
  );
  graphql(LIST, { first: PAGE_SIZE, after })
    .then(({ endpoints }) => {
      if (!endpoints.nodes.length && !after) {
        replace(body, h("p", { class: "empty" }, session.canChange() ? "No endpoints yet. Create one to get a form address." : "No endpoints yet."));
        return;
      }
      replace(
        body,
        h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { id: "endpoints" },
            h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Id"), h("th", {}, "Webhook"), h("th", {}, "Status"), h("th", {}, "Created"))),
            h(
              "tbody",
              {},
              endpoints.nodes.map((e) =>
                h(
                  "tr",
                  { "data-endpoint": e.id },
                  h("td", {}, h("a", { href: `#/endpoints/${encodeURIComponent(e.id)}` }, e.name)),
                  h("td", { class: "mono" }, e.id),
                  h("td", { class: "mono wrap" }, e.webhookUrl || "—"),
                  h(
                    "td",
                    {},
                    e.isActive ? "active" : h("span", { class: "tag" }, "inactive"),
                    e.deliveryState === "PAUSED" ? h("span", { class: "tag paused" }, "deliveries paused") : null,
                  ),
                  h("td", {}, time(e.createdAt)),
                ),
              ),
            ),
          ),
        ),
        h(
          "nav",
          { class: "pager", "aria-label": "Pages" },
          after ? h("a", { href: "#/endpoints" }, "← First page") : null,
          endpoints.pageInfo.hasNextPage
            ? h("a", { href: `#/endpoints?after=${encodeURIComponent(endpoints.pageInfo.endCursor)}`, id: "next-page" }, "Older →")
            : null,
        ),
      );
    })
    .catch((error) => replace(body, h("p", { class: "error", role: "alert" }, explain(error))));
}

export function create(view, _route, shell) {
  if (!session.canChange()) {
    replace(view, h("h1", {}, "New endpoint"), readOnly("create endpoints"));
    return;
  }
  const error = errorLine("form-error");
  const form = h(
    "form",
    { id: "endpoint-form", class: "card form" },
    h(
      "div",
      { class: "field" },
      h("label", { for: "field-id" }, "Id"),
      h("input", { id: "field-id", name: "id", required: true, minlength: 3, maxlength: 64, pattern: "[a-z0-9]([a-z0-9_\\-]*[a-z0-9])?", autocomplete: "off", spellcheck: "false" }),
      h("p", { class: "hint" }, "Part of the form address /f/{id}: 3 to 64 lowercase letters, digits, - and _, starting and ending with a letter or digit. It cannot change later."),
    ),
    settingsInputs(),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Create endpoint"), h("a", { href: "#/endpoints" }, "Cancel")),
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    const input = { id: form.elements.id.value.trim(), ...readSettings(form) };
    try {
      const { createEndpoint } = await graphql(CREATE, { input });
      const id = createEndpoint.endpoint.id;
      const done = h("a", { class: "button", href: `#/endpoints/${encodeURIComponent(id)}`, id: "done" }, "I have copied it — go to the endpoint");
      replace(
        view,
        h("h1", {}, `Endpoint ${id} created`),
        createEndpoint.webhookSecret
          ? secretBlock(createEndpoint.webhookSecret, "This endpoint signs its webhooks with this secret.")
          : h("p", {}, "It has no webhook: submissions are stored and shown here."),
        snippetBlock({ id, honeypotField: input.honeypotField }),
        h("p", {}, done),
      );
      shell.flash("");
    } catch (failure) {
      error.textContent = explain(failure);
    }
  });
  replace(view, h("h1", {}, "New endpoint"), form);
  form.elements.id.focus();
}

export function detail(view, route, shell) {
  const id = route.id;
  const body = h("div", { class: "loading" }, "Loading…");
  replace(view, h("h1", {}, `Endpoint ${id}`), body);

  function show(endpoint, secret = null, what = "") {
    const error = errorLine("form-error");
    const form = h(
      "form",
      { id: "endpoint-form", class: "card form" },
      h("h2", {}, "Settings"),
      settingsInputs(endpoint),
      h("div", { class: "actions" }, h("button", { type: "submit" }, "Save changes")),
      error,
    );
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      error.textContent = "";
      try {
        const { updateEndpoint } = await graphql(UPDATE, { input: { id, ...readSettings(form) } });
        shell.flash("Saved.", "ok");
        show(updateEndpoint.endpoint, updateEndpoint.webhookSecret, "The webhook URL changed, so it has a new secret.");
      } catch (failure) {
        error.textContent = explain(failure);
      }
    });

    const actionError = errorLine("action-error");
    const failed = (failure) => {
      actionError.textContent = explain(failure);
    };
    const actions = h("div", { class: "actions" });
    const button = (id, label) => h("button", { type: "button", class: "secondary", id }, label);
    const deleteButton = button("delete-endpoint", endpoint.deliveryState === "DELETED" ? "Erase history…" : "Delete…");
    deleteButton.addEventListener("click", () => confirmDelete(endpoint, deleteButton));

    if (endpoint.deliveryState !== "DELETED") {
      const toggle = button("toggle-active", endpoint.isActive ? "Deactivate" : "Activate");
      toggle.addEventListener("click", async () => {
        try {
          const { updateEndpoint } = await graphql(UPDATE, { input: { id, isActive: !endpoint.isActive } });
          shell.flash(updateEndpoint.endpoint.isActive ? "Activated: it accepts submissions again." : "Deactivated: new submissions are refused; queued deliveries still go out.", "ok");
          show(updateEndpoint.endpoint);
        } catch (failure) {
          failed(failure);
        }
      });
      const paused = endpoint.deliveryState === "PAUSED";
      const pause = button("toggle-paused", paused ? "Resume deliveries" : "Pause deliveries");
      pause.addEventListener("click", async () => {
        try {
          if (paused) {
            const { resumeEndpoint } = await graphql(RESUME, { id });
            const n = resumeEndpoint.heldDeliveries;
            shell.flash(`Resumed: ${n} held ${n === 1 ? "delivery is" : "deliveries are"} due now.`, "ok");
            show(resumeEndpoint.endpoint);
          } else {
            const { pauseEndpoint } = await graphql(PAUSE, { id });
            shell.flash("Paused: submissions are still accepted; their deliveries wait until you resume.", "ok");
            show(pauseEndpoint.endpoint);
          }
        } catch (failure) {
          failed(failure);
        }
      });
      actions.append(toggle, pause);
    }
    if (endpoint.webhookUrl) {
      const rotate = button("rotate", "Rotate secret…");
      rotate.addEventListener("click", () =>
        confirmation({
          anchor: actions,
          trigger: rotate,
          label: "Rotate the secret",
          text: "A new secret signs every webhook from now on. The old one keeps signing webhook-signature beside it for the server's overlap (24 hours unless configured otherwise), so receivers can switch meanwhile; queued deliveries keep it in Hymical-Signature.",
          confirmLabel: "Rotate now",
          confirmId: "confirm-rotate",
          confirmed: async () => {
            const { rotateWebhookSecret } = await graphql(ROTATE, { id });
            show(rotateWebhookSecret.endpoint, rotateWebhookSecret.webhookSecret, "The secret was rotated.");
          },
          failed,
        }),
      );
      actions.append(rotate);
    }
    if (endpoint.webhookSecrets.some((secret) => secret.role === "PREVIOUS")) {
      const end = button("end-overlap", "Stop the old secret now");
      end.addEventListener("click", async () => {
        try {
          const { endWebhookSecretOverlap } = await graphql(END_OVERLAP, { id });
          shell.flash("The old secret no longer signs anything.", "ok");
          show(endWebhookSecretOverlap.endpoint);
        } catch (failure) {
          failed(failure);
        }
      });
      actions.append(end);
    }
    actions.append(
      h("a", { class: "button secondary", href: `#/deliveries?endpoint=${encodeURIComponent(id)}` }, "Deliveries"),
      h("a", { class: "button secondary", href: `#/submissions?endpoint=${encodeURIComponent(id)}` }, "Submissions"),
      deleteButton,
    );

    // Deleting: keeping the history or erasing it is the operator's explicit choice;
    // deliveries still owed are cancelled only when asked.
    function confirmDelete(endpoint, trigger) {
      const tombstone = endpoint.deliveryState === "DELETED";
      const choice = (value, text) =>
        h("label", { class: "choice" }, h("input", { type: "radio", name: "history", value, id: `history-${value.toLowerCase()}` }), ` ${text}`);
      const history = tombstone
        ? []
        : [
            choice("KEEP", "Keep its submissions, deliveries and attempts readable (the id stays taken)"),
            choice("ERASE", "Erase all of them with it (the id becomes free)"),
          ];
      const cancelOwed = h("input", { type: "checkbox", id: "cancel-deliveries" });
      const confirm = confirmation({
        anchor: actions,
        trigger,
        label: "Delete the endpoint",
        text: tombstone
          ? `Erase everything kept of ${endpoint.id}: its submissions, deliveries, attempts and events. This cannot be undone.`
          : `Delete ${endpoint.id}: its form address stops accepting submissions.`,
        extra: [
          ...history,
          tombstone ? null : h("label", { class: "choice" }, cancelOwed, " Cancel its deliveries still waiting or in flight"),
        ],
        confirmLabel: tombstone ? "Erase" : "Delete",
        confirmId: "confirm-delete",
        confirmed: async () => {
          const picked = tombstone ? "ERASE" : document.querySelector('input[name="history"]:checked').value;
          const input = { id: endpoint.id, history: picked, cancelDeliveries: cancelOwed.checked };
          const { deleteEndpoint } = await graphql(DELETE, { input });
          const n = deleteEndpoint.cancelledDeliveries;
          const cancelled = n ? ` ${n} owed ${n === 1 ? "delivery was" : "deliveries were"} cancelled.` : "";
          shell.go("#/endpoints", `Endpoint ${endpoint.id} deleted; its history was ${picked === "KEEP" ? "kept" : "erased"}.${cancelled}`);
        },
        failed,
      });
      // No default: nothing is deleted until keep or erase is chosen.
      if (!tombstone) {
        confirm.disabled = true;
        const radios = document.querySelectorAll('input[name="history"]');
        for (const radio of radios) {
          radio.addEventListener("change", () => {
            confirm.disabled = false;
          });
        }
        radios[0].focus();
      }
    }

    const tombstone = endpoint.deliveryState === "DELETED";
    // A read-only key is offered what it may do: look, and go to the lists.
    const changes = session.canChange();
    if (!changes) {
      replace(
        actions,
        h("a", { class: "button secondary", href: `#/deliveries?endpoint=${encodeURIComponent(id)}` }, "Deliveries"),
        h("a", { class: "button secondary", href: `#/submissions?endpoint=${encodeURIComponent(id)}` }, "Submissions"),
      );
    }
    replace(
      body,
      secret ? secretBlock(secret, what) : null,
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Form address"),
        h("dd", { class: "mono" }, `${location.origin}/f/${endpoint.id}`),
        h("dt", {}, "Status"),
        h("dd", { id: "endpoint-status" }, tombstone ? "deleted, refusing submissions" : endpoint.isActive ? "active, accepting submissions" : "inactive, refusing submissions"),
        h("dt", {}, "Deliveries"),
        h("dd", { id: "endpoint-delivery-state" }, deliveryStatus(endpoint)),
        h("dt", {}, "Signing secrets"),
        h("dd", {}, secretsList(endpoint)),
        h("dt", {}, "Spam protection"),
        h("dd", { id: "spam-protection" }, spamSummary(endpoint.spamProtection)),
        h("dt", {}, "Created"),
        h("dd", {}, time(endpoint.createdAt)),
      ),
      actions,
      actionError,
      destinationsSection(endpoint, { shell, refresh }),
      tombstone ? null : snippetBlock(endpoint),
      tombstone ? null : changes ? form : readOnly("change its settings"),
    );
    body.className = "";
  }

  // After a destination changed: the whole page again, since the endpoint's own facts
  // (its webhook URL and secrets, its delivery state) follow its destinations.
  async function refresh(secret = null, what = "") {
    const { endpoint } = await graphql(ONE, { id });
    if (endpoint) show(endpoint, secret, what);
    else replace(body, h("p", { class: "error" }, "No endpoint has this id."));
  }

  graphql(ONE, { id })
    .then(({ endpoint }) => {
      if (!endpoint) replace(body, h("p", { class: "error" }, "No endpoint has this id."));
      else show(endpoint);
    })
    .catch((error) => replace(body, h("p", { class: "error", role: "alert" }, explain(error))));
}
