use super::*;
use serde_json::json;

#[test]
fn config_reads_transformers_fields_and_defaults() {
    let c = ViTConfig::from_json(&json!({
        "hidden_size": 64, "num_attention_heads": 4, "hidden_act": "gelu_new",
        "id2label": {"1": "dog", "0": "cat"}
    }))
    .unwrap();
    assert_eq!(
        (c.hidden_size, c.head_dim(), c.num_hidden_layers),
        (64, 16, 12)
    );
    assert_eq!(c.hidden_act, crate::nn::Activation::GeluTanh);
    assert_eq!(c.labels, ["cat", "dog"]);
    assert_eq!(c.pooler_output_size, 64);
}

#[test]
fn bad_configs_name_the_field() {
    for (v, needle) in [
        (
            json!({"hidden_size": 30, "num_attention_heads": 4}),
            "multiple",
        ),
        (json!({"hidden_act": "swishy"}), "swishy"),
        (json!({"patch_size": 0}), "patch_size"),
        (json!({"id2label": {"7": "x"}}), "id2label"),
        (json!({"pooler_act": "relu"}), "pooler_act"),
    ] {
        let err = ViTConfig::from_json(&v).unwrap_err().to_string();
        assert!(err.contains(needle), "{v}: {err}");
    }
}

#[test]
fn images_of_the_wrong_shape_are_refused_by_the_model() {
    let config = ViTConfig::from_json(&json!({
        "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 32, "image_size": 16, "patch_size": 4
    }))
    .unwrap();
    let vit = ViT::new(config, HeadKind::None, &mut Generator::new(0)).unwrap();
    let x = Tensor::zeros(&[1, 3, 18, 16], crate::DType::F32, crate::Device::Cpu).unwrap();
    let err = vit.forward(&x).err().unwrap().to_string();
    assert!(err.contains("multiples of 4"), "{err}");
    let ok = Tensor::zeros(&[1, 3, 16, 16], crate::DType::F32, crate::Device::Cpu).unwrap();
    assert_eq!(vit.forward(&ok).unwrap().shape(), [1, 17, 16]);
}
