// Projects: the header's switcher and the names other views give project ids. A key of
// every project chooses "All projects" or one of them; the choice is kept in this tab's
// sessionStorage beside the key (api.js) and sent as `Hymical-Project` on every request
// and in the WebSocket's `connection_init` from then on, so every view (lists, counts,
// exports, live updates, keys, the audit trail) is that project's alone, and an endpoint
// created meanwhile lands in it. A project's own key sees its project only: the header
// names it and offers no choice.

import { graphql, session } from "./api.js";
import { h, replace } from "./dom.js";

// Asked without `Hymical-Project`: narrowed to one project, `projects` lists that one only.
const PROJECTS = "query Projects { projects { id name } }";
// The last list the server gave: the next header is drawn from it at once, then refreshed.
let known = [];

// Every project the key sees ({ id, name }, oldest first), whatever the switcher says.
export async function listProjects() {
  const { projects } = await graphql(PROJECTS, {}, undefined, { project: null });
  known = projects;
  return projects;
}

// How a page names the project `id` (null: a key of every project's "All projects").
// `projects` lists live projects only, so an id not among them is a deleted one's.
export function projectLabel(id, projects = known) {
  if (!id) return "All projects";
  const found = projects.find((project) => project.id === id);
  return found ? found.name : `${id} (deleted)`;
}

// The switcher for the header. `switched(label)` runs once another choice is applied (the
// shell ends the live connection and draws the page again); `gone()` when the project
// chosen earlier is no longer among the key's (deleted meanwhile).
export function switcher({ switched, gone }) {
  const own = session.keyProject();
  if (own) {
    // Named by its id until the list comes back.
    const named = known.find((project) => project.id === own);
    const name = h(
      "span",
      { id: "project-name", class: "project-name", title: "This key sees this project only." },
      `Project: ${named ? named.name : own}`,
    );
    listProjects()
      .then((projects) => {
        name.textContent = `Project: ${projectLabel(own, projects)}`;
      })
      .catch(() => {});
    return name;
  }
  const select = h("select", { id: "project-select", name: "project" });
  const apply = h("button", { type: "submit", class: "secondary", id: "project-switch" }, "Switch");
  const form = h(
    "form",
    { id: "project-switcher", class: "project-switcher", "aria-label": "Project" },
    h("label", { for: "project-select" }, "Project"),
    select,
    apply,
  );
  const current = () => session.project() || "";
  let drawn = null;
  let touched = false;
  // The options for `projects`; a choice made before the list came back stays chosen.
  const fill = (projects) => {
    const same = JSON.stringify(projects);
    if (same === drawn) return;
    drawn = same;
    const chosen = current();
    const picked = touched ? select.value : chosen;
    const options = projects.map((project) => h("option", { value: project.id }, project.name));
    // Before the first answer, the chosen project is named by its id.
    if (chosen && !projects.some((project) => project.id === chosen)) options.push(h("option", { value: chosen }, chosen));
    replace(select, h("option", { value: "" }, "All projects"), options);
    select.value = picked;
    if (select.value !== picked) select.value = chosen;
    apply.disabled = select.value === chosen;
  };
  fill(known);
  listProjects()
    .then((projects) => {
      if (!select.isConnected) return;
      if (current() && !projects.some((project) => project.id === current())) gone();
      else fill(projects);
    })
    .catch(() => {});
  // Applied with its button, so arrowing through the list loads nothing.
  select.addEventListener("change", () => {
    touched = true;
    apply.disabled = select.value === current();
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (select.value === current()) return;
    session.setProject(select.value || null);
    switched(select.value ? select.selectedOptions[0].textContent : "All projects");
  });
  return form;
}
