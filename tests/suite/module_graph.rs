//! Layering, checked: within each crate of the workspace (every member, the
//! binary's `src/` and `python/src` when it exists), no module imports a
//! module that imports it back, directly or through others. A cycle is how
//! the SquashFS reader once grew `impl SquashFs` blocks in six files that
//! all reached back into each other; this test keeps the layers one-way.
//!
//! A reference is any `crate::a::b`, `super::x` or `self::x` path, or a path
//! starting with a child module's name (`x::f()`, `use x::Y`), outside
//! comments and outside `#[cfg(test)]` modules (a test module naturally
//! reaches into the module it tests), resolved to the longest module path it
//! names. Declaring a child (`mod x;`) is not a reference; calling into one
//! or re-exporting from one (`pub use x::Y`) is. An item the crate root
//! re-exports counts as a reference to the module that defines it. A path to
//! an item the root itself defines (`crate::PackOptions`) is not counted:
//! the root is the crate's public face, which every module may name.
//!
//! One boundary is checked too: in mountfs everything FUSE lives under
//! `fuse/` (the `fuse` feature), so no module outside it names `fuser` or
//! refers to `crate::fuse` (test modules included).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path ("a::b") of each source file under `src`.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&p).unwrap();
            out.insert(parts.join("::"), text);
        }
    }
    out
}

/// The code of a file without comments and without its test module.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let t = l.trim_start();
        if t.starts_with("#[cfg(test)]") {
            // Skip the annotated item: up to the matching closing brace, or
            // the line when it has none (`mod tests;`).
            let mut depth = 0i32;
            let mut opened = false;
            for l in lines.by_ref() {
                depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                opened |= l.contains('{');
                if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(l.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// Items a module re-exports from one of its children (`pub use x::Y;`,
/// `pub use x::{Y, Z as W};`): "module::Name" (or "Name" at the root) ->
/// the child module. A path to `crate::Y` names the child that defines it,
/// not the root that passes it on.
fn reexports(me: &str, code: &str, known: &BTreeSet<String>) -> BTreeMap<String, String> {
    let join = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_string()
        } else {
            format!("{a}::{b}")
        }
    };
    let mut out = BTreeMap::new();
    for (i, _) in code.match_indices("pub use ") {
        let stmt = code[i + 8..].split(';').next().unwrap_or("");
        let (path, names) = match stmt.split_once('{') {
            Some((p, n)) => (p, n.trim_end_matches('}').to_string()),
            None => match stmt.rsplit_once("::") {
                Some((p, n)) => (p, n.to_string()),
                None => continue,
            },
        };
        let mut module = me.to_string();
        for seg in path.split("::").map(str::trim).filter(|s| !s.is_empty()) {
            let cand = join(&module, seg);
            if !known.contains(&cand) {
                break;
            }
            module = cand;
        }
        if module == me {
            continue;
        }
        for n in names.split(',') {
            let name = n.split(" as ").last().unwrap_or("").trim();
            if !name.is_empty() && name != "*" && name != "self" {
                out.insert(join(me, name), module.clone());
            }
        }
    }
    out
}

/// Module paths named from inside module `me` (the longest known prefix of
/// each `crate::` or `super::` path), without re-exports to resolve.
fn references(me: &str, code: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    references_via(me, code, known, &BTreeMap::new())
}

/// [`references`], an item re-exported by a module (`aliases`, from
/// [`reexports`]) counting as a reference to the module that defines it.
fn references_via(
    me: &str,
    code: &str,
    known: &BTreeSet<String>,
    aliases: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let parent = |m: &str| {
        m.rsplit_once("::")
            .map_or(String::new(), |(p, _)| p.to_string())
    };
    let child = |m: &str| {
        if me.is_empty() {
            m.to_string()
        } else {
            format!("{me}::{m}")
        }
    };
    // `x::...` where `x` is a child module of `me` (a relative path, in a
    // `use` or in an expression), unless it continues another path.
    for (i, _) in code.match_indices("::") {
        let head = &code[..i];
        let start = head
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        let first = &head[start..];
        if first.is_empty() || head[..start].ends_with("::") {
            continue;
        }
        if known.contains(&child(first)) {
            out.insert(child(first));
        }
    }
    for (kw, base) in [
        ("crate::", String::new()),
        ("super::", parent(me)),
        ("self::", me.to_string()),
    ] {
        for (i, _) in code.match_indices(kw) {
            // `super::` inside `crate::a::super::`-like text does not occur;
            // a preceding identifier character means another path segment.
            if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut path = base.clone();
            let rest = &code[i + kw.len()..];
            let mut rest = rest;
            // Nested `super::super::`.
            while let Some(r) = rest.strip_prefix("super::") {
                path = parent(&path);
                rest = r;
            }
            let mut best = path.clone();
            for seg in rest.split("::").map(|s| {
                s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap()
            }) {
                if seg.is_empty() {
                    break;
                }
                let cand = if path.is_empty() {
                    seg.to_string()
                } else {
                    format!("{path}::{seg}")
                };
                if let Some(defined) = aliases.get(&cand) {
                    best = defined.clone();
                    break;
                }
                if !known.contains(&cand) {
                    break;
                }
                path = cand;
                best = path.clone();
            }
            if best != me {
                out.insert(best);
            }
        }
    }
    out
}

/// A cycle in the graph, if any, as a list of modules.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let at = path.iter().position(|p| p == n).unwrap();
                let mut c = path[at..].to_vec();
                c.push(n.to_string());
                return Some(c);
            }
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

fn graph_of(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(src);
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    let aliases: BTreeMap<String, String> = mods
        .iter()
        .flat_map(|(m, text)| reexports(m, &code(text), &known))
        .collect();
    mods.iter()
        .map(|(m, text)| {
            let mut refs = references_via(m, &code(text), &known, &aliases);
            refs.remove("");
            (m.clone(), refs)
        })
        .collect()
}

/// The workspace's members as the root Cargo.toml lists them.
fn workspace_members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let at = manifest
        .lines()
        .position(|l| l.trim_start().starts_with("members"))
        .expect("Cargo.toml has a workspace members list");
    // The list, on one line or several, comments dropped.
    let text: String = manifest
        .lines()
        .skip(at)
        .map(|l| l.split('#').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let list = text.split_once('[').unwrap().1.split_once(']').unwrap().0;
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

#[test]
fn no_crate_has_a_module_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let members = workspace_members(root);
    for m in [
        "format", "objstore", "packer", "mountfs", "testkit", "bench",
    ] {
        assert!(members.iter().any(|x| x == m), "{m} is not a member");
    }
    // The binary (main.rs is its root module), every member, and the Python
    // extension when it is there.
    let mut crates: Vec<String> = vec![".".into()];
    crates.extend(members);
    if root.join("python/src").is_dir() {
        crates.push("python".into());
    }
    for krate in &crates {
        let g = graph_of(&root.join(krate).join("src"));
        assert!(!g.is_empty(), "{krate}: modules not found");
        if let Some(c) = find_cycle(&g) {
            panic!("{krate}: import cycle {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_checker_sees_a_cycle() {
    // Two modules that reach into each other, one through `super::`.
    let mut g = BTreeMap::new();
    let known: BTreeSet<String> = ["a", "a::b", "c"].map(String::from).into();
    g.insert("a".into(), references("a", "use crate::a::b::X;\n", &known));
    g.insert("a::b".into(), references("a::b", "use super::Y;\n", &known));
    g.insert(
        "c".into(),
        references("c", "fn f() { crate::a::b::g() }\n", &known),
    );
    assert_eq!(g["a"], ["a::b".to_string()].into());
    assert_eq!(g["a::b"], ["a".to_string()].into());
    assert!(find_cycle(&g).is_some());
    g.insert(
        "a::b".into(),
        references("a::b", "// use super::Y;\n", &known),
    );
    g.insert(
        "a::b".into(),
        references("a::b", &code("// use super::Y;\n"), &known),
    );
    assert!(find_cycle(&g).is_none());
    // A parent re-exporting from a child that uses the parent's items.
    g.insert("a".into(), references("a", "pub use b::X;\n", &known));
    g.insert("a::b".into(), references("a::b", "use super::*;\n", &known));
    assert!(find_cycle(&g).is_some());
    // A parent calling into a child (no `use`) that uses the parent's items.
    let known: BTreeSet<String> = ["cmd", "cmd::pack"].map(String::from).into();
    let calls = references("cmd", "fn d() { pack::run(); std::pack::x(); }\n", &known);
    assert_eq!(calls, ["cmd::pack".to_string()].into());
    g.insert("cmd".into(), calls);
    g.insert(
        "cmd::pack".into(),
        references("cmd::pack", "use super::location;\n", &known),
    );
    assert!(find_cycle(&g).is_some());
    // An item re-exported by the root names the module that defines it.
    let known: BTreeSet<String> = ["error", "output"].map(String::from).into();
    let aliases = reexports("", "pub use error::{Kind, PackError as E};\n", &known);
    assert_eq!(aliases["E"], "error");
    assert_eq!(aliases["Kind"], "error");
    let refs = references_via("output", "use crate::E;\n", &known, &aliases);
    assert_eq!(refs, ["error".to_string()].into());
    // Test modules are not references.
    let c = code("use crate::c;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\nfn x() {}\n");
    assert!(c.contains("use crate::c;") && !c.contains("super") && c.contains("fn x"));
}

/// The code of a file without comments, its test modules kept: a test of
/// the core that reached into the FUSE server would tie the core's tests
/// to the `fuse` feature.
fn code_with_tests(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `code` names the identifier `word` (not as part of a longer one).
fn names(code: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(word)
        .any(|(i, _)| !code[..i].ends_with(ident) && !code[i + word.len()..].starts_with(ident))
}

/// Breaches of mountfs's FUSE boundary among `mods` (module path -> source):
/// a module outside `fuse` that names `fuser`, or that refers to `fuse` or
/// any module under it.
fn fuse_breaches(mods: &BTreeMap<String, String>) -> Vec<String> {
    let in_fuse = |m: &str| m == "fuse" || m.starts_with("fuse::");
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    let aliases: BTreeMap<String, String> = mods
        .iter()
        .flat_map(|(m, text)| reexports(m, &code(text), &known))
        .collect();
    let mut out = Vec::new();
    for (m, text) in mods.iter().filter(|(m, _)| !in_fuse(m)) {
        let code = code_with_tests(text);
        let name = if m.is_empty() { "the crate root" } else { m };
        if names(&code, "fuser") {
            out.push(format!("{name} names fuser"));
        }
        for r in references_via(m, &code, &known, &aliases) {
            if in_fuse(&r) {
                out.push(format!("{name} refers to crate::{r}"));
            }
        }
    }
    out
}

#[test]
fn the_core_of_mountfs_knows_nothing_of_fuse() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mods = modules(&root.join("mountfs/src"));
    assert!(
        mods.keys().any(|m| m.starts_with("fuse::")),
        "mountfs/src/fuse/ not found"
    );
    let breaches = fuse_breaches(&mods);
    assert!(
        breaches.is_empty(),
        "everything FUSE belongs under mountfs/src/fuse/: {}",
        breaches.join("; ")
    );
}

#[test]
fn the_fuse_guard_sees_a_breach() {
    let mods = |fs: &str| -> BTreeMap<String, String> {
        [
            (
                "",
                "pub mod fs;\n#[cfg(feature = \"fuse\")]\npub mod fuse;\n",
            ),
            ("fs", fs),
            ("fuse", "pub mod ops;\n"),
            ("fuse::ops", "use crate::fs::PackFs;\nuse fuser::Errno;\n"),
        ]
        .into_iter()
        .map(|(m, t)| (m.to_string(), t.to_string()))
        .collect()
    };
    // The FUSE side may use the core and fuser; comments and longer
    // names (`defuser`, `fuser_x`) are not a use.
    let clean = "// fuser answers EIO here\nfn f(defuser: u8, fuser_x: u8) {}\n";
    assert_eq!(fuse_breaches(&mods(clean)), Vec::<String>::new());
    assert_eq!(
        fuse_breaches(&mods("fn f(e: fuser::Errno) {}\n")),
        ["fs names fuser"]
    );
    assert_eq!(
        fuse_breaches(&mods("use crate::fuse::ops::Ops;\n")),
        ["fs refers to crate::fuse::ops"]
    );
    // From a test module too.
    let test = "fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::fuse::ops;\n}\n";
    assert_eq!(
        fuse_breaches(&mods(test)),
        ["fs refers to crate::fuse::ops"]
    );
}
