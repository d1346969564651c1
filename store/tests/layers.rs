//! The store's modules read top to bottom: no two top-level modules import each
//! other (directly or through others), nor two files of `mvcc/`. Read from the
//! sources (`crate::a::…` and `super::b` paths outside comments and test modules),
//! so a new import circle fails here with the files that close it.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `mvcc/kvstore.rs` → ["mvcc", "kvstore"]; `mvcc/mod.rs` → ["mvcc"].
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its `#[cfg(test)]` modules
/// (tests may use any layer).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i32> = None;
    let mut depth = 0i32;
    let mut test_attr = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        if skip_depth.is_none() && test_attr && (t.starts_with("mod ") || t.contains(" mod ")) && t.ends_with('{') {
            skip_depth = Some(depth);
        }
        test_attr = t.starts_with("#[cfg(test)]");
        let opens = line.matches('{').count() as i32;
        let closes = line.matches('}').count() as i32;
        depth += opens - closes;
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every `crate::a[::b]` and `super::b` path in `code`, as module paths.
fn imports(module: &[String], code: &str) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit()).collect::<String>();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + 7..];
        let a = ident(rest);
        if a.is_empty() {
            continue;
        }
        let mut path = vec![a.clone()];
        if let Some(after) = rest[a.len()..].strip_prefix("::") {
            let b = ident(after);
            if !b.is_empty() {
                path.push(b);
            }
        }
        out.insert(path);
    }
    for (i, _) in code.match_indices("super::") {
        // Only a plain `super::name` (not `super::super::`): the sibling module.
        if i >= 2 && &code[i - 2..i] == "::" {
            continue;
        }
        let b = ident(&code[i + 7..]);
        if b.is_empty() || b == "super" || module.len() < 2 {
            continue;
        }
        let mut path = module[..module.len() - 1].to_vec();
        path.push(b);
        out.insert(path);
    }
    out
}

/// A cycle in `edges`, as the nodes along it, if there is one.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(n: &str, edges: &BTreeMap<String, BTreeSet<String>>, state: &mut BTreeMap<String, u8>, stack: &mut Vec<String>) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if !state.contains_key(n) {
            if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn modules_import_downwards_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut mvcc: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut by: BTreeMap<(String, String), String> = BTreeMap::new();
    let tops: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).filter_map(|m| m.first().cloned()).collect();
    for f in &files {
        let module = module_of(&src, f);
        // main.rs and lib.rs sit above everything; a `tests.rs` is a test module.
        if module.is_empty() || module[0] == "main" || module[0] == "lib" || module.last().is_some_and(|m| m == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for target in imports(&module, &code(&text)) {
            if target[0] != module[0] && tops.contains(&target[0]) {
                top.entry(module[0].clone()).or_default().insert(target[0].clone());
                by.entry((module[0].clone(), target[0].clone())).or_insert_with(|| f.display().to_string());
            }
            if module[0] == "mvcc" && target[0] == "mvcc" && module.len() > 1 && target.len() > 1 && module[1] != target[1] {
                mvcc.entry(module[1].clone()).or_default().insert(target[1].clone());
                by.entry((module[1].clone(), target[1].clone())).or_insert_with(|| f.display().to_string());
            }
        }
    }
    for (name, edges) in [("top-level modules", &top), ("mvcc/", &mvcc)] {
        if let Some(c) = find_cycle(edges) {
            let files: Vec<String> = c.windows(2).map(|w| format!("{} → {} ({})", w[0], w[1], by[&(w[0].clone(), w[1].clone())])).collect();
            panic!("an import circle among the {name}: {}", files.join(", "));
        }
    }
    assert!(top.len() > 5 && mvcc.len() > 5, "the scan found the modules: {top:?} {mvcc:?}");
}
