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
    // The config's durations: one parser, one bound.
    ("duration", 0),
    ("methods", 1),
    ("keys", 1),
    // A call's trace: what its spans hang from (OpenTelemetry, off without `[tracing]`).
    ("otel", 1),
    ("error", 2),
    ("call", 2),
    ("config", 2),
    ("metrics", 2),
    // The log subscriber, whose filter comes from the config.
    ("logging", 3),
    // The fleet's Redis, under the layers that keep things in it.
    ("shared", 3),
    // Holding an answer against its call: the pool checks a node's, the cache one read from Redis.
    ("verify", 3),
    // The per-call layers, independent of each other.
    ("policy", 4),
    ("ratelimit", 4),
    ("cache", 4),
    ("upstream", 4),
    // The node's health API, answered from the pool's state at the bottom of the per-call stack.
    ("health", 5),
    // The HTTP layers over them, then their composition.
    ("http", 6),
    ("stack", 7),
    // Serving it.
    ("server", 8),
    ("gateway", 9),
    ("cli", 10),
    ("demo", 11),
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
    names_after(text, "crate::", known)
}

/// The names among `known` that a file's non-test code names right after `prefix` (`crate::`,
/// `super::`, `crate::http::`), each name of a `{…}` group included.
fn names_after(text: &str, prefix: &str, known: &[&str]) -> Vec<String> {
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
    while let Some(at) = rest.find(prefix) {
        // `super::` inside a longer path (`crate::a::super::`) does not occur; `x_crate::` might.
        let before = code[..code.len() - rest.len() + at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
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

/// The largest a source file of the gateway may grow (the simulated node apart): past it, a file
/// holds more than one concept, and should be cut by concept.
const MAX_LINES: usize = 900;

#[test]
fn no_gateway_file_is_over_the_size_bound() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut large: Vec<String> = files
        .iter()
        .filter(|f| top_module(&src, f) != DEVNODE)
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    large.sort();
    assert!(
        large.is_empty(),
        "files over {MAX_LINES} lines (cut them by concept):\n{}",
        large.join("\n")
    );
}

/// The files of one folder (not `mod.rs`) and the siblings each names through `super::` or
/// `crate::<folder>::`.
fn sibling_imports(src: &Path, dir: &Path) -> BTreeMap<String, Vec<String>> {
    let mut siblings: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a readable folder").flatten() {
        let path = entry.path();
        let name = path.file_stem().map(|n| n.to_string_lossy().into_owned());
        match name {
            Some(n)
                if path.is_dir() || (path.extension().is_some_and(|e| e == "rs") && n != "mod") =>
            {
                siblings.push(n)
            }
            _ => {}
        }
    }
    let known: Vec<&str> = siblings.iter().map(String::as_str).collect();
    let rel = dir.strip_prefix(src).expect("a folder under src/");
    let crate_prefix = format!(
        "crate::{}::",
        rel.components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("::")
    );
    let mut graph = BTreeMap::new();
    for name in &siblings {
        let file = dir.join(format!("{name}.rs"));
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // a sub-folder: its own folder is checked on its own
        };
        let mut used = names_after(&text, "super::", &known);
        used.extend(names_after(&text, &crate_prefix, &known));
        used.retain(|u| u != name);
        used.sort();
        used.dedup();
        graph.insert(name.clone(), used);
    }
    graph
}

/// A cycle in `graph`, as the names along it, if there is one.
fn a_cycle(graph: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|start| visit(start, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_folder_has_an_import_loop_between_its_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![src.clone()];
    let mut loops = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("a readable folder")
            .flatten()
        {
            if entry.path().is_dir() {
                dirs.push(entry.path());
            }
        }
        if dir == src || dir.strip_prefix(&src).is_ok_and(|r| r.starts_with(DEVNODE)) {
            continue; // the top level is the layer test's; the simulated node stands apart
        }
        if let Some(cycle) = a_cycle(&sibling_imports(&src, &dir)) {
            loops.push(format!("{}: {}", dir.display(), cycle.join(" -> ")));
        }
    }
    loops.sort();
    assert!(
        loops.is_empty(),
        "files of one folder importing each other in a loop:\n{}",
        loops.join("\n")
    );
}

#[test]
fn the_loop_check_finds_a_loop_and_passes_a_chain() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().push(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(a_cycle(&graph(&[("a", "b"), ("b", "c")])), None);
    assert_eq!(
        a_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let known = ["value", "scanner"];
    assert_eq!(
        names_after(
            "use super::{value::Json, scanner};\nuse x_super::value;",
            "super::",
            &known
        ),
        ["value", "scanner"]
    );
}
