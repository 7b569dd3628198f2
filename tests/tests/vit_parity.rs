//! ViTs saved by transformers (`tests/fixtures/vit/make_vit.py`: a `ViTForImageClassification`
//! with exact GELU and labels, and a `ViTModel` with its pooler, tanh GELU and bias-free q/k/v)
//! load from their folders and give transformers' outputs: at the configured size, and at
//! another size with the position table resampled bicubically (transformers'
//! `interpolate_pos_encoding`).

use rusting_brain::models::vit::ViT;
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, Tensor};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/vit")
}

fn expected() -> BTreeMap<String, Tensor> {
    rusting_brain::io::safetensors::load(fixtures().join("expected.safetensors")).unwrap()
}

fn assert_close(what: &str, got: &Tensor, want: &Tensor) {
    rb_integration_tests::parity::assert_close(what, got, want, 1e-5);
}

fn check(model: &str, head: &str) {
    let mut vit = ViT::from_pretrained(&fixtures().join(model)).unwrap();
    vit.eval();
    let want = expected();
    for key in ["square", "resampled"] {
        let out = no_grad(|| vit.run(&want[&format!("{key}.images")])).unwrap();
        assert_close(
            &format!("{model} {key} last_hidden_state"),
            &out.last_hidden_state,
            &want[&format!("{key}.{model}.last_hidden_state")],
        );
        assert_close(
            &format!("{model} {key} {head}"),
            out.head.as_ref().unwrap(),
            &want[&format!("{key}.{model}.{head}")],
        );
    }
}

#[test]
fn vit_for_image_classification_gives_transformers_logits() {
    check("classifier", "logits");
    let vit = ViT::from_pretrained(&fixtures().join("classifier")).unwrap();
    assert_eq!(vit.config.labels, ["cat", "dog", "car", "tree", "boat"]);
    assert!(vit
        .state_dict()
        .contains_key("vit.encoder.layer.1.attention.attention.query.weight"));
}

#[test]
fn vit_model_gives_transformers_pooler_output_and_tokens() {
    check("backbone", "pooler_output");
}

#[test]
fn a_folder_loads_by_its_model_type_and_other_types_are_refused_by_name() {
    use rusting_brain::models::pretrained::load_image_model;
    let m = load_image_model(&fixtures().join("classifier")).unwrap();
    assert!(m.title().starts_with("ViT(patch 8"), "{}", m.title());
    let dir = std::env::temp_dir().join(format!("rb-vit-type-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"model_type": "swin"}"#).unwrap();
    let err = load_image_model(&dir).err().unwrap().to_string();
    assert!(err.contains("`swin`") && err.contains("vit"), "{err}");
}
