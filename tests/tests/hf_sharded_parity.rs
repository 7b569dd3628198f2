//! A sharded `save_pretrained` directory against Hugging Face transformers:
//! `tests/fixtures/hf/sharded` (three shards and an index, written by our `save_pretrained`
//! with a small `max_shard_size`) loaded by `AutoModelForCausalLM.from_pretrained` gives the
//! logits in `expected.json`; our `load_pretrained` of the same directory must give the same
//! within 1e-4 relative.

use rb_integration_tests::lm_fixtures::{
    expected, files_of, fixture_dir, input_ids, load_base, logits, relative_error, tiny_base,
};
use rusting_brain::models::transformer_lm::pretrained::{save_pretrained, PretrainedOptions};
use std::path::Path;

const COMMAND: &str = "python3 tests/fixtures/hf/make_hf_fixture.py tests/fixtures/hf";

/// 78464 bytes of weights in shards of at most 30000: three shards.
fn write_inputs(dir: &Path) {
    let opts = PretrainedOptions {
        max_shard_size: 30_000,
        bos_id: Some(1),
        eos_id: Some(2),
        ..Default::default()
    };
    let files = save_pretrained(&tiny_base(), dir, &opts).unwrap();
    assert_eq!(files.len(), 3);
}

/// Rewrites the committed sharded/ (then run COMMAND to remake expected.json).
#[test]
#[ignore]
fn regenerate() {
    write_inputs(&fixture_dir("hf").join("sharded"));
}

#[test]
fn the_committed_shards_are_what_the_generator_makes() {
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let made = files_of(dir.path());
    let committed = files_of(&fixture_dir("hf").join("sharded"));
    let names = |f: &[(String, Vec<u8>)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&made), names(&committed));
    for ((name, a), (_, b)) in made.iter().zip(&committed) {
        assert!(a == b, "{name} differs from what the generator makes");
    }
}

#[test]
fn sharded_checkpoint_logits_match_transformers() {
    let root = fixture_dir("hf");
    let test = "sharded_checkpoint_logits_match_transformers";
    let Some(expected) = expected(test, &root.join("expected.json"), COMMAND) else {
        return;
    };
    let model = load_base(&root.join("sharded"));
    let err = relative_error(&logits(&model, &input_ids(&expected)), &expected, "logits");
    assert!(err < 1e-4, "relative error {err}");
    assert_eq!(expected["generation"]["bos_token_id"], 1);
    assert_eq!(expected["generation"]["eos_token_id"], 2);
}
