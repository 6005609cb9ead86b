//! The module graph reads bottom-up, as `src/lib.rs` draws it: a module imports only modules of a
//! lower rank, never one of its own rank or above, so the request path has no cycle and each new
//! feature has one obvious place. This test reads every source file's `crate::` paths (outside its
//! unit tests) and fails, naming the file and the import, when a module reaches up or sideways.

use std::collections::BTreeMap;
use std::path::Path;

/// Each top-level module of `src/` and its rank. Same-rank modules are independent.
const RANKS: &[(&str, u32)] = &[
    // Leaves: the vocabulary every layer speaks.
    ("jsonrpc", 0),
    ("body", 0),
    ("methods", 1),
    ("keys", 1),
    ("error", 2),
    ("call", 2),
    ("config", 2),
    ("metrics", 2),
    // The log subscriber, whose filter comes from the config.
    ("logging", 3),
    // The fleet's Redis, under the layers that keep things in it.
    ("shared", 3),
    // The per-call layers, independent of each other.
    ("policy", 4),
    ("ratelimit", 4),
    ("cache", 4),
    ("upstream", 4),
    // The HTTP layers over them, then their composition.
    ("http", 5),
    ("stack", 6),
    // Serving it.
    ("server", 7),
    ("gateway", 8),
    ("cli", 9),
    ("demo", 10),
];

/// The simulated node stands apart: it speaks the node's wire (`jsonrpc`) and nothing else, and
/// only the demo starts it.
const DEVNODE: &str = "devnode";
const DEVNODE_MAY_IMPORT: &[&str] = &["jsonrpc"];
const MAY_IMPORT_DEVNODE: &[&str] = &["demo"];

fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("a file under src/");
    let first = rel.components().next().expect("a path").as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

/// The top-level modules a file's non-test code names through `crate::`, including each name of
/// a `use crate::{a::X, b::{Y, Z}}` group spread over several lines.
fn imports(text: &str, known: &[&str]) -> Vec<String> {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let first_segment = |s: &str| -> String {
        s.trim()
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .unwrap_or("")
            .to_string()
    };
    let mut found = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names = match rest.strip_prefix('{') {
            Some(group) => {
                // The group's top-level elements, up to its matching brace.
                let (mut depth, mut start, mut names) = (0usize, 0usize, Vec::new());
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            names.push(first_segment(&group[start..i]));
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            names.push(first_segment(&group[start..i]));
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
                names
            }
            None => vec![first_segment(rest)],
        };
        found.extend(names.into_iter().filter(|n| known.contains(&n.as_str())));
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_imports_one_above_or_beside_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let ranks: BTreeMap<&str, u32> = RANKS.iter().copied().collect();
    let mut known: Vec<&str> = RANKS.iter().map(|(m, _)| *m).collect();
    known.push(DEVNODE);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let module = top_module(&src, file);
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a readable source file");
        for used in imports(&text, &known) {
            if used == module {
                continue;
            }
            let allowed = if module == DEVNODE {
                DEVNODE_MAY_IMPORT.contains(&used.as_str())
            } else if used == DEVNODE {
                MAY_IMPORT_DEVNODE.contains(&module.as_str())
            } else {
                let mine = ranks.get(module.as_str()).unwrap_or_else(|| {
                    panic!("src/{module} is not in RANKS: give it its place in the graph")
                });
                ranks[used.as_str()] < *mine
            };
            if !allowed {
                wrong.push(format!(
                    "{} imports crate::{used}",
                    file.strip_prefix(&src).unwrap_or(file).display()
                ));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "imports against the layer order:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_sees_multi_name_imports() {
    let known = ["cache", "call", "upstream", "methods"];
    let found = imports(
        "use crate::{\n    cache::{AnswerCache, CacheLayer},\n    call::RpcCall,\n};\nlet x = crate::upstream::Pool::new();\n// crate::methods in a comment\n",
        &known,
    );
    assert_eq!(found, ["cache", "call", "upstream"]);
}
