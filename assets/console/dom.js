// Building the page without HTML strings: every text from the API (names, field values,
// URLs) becomes a text node, so nothing submitted can turn into markup or script.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function assign(node, attributes) {
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "value" || name === "checked" || name === "disabled") {
      node[name] = value;
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
}

// h("a", { href: "#/x", class: "link" }, "text", child, [more])
export function h(tag, attributes, ...children) {
  const node = document.createElement(tag);
  assign(node, attributes);
  append(node, children);
  return node;
}

export function svg(tag, attributes, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  assign(node, attributes);
  append(node, children);
  return node;
}

// The one escaping of values written into HTML source, which only the form snippet does
// (text an operator pastes into a page of their own, so a stored value must not become
// markup there): safe in text and in single- or double-quoted attribute values.
const HTML_ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(value) {
  return String(value).replace(/[&<>"']/g, (character) => HTML_ESCAPES[character]);
}

// A template tag for HTML source: every interpolated value goes through escapeHtml, so
// none can be pasted in raw by forgetting to. html`<input name="${name}">`
export function html(strings, ...values) {
  return strings.reduce((source, piece, i) => source + escapeHtml(values[i - 1]) + piece);
}

export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

// A button that copies `text()` to the clipboard and says so. Falls back to selecting a
// hidden text area where the Clipboard API is unavailable (plain http on another host).
export function copyButton(label, text) {
  const button = h("button", { type: "button", class: "secondary" }, label);
  button.addEventListener("click", async () => {
    const value = text();
    try {
      await navigator.clipboard.writeText(value);
    } catch {
      const area = h("textarea", { class: "offscreen", readonly: true });
      area.value = value;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    button.textContent = "Copied";
    setTimeout(() => (button.textContent = label), 1500);
  });
  return button;
}

// Hands `blob` to the browser as a download named `name`.
export function saveFile(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = h("a", { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// "2026-12-01T13:25:17.123Z" → "2026-12-01 13:25:17" in the browser's time zone.
export function time(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

// `datetime-local` inputs work in local time without a zone; the API wants RFC 3339.
export function toIso(local) {
  return local ? new Date(local).toISOString() : null;
}

// RFC 3339 → the value of a `datetime-local` input, in the browser's time zone.
export function toLocal(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

export function stateBadge(state) {
  return h("span", { class: `state state-${state.toLowerCase()}`, "data-state": state }, state);
}

// Runs the async `task` at most once per `ms` however often it is asked for, once more
// after the last ask, and never two at once: views reload on events without a query per
// event, and an older answer can never overwrite a newer one.
export function throttle(ms, task) {
  let busy = false;
  let again = false;
  const run = async () => {
    busy = true;
    try {
      await task();
    } finally {
      setTimeout(() => {
        busy = false;
        if (again) {
          again = false;
          run();
        }
      }, ms);
    }
  };
  return () => {
    if (busy) again = true;
    else run();
  };
}

// A confirmation box placed after `anchor` for the button `trigger`: a sentence, optional
// inputs, and a confirm and a cancel button. It takes focus, gives it back to `trigger`
// on cancel or Escape, and runs `confirmed` (which may throw: the box closes and the
// error is handed to `failed`). Returns the confirm button.
export function confirmation({ anchor, trigger, label, text, extra = [], confirmLabel, confirmId, confirmed, failed }) {
  trigger.disabled = true;
  const confirm = h("button", { type: "button", class: "danger", id: confirmId }, confirmLabel);
  const cancel = h("button", { type: "button", class: "secondary" }, "Cancel");
  const box = h("div", { class: "confirm", role: "alertdialog", "aria-label": label }, h("p", {}, text), ...extra, confirm, " ", cancel);
  const close = () => {
    box.remove();
    trigger.disabled = false;
    trigger.focus();
  };
  cancel.addEventListener("click", close);
  box.addEventListener("keydown", (event) => event.key === "Escape" && close());
  confirm.addEventListener("click", async () => {
    confirm.disabled = true;
    cancel.disabled = true;
    try {
      await confirmed();
    } catch (failure) {
      close();
      failed(failure);
    }
  });
  anchor.after(box);
  confirm.focus();
  return confirm;
}
