//! Third-party test material fetched by `scripts/fetch_test_assets.sh` (never committed).
//!
//! A test asks for a file by its path under the assets folder. When the file is absent the test
//! prints SKIPPED and returns; under `RB_REQUIRE_ASSETS=1` (set by `.ci/run` after fetching) an
//! absent file fails the test instead, so a run that should have real weights cannot pass by
//! skipping.

use std::path::PathBuf;

/// The assets folder: `RB_ASSETS`, else `~/.cache/rusting-brain/assets`.
pub fn assets_dir() -> PathBuf {
    match std::env::var_os("RB_ASSETS") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/rusting-brain/assets")
        }
    }
}

/// The path of asset `relative` if it was fetched. `None` means: skip (after printing why).
/// Panics when `RB_REQUIRE_ASSETS=1` and the asset is absent.
pub fn asset(test: &str, relative: &str) -> Option<PathBuf> {
    let path = assets_dir().join(relative);
    if path.is_file() {
        return Some(path);
    }
    if std::env::var("RB_REQUIRE_ASSETS").as_deref() == Ok("1") {
        panic!(
            "{test}: asset {} is missing and RB_REQUIRE_ASSETS=1; run scripts/fetch_test_assets.sh",
            path.display()
        );
    }
    eprintln!(
        "SKIPPED {test}: asset {} is absent (run scripts/fetch_test_assets.sh)",
        path.display()
    );
    None
}
