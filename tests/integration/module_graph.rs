//! No module of the crate imports in a circle, at any level: the top-level modules depend
//! on each other in one direction only, and so do the files (and sub-folders) of every
//! folder. Read from the source as it is, so docs/ARCHITECTURE.md's "no import cycles"
//! cannot go stale.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module by its path below the crate root: `["intake", "committer", "store"]`.
type ModulePath = Vec<String>;

/// For every folder (the crate root is `[]`), the graph between its children: an arrow from
/// a child to a sibling whose items the child's code names. Paths are read as `crate::…`,
/// `super::…` and `self::…` (groups included), resolved against the file's own module; a
/// name a folder re-exports from one of its children counts as that child's. Comments,
/// `#[cfg(test)]` modules, the crate root and the test re-exports (`testing/`, which names
/// everything by design) do not count.
fn folder_graphs(src: &Path) -> BTreeMap<ModulePath, BTreeMap<String, BTreeSet<String>>> {
    let mut sources = BTreeMap::new();
    for file in rust_files(src) {
        let module = module_of(file.strip_prefix(src).unwrap());
        if module.is_empty() || module[0] == "main" || module[0] == "testing" {
            continue;
        }
        let code =
            without_test_modules(&without_comments(&std::fs::read_to_string(&file).unwrap()));
        sources.insert(module, code);
    }
    let modules: BTreeSet<ModulePath> = sources.keys().cloned().collect();
    let mut graphs: BTreeMap<ModulePath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, code) in &sources {
        for path in named_paths(code, module) {
            let target = resolve(&path, &modules, &sources);
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common < module.len() && common < target.len() {
                graphs
                    .entry(module[..common].to_vec())
                    .or_default()
                    .entry(module[common].clone())
                    .or_default()
                    .insert(target[common].clone());
            }
        }
        // Every child is a node, arrows or not.
        if let Some((child, folder)) = module.split_last() {
            graphs
                .entry(folder.to_vec())
                .or_default()
                .entry(child.clone())
                .or_default();
        }
    }
    graphs
}

/// `intake/committer/mod.rs` is `["intake", "committer"]`, `lib.rs` is `[]`.
fn module_of(relative: &Path) -> ModulePath {
    let mut parts: ModulePath = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The module a path names: its longest prefix that is a module, followed into the child a
/// folder re-exports the next name from (`pub use child::Name`).
fn resolve(
    path: &[String],
    modules: &BTreeSet<ModulePath>,
    sources: &BTreeMap<ModulePath, String>,
) -> ModulePath {
    let mut module: ModulePath = Vec::new();
    for segment in path {
        let mut deeper = module.clone();
        deeper.push(segment.clone());
        if modules.contains(&deeper) {
            module = deeper;
            continue;
        }
        // An item of `module`: re-exported from one of its children?
        let Some(code) = sources.get(&module) else {
            break;
        };
        for re_export in named_paths_of_uses(code, &module) {
            if re_export.last() == Some(segment) && re_export.len() > module.len() + 1 {
                let child = &re_export[..module.len() + 1];
                if re_export[..module.len()] == module[..] && modules.contains(child) {
                    return resolve(&re_export, modules, sources);
                }
            }
        }
        break;
    }
    module
}

/// The full paths of the `use` items in `code` (re-exports among them).
fn named_paths_of_uses(code: &str, module: &[String]) -> Vec<ModulePath> {
    let mut found = Vec::new();
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(at) = statement.find("use ") else {
            continue;
        };
        let before = &statement[..at];
        if !before.trim().is_empty() && !before.trim_start().starts_with("pub") {
            continue;
        }
        let tree = statement[at + 4..].trim();
        let relative = !(tree.starts_with("crate::")
            || tree.starts_with("super::")
            || tree.starts_with("self::"));
        let tree = if relative {
            format!("self::{tree}")
        } else {
            tree.to_string()
        };
        found.extend(named_paths(&tree, module));
    }
    found
}

/// Every `crate::`, `super::` and `self::` path in `code` as an absolute module path,
/// groups expanded: `use super::{a::B, c}` in `x/y.rs` is `[x, a, B]` and `[x, c]`.
fn named_paths(code: &str, module: &[String]) -> Vec<ModulePath> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|root| code[at..].starts_with(root));
        let after_ident = at > 0
            && (bytes[at - 1].is_ascii_alphanumeric()
                || bytes[at - 1] == b'_'
                || bytes[at - 1] == b':');
        if starts && !after_ident {
            let (paths, used) = use_tree(&code[at..]);
            for path in paths {
                found.push(absolute(&path, module));
            }
            at += used.max(1);
        } else {
            at += code[at..].chars().next().map_or(1, char::len_utf8);
        }
    }
    found
}

/// `crate`/`super`/`self` segments resolved against the module the text is in. A file's
/// own module is where `self` stands; `super` climbs one from there.
fn absolute(path: &[String], module: &[String]) -> ModulePath {
    let mut base: ModulePath = module.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().filter(|s| s.as_str() != "self").cloned());
    base
}

/// The paths of one use tree (or plain path) at the start of `text`, and the bytes read.
fn use_tree(text: &str) -> (Vec<ModulePath>, usize) {
    let ident = |text: &str| -> String {
        text.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut prefix: ModulePath = Vec::new();
    let mut at = 0;
    loop {
        let rest = &text[at..];
        let name = ident(rest);
        if name.is_empty() {
            if let Some(group) = rest.strip_prefix('{') {
                let mut paths = Vec::new();
                let mut inner = 0;
                let group_bytes = group.as_bytes();
                loop {
                    while inner < group.len()
                        && (group_bytes[inner] == b',' || group_bytes[inner].is_ascii_whitespace())
                    {
                        inner += 1;
                    }
                    if inner >= group.len() || group_bytes[inner] == b'}' {
                        inner += 1;
                        break;
                    }
                    let (children, used) = use_tree(&group[inner..]);
                    for child in children {
                        let mut full = prefix.clone();
                        full.extend(child);
                        paths.push(full);
                    }
                    inner += used.max(1);
                }
                return (paths, at + 1 + inner);
            }
            return (vec![prefix], at);
        }
        at += name.len();
        prefix.push(name);
        if text[at..].starts_with("::") {
            at += 2;
        } else {
            // `as alias` and anything after the path end it.
            return (vec![prefix], at);
        }
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The text with `//` and `/* */` comments (doc comments too) blanked; string literals are
/// kept whole, so `"//"` inside one is no comment.
fn without_comments(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at..].starts_with(b"//") {
            while at < bytes.len() && bytes[at] != b'\n' {
                at += 1;
            }
        } else if bytes[at..].starts_with(b"/*") {
            let mut depth = 0;
            while at < bytes.len() {
                if bytes[at..].starts_with(b"/*") {
                    depth += 1;
                    at += 2;
                } else if bytes[at..].starts_with(b"*/") {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    at += 1;
                }
            }
        } else if bytes[at] == b'"' && (at == 0 || bytes[at - 1] != b'\'') {
            let start = at;
            at += 1;
            while at < bytes.len() && bytes[at] != b'"' {
                at += if bytes[at] == b'\\' { 2 } else { 1 };
            }
            at = (at + 1).min(bytes.len());
            out.push_str(&text[start..at]);
        } else {
            let next = text[at..].chars().next().unwrap();
            out.push(next);
            at += next.len_utf8();
        }
    }
    out
}

/// The text without the bodies of `#[cfg(test)] mod … { … }`: unit tests may name any
/// module.
fn without_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(found) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..found]);
        let after = &rest[found..];
        let Some(open) = after.find('{') else {
            rest = "";
            break;
        };
        let is_module = after[..open].contains("mod ");
        if !is_module {
            out.push_str("#[cfg(test)]");
            rest = &after["#[cfg(test)]".len()..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = after.len();
        for (index, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + index + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|n| n == node).unwrap();
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_string(), Mark::Open);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn no_module_imports_in_a_circle_at_any_level() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graphs = folder_graphs(&src);
    // The reading itself works: known arrows are seen, comments and unit tests are not.
    let top = &graphs[&Vec::new()];
    assert!(top["router"].contains("graphql"), "{top:?}");
    assert!(top["db"].contains("config"), "{top:?}");
    assert!(top["model"].is_empty(), "model depends on nothing: {top:?}");
    assert!(graphs.len() > 5, "folders are read: {:?}", graphs.keys());
    let circles: Vec<String> = graphs
        .iter()
        .filter_map(|(folder, graph)| {
            let circle = find_cycle(graph)?;
            Some(format!(
                "in src/{}: {}",
                folder.join("/"),
                circle.join(" -> ")
            ))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_reader_resolves_paths_groups_and_re_exports() {
    let module = |path: &str| -> ModulePath {
        path.split('/')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    let code = without_test_modules(&without_comments(
        "use crate::{app::App, db::{self, Db}, error};\nuse super::sibling::Thing;\n// crate::hidden\nlet x = crate::clock::now();\n#[cfg(test)]\nmod tests { use crate::tested; }\nlet s = \"// not a comment\"; self::inner::f(); crate::after;",
    ));
    let named: BTreeSet<ModulePath> = named_paths(&code, &module("intake/parse"))
        .into_iter()
        .collect();
    let expected: BTreeSet<ModulePath> = [
        "app/App",
        "db",
        "db/Db",
        "error",
        "intake/sibling/Thing",
        "clock/now",
        "intake/parse/inner/f",
        "after",
    ]
    .into_iter()
    .map(module)
    .collect();
    assert_eq!(named, expected);
    // `super::Name` where the folder re-exports `Name` from a child names that child.
    let sources: BTreeMap<ModulePath, String> = [
        (
            module("graphql"),
            "mod types;\npub(crate) use types::{Endpoint, Delivery as D};".to_string(),
        ),
        (module("graphql/types"), String::new()),
        (module("graphql/query"), String::new()),
    ]
    .into_iter()
    .collect();
    let modules = sources.keys().cloned().collect();
    assert_eq!(
        resolve(&module("graphql/Endpoint"), &modules, &sources),
        module("graphql/types")
    );
    assert_eq!(
        resolve(&module("graphql/query/run"), &modules, &sources),
        module("graphql/query")
    );
    assert_eq!(
        resolve(&module("graphql/Schema"), &modules, &sources),
        module("graphql")
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
