//! The language model's config: Hugging Face's field names both ways, and what is refused.

use super::config::*;
use super::family::Family;

#[test]
fn config_round_trips_through_hugging_face_field_names() {
    let mut c = LmConfig::new(100, 64, 2, 4);
    c.n_kv_heads = 2;
    let json = c.to_hf_json();
    assert_eq!(json["hidden_size"], 64);
    assert_eq!(json["num_key_value_heads"], 2);
    assert_eq!(json["model_type"], "llama");
    assert_eq!(LmConfig::from_json(&json.to_string()).unwrap(), c);
}

#[test]
fn validate_names_every_bad_size() {
    let mut c = LmConfig::new(100, 60, 2, 8);
    c.n_kv_heads = 3;
    let msg = c.validate().unwrap_err().to_string();
    assert!(
        msg.contains("d_model 60 is not a multiple of heads 8"),
        "{msg}"
    );
    assert!(
        msg.contains("heads 8 is not a multiple of kv_heads 3"),
        "{msg}"
    );
}

#[test]
fn sizes_far_beyond_any_model_are_refused() {
    let mut json = LmConfig::new(10, 8, 1, 2).to_hf_json();
    json["hidden_size"] = (1u64 << 53).into();
    json["num_hidden_layers"] = (1u64 << 53).into();
    json["max_position_embeddings"] = (1u64 << 40).into();
    let msg = LmConfig::from_json(&json.to_string())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("d_model 9007199254740992 is above"), "{msg}");
    assert!(msg.contains("layers 9007199254740992 is above"), "{msg}");
    assert!(msg.contains("max_seq_len 1099511627776 is above"), "{msg}");
}

#[test]
fn from_json_refuses_features_the_model_lacks() {
    let mut json = LmConfig::new(10, 8, 1, 2).to_hf_json();
    json["mlp_bias"] = true.into();
    let msg = LmConfig::from_json(&json.to_string())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("mlp_bias"), "{msg}");
}

#[test]
fn an_unknown_model_type_is_named_with_the_families_that_run() {
    let mut json = LmConfig::new(10, 8, 1, 2).to_hf_json();
    json["model_type"] = "gpt_neox".into();
    let msg = LmConfig::from_json(&json.to_string())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("\"gpt_neox\""), "{msg}");
    assert!(msg.contains("llama, mistral, qwen2, qwen3, gemma"), "{msg}");
}

#[test]
fn family_switches_follow_model_type_and_round_trip() {
    let mut qwen2 = LmConfig::new(10, 8, 1, 2);
    qwen2.family = Family::Qwen2;
    let json = qwen2.to_hf_json();
    assert_eq!(json["architectures"][0], "Qwen2ForCausalLM");
    let back = LmConfig::from_json(&json.to_string()).unwrap();
    assert_eq!(back, qwen2);
    assert!(back.qkv_bias() && !back.qk_norm());

    // Qwen's sliding_window is inert without use_sliding_window; Mistral's is kept.
    let mut json = json;
    json["sliding_window"] = 4096.into();
    assert_eq!(
        LmConfig::from_json(&json.to_string())
            .unwrap()
            .sliding_window,
        None
    );
    json["use_sliding_window"] = true.into();
    let msg = LmConfig::from_json(&json.to_string())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("use_sliding_window"), "{msg}");
    json["model_type"] = "mistral".into();
    assert_eq!(
        LmConfig::from_json(&json.to_string())
            .unwrap()
            .sliding_window,
        Some(4096)
    );
    // transformers' defaults: a Mistral file without the field has a 4096 window, and one
    // saved here without a window says so.
    let mut no_window = LmConfig::new(10, 8, 1, 2);
    no_window.family = Family::Mistral;
    let saved = no_window.to_hf_json();
    assert!(saved["sliding_window"].is_null());
    assert_eq!(LmConfig::from_json(&saved.to_string()).unwrap(), no_window);
    let mut bare = saved.clone();
    bare.as_object_mut().unwrap().remove("sliding_window");
    assert_eq!(
        LmConfig::from_json(&bare.to_string())
            .unwrap()
            .sliding_window,
        Some(4096)
    );

    // Qwen3: its own head width (q is wider than the stream) and q/k norms.
    json["use_sliding_window"] = false.into();
    json["model_type"] = "qwen3".into();
    json["head_dim"] = 16.into();
    let qwen3 = LmConfig::from_json(&json.to_string()).unwrap();
    assert_eq!(
        (qwen3.head_dim(), qwen3.qk_norm(), qwen3.qkv_bias()),
        (16, true, false)
    );
}
