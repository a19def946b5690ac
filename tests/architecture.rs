//! The house's shape, checked from `src/`: no dependency circle between the top-level rooms, no
//! file over 600 lines before its tests, no function over 80 lines (issue 21). Test code — a
//! `tests.rs` file, a file under a `tests/` folder, the item after `#[cfg(test)]` — is left out
//! of all three. Each checker is shown to find what it looks for on a small example first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// The most lines a file may hold outside its tests.
const MAX_FILE_LINES: usize = 600;
/// The most lines a function may span, its signature and closing brace included.
const MAX_FN_LINES: usize = 80;

/// One source file: its path relative to `src/`, and its text.
struct Source {
    rel: PathBuf,
    text: String,
}

/// Every `.rs` file under `dir`, relative to it, sorted.
fn read_tree(dir: &Path) -> Vec<Source> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<Source>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
                let rel = path
                    .strip_prefix(root)
                    .expect("under the root")
                    .to_path_buf();
                out.push(Source { rel, text });
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

fn is_test_file(rel: &Path) -> bool {
    rel.file_name().is_some_and(|n| n == "tests.rs")
        || rel
            .parent()
            .is_some_and(|p| p.components().any(|c| c.as_os_str() == "tests"))
}

/// The file's lines outside its tests, each with its 1-based number: the item after a
/// `#[cfg(test)]` (and its other attributes) is skipped — `mod x;` that line, a block to the
/// closing brace at the item's indentation (rustfmt's layout).
fn non_test_lines(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start().starts_with("#[cfg(test)]") {
            let mut j = i + 1;
            while j < lines.len() && lines[j].trim_start().starts_with("#[") {
                j += 1;
            }
            i = match lines.get(j) {
                Some(item) if item.trim_end().ends_with(';') => j + 1,
                Some(item) => closing(&lines, j, indent(item)) + 1,
                None => j,
            };
            continue;
        }
        out.push((i + 1, lines[i]));
        i += 1;
    }
    out
}

fn indent(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// The index of the line closing the item opened at `at` (indented by `ind`): the first line
/// after it that is `ind` and `}`, or the last line.
fn closing(lines: &[&str], at: usize, ind: &str) -> usize {
    let opened = lines[at].trim_end();
    if opened.ends_with('}') && opened.contains('{') {
        return at; // `fn f() {}`, `mod m { … }` on one line
    }
    (at + 1..lines.len())
        .find(|&j| lines[j].strip_prefix(ind) == Some("}"))
        .unwrap_or(lines.len().saturating_sub(1))
}

// ---- (a) circles between the top-level rooms ----

/// The top-level rooms: each `src/X.rs` (but `lib.rs` and `main.rs`) and each `src/X/`.
fn rooms(sources: &[Source]) -> BTreeSet<String> {
    sources
        .iter()
        .filter_map(|s| {
            let mut parts = s.rel.components();
            let first = parts.next()?.as_os_str().to_str()?;
            match parts.next() {
                Some(_) => Some(first.to_string()),
                None => first
                    .strip_suffix(".rs")
                    .filter(|m| !matches!(*m, "lib" | "main"))
                    .map(str::to_string),
            }
        })
        .collect()
}

/// The module path of a file (`src/a/b.rs` and `src/a/b/mod.rs` are `["a", "b"]`).
fn module_path(rel: &Path) -> Vec<String> {
    let mut path: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|l| l == "mod") {
        path.pop();
    }
    path
}

/// The top-level rooms a line of code names: `crate::X`, each `X` of `use crate::{X, …}` (its
/// braces may span lines: `code` is the whole non-test text), and `super::…::X` climbing to the
/// crate's root.
fn named_rooms(code: &str, module: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let path = Regex::new(r"\b((?:super::)+|crate::)(\{|\w+)").expect("a valid regex");
    for m in path.captures_iter(code) {
        let climbs = m[1].matches("super::").count();
        let at_root = &m[1] == "crate::" || climbs == module.len();
        if !at_root {
            continue;
        }
        if &m[2] == "{" {
            let open = m.get(2).expect("the brace").end();
            out.extend(group_heads(&code[open..]));
        } else {
            out.push(m[2].to_string());
        }
    }
    out
}

/// The first name of each path in a `use` group whose `{` came just before `rest`.
fn group_heads(rest: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut expecting) = (1, true);
    let mut word = String::new();
    for c in rest.chars() {
        if depth == 1 && expecting && (c.is_alphanumeric() || c == '_') {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            heads.push(std::mem::take(&mut word));
            expecting = false;
        }
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => break,
            '}' => depth -= 1,
            ',' if depth == 1 => expecting = true,
            _ => {}
        }
    }
    heads
}

/// Edges between rooms: `from → to → the files of `from` that name `to``.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>>;

fn dependencies(sources: &[Source]) -> Graph {
    let rooms = rooms(sources);
    let mut graph = Graph::new();
    for s in sources.iter().filter(|s| !is_test_file(&s.rel)) {
        let module = module_path(&s.rel);
        let Some(from) = module.first().filter(|m| rooms.contains(*m)) else {
            continue;
        };
        let code: String = non_test_lines(&s.text)
            .into_iter()
            .filter(|(_, l)| !l.trim_start().starts_with("//"))
            .map(|(_, l)| format!("{l}\n"))
            .collect();
        for to in named_rooms(&code, &module) {
            if &to != from && rooms.contains(&to) {
                let files = graph.entry(from.clone()).or_default();
                files.entry(to).or_default().insert(s.rel.clone());
            }
        }
    }
    graph
}

/// Every room `from` reaches.
fn reach(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(at) = todo.pop() {
        for next in graph.get(&at).into_iter().flat_map(BTreeMap::keys) {
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    seen
}

/// Each circle (rooms that reach each other), with the edges inside it and the files that make
/// them.
fn circles(sources: &[Source]) -> Vec<String> {
    let graph = dependencies(sources);
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|r| (r, reach(&graph, r))).collect();
    let mut found: BTreeSet<BTreeSet<&String>> = BTreeSet::new();
    for (room, reached) in &reaches {
        let circle: BTreeSet<&String> = reaches
            .iter()
            .filter(|(other, theirs)| reached.contains(**other) && theirs.contains(*room))
            .map(|(other, _)| *other)
            .collect();
        if circle.len() > 1 {
            found.insert(circle);
        }
    }
    found
        .into_iter()
        .map(|circle| {
            let mut text = format!("circle between {circle:?}:");
            for from in &circle {
                for (to, files) in &graph[*from] {
                    if circle.contains(to) {
                        text.push_str(&format!("\n  {from} -> {to}: {files:?}"));
                    }
                }
            }
            text
        })
        .collect()
}

// ---- (b) files too long, (c) functions too long ----

fn long_files(sources: &[Source]) -> Vec<String> {
    sources
        .iter()
        .filter(|s| !is_test_file(&s.rel))
        .filter_map(|s| {
            let n = non_test_lines(&s.text).len();
            (n > MAX_FILE_LINES).then(|| {
                format!(
                    "src/{}: {n} lines outside its tests (at most {MAX_FILE_LINES})",
                    s.rel.display()
                )
            })
        })
        .collect()
}

fn long_functions(sources: &[Source]) -> Vec<String> {
    let start = Regex::new(
        r#"^(\s*)(?:pub(?:\([a-z]+\))? )?(?:const )?(?:async )?(?:unsafe )?(?:extern "C" )?fn (\w+)"#,
    )
    .expect("a valid regex");
    let mut out = Vec::new();
    for s in sources.iter().filter(|s| !is_test_file(&s.rel)) {
        let kept = non_test_lines(&s.text);
        let lines: Vec<&str> = kept.iter().map(|(_, l)| *l).collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(m) = start.captures(line) else {
                continue;
            };
            if line.trim_end().ends_with(';') {
                continue; // a declaration in a trait or `extern` block
            }
            let end = closing(&lines, i, m.get(1).map_or("", |g| g.as_str()));
            let n = kept[end].0 - kept[i].0 + 1;
            if n > MAX_FN_LINES {
                out.push(format!(
                    "src/{}:{} fn {}: {n} lines (at most {MAX_FN_LINES})",
                    s.rel.display(),
                    kept[i].0,
                    &m[2]
                ));
            }
        }
    }
    out
}

// ---- the house ----

fn src() -> Vec<Source> {
    read_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

fn assert_none(what: &str, found: &[String]) {
    assert!(found.is_empty(), "{what}:\n{}", found.join("\n"));
}

#[test]
fn no_circle_between_the_top_level_rooms() {
    assert_none("module circles", &circles(&src()));
}

#[test]
fn no_file_over_600_lines_before_its_tests() {
    assert_none("files too long", &long_files(&src()));
}

#[test]
fn no_function_over_80_lines() {
    assert_none("functions too long", &long_functions(&src()));
}

// ---- the checkers, shown to find what they look for ----

fn sources(files: &[(&str, &str)]) -> Vec<Source> {
    files
        .iter()
        .map(|(rel, text)| Source {
            rel: PathBuf::from(rel),
            text: text.to_string(),
        })
        .collect()
}

#[test]
fn a_circle_is_found_and_named_with_its_files() {
    let house = sources(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a/mod.rs", "mod x;\n"),
        ("a/x.rs", "use crate::{\n    b::Thing,\n    c,\n};\n"),
        ("b.rs", "fn f() { crate::a::g() }\n"),
        ("c.rs", "fn c() {}\n"),
    ]);
    let found = circles(&house);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains(r#"{"a", "b"}"#), "{}", found[0]);
    assert!(found[0].contains(r#"a -> b: {"a/x.rs"}"#), "{}", found[0]);
    assert!(found[0].contains(r#"b -> a: {"b.rs"}"#), "{}", found[0]);
    // a → c with c ↛ a is an arrow, not a circle.
    assert!(!found[0].contains("\"c\""), "{}", found[0]);
}

#[test]
fn test_code_comments_and_climbs_count_as_they_should() {
    let house = |b: &str| {
        sources(&[
            ("a/mod.rs", "use crate::b;\n"),
            ("a/tests.rs", ""),
            ("b/mod.rs", "mod deep;\n"),
            ("b/deep.rs", b),
            ("b/tests.rs", "use crate::a;\n"),
        ])
    };
    // Test code, and a comment naming a room, make no edge.
    let quiet = "// see crate::a\n#[cfg(test)]\n#[allow(x)]\nmod tests {\n    use crate::a;\n}\n";
    assert!(circles(&house(quiet)).is_empty());
    // Code after the test module still counts; so does `super::super::a` from `b::deep`.
    let after = format!("{quiet}fn f() {{ crate::a::g() }}\n");
    assert_eq!(circles(&house(&after)).len(), 1);
    assert_eq!(circles(&house("use super::super::a;\n")).len(), 1);
    // `super::a` from `b::deep` is `b::a`, not the room `a`.
    assert!(circles(&house("use super::a;\n")).is_empty());
}

fn body(n: usize) -> String {
    (0..n).map(|i| format!("    let _x{i} = {i};\n")).collect()
}

#[test]
fn a_long_function_is_found_and_a_short_or_test_one_is_not() {
    // 80 lines with its signature and closing brace: the most allowed.
    let ok = format!("fn fine() {{\n{}}}\n", body(78));
    let long = format!(
        "impl X {{\n    pub(crate) async fn long() {{\n{}    }}\n}}\n",
        body(79)
    );
    let test = format!(
        "#[cfg(test)]\nmod tests {{\n    fn t() {{\n{}    }}\n}}\n",
        body(200)
    );
    let house = sources(&[
        ("a.rs", &format!("fn one() {{}}\n{ok}\n{test}")),
        ("b.rs", &format!("fn d();\n{long}")),
        ("c/tests.rs", &format!("fn t() {{\n{}}}\n", body(200))),
    ]);
    assert_eq!(
        long_functions(&house),
        ["src/b.rs:3 fn long: 81 lines (at most 80)"]
    );
}

#[test]
fn a_long_file_is_found_its_tests_left_out() {
    let code = body(600);
    let tests = format!("#[cfg(test)]\nmod tests {{\n{}}}\n", body(100));
    let house = sources(&[
        ("a.rs", &format!("{code}{tests}")),
        ("b.rs", &format!("{code}fn one_more() {{}}\n")),
        ("c/tests.rs", &body(700)),
    ]);
    assert_eq!(
        long_files(&house),
        ["src/b.rs: 601 lines outside its tests (at most 600)"]
    );
}
