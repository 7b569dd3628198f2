//! Finding text files: named files as given, directories walked recursively in sorted order
//! (so a corpus is read the same way on every machine), globs expanded, filtered by extension
//! or by content.

use super::glob;
use crate::{Error, Result};
use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Which files a directory (or a glob) contributes.
#[derive(Clone, Debug, PartialEq)]
pub enum FileFilter {
    /// Those whose extension (any case, without the dot) is listed.
    Extensions(Vec<String>),
    /// Every file whose beginning is text (see [`looks_like_text`]), whatever its name.
    Text,
}

/// How much of a file decides whether it is text.
const SNIFF_BYTES: usize = 8192;

/// The files under `paths`, with directories filtered by extension. See [`collect`].
pub fn collect_files(paths: &[PathBuf], extensions: &[String]) -> Result<Vec<PathBuf>> {
    collect(paths, &FileFilter::Extensions(extensions.to_vec()))
}

/// The files under `paths`. A path that is a file is taken whatever it holds (it was named); a
/// directory contributes the files below it that pass `filter`, skipping names that start with
/// a dot (`.git`, editor files); a glob (`books/**/*.txt`) stands for what it matches, files
/// filtered as a directory's. A missing path, or a glob that matches nothing, is an error.
/// A file reached twice (named twice, or through a symbolic link) is taken once, where it was
/// first reached, and a link back to a directory being walked is not followed again.
pub fn collect(paths: &[PathBuf], filter: &FileFilter) -> Result<Vec<PathBuf>> {
    let mut found = Found::default();
    for p in paths {
        if glob::is_glob(p) {
            for m in glob::expand(p)? {
                if m.is_dir() {
                    walk(&m, filter, &mut found)?;
                } else if passes(&m, filter)? {
                    found.file(m)?;
                }
            }
            continue;
        }
        let meta = std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
        if meta.is_dir() {
            walk(p, filter, &mut found)?;
        } else {
            found.file(p.clone())?;
        }
    }
    Ok(found.files)
}

/// The files found so far, and the real paths already taken or walked.
#[derive(Default)]
struct Found {
    files: Vec<PathBuf>,
    real_files: HashSet<PathBuf>,
    real_dirs: HashSet<PathBuf>,
}

impl Found {
    fn file(&mut self, path: PathBuf) -> Result<()> {
        let real = std::fs::canonicalize(&path).map_err(|e| Error::io(&path, e))?;
        if self.real_files.insert(real) {
            self.files.push(path);
        }
        Ok(())
    }

    /// Whether `dir` is walked for the first time (false for a cycle or a second way in).
    fn first_visit(&mut self, dir: &Path) -> Result<bool> {
        let real = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
        Ok(self.real_dirs.insert(real))
    }
}

/// Whether a file's first 8 KiB hold no NUL byte and are valid UTF-8 (a character cut at the
/// 8 KiB mark counts as valid): the test `git` and `grep` use, without trusting the name.
pub fn looks_like_text(path: &Path) -> Result<bool> {
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    std::fs::File::open(path)
        .and_then(|f| f.take(SNIFF_BYTES as u64).read_to_end(&mut head))
        .map_err(|e| Error::io(path, e))?;
    if head.contains(&0) {
        return Ok(false);
    }
    Ok(match std::str::from_utf8(&head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none() && head.len() == SNIFF_BYTES,
    })
}

fn passes(path: &Path, filter: &FileFilter) -> Result<bool> {
    match filter {
        FileFilter::Extensions(wanted) => {
            let ext = path
                .extension()
                .and_then(|e| e.to_str())
                .map(|e| e.to_ascii_lowercase());
            Ok(ext.is_some_and(|e| {
                wanted
                    .iter()
                    .any(|w| w.trim_start_matches('.').eq_ignore_ascii_case(&e))
            }))
        }
        FileFilter::Text => looks_like_text(path),
    }
}

fn walk(dir: &Path, filter: &FileFilter, found: &mut Found) -> Result<()> {
    if !found.first_visit(dir)? {
        return Ok(());
    }
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
            walk(&path, filter, found)?;
        } else if passes(&path, filter)? {
            found.file(path)?;
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

    #[test]
    fn the_text_filter_takes_any_extension_and_skips_binary_content() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("notes.log"), "plain text").unwrap();
        std::fs::write(dir.join("sub/story"), "é and ü").unwrap();
        std::fs::write(dir.join("image.txt"), b"PNG\0\x01\x02").unwrap();
        std::fs::write(dir.join("latin1.txt"), b"caf\xe9 au lait").unwrap();
        // A multi-byte character cut by the 8 KiB mark is still text.
        let mut long = vec![b'a'; SNIFF_BYTES - 1];
        long.extend("é and more".as_bytes());
        std::fs::write(dir.join("long.md"), long).unwrap();
        let found = collect(&[dir.to_path_buf()], &FileFilter::Text).unwrap();
        let names: Vec<String> = found
            .iter()
            .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["long.md", "notes.log", "sub/story"]);
    }

    #[test]
    fn a_glob_stands_for_its_matches_filtered_like_a_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        std::fs::write(dir.join("a.txt"), "a").unwrap();
        std::fs::write(dir.join("b.txt"), b"\0binary").unwrap();
        std::fs::write(dir.join("c.md"), "c").unwrap();
        let found = collect(&[dir.join("*.txt")], &FileFilter::Text).unwrap();
        assert_eq!(found, [dir.join("a.txt")]);
        assert!(collect(&[dir.join("*.pdf")], &FileFilter::Text).is_err());
    }

    /// A corpus folder with a link to one of its files and a link back to itself: every file
    /// once, and the walk ends.
    #[cfg(unix)]
    #[test]
    fn a_file_reached_through_links_is_taken_once_and_cycles_end() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("corpus");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.txt"), "a").unwrap();
        std::fs::write(dir.join("sub/b.txt"), "b").unwrap();
        std::os::unix::fs::symlink(dir.join("a.txt"), dir.join("sub/link_to_a.txt")).unwrap();
        std::os::unix::fs::symlink(&dir, dir.join("sub/loop")).unwrap();
        let files = collect_files(&[dir.clone(), dir.join("a.txt")], &["txt".into()]).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.strip_prefix(&dir).unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.txt", "sub/b.txt"]);
    }
}
