//! Guards the runtime's layout (DESIGN.md, "The runtime's layout as it grows"):
//! no two source files import each other, directly or around a loop, and the
//! clients never name a backend's module.
//!
//! Each file of `src/` is a node; an edge is a path in its non-test code
//! (`crate::…`, `super::…`, `self::…`, or a child module's name in a `mod.rs`)
//! resolved to the file that defines the item. A re-export in a `mod.rs`
//! (`pub use child::X`) is not an edge of its own: a path through it resolves
//! to the file it re-exports from, so a folder's `mod.rs` can gather its
//! children's names without closing a loop. `lib.rs` is the public hub and is
//! left out the same way.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

type Module = Vec<String>;

struct Source {
    module: Module,
    is_folder: bool,
    text: String,
}

fn read_sources(dir: &Path, module: &[String], out: &mut Vec<Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("src/ is readable")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut m = module.to_vec();
            m.push(name);
            read_sources(&path, &m, out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut m = module.to_vec();
            let is_folder = stem == "mod" || (module.is_empty() && stem == "lib");
            if !is_folder {
                m.push(stem.to_owned());
            }
            let text = std::fs::read_to_string(&path).expect("a source file is readable");
            out.push(Source {
                module: m,
                is_folder,
                text: code_only(&text),
            });
        }
    }
}

/// The file without its unit tests and comment lines.
fn code_only(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands a use tree (`a::{b, c::{d, e as f}}`) into paths.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or("").trim();
        if path.is_empty() {
            return Vec::new();
        }
        return vec![path.split("::").map(|s| s.trim().to_owned()).collect()];
    };
    let prefix: Vec<String> = tree[..open]
        .trim_end_matches(':')
        .split("::")
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut item, mut out) = (0, String::new(), Vec::new());
    let push = |item: &str, out: &mut Vec<Vec<String>>| {
        for sub in expand(item) {
            let mut path = prefix.clone();
            if sub != ["self"] {
                path.extend(sub);
            }
            out.push(path);
        }
    };
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                push(&item, &mut out);
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    push(&item, &mut out);
    out
}

/// The `use` statements of a file (those that start a line): (is a
/// re-export, the tree), and the text outside them.
fn uses(text: &str) -> (Vec<(bool, String)>, String) {
    let (mut found, mut rest) = (Vec::new(), String::new());
    let mut lines = text.split_inclusive('\n');
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        let after_pub = trimmed
            .strip_prefix("pub")
            .map(|r| match r.strip_prefix('(') {
                Some(r) => r.split_once(')').map_or("", |(_, r)| r),
                None => r,
            })
            .map(str::trim_start);
        let Some(tree) = after_pub.unwrap_or(trimmed).strip_prefix("use ") else {
            rest.push_str(line);
            continue;
        };
        let mut statement = tree.to_owned();
        while !statement.contains(';') {
            match lines.next() {
                Some(more) => statement.push_str(more),
                None => break,
            }
        }
        let end = statement.find(';').unwrap_or(statement.len());
        found.push((after_pub.is_some(), statement[..end].to_owned()));
    }
    (found, rest)
}

/// Paths written in expressions and types: `a::b::c` runs of identifiers.
fn inline_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if ident(bytes[i]) && (i == 0 || (!ident(bytes[i - 1]) && bytes[i - 1] != b':')) {
            let mut j = i;
            while j < bytes.len() && (ident(bytes[j]) || bytes[j] == b':') {
                j += 1;
            }
            let run = &text[i..j];
            if run.contains("::") {
                out.push(
                    run.split("::")
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect(),
                );
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

struct Graph {
    files: BTreeSet<Module>,
    /// Per folder module: re-exported name → the path it re-exports.
    reexports: HashMap<Module, HashMap<String, Vec<String>>>,
}

impl Graph {
    fn absolute(&self, here: &Source, path: &[String]) -> Option<Vec<String>> {
        let (first, rest) = path.split_first()?;
        let parent = &here.module[..here.module.len().saturating_sub(1)];
        let base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "super" if here.is_folder => parent.to_vec(),
            "super" => parent.to_vec(),
            "self" => here.module.clone(),
            child if here.is_folder => {
                let mut m = here.module.clone();
                m.push(child.to_owned());
                if !self.files.contains(&m) {
                    return None;
                }
                return Some(m.into_iter().chain(rest.iter().cloned()).collect());
            }
            _ => return None,
        };
        Some(base.into_iter().chain(rest.iter().cloned()).collect())
    }

    /// The file that defines what `path` (absolute) names.
    fn resolve(&self, path: &[String], hops: usize) -> Module {
        let mut here: Module = Vec::new();
        for segment in path {
            let mut next = here.clone();
            next.push(segment.clone());
            if self.files.contains(&next) {
                here = next;
                continue;
            }
            if hops < 8 {
                if let Some(target) = self.reexports.get(&here).and_then(|r| r.get(segment)) {
                    return self.resolve(&target.clone(), hops + 1);
                }
            }
            break;
        }
        here
    }
}

/// The file graph of `src/`: each file and the files it uses.
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut sources = Vec::new();
    read_sources(src, &[], &mut sources);
    sources.retain(|s| s.module != ["layering"]);
    let mut graph = Graph {
        files: sources.iter().map(|s| s.module.clone()).collect(),
        reexports: HashMap::new(),
    };
    for source in sources.iter().filter(|s| s.is_folder) {
        let mut names = HashMap::new();
        for (is_pub, tree) in uses(&source.text).0 {
            for path in expand(&tree).into_iter().filter(|_| is_pub) {
                if let (Some(name), Some(abs)) = (path.last(), graph.absolute(source, &path)) {
                    names.insert(name.clone(), abs);
                }
            }
        }
        graph.reexports.insert(source.module.clone(), names);
    }
    let mut edges = BTreeMap::new();
    for source in sources.iter().filter(|s| !s.module.is_empty()) {
        let (used, rest) = uses(&source.text);
        let mut paths: Vec<Vec<String>> = used
            .into_iter()
            .filter(|(is_pub, _)| !(*is_pub && source.is_folder))
            .flat_map(|(_, tree)| expand(&tree))
            .collect();
        paths.extend(inline_paths(&rest));
        let targets: BTreeSet<Module> = paths
            .iter()
            .filter_map(|p| graph.absolute(source, p))
            .map(|p| graph.resolve(&p, 0))
            .filter(|m| !m.is_empty() && *m != source.module)
            .collect();
        edges.insert(source.module.clone(), targets);
    }
    edges
}

/// One loop of the graph, if there is one.
fn find_loop(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        node: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        state: &mut HashMap<Module, bool>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        match state.get(node) {
            Some(true) => {
                let at = stack.iter().position(|m| m == node).unwrap_or(0);
                let mut cycle = stack[at..].to_vec();
                cycle.push(node.clone());
                return Some(cycle);
            }
            Some(false) => return None,
            None => {}
        }
        state.insert(node.clone(), true);
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, state, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        state.insert(node.clone(), false);
        None
    }
    let mut state = HashMap::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut state, &mut Vec::new()))
}

fn src() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
}

#[test]
fn no_source_files_import_each_other_in_a_loop() {
    let edges = graph(src());
    assert!(edges.len() > 30, "the graph covers the crate's files");
    if let Some(cycle) = find_loop(&edges) {
        let names: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
        panic!("import loop: {}", names.join(" -> "));
    }
}

#[test]
fn clients_reach_backends_only_through_the_seam() {
    let edges = graph(src());
    for (module, targets) in &edges {
        if !["table", "queue", "blob"].contains(&module[0].as_str()) {
            continue;
        }
        for target in targets {
            let concrete = target.len() > 1
                && target[0] == "backend"
                && ["http", "embedded"].contains(&target[1].as_str());
            assert!(
                !concrete,
                "{} imports {}",
                module.join("/"),
                target.join("/")
            );
        }
    }
}

#[test]
fn the_checker_sees_a_loop_and_a_client_naming_a_backend() {
    let dir = std::env::temp_dir().join(format!("tablekit-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("backend/http")).unwrap();
    std::fs::create_dir_all(dir.join("table")).unwrap();
    let write = |path: &str, text: &str| std::fs::write(dir.join(path), text).unwrap();
    write("lib.rs", "mod backend;\nmod error;\nmod edm;\nmod table;\n");
    write("error.rs", "use crate::edm::EdmValue;\npub struct Error;\n");
    write("edm.rs", "use crate::error::Error;\npub enum EdmValue {}\n");
    write(
        "backend/mod.rs",
        "pub(crate) mod http;\npub(crate) use http::connect;\n",
    );
    write(
        "backend/http/mod.rs",
        "pub(crate) fn connect() {}\npub(crate) struct HttpBackend;\n",
    );
    write(
        "table/mod.rs",
        "fn new() { crate::backend::connect(); let _ = crate::backend::http::HttpBackend; }\n\
         #[cfg(test)]\nmod tests {\n    use crate::error::Error;\n}\n",
    );
    let edges = graph(&dir);
    let names = |m: &str| m.split('/').map(str::to_owned).collect::<Vec<_>>();
    assert!(edges[&names("error")].contains(&names("edm")));
    let cycle = find_loop(&edges).expect("error <-> edm is a loop");
    assert!(cycle.len() == 3, "{cycle:?}");
    // The re-export resolves to the file that defines the item; tests are not edges.
    assert_eq!(
        edges[&names("table")],
        [names("backend/http")].into_iter().collect()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
