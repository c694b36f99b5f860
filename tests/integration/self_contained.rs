//! The repository stands alone: no file refers to documents outside it. Its behaviour is
//! described in its own `docs/`, which someone who clones it has.

use std::path::{Path, PathBuf};

/// Spelled in pieces so that this file does not match itself.
fn outside_references() -> Vec<String> {
    vec![
        format!("../{}", "shared"),
        format!("{}.md", "SPEC"),
        format!("{} section", "SPEC"),
        format!("{} ", "SPEC"),
        format!("{} {}", "the", "seeds"),
        format!("{}/", "seeds"),
    ]
}

/// Directories that are not the repository's own text: build output, installed
/// packages, local data, and fuzzing's working files.
const SKIPPED: &[&str] = &[
    ".git",
    "target",
    "node_modules",
    ".hymical",
    "corpus",
    "artifacts",
    "seed-corpus",
];

fn files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !SKIPPED.contains(&name.as_str()) {
                files(&path, found);
            }
        } else {
            found.push(path);
        }
    }
}

#[test]
fn no_file_refers_to_anything_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    files(root, &mut found);
    let patterns = outside_references();
    let mut offending = Vec::new();
    let mut read = 0;
    for path in &found {
        // Binary files and lock files are not prose.
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        read += 1;
        for (number, line) in text.lines().enumerate() {
            if patterns
                .iter()
                .any(|pattern| line.contains(pattern.as_str()))
            {
                offending.push(format!(
                    "{}:{}: {}",
                    path.strip_prefix(root).unwrap().display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(read > 100, "only {read} files read from {root:?}");
    assert!(
        offending.is_empty(),
        "references to outside the repository:\n{}",
        offending.join("\n")
    );
}
