//! `save_pretrained` directories: sharding, the index, the files beside the weights, and the
//! errors of a broken sharded checkpoint.

use super::pretrained::{
    load_pretrained, parse_size, save_pretrained, PretrainedOptions, WEIGHTS, WEIGHTS_INDEX,
};
use super::*;
use crate::nn::Module;
use crate::{no_grad, DType, Device, Generator, Tensor};
use std::path::Path;

/// 20800 bytes of F32 weights: embedding and head 2560 each, 7808 per layer, final norm 64.
fn model() -> TransformerLm {
    let mut c = LmConfig::new(40, 16, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 24;
    c.max_seq_len = 16;
    c.init_std = 0.2;
    c.tied_embeddings = false;
    TransformerLm::new(c, &mut Generator::new(11)).unwrap()
}

fn logits(m: &TransformerLm) -> Vec<f32> {
    let ids = Tensor::from_vec(vec![1i64, 2, 3, 39, 0, 17], &[2, 3]).unwrap();
    no_grad(|| m.forward(&ids)).unwrap().to_vec_f32().unwrap()
}

fn sharded(dir: &Path) -> TransformerLm {
    let m = model();
    let opts = PretrainedOptions {
        max_shard_size: 8000,
        ..Default::default()
    };
    let files = save_pretrained(&m, dir, &opts).unwrap();
    assert_eq!(files.len(), 3);
    m
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_sharded_save_writes_three_shards_and_an_index_and_loads_back_equal() {
    let dir = tempfile::tempdir().unwrap();
    let m = sharded(dir.path());
    for i in 1..=3 {
        let f = dir
            .path()
            .join(format!("model-0000{i}-of-00003.safetensors"));
        assert!(f.exists(), "{} missing", f.display());
    }
    assert!(!dir.path().join(WEIGHTS).exists());
    let index = read_json(&dir.path().join(WEIGHTS_INDEX));
    assert_eq!(index["metadata"]["total_size"], 20800);
    let map = index["weight_map"].as_object().unwrap();
    assert_eq!(map.len(), m.named_parameters().len());
    assert_eq!(
        map["model.embed_tokens.weight"],
        "model-00001-of-00003.safetensors"
    );
    assert_eq!(map["lm_head.weight"], "model-00003-of-00003.safetensors");
    let back = load_pretrained(dir.path(), DType::F32, Device::Cpu).unwrap();
    assert_eq!(logits(&back), logits(&m));
}

#[test]
fn a_save_below_the_limit_is_one_file_and_removes_an_earlier_saves_shards() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path());
    let m = model();
    let files = save_pretrained(&m, dir.path(), &PretrainedOptions::default()).unwrap();
    assert_eq!(files, [dir.path().join(WEIGHTS)]);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["config.json", "generation_config.json", WEIGHTS]);
    let back = load_pretrained(dir.path(), DType::F32, Device::Cpu).unwrap();
    assert_eq!(logits(&back), logits(&m));
}

#[test]
fn bos_and_eos_ids_go_to_the_config_and_the_generation_config() {
    let dir = tempfile::tempdir().unwrap();
    let opts = PretrainedOptions {
        bos_id: Some(1),
        eos_id: Some(2),
        ..Default::default()
    };
    save_pretrained(&model(), dir.path(), &opts).unwrap();
    for file in ["config.json", "generation_config.json"] {
        let v = read_json(&dir.path().join(file));
        assert_eq!(
            (v["bos_token_id"].clone(), v["eos_token_id"].clone()),
            (1.into(), 2.into()),
            "{file}"
        );
    }
}

#[test]
fn a_missing_shard_or_a_tensor_the_index_lacks_is_named() {
    let dir = tempfile::tempdir().unwrap();
    sharded(dir.path());
    let index_path = dir.path().join(WEIGHTS_INDEX);
    let mut index = read_json(&index_path);
    index["weight_map"]
        .as_object_mut()
        .unwrap()
        .remove("model.norm.weight");
    std::fs::write(&index_path, index.to_string()).unwrap();
    let msg = load_pretrained(dir.path(), DType::F32, Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("model-00003-of-00003.safetensors holds model.norm.weight, which the index does not list"),
        "{msg}"
    );
    std::fs::remove_file(dir.path().join("model-00002-of-00003.safetensors")).unwrap();
    let msg = load_pretrained(dir.path(), DType::F32, Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("the shard model-00002-of-00003.safetensors it lists is missing"),
        "{msg}"
    );
}

#[test]
fn a_model_with_adapters_is_not_saved_as_a_plain_model() {
    let mut m = model();
    m.add_lora(LoraConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let msg = save_pretrained(&m, dir.path(), &PretrainedOptions::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("merge_lora() first"), "{msg}");
}

#[test]
fn shard_sizes_parse_as_transformers_reads_them() {
    assert_eq!(parse_size("5GB").unwrap(), 5_000_000_000);
    assert_eq!(parse_size("200KiB").unwrap(), 204_800);
    assert_eq!(parse_size("1.5MB").unwrap(), 1_500_000);
    assert_eq!(parse_size("8000").unwrap(), 8000);
    let msg = parse_size("5 parsecs").unwrap_err().to_string();
    assert!(msg.contains("\"5 parsecs\" is not a size"), "{msg}");
}

/// With a tokenizer, `tokenizer_config.json` goes beside `tokenizer.json`: the class
/// `AutoTokenizer` builds, the bos/eos tokens by their text, the context, the chat template.
#[test]
fn a_tokenizer_is_saved_with_its_tokenizer_config() {
    use crate::text::{train_bpe, SplitPattern, TrainOptions};
    let o = TrainOptions {
        vocab_size: 300,
        pattern: SplitPattern::Gpt2,
        ..TrainOptions::default()
    };
    let tok = train_bpe(["hello world, hello tokens. ".repeat(20)], &o).unwrap();
    let eos = tok
        .eos_id()
        .expect("the trained tokenizer's end-of-text id");
    let dir = tempfile::tempdir().unwrap();
    let template = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
    let opts = PretrainedOptions {
        tokenizer: Some(&tok),
        chat_template: Some(template),
        ..Default::default()
    };
    save_pretrained(&model(), dir.path(), &opts).unwrap();
    let c = read_json(&dir.path().join("tokenizer_config.json"));
    assert_eq!(c["tokenizer_class"], "PreTrainedTokenizerFast");
    assert_eq!(c["eos_token"], tok.id_to_token(eos).unwrap().as_str());
    assert_eq!(c["model_max_length"], 16);
    assert_eq!(c["chat_template"], template);
}
