//! `io::load` of files written by torch and numpy (tests/fixtures/checkpoints/make_checkpoints.py):
//! a nested training checkpoint in torch's zip and legacy formats and an NPZ, each recognised by
//! its content, every tensor under the dotted name and with the values torch saved.

use rusting_brain::io::any::load_any;
use rusting_brain::Tensor;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/checkpoints")
        .join(name)
}

fn expected() -> BTreeMap<String, Tensor> {
    rusting_brain::io::safetensors::load(fixture("expected.safetensors")).unwrap()
}

/// `loaded` holds exactly the `expected` entries whose names start with one of `prefixes`,
/// with equal shapes, dtypes and values.
fn check(loaded: Vec<(String, Tensor)>, prefixes: &[&str]) {
    let want: BTreeMap<String, Tensor> = expected()
        .into_iter()
        .filter(|(n, _)| prefixes.iter().any(|p| n.starts_with(p)))
        .collect();
    let got: BTreeMap<String, Tensor> = loaded.into_iter().collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (name, w) in &want {
        let g = &got[name];
        assert_eq!(g.shape(), w.shape(), "{name}");
        assert_eq!(g.dtype(), w.dtype(), "{name}");
        assert_eq!(g.to_vec_f64().unwrap(), w.to_vec_f64().unwrap(), "{name}");
    }
}

#[test]
fn a_nested_torch_checkpoint_loads_with_dotted_names() {
    check(
        load_any(fixture("training.pt")).unwrap(),
        &["model.", "history."],
    );
}

#[test]
fn the_legacy_torch_format_loads_the_same() {
    check(
        load_any(fixture("legacy.pt")).unwrap(),
        &["model.", "history."],
    );
}

#[test]
fn an_npz_loads_each_array_by_name() {
    check(load_any(fixture("arrays.npz")).unwrap(), &["a", "b"]);
}
