//! DeiT, DINOv2 (plain, with a classifier, with registers) and CLIP saved by transformers
//! (`tests/fixtures/vision_families/make_families.py`, random weights) load from their folders
//! and give transformers' outputs: at the configured image size and at another one (the
//! position table resampled; DINOv2 with registers resamples with antialiasing).

use rb_integration_tests::parity::assert_close;
use rusting_brain::models::clip::Clip;
use rusting_brain::models::dinov2::Dinov2;
use rusting_brain::models::image_text::ImageTextModel;
use rusting_brain::models::vit::ViT;
use rusting_brain::nn::Module;
use rusting_brain::{no_grad, Tensor};
use std::collections::BTreeMap;
use std::path::PathBuf;

const TOL: f64 = 1e-5;
const SIZES: [&str; 2] = ["square", "resampled"];

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/vision_families")
}

fn expected() -> BTreeMap<String, Tensor> {
    rusting_brain::io::safetensors::load(fixtures().join("expected.safetensors")).unwrap()
}

#[test]
fn deit_with_teacher_averages_its_two_classifiers_as_transformers() {
    let mut deit = ViT::from_pretrained(&fixtures().join("deit")).unwrap();
    deit.eval();
    let want = expected();
    for key in SIZES {
        let out = no_grad(|| deit.run(&want[&format!("{key}.images")])).unwrap();
        let states = &want[&format!("{key}.deit.last_hidden_state")];
        assert_close(
            &format!("deit {key} states"),
            &out.last_hidden_state,
            states,
            TOL,
        );
        let logits = &want[&format!("{key}.deit.logits")];
        assert_close(
            &format!("deit {key} logits"),
            out.head.as_ref().unwrap(),
            logits,
            TOL,
        );
    }
    let names = deit.state_dict();
    assert!(names.contains_key("deit.embeddings.distillation_token"));
    assert!(names.contains_key("distillation_classifier.weight"));
}

fn check_dinov2(model: &str) {
    let mut m = Dinov2::from_pretrained(&fixtures().join(model)).unwrap();
    m.eval();
    let want = expected();
    for key in SIZES {
        let out = no_grad(|| m.run(&want[&format!("{key}.images")])).unwrap();
        for (what, got) in [
            ("last_hidden_state", &out.last_hidden_state),
            ("pooler_output", &out.pooler_output),
        ] {
            let name = format!("{key}.{model}.{what}");
            assert_close(&name, got, &want[&name], TOL);
        }
    }
}

#[test]
fn dinov2_gives_transformers_tokens_and_pooled_output() {
    check_dinov2("dinov2");
}

#[test]
fn dinov2_with_registers_resamples_its_table_with_antialiasing() {
    // The table is 8x8 patches; 32x32 and 48x40 images shrink it to 4x4 and 6x5.
    check_dinov2("dinov2_reg");
}

#[test]
fn dinov2_classifier_reads_cls_beside_the_patch_mean() {
    let mut m = Dinov2::from_pretrained(&fixtures().join("dinov2_cls")).unwrap();
    m.eval();
    let want = expected();
    for key in SIZES {
        let got = no_grad(|| m.forward(&want[&format!("{key}.images")])).unwrap();
        let name = format!("{key}.dinov2_cls.logits");
        assert_close(&name, &got, &want[&name], TOL);
    }
}

#[test]
fn clip_towers_and_scores_equal_transformers() {
    let mut clip = Clip::from_pretrained(&fixtures().join("clip")).unwrap();
    clip.eval();
    let want = expected();
    let ids = &want["text.ids"];
    let text = no_grad(|| clip.text.run(ids)).unwrap();
    assert_close(
        "text last_hidden_state",
        &text.last_hidden_state,
        &want["text.clip.last_hidden_state"],
        TOL,
    );
    assert_close(
        "text pooled at the end token",
        &text.pooler_output,
        &want["text.clip.pooler_output"],
        TOL,
    );
    let text_embeds = no_grad(|| clip.text_features(ids)).unwrap();
    assert_close(
        "text_embeds",
        &text_embeds,
        &want["text.clip.text_embeds"],
        TOL,
    );
    for key in SIZES {
        let images = &want[&format!("{key}.images")];
        let vision = no_grad(|| clip.vision.run(images)).unwrap();
        for (what, got) in [
            ("vision.last_hidden_state", &vision.last_hidden_state),
            ("vision.pooler_output", &vision.pooler_output),
        ] {
            let name = format!("{key}.clip.{what}");
            assert_close(&name, got, &want[&name], TOL);
        }
        let image_embeds = no_grad(|| clip.image_features(images)).unwrap();
        let name = format!("{key}.clip.image_embeds");
        assert_close(&name, &image_embeds, &want[&name], TOL);
        let scores = clip.scores(&image_embeds, &text_embeds).unwrap();
        let name = format!("{key}.clip.logits_per_image");
        assert_close(&name, &scores, &want[&name], TOL);
    }
}

#[test]
fn siglip_towers_and_sigmoid_scores_equal_transformers() {
    use rusting_brain::models::siglip::Siglip;
    let mut siglip = Siglip::from_pretrained(&fixtures().join("siglip")).unwrap();
    siglip.eval();
    let want = expected();
    let text = no_grad(|| siglip.text.run(&want["text.siglip_ids"])).unwrap();
    for (what, got) in [
        ("last_hidden_state", &text.last_hidden_state),
        ("pooler_output", &text.pooler_output),
    ] {
        let name = format!("text.siglip.{what}");
        assert_close(&name, got, &want[&name], TOL);
    }
    for key in SIZES {
        let images = &want[&format!("{key}.images")];
        let vision = no_grad(|| siglip.vision.run(images)).unwrap();
        for (what, got) in [
            ("vision.last_hidden_state", &vision.last_hidden_state),
            ("vision.pooler_output", &vision.pooler_output),
        ] {
            let name = format!("{key}.siglip.{what}");
            assert_close(&name, got, &want[&name], TOL);
        }
        let scores = siglip
            .scores(&vision.pooler_output, &text.pooler_output)
            .unwrap();
        let name = format!("{key}.siglip.logits_per_image");
        assert_close(&name, &scores, &want[&name], TOL);
    }
}

#[test]
fn every_family_loads_by_its_model_type() {
    use rusting_brain::models::pretrained::load_image_model;
    for (dir, title) in [
        ("deit", "DeiT(patch 8"),
        ("dinov2", "DINOv2(patch 8"),
        (
            "dinov2_reg",
            "DINOv2(patch 8, 2 layers, width 32, 4 heads, 2 registers",
        ),
        ("clip", "CLIP(vision: patch 8"),
        ("siglip", "SigLIP(vision: patch 8"),
    ] {
        let m = load_image_model(&fixtures().join(dir)).unwrap();
        assert!(m.title().starts_with(title), "{dir}: {}", m.title());
    }
}

#[test]
fn a_config_that_does_not_match_its_weights_names_the_tensors() {
    let dir = std::env::temp_dir().join(format!("rb-clip-mismatch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = fixtures().join("clip");
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    let config = config.replace("\"projection_dim\": 16", "\"projection_dim\": 20");
    std::fs::write(dir.join("config.json"), config).unwrap();
    let err = Clip::from_pretrained(&dir).err().unwrap().to_string();
    assert!(
        err.contains("text_projection.weight") && err.contains("visual_projection.weight"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A tokenizer fixture's texts (`cases.json`'s "texts").
fn case_texts(cases: &serde_json::Value) -> Vec<&str> {
    cases["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect()
}

/// One row of token ids from a fixture.
fn id_row(v: &serde_json::Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

/// CLIP ViT-L/14's real vocab.json + merges.txt (no tokenizer.json) give transformers' ids for
/// each text, and the batch padded with the end token and cut to 77 keeping the end token
/// (ids made by `tests/fixtures/clip_tokenizer/make_cases.py`).
#[test]
fn clip_tokenizer_from_vocab_and_merges_encodes_as_transformers() {
    let test = "clip_tokenizer_from_vocab_and_merges_encodes_as_transformers";
    let Some(vocab) = rb_integration_tests::assets::asset(test, "clip_tokenizer/vocab.json") else {
        return;
    };
    let tok = rusting_brain::models::clip::tokenizer::from_folder(vocab.parent().unwrap(), 77)
        .unwrap()
        .expect("vocab.json and merges.txt are there");
    let cases_path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/clip_tokenizer/cases.json");
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cases_path).unwrap()).unwrap();
    let texts = case_texts(&cases);
    for (text, want) in texts.iter().zip(cases["ids"].as_array().unwrap()) {
        let got: Vec<i64> = tok
            .tokenizer
            .encode_with_template(text)
            .unwrap()
            .into_iter()
            .map(i64::from)
            .collect();
        assert_eq!(got, id_row(want), "{text:?}");
    }
    let batch = tok.encode_batch(&texts).unwrap();
    let want: Vec<i64> = cases["batch"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(id_row)
        .collect();
    assert_eq!(batch.shape(), [texts.len(), 77]);
    assert_eq!(batch.to_vec::<i64>().unwrap(), want);
}

/// A SentencePiece Unigram `spiece.model` (with the `nmt_nfkc` character map real SigLIP files
/// carry) gives transformers' `SiglipTokenizer` ids: lower-cased, ASCII punctuation and extra
/// whitespace gone, `</s>` closing each text, every row padded to the 64 positions
/// (`tests/fixtures/siglip_tokenizer/make_cases.py`).
#[test]
fn siglip_tokenizer_from_spiece_model_encodes_as_transformers() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/siglip_tokenizer");
    let tok = rusting_brain::models::siglip::tokenizer::from_folder(&dir, 64)
        .unwrap()
        .expect("spiece.model is there");
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    let texts = case_texts(&cases);
    let batch = tok.encode_batch(&texts).unwrap();
    assert_eq!(batch.shape(), [texts.len(), 64]);
    let got = batch.to_vec::<i64>().unwrap();
    for (i, (text, want)) in texts
        .iter()
        .zip(cases["batch"].as_array().unwrap())
        .enumerate()
    {
        assert_eq!(got[i * 64..(i + 1) * 64], id_row(want)[..], "{text:?}");
    }
}

/// A file that is not a SentencePiece model, or a BPE one, is refused with the file named.
#[test]
fn a_corrupt_or_bpe_spiece_model_is_named() {
    use rusting_brain::text::spiece_model::SpieceModel;
    let err = SpieceModel::parse(b"\xff\xff\xff\x01", "broken/spiece.model")
        .unwrap_err()
        .to_string();
    assert!(err.contains("broken/spiece.model"), "{err}");
    // One piece, and a trainer spec with model_type 2 (BPE).
    let bpe = [0x0a, 0x03, 0x0a, 0x01, b'a', 0x12, 0x02, 0x18, 0x02];
    let err = SpieceModel::parse(&bpe, "bpe.model")
        .unwrap_err()
        .to_string();
    assert!(err.contains("BPE"), "{err}");
}

fn photos(test: &str) -> Option<Vec<rusting_brain::vision::RgbImage>> {
    ["bus.jpg", "zidane.jpg"]
        .iter()
        .map(|p| {
            let path =
                rb_integration_tests::assets::asset(test, &format!("ultralytics/assets/{p}"))?;
            Some(rusting_brain::vision::image::read_rgb(path).unwrap())
        })
        .collect()
}

/// Photos through the folder's preprocessor_config.json (Pillow's bicubic) give the logits
/// transformers gives for its processor's pixels.
#[test]
fn deit_classifies_photos_through_its_preprocessor_config() {
    use rusting_brain::models::pretrained::{as_image_model, load_image_model};
    let Some(photos) = photos("deit_classifies_photos_through_its_preprocessor_config") else {
        return;
    };
    let mut m = load_image_model(&fixtures().join("deit")).unwrap();
    m.eval();
    let im = as_image_model(m.as_ref()).unwrap();
    let x = im.preprocess(&photos).unwrap();
    assert_eq!(x.shape(), [2, 3, 32, 32]);
    let logits = no_grad(|| im.forward(&x)).unwrap();
    assert_close(
        "photo logits",
        &logits,
        &expected()["photos.deit.logits"],
        TOL,
    );
    let top = im.classify(&x, 2).unwrap();
    assert_eq!((top.len(), top[0].len()), (2, 2));
    assert!(top[0][0].score >= top[0][1].score && top[0][0].label.starts_with("LABEL_"));
}

/// The folder's tokenizer files encode the prompts as transformers' CLIPTokenizer, and the
/// zero-shot probabilities over them equal transformers' on real photos.
#[test]
fn clip_zero_shot_on_photos_equals_transformers() {
    use rusting_brain::models::pretrained::ImageModel;
    let Some(photos) = photos("clip_zero_shot_on_photos_equals_transformers") else {
        return;
    };
    let mut clip = Clip::from_pretrained(&fixtures().join("clip")).unwrap();
    clip.eval();
    let want = expected();
    let labels = ["bus", "person", "cat"];
    let prompts: Vec<String> = labels
        .iter()
        .map(|l| format!("a photo of a {l}."))
        .collect();
    let prompts: Vec<&str> = prompts.iter().map(String::as_str).collect();
    let ids = clip
        .tokenizer
        .as_ref()
        .unwrap()
        .encode_batch(&prompts)
        .unwrap();
    assert_eq!(
        ids.to_vec::<i64>().unwrap(),
        want["photos.clip.text_ids"].to_vec::<i64>().unwrap()
    );
    let x = clip.preprocess(&photos).unwrap();
    let probs = no_grad(|| clip.zero_shot(&x, &labels, "a photo of a {}.")).unwrap();
    assert_close("zero-shot", &probs, &want["photos.clip.zero_shot"], TOL);
}

/// The same folders on a GPU: DeiT's logits, DINOv2-with-registers' tokens (the antialiased
/// table resampling as gathers on the device) and CLIP's scores, against transformers'.
#[test]
fn families_on_cuda_give_transformers_outputs() {
    use rusting_brain::Device;
    let Some(cuda) = rusting_brain::backend::cuda::device_for_test("vision_families_cuda") else {
        return;
    };
    // TF32 products may be on: a looser bound than the CPU's.
    let tol = 2e-3;
    let want = expected();
    let on = |t: &Tensor| t.to_device(cuda).unwrap();
    let back = |t: Tensor| t.to_device(Device::Cpu).unwrap();
    let mut deit = ViT::from_pretrained(&fixtures().join("deit")).unwrap();
    let mut dino = Dinov2::from_pretrained(&fixtures().join("dinov2_reg")).unwrap();
    let mut clip = Clip::from_pretrained(&fixtures().join("clip")).unwrap();
    for m in [&mut deit as &mut dyn Module, &mut dino, &mut clip] {
        m.eval();
        m.to_device(cuda).unwrap();
    }
    let text = no_grad(|| clip.text_features(&on(&want["text.ids"]))).unwrap();
    for key in SIZES {
        let x = on(&want[&format!("{key}.images")]);
        let logits = no_grad(|| deit.forward(&x)).unwrap();
        let name = format!("{key}.deit.logits");
        assert_close(&name, &back(logits), &want[&name], tol);
        let tokens = no_grad(|| dino.run(&x)).unwrap().last_hidden_state;
        let name = format!("{key}.dinov2_reg.last_hidden_state");
        assert_close(&name, &back(tokens), &want[&name], tol);
        let scores = no_grad(|| clip.scores(&clip.image_features(&x)?, &text)).unwrap();
        let name = format!("{key}.clip.logits_per_image");
        assert_close(&name, &back(scores), &want[&name], tol);
    }
}
