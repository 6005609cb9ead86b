//! The manual's links hold: every relative link in `README.md`, `docs/*.md` and
//! `benches/README.md` points at a file or directory of this repository, and a link to a
//! `#section` of a markdown file names a heading that file has (GitHub's anchor for it). Links
//! never leave the repository: no `../` past its root, no `http(s)://` link (the only web
//! addresses allowed are the demo's own, on loopback, written as `<http://127.0.0.1:...>`).
//! Inline code that names a repository file (`config/...`, `src/...`, `tests/...`, ...) must name
//! one that exists, too. No network, no build of the gateway: it reads files.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The markdown files whose links are checked, relative to the repository's root.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![
        PathBuf::from("README.md"),
        PathBuf::from("benches/README.md"),
    ];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("a docs/ directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

/// The text outside fenced code blocks, line by line (with line numbers from 1), and the headings
/// among those lines.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = if trimmed.starts_with("```") {
            Some("```")
        } else if trimmed.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((n + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` with its inline code spans taken out, and the spans.
fn split_code(line: &str) -> (String, Vec<String>) {
    let mut prose = String::new();
    let mut spans = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        let closing = "`".repeat(ticks);
        match after.find(&closing) {
            Some(end) => {
                prose.push_str(&rest[..start]);
                prose.push_str(" CODE ");
                spans.push(after[..end].trim().to_string());
                rest = &after[end + ticks..];
            }
            None => {
                prose.push_str(rest);
                rest = "";
            }
        }
    }
    prose.push_str(rest);
    (prose, spans)
}

/// The targets of the `[text](target)` and `![alt](target)` links of a line of prose (inline
/// code already taken out).
fn link_targets(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = prose.as_bytes();
    let mut i = 0;
    while let Some(pos) = prose[i..].find("](") {
        let open = i + pos + 2;
        // The link text must open with `[` on this line.
        let has_text = prose[..i + pos].rfind('[').is_some();
        let mut depth = 1;
        let mut end = open;
        while end < bytes.len() {
            match bytes[end] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            end += 1;
        }
        if has_text && end < bytes.len() {
            let target = prose[open..end].trim();
            // `[text](<target>)` may hold spaces; `[text](target "title")`: the title is not
            // part of the target.
            let target = match target.strip_prefix('<') {
                Some(t) => t.split('>').next().unwrap_or_default(),
                None => target.split_whitespace().next().unwrap_or_default(),
            };
            out.push(target.to_string());
        }
        i = end.min(bytes.len());
        if i >= bytes.len() {
            break;
        }
    }
    out
}

/// The web addresses written as `<scheme://...>` autolinks in a line of prose.
fn autolinks(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = prose;
    while let Some(start) = rest.find('<') {
        let after = &rest[start + 1..];
        match after.find('>') {
            Some(end) => {
                let inside = &after[..end];
                if inside.contains("://") && !inside.contains(' ') {
                    out.push(inside.to_string());
                }
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    out
}

/// GitHub's anchor for a heading's text: the rendered text in lower case, without the
/// characters that are neither letters, digits, spaces, `-` nor `_`, spaces made `-`.
fn slug(heading: &str) -> String {
    // Links in a heading render as their text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(pos) = rest.find("](") {
        let before = &rest[..pos];
        let after = &rest[pos + 2..];
        match after.find(')') {
            Some(end) => {
                text.push_str(&before.replacen('[', "", 1));
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown file's headings (`#` to `######`, outside code blocks), with
/// GitHub's `-1`, `-2` suffixes for repeated ones.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#').trim());
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// `base/relative` with `.` and `..` resolved, or `None` when it climbs out of the repository.
fn resolve(base: &Path, relative: &str) -> Option<PathBuf> {
    let joined = base.join(relative);
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(part) => parts.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// Inline code that reads as a path in this repository: a top-level directory of it, then more.
fn repository_path(code: &str) -> Option<&str> {
    const DIRS: &[&str] = &[
        "config/",
        "src/",
        "tests/",
        "benches/",
        "docs/",
        ".ci/",
        "examples/",
    ];
    let code = code.trim();
    let looks_like_path = DIRS.iter().any(|d| code.starts_with(d))
        && !code.contains(|c: char| c.is_whitespace() || "*?<>{}[]|$,;=:\"'".contains(c))
        && !code.contains("...");
    looks_like_path.then_some(code)
}

/// Every broken link of one document, as `file:line: why`.
fn broken_links(doc: &Path) -> Vec<String> {
    let root = root();
    let text = std::fs::read_to_string(root.join(doc)).unwrap();
    let dir = doc.parent().unwrap_or(Path::new(""));
    let own = anchors(&text);
    let mut broken = Vec::new();
    for (n, line) in prose_lines(&text) {
        let at = format!("{}:{n}", doc.display());
        let (prose, spans) = split_code(line);
        for target in link_targets(&prose) {
            if target.is_empty() {
                broken.push(format!("{at}: an empty link"));
                continue;
            }
            if target.contains("://") || target.starts_with("mailto:") {
                broken.push(format!(
                    "{at}: {target} leaves the repository (link to its own files only)"
                ));
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            if path.is_empty() {
                let anchor = anchor.unwrap_or_default();
                if !own.contains(anchor) {
                    broken.push(format!("{at}: #{anchor}: no such heading in this file"));
                }
                continue;
            }
            let Some(resolved) = resolve(dir, path) else {
                broken.push(format!("{at}: {target} climbs out of the repository"));
                continue;
            };
            let file = root.join(&resolved);
            if !file.exists() {
                broken.push(format!(
                    "{at}: {target}: {} does not exist",
                    resolved.display()
                ));
                continue;
            }
            if let Some(anchor) = anchor {
                if file.extension().is_some_and(|e| e == "md") {
                    let headings = anchors(&std::fs::read_to_string(&file).unwrap());
                    if !headings.contains(anchor) {
                        broken.push(format!(
                            "{at}: {target}: no heading with the anchor #{anchor} in {}",
                            resolved.display()
                        ));
                    }
                }
            }
        }
        for address in autolinks(&prose) {
            let host = address
                .split("://")
                .nth(1)
                .unwrap_or_default()
                .split(['/', ':'])
                .next()
                .unwrap_or_default();
            if !matches!(host, "127.0.0.1" | "localhost") {
                broken.push(format!(
                    "{at}: <{address}> leaves the repository (link to its own files only)"
                ));
            }
        }
        for code in spans {
            if let Some(path) = repository_path(&code) {
                if !root.join(path).exists() {
                    broken.push(format!("{at}: `{path}` names no file of the repository"));
                }
            }
        }
    }
    broken
}

#[test]
fn every_link_in_the_manual_points_at_something_that_exists() {
    let mut broken = Vec::new();
    let docs = documents();
    assert!(
        docs.len() >= 3,
        "README.md, benches/README.md and docs/: {docs:?}"
    );
    for doc in &docs {
        broken.extend(broken_links(doc));
    }
    assert!(
        broken.is_empty(),
        "{} broken link(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_readme_links_every_document_in_docs() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let linked: BTreeSet<String> = prose_lines(&readme)
        .into_iter()
        .flat_map(|(_, line)| link_targets(&split_code(line).0))
        .map(|t| t.split('#').next().unwrap_or_default().to_string())
        .collect();
    for doc in documents() {
        let doc = doc.display().to_string();
        if doc.starts_with("docs/") {
            assert!(linked.contains(&doc), "README.md does not link {doc}");
        }
    }
}

#[test]
fn the_checker_reads_links_anchors_and_paths_as_github_does() {
    assert_eq!(
        slug("Secrets from the environment (`${VAR}`)"),
        "secrets-from-the-environment-var"
    );
    assert_eq!(
        slug("Monitoring: Prometheus and Grafana"),
        "monitoring-prometheus-and-grafana"
    );
    assert_eq!(
        slug("The control endpoint (`/_devnode`)"),
        "the-control-endpoint-_devnode"
    );
    let (prose, spans) = split_code("see [a](docs/a.md#x) and `[object]`(not a link) `src/x.rs`");
    assert_eq!(link_targets(&prose), vec!["docs/a.md#x".to_string()]);
    assert_eq!(spans, vec!["[object]".to_string(), "src/x.rs".to_string()]);
    assert_eq!(
        link_targets("![shot](config/status-page.png) [t](<a b.md> \"title\")"),
        vec!["config/status-page.png".to_string(), "a b.md".to_string()]
    );
    assert_eq!(
        resolve(Path::new("docs"), "../README.md"),
        Some(PathBuf::from("README.md"))
    );
    assert_eq!(resolve(Path::new("docs"), "../../shared/x.md"), None);
    assert_eq!(
        anchors("# A\n```\n# not a heading\n```\n## A\n"),
        ["a".to_string(), "a-1".to_string()].into_iter().collect()
    );
    assert_eq!(repository_path("tests/fleet*.rs"), None);
    assert_eq!(repository_path("src/http/"), Some("src/http/"));
}
