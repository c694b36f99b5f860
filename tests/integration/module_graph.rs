//! The crate's top-level modules depend on each other in one direction only: read from the
//! source as it is, so docs/ARCHITECTURE.md's "no import cycles" cannot go stale.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module and the top-level modules its code names (`crate::x`), from every
/// file under `src/` but the crate root and the test re-exports (`testing/`, which names
/// everything by design). Comments and `#[cfg(test)]` modules do not count.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if matches!(top.as_str(), "lib" | "main" | "testing") {
            continue;
        }
        let code =
            without_test_modules(&without_comments(&std::fs::read_to_string(&file).unwrap()));
        let named = graph.entry(top.clone()).or_default();
        for target in crate_paths(&code) {
            if target != top {
                named.insert(target);
            }
        }
    }
    graph
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

/// The top-level module of every `crate::x` path, `use crate::{x, y::z}` groups included.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let ident = |text: &str| -> String {
        text.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = code;
    while let Some(found) = rest.find("crate::") {
        let after = &rest[found + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // Top-level names of the group: those at brace depth zero after `{` or `,`.
            let mut depth = 0usize;
            let mut expecting = true;
            for (index, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => expecting = true,
                    c if expecting && (c.is_ascii_alphabetic() || c == '_') => {
                        named.insert(ident(&group[index..]));
                        expecting = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(after);
            if !name.is_empty() {
                named.insert(name);
            }
        }
        rest = after;
    }
    named
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
fn the_top_level_modules_have_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    // The reading itself works: known edges are seen, comments and unit tests are not.
    assert!(graph["router"].contains("graphql"), "{graph:?}");
    assert!(graph["db"].contains("config"), "{graph:?}");
    assert!(
        graph["model"].is_empty(),
        "model depends on nothing: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_reader_sees_groups_and_cycles() {
    let code = without_test_modules(&without_comments(
        "use crate::{app::App, db::{self, Db}, error};\n// crate::hidden\nlet x = crate::clock::now();\n#[cfg(test)]\nmod tests { use crate::tested; }\nlet s = \"// not a comment\"; crate::after;",
    ));
    let named: Vec<String> = crate_paths(&code).into_iter().collect();
    assert_eq!(named, ["after", "app", "clock", "db", "error"]);
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
