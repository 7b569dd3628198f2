use super::*;
use crate::Tensor;
use serde_json::json;

fn tiny(eos: u32) -> Clip {
    let config = ClipConfig::from_json(&json!({
        "projection_dim": 4,
        "text_config": {"vocab_size": 20, "hidden_size": 8, "intermediate_size": 16,
                        "num_hidden_layers": 1, "num_attention_heads": 2,
                        "max_position_embeddings": 6, "eos_token_id": eos},
        "vision_config": {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "image_size": 8, "patch_size": 4}
    }))
    .unwrap();
    Clip::new(config, &mut Generator::new(0)).unwrap()
}

#[test]
fn config_takes_transformers_defaults_for_missing_towers() {
    let c = ClipConfig::from_json(&json!({"model_type": "clip"})).unwrap();
    assert_eq!(
        (
            c.vision.patch_size,
            c.vision.tower.hidden_size,
            c.text.tower.hidden_size
        ),
        (32, 768, 512)
    );
    assert_eq!(c.text.tower.hidden_act, crate::nn::Activation::QuickGelu);
    assert_eq!(
        (c.text.pooling, c.projection_dim),
        (config::TextPooling::EndToken(49407), 512)
    );
}

#[test]
fn bad_configs_name_the_tower_and_field() {
    for (v, needle) in [
        (json!({"text_config": {"hidden_size": 30}}), "text_config"),
        (json!({"vision_config": {"patch_size": 0}}), "patch_size"),
        (json!({"vision_config": 3}), "vision_config"),
        (json!({"model_type": "siglip"}), "siglip"),
    ] {
        let err = ClipConfig::from_json(&v).unwrap_err().to_string();
        assert!(err.contains(needle), "{v}: {err}");
    }
}

/// The text is pooled at its first end token; configs with the legacy `eos_token_id` 2 pool at
/// the first highest id instead, as transformers does.
#[test]
fn text_pools_at_the_end_token_or_the_legacy_highest_id() {
    let ids = Tensor::from_vec(vec![1i64, 19, 5, 7, 7, 7], &[1, 6]).unwrap();
    let states = |clip: &Clip| {
        let out = clip.text.run(&ids).unwrap();
        let h = out.last_hidden_state.to_vec_f32().unwrap();
        (out.pooler_output.to_vec_f32().unwrap(), h)
    };
    let (pooled, h) = states(&tiny(7));
    assert_eq!(pooled, h[3 * 8..4 * 8]);
    let (pooled, h) = states(&tiny(2));
    assert_eq!(pooled, h[8..2 * 8]);
}

#[test]
fn text_longer_than_the_context_or_float_ids_are_refused() {
    let clip = tiny(7);
    let long = Tensor::from_vec(vec![1i64; 7], &[1, 7]).unwrap();
    let err = clip.text.run(&long).err().unwrap().to_string();
    assert!(err.contains("T <= 6"), "{err}");
    let floats = Tensor::from_vec(vec![1f32; 3], &[1, 3]).unwrap();
    assert!(clip.text.run(&floats).is_err());
}

#[test]
fn zero_shot_needs_a_tokenizer_and_a_template_slot() {
    use crate::models::image_text::ImageTextModel;
    let clip = tiny(7);
    let images = Tensor::zeros(&[1, 3, 8, 8], crate::DType::F32, crate::Device::Cpu).unwrap();
    let err = clip
        .zero_shot(&images, &["cat"], "a photo of a {}")
        .err()
        .unwrap();
    assert!(err.to_string().contains("no tokenizer"), "{err}");
    let err = clip.zero_shot(&images, &["cat"], "a photo").err().unwrap();
    assert!(err.to_string().contains("no {}"), "{err}");
}
