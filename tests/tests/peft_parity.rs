//! Our LoRA against Hugging Face PEFT: the tiny base in `tests/fixtures/peft/base` (written by
//! our `save_pretrained`) with the adapter in `tests/fixtures/peft/adapter` (our
//! `save_adapter`), loaded by PEFT on a machine with torch, gives the logits in
//! `expected.json`; our engine must give the same within 1e-4 relative, adapted and merged.

use rb_integration_tests::lm_fixtures::{
    expected, files_of, fixture_dir, input_ids, load_base, logits, relative_error, tiny_adapted,
    tiny_base,
};
use rusting_brain::models::transformer_lm::peft;
use rusting_brain::models::transformer_lm::pretrained::{save_pretrained, PretrainedOptions};
use std::path::Path;

const COMMAND: &str = "python3 tests/fixtures/peft/make_peft_fixture.py tests/fixtures/peft";

fn write_inputs(root: &Path) {
    save_pretrained(
        &tiny_base(),
        root.join("base"),
        &PretrainedOptions::default(),
    )
    .unwrap();
    peft::save_adapter(&tiny_adapted(), root.join("adapter"), None).unwrap();
}

/// Rewrites the committed base/ and adapter/ (then run COMMAND to remake expected.json).
#[test]
#[ignore]
fn regenerate() {
    write_inputs(&fixture_dir("peft"));
}

#[test]
fn the_committed_base_and_adapter_are_what_the_generator_makes() {
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    for sub in ["base", "adapter"] {
        let made = files_of(&dir.path().join(sub));
        let committed = files_of(&fixture_dir("peft").join(sub));
        let names = |f: &[(String, Vec<u8>)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(&made), names(&committed), "{sub}");
        for ((name, a), (_, b)) in made.iter().zip(&committed) {
            assert!(a == b, "{sub}/{name} differs from what the generator makes");
        }
    }
}

#[test]
fn the_fixture_adapter_moves_the_logits_well_past_the_tolerance() {
    let root = fixture_dir("peft");
    let ids = rusting_brain::Tensor::from_vec((0..12i64).map(|i| i * 5 % 64).collect(), &[1, 12])
        .unwrap();
    let mut model = load_base(&root.join("base"));
    let base = logits(&model, &ids).to_vec_f32().unwrap();
    peft::load_adapter(&mut model, root.join("adapter")).unwrap();
    let adapted = logits(&model, &ids).to_vec_f32().unwrap();
    let max_ref = base.iter().fold(0f32, |m, v| m.max(v.abs()));
    let moved = base
        .iter()
        .zip(&adapted)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        moved / max_ref > 1e-2,
        "the adapter moves the logits by {moved} of {max_ref}"
    );
}

#[test]
fn adapted_and_merged_logits_match_peft() {
    let root = fixture_dir("peft");
    let test = "adapted_and_merged_logits_match_peft";
    let Some(expected) = expected(test, &root.join("expected.json"), COMMAND) else {
        return;
    };
    let ids = input_ids(&expected);
    let mut model = load_base(&root.join("base"));
    let base = relative_error(&logits(&model, &ids), &expected, "base_logits");
    assert!(base < 1e-4, "base logits: relative error {base}");

    peft::load_adapter(&mut model, root.join("adapter")).unwrap();
    let adapted = logits(&model, &ids);
    let err = relative_error(&adapted, &expected, "lora_logits");
    assert!(err < 1e-4, "adapted logits: relative error {err}");
    // The adapter must matter, or the comparison above says nothing about it.
    let effect = expected["adapter_effect"].as_f64().unwrap();
    assert!(
        effect > 1e-2,
        "the adapter changes the logits by only {effect}"
    );

    model.merge_lora().unwrap();
    let err = relative_error(&logits(&model, &ids), &expected, "merged_logits");
    assert!(err < 1e-4, "merged logits: relative error {err}");
}
