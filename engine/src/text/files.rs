//! Finding text files: named files as given, directories walked recursively in sorted order
//! (so a corpus is read the same way on every machine), filtered by extension.

use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// The files under `paths`. A path that is a file is taken whatever its extension; a
/// directory contributes the files below it whose extension (any case) is in `extensions`,
/// skipping names that start with a dot (`.git`, editor files). A missing path is an error.
pub fn collect_files(paths: &[PathBuf], extensions: &[String]) -> Result<Vec<PathBuf>> {
    let wanted: Vec<String> = extensions
        .iter()
        .map(|e| e.trim_start_matches('.').to_ascii_lowercase())
        .collect();
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
        if meta.is_dir() {
            walk(p, &wanted, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn walk(dir: &Path, wanted: &[String], out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .map(|e| e.map(|e| e.path()).map_err(|e| Error::io(dir, e)))
        .collect::<Result<_>>()?;
    entries.sort();
    for path in entries {
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            walk(&path, wanted, out)?;
        } else {
            let ext = path
                .extension()
                .and_then(|e| e.to_str())
                .map(|e| e.to_ascii_lowercase());
            if ext.is_some_and(|e| wanted.contains(&e)) {
                out.push(path);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_walked_sorted_and_filtered_by_extension() {
        let root = std::env::temp_dir().join(format!("rb_files_{}", std::process::id()));
        std::fs::create_dir_all(root.join("b/.hidden")).unwrap();
        std::fs::create_dir_all(root.join("a")).unwrap();
        for f in [
            "b/2.md",
            "b/1.RS",
            "a/z.md",
            "a/skip.bin",
            "b/.hidden/x.md",
            "b/.dot.md",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        let found = collect_files(
            &[root.clone(), root.join("a/skip.bin")],
            &["md".into(), ".rs".into()],
        )
        .unwrap();
        let rel: Vec<String> = found
            .iter()
            .map(|p| {
                p.strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/")
            })
            .collect();
        std::fs::remove_dir_all(&root).ok();
        assert_eq!(rel, ["a/z.md", "b/1.RS", "b/2.md", "a/skip.bin"]);
        assert!(collect_files(&[root.join("missing")], &[]).is_err());
    }
}
