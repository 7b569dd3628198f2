//! Shell-style globs for naming a corpus: `*` and `?` within one path component, `**` for any
//! number of folders (`books/**/*.txt`). Matches come in sorted order, hidden names (a leading
//! dot) only when the pattern's component starts with a dot, as in a shell.

use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// Whether a path names a glob rather than a file or folder.
pub fn is_glob(path: &Path) -> bool {
    path.to_string_lossy().contains(['*', '?'])
}

/// The files and folders `pattern` matches, sorted; a pattern that matches nothing is an error
/// that names it.
pub fn expand(pattern: &Path) -> Result<Vec<PathBuf>> {
    let text = pattern.to_string_lossy();
    let absolute = text.starts_with('/');
    let components: Vec<&str> = text.split('/').filter(|c| !c.is_empty()).collect();
    // The folders before the first wildcard are where the search starts.
    let literal = components
        .iter()
        .take_while(|c| !c.contains(['*', '?']))
        .count();
    let mut base = PathBuf::from(if absolute { "/" } else { "." });
    for c in &components[..literal] {
        base.push(c);
    }
    let mut out = Vec::new();
    search(&base, &components[literal..], &mut out)?;
    // A relative pattern answers relative paths, as the user wrote them.
    if !absolute {
        for p in &mut out {
            if let Ok(rest) = p.strip_prefix(".") {
                *p = rest.to_path_buf();
            }
        }
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err(Error::invalid(
            "files",
            format!("no file matches the pattern {text}"),
        ));
    }
    Ok(out)
}

fn search(dir: &Path, pattern: &[&str], out: &mut Vec<PathBuf>) -> Result<()> {
    let Some((first, rest)) = pattern.split_first() else {
        out.push(dir.to_path_buf());
        return Ok(());
    };
    if !dir.is_dir() {
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    if *first == "**" {
        // Zero folders, then one more folder at a time.
        search(dir, rest, out)?;
        for e in entries.iter().filter(|e| e.is_dir() && !is_hidden(e)) {
            search(e, pattern, out)?;
        }
        return Ok(());
    }
    for e in entries {
        let name = e.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(name) = name else { continue };
        if name.starts_with('.') && !first.starts_with('.') {
            continue;
        }
        if wildcard_match(first, &name) {
            search(&e, rest, out)?;
        }
    }
    Ok(())
}

fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

/// `*` matches any run of characters, `?` one character; everything else itself.
pub fn wildcard_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut i, mut j) = (0, 0);
    // Where the last `*` was and how much of the name it has taken: on a mismatch it takes one
    // more character (the classic linear backtracking for a single wildcard kind).
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_within_a_name() {
        assert!(wildcard_match("*.txt", "a.txt"));
        assert!(wildcard_match("ch?pter*.md", "chapter12.md"));
        assert!(!wildcard_match("*.txt", "a.txt.bak"));
        assert!(wildcard_match("*", ""));
        assert!(!wildcard_match("a?", "a"));
    }

    #[test]
    fn globs_expand_sorted_through_double_star_folders() {
        let root = tempfile::tempdir().unwrap();
        for f in ["a/1.txt", "a/b/2.txt", "a/b/3.md", "a/.h/4.txt", "5.txt"] {
            let p = root.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        }
        let found = expand(&root.path().join("**/*.txt")).unwrap();
        let rel: Vec<String> = found
            .iter()
            .map(|p| p.strip_prefix(root.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(rel, ["5.txt", "a/1.txt", "a/b/2.txt"]);
        let err = expand(&root.path().join("*.pdf"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("no file matches the pattern"), "{err}");
    }
}
