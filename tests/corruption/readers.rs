//! Every file reader of the engine, as the harness drives it: the file it reads, what it does
//! with a loaded file (a model is also run, since some sizes are only used then: the rotary
//! tables, the cache), where its binary header lies, and its well-framed corruption.

use super::gguf::gguf_field;
use super::mutate::Semantic;
use super::semantic;
use rusting_brain::data::{csv, idx, npy, unigram_cross_entropy, CsvOptions, TokenFile};
use rusting_brain::io::onnx::{parse_python_literal, read_onnx};
use rusting_brain::io::torch::{load_pt, module_state_dict, state_dict};
use rusting_brain::models::transformer_lm::generate::{
    generate, Flow, GenerateOptions, SamplingOptions,
};
use rusting_brain::models::transformer_lm::{checkpoint, load_gguf, pretrained, TransformerLm};
use rusting_brain::nn::Module;
use rusting_brain::optim::{AdamW, AdamWConfig};
use rusting_brain::text::Tokenizer;
use rusting_brain::{DType, Device, Result, Tensor};
use std::path::Path;

pub struct Reader {
    pub name: &'static str,
    /// The corrupt file's name (a reader may look for it by name, as `config.json`).
    pub file_name: &'static str,
    /// The leading bytes that hold binary sizes and offsets.
    pub header_span: usize,
    pub semantic: Option<Semantic>,
    pub read: fn(&Path) -> Result<()>,
}

pub const READERS: &[Reader] = &[
    Reader {
        name: "safetensors",
        file_name: "weights.safetensors",
        header_span: 8,
        semantic: Some(semantic::safetensors_header),
        read: |p| rusting_brain::io::load(p).map(drop),
    },
    Reader {
        name: "tokenizer.json",
        file_name: "tokenizer.json",
        header_span: 0,
        semantic: Some(semantic::tokenizer_json),
        read: read_tokenizer,
    },
    Reader {
        name: "npy",
        file_name: "features.npy",
        header_span: 10,
        semantic: Some(semantic::npy_shape),
        read: |p| npy::read_npy(p).map(drop),
    },
    Reader {
        name: "idx",
        file_name: "images.idx",
        header_span: 16,
        semantic: Some(semantic::idx_dims),
        read: |p| idx::read_idx(p).map(drop),
    },
    Reader {
        name: "csv",
        file_name: "iris.csv",
        header_span: 0,
        semantic: Some(semantic::csv_cell),
        read: |p| csv::read_csv(p, &CsvOptions::classification("species")).map(drop),
    },
    Reader {
        name: "checkpoint",
        file_name: "ckpt.safetensors",
        header_span: 8,
        semantic: Some(semantic::checkpoint_header),
        read: read_checkpoint,
    },
    Reader {
        name: "config.json",
        file_name: "config.json",
        header_span: 0,
        semantic: Some(semantic::config_json),
        read: read_pretrained,
    },
    Reader {
        name: "token file",
        file_name: "corpus.tokens",
        header_span: 32,
        semantic: Some(semantic::token_header),
        read: read_tokens,
    },
    Reader {
        name: "pt",
        file_name: "model.pt",
        header_span: 64,
        semantic: Some(semantic::pt_pickle),
        read: read_pt,
    },
    Reader {
        name: "onnx",
        file_name: "model.onnx",
        header_span: 32,
        semantic: Some(semantic::onnx_model),
        read: read_model_onnx,
    },
    Reader {
        name: "onnx graph",
        file_name: "model.onnx",
        header_span: 32,
        semantic: Some(semantic::onnx_graph),
        read: run_onnx_graph,
    },
    Reader {
        name: "gguf",
        file_name: "model.gguf",
        header_span: 24,
        semantic: Some(gguf_field),
        read: read_gguf,
    },
    Reader {
        name: "model yaml",
        file_name: "model.yaml",
        header_span: 0,
        semantic: None,
        read: read_model_yaml,
    },
    Reader {
        name: "spiece.model",
        file_name: "spiece.model",
        header_span: 16,
        semantic: None,
        read: read_spiece_model,
    },
    Reader {
        name: "vocab.json",
        file_name: "vocab.json",
        header_span: 0,
        semantic: None,
        read: read_clip_vocab,
    },
    Reader {
        name: "preprocessor_config.json",
        file_name: "preprocessor_config.json",
        header_span: 0,
        semantic: None,
        read: read_image_processor,
    },
    Reader {
        name: "image folder",
        file_name: "image.png",
        header_span: 64,
        semantic: None,
        read: read_image_folder,
    },
    Reader {
        name: "data.yaml",
        file_name: "data.yaml",
        header_span: 0,
        semantic: None,
        read: read_data_yaml,
    },
    Reader {
        name: "scheduler_config.json",
        file_name: "scheduler_config.json",
        header_span: 0,
        semantic: Some(semantic::config_json),
        read: read_scheduler_config,
    },
    Reader {
        name: "unet config.json",
        file_name: "config.json",
        header_span: 0,
        semantic: Some(semantic::config_json),
        read: read_unet,
    },
    Reader {
        name: "textual inversion",
        file_name: "style.safetensors",
        header_span: 8,
        semantic: Some(semantic::safetensors_header),
        read: read_textual_inversion,
    },
    Reader {
        name: "vae config.json",
        file_name: "config.json",
        header_span: 0,
        semantic: Some(semantic::config_json),
        read: read_vae,
    },
    Reader {
        name: "t5 config.json",
        file_name: "config.json",
        header_span: 0,
        semantic: Some(semantic::config_json),
        read: read_t5,
    },
    Reader {
        name: "sd3 transformer config.json",
        file_name: "config.json",
        header_span: 0,
        semantic: Some(semantic::config_json),
        read: read_sd3_transformer,
    },
    Reader {
        name: "flux transformer config.json",
        file_name: "config.json",
        header_span: 0,
        semantic: Some(semantic::config_json),
        read: read_flux_transformer,
    },
];

/// A T5 encoder folder (the corrupt config.json beside valid weights), loaded and run.
fn read_t5(p: &Path) -> Result<()> {
    use rusting_brain::models::t5::T5EncoderModel;
    let dir = alone_with(p, &["config.json", "model.safetensors"])?;
    let model = T5EncoderModel::from_folder(&dir)?;
    let ids = Tensor::from_vec(vec![1i64, 2, 3, 0], &[1, 4])?;
    model.forward(&ids).map(drop)
}

/// An SD3 transformer folder (the corrupt config.json beside valid weights), loaded and run.
fn read_sd3_transformer(p: &Path) -> Result<()> {
    use rusting_brain::models::diffusion::mmdit::Sd3Transformer;
    let dir = alone_with(p, &["config.json", "diffusion_pytorch_model.safetensors"])?;
    let model = Sd3Transformer::from_folder(&dir)?;
    let c = &model.config;
    let side = 2 * c.patch_size;
    let x = Tensor::ones(&[1, c.in_channels, side, side], DType::F32, Device::Cpu)?;
    let t = Tensor::ones(&[1], DType::F32, Device::Cpu)?;
    let ctx = Tensor::ones(&[1, 3, c.joint_attention_dim], DType::F32, Device::Cpu)?;
    let pooled = Tensor::ones(&[1, c.pooled_projection_dim], DType::F32, Device::Cpu)?;
    model.predict(&x, &t, &ctx, &pooled).map(drop)
}

/// A FLUX transformer folder (the corrupt config.json beside valid weights), loaded and run.
fn read_flux_transformer(p: &Path) -> Result<()> {
    use rusting_brain::models::diffusion::mmdit::flux::image_ids;
    use rusting_brain::models::diffusion::mmdit::{FluxInputs, FluxTransformer};
    let dir = alone_with(p, &["config.json", "diffusion_pytorch_model.safetensors"])?;
    let model = FluxTransformer::from_folder(&dir)?;
    let c = &model.config;
    let x = Tensor::ones(&[1, 4, c.in_channels], DType::F32, Device::Cpu)?;
    let one = Tensor::ones(&[1], DType::F32, Device::Cpu)?;
    let ctx = Tensor::ones(&[1, 3, c.joint_attention_dim], DType::F32, Device::Cpu)?;
    let pooled = Tensor::ones(&[1, c.pooled_projection_dim], DType::F32, Device::Cpu)?;
    let ids = image_ids(4, 4);
    let inputs = FluxInputs {
        context: &ctx,
        pooled: &pooled,
        timesteps: &one,
        guidance: Some(&one),
        image_ids: &ids,
    };
    model.predict(&x, &inputs).map(drop)
}

/// A textual-inversion file added to the tiny SD pipeline, and a prompt with its token encoded.
fn read_textual_inversion(p: &Path) -> Result<()> {
    use rusting_brain::models::diffusion::StableDiffusion;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/diffusion/sd_tiny");
    let mut pipe = StableDiffusion::from_folder(&dir)?;
    let (token, _) = pipe.add_textual_inversion(p, None)?;
    pipe.encode_prompts(&[&format!("a {token} cat")], None)
        .map(drop)
}

/// A diffusers UNet folder (the corrupt config.json beside valid weights), loaded and run.
fn read_unet(p: &Path) -> Result<()> {
    use rusting_brain::models::diffusion::UNet;
    let dir = alone_with(p, &["config.json", "diffusion_pytorch_model.safetensors"])?;
    let unet = UNet::from_folder(&dir)?;
    let c = &unet.config;
    let side = c.downscale();
    let x = Tensor::ones(&[1, c.in_channels, side, side], DType::F32, Device::Cpu)?;
    let t = Tensor::ones(&[1], DType::F32, Device::Cpu)?;
    let ctx = Tensor::ones(&[1, 3, c.cross_attention_dim], DType::F32, Device::Cpu)?;
    unet.predict(&x, &t, Some(&ctx)).map(drop)
}

/// A diffusers VAE folder (the corrupt config.json beside valid weights), loaded and run.
fn read_vae(p: &Path) -> Result<()> {
    use rusting_brain::models::diffusion::AutoencoderKl;
    let dir = alone_with(p, &["config.json", "diffusion_pytorch_model.safetensors"])?;
    let vae = AutoencoderKl::from_folder(&dir)?;
    let c = &vae.config;
    let side = c.downscale();
    let x = Tensor::ones(&[1, c.in_channels, side, side], DType::F32, Device::Cpu)?;
    vae.forward(&x).map(drop)
}

/// A diffusion scheduler's config, walked for a few steps (its numbers size the tables).
fn read_scheduler_config(p: &Path) -> Result<()> {
    use rusting_brain::models::diffusion::scheduler::from_config;
    let text = std::fs::read_to_string(p).map_err(|e| rusting_brain::Error::io(p, e))?;
    let mut s = from_config(&text, None)?;
    s.set_image_tokens(64);
    s.set_timesteps(4)?;
    let x = Tensor::ones(&[1, 2, 2, 2], DType::F32, Device::Cpu)?;
    let mut gen = rusting_brain::Generator::new(0);
    for _ in 0..4 {
        let scaled = s.scale_model_input(&x)?;
        s.step(&scaled, &x, &mut gen)?;
    }
    Ok(())
}

/// A YOLO definition, built into a network (its numbers size the allocations).
fn read_model_yaml(p: &Path) -> Result<()> {
    use rusting_brain::models::yolo::{YoloConfig, YoloModel};
    let config = YoloConfig::from_file(p, None)?;
    YoloModel::build(
        &config,
        Vec::new(),
        false,
        &mut rusting_brain::Generator::new(0),
    )
    .map(drop)
}

/// A dataset definition and its validation split's images and labels.
fn read_data_yaml(p: &Path) -> Result<()> {
    use rusting_brain::data::yolo::{DataConfig, YoloDataset};
    let config = DataConfig::load(p)?;
    YoloDataset::load(&config, "val").map(drop)
}

pub fn by_name(name: &str) -> Option<&'static Reader> {
    READERS.iter().find(|r| r.name == name)
}

fn read_tokenizer(p: &Path) -> Result<()> {
    let tok = Tokenizer::load(p)?;
    let ids = tok.encode("Hello, corrupt world! 123")?;
    tok.decode(&ids, false)?;
    Ok(())
}

/// `files` (the corrupt file first, then siblings beside it) copied into a folder of their own,
/// so that a folder reader sees only them (not another reader's tokenizer.json).
fn alone_with(p: &Path, files: &[&str]) -> Result<std::path::PathBuf> {
    let from = p.parent().unwrap_or(Path::new("."));
    let dir = from.join(format!("only_{}", files[0]));
    std::fs::create_dir_all(&dir).map_err(|e| rusting_brain::Error::io(&dir, e))?;
    for f in files {
        std::fs::copy(from.join(f), dir.join(f)).map_err(|e| rusting_brain::Error::io(&dir, e))?;
    }
    Ok(dir)
}

/// SigLIP's tokenizer from the folder's spiece.model, a batch of prompts encoded.
fn read_spiece_model(p: &Path) -> Result<()> {
    use rusting_brain::models::siglip::tokenizer;
    let dir = alone_with(p, &["spiece.model", "tokenizer_config.json"])?;
    if let Some(tok) = tokenizer::from_folder(&dir, 64)? {
        tok.encode_batch(&["A photo of a cat.", "naïve café ＦＵＬＬ 123"])?;
    }
    Ok(())
}

/// CLIP's tokenizer from the folder's vocab.json beside its merges.txt.
fn read_clip_vocab(p: &Path) -> Result<()> {
    use rusting_brain::models::clip::tokenizer;
    let dir = alone_with(p, &["vocab.json", "merges.txt"])?;
    if let Some(tok) = tokenizer::from_folder(&dir, 77)? {
        tok.encode_batch(&["a photo of a cat", "Hello, World! it's 3.14"])?;
    }
    Ok(())
}

/// The processor read and applied to a small photo.
fn read_image_processor(p: &Path) -> Result<()> {
    use rusting_brain::vision::{ImageProcessor, RgbImage};
    let dir = p.parent().unwrap_or(Path::new("."));
    if let Some(processor) = ImageProcessor::from_folder(dir)? {
        let photo = RgbImage::from_fn(40, 30, |x, y| image::Rgb([x as u8, y as u8, 7]));
        processor.batch(&[photo])?;
    }
    Ok(())
}

/// The (corrupt) image as one class of an image folder beside a valid one, every batch of an
/// epoch decoded: a broken image must come back as an error that names it.
fn read_image_folder(p: &Path) -> Result<()> {
    use rusting_brain::data::image_folder::{
        ImageFolder, ImageFolderBatches, ImageFolderOptions, ImageTransform,
    };
    use rusting_brain::data::BatchSource;
    use rusting_brain::vision::ImageProcessor;
    let root = p.parent().unwrap_or(Path::new(".")).join("folder");
    for class in ["broken", "fine"] {
        std::fs::create_dir_all(root.join(class))
            .map_err(|e| rusting_brain::Error::io(&root, e))?;
    }
    let copy = |to: &Path| std::fs::copy(p, to).map_err(|e| rusting_brain::Error::io(to, e));
    let broken = root.join("broken/image.png");
    copy(&broken)?;
    let fine = image::RgbImage::from_pixel(12, 9, image::Rgb([10, 200, 30]));
    fine.save(root.join("fine/ok.png")).unwrap();
    let processor = ImageProcessor::from_json(&serde_json::json!({
        "size": {"height": 8, "width": 8}, "resample": 2,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]
    }))?;
    let options = ImageFolderOptions {
        batch_size: 2,
        shuffle: false,
        drop_last: false,
        seed: 0,
        workers: 1,
        mix: None,
    };
    let folder = ImageFolder::open(&root)?;
    let mut batches = ImageFolderBatches::new(folder, ImageTransform::Eval(processor), options)?;
    for batch in batches.epoch(Device::Cpu)? {
        if let Err(e) = batch {
            let text = e.to_string();
            assert!(
                text.contains("image.png"),
                "the error does not name the image: {text}"
            );
            return Err(e);
        }
    }
    Ok(())
}

/// A few greedy tokens: the cache and the rotary tables are sized and used.
fn run_model(model: &TransformerLm) -> Result<()> {
    let opts = GenerateOptions {
        max_new_tokens: 3,
        sampling: SamplingOptions::greedy(),
        ..Default::default()
    };
    generate(model, &[vec![1, 2]], &opts, &mut |_, _| Ok(Flow::Continue))?;
    Ok(())
}

fn read_checkpoint(p: &Path) -> Result<()> {
    let ck = checkpoint::load(p)?;
    let model = ck.model(DType::F32, Device::Cpu)?;
    if ck.has_optimizer() {
        let mut opt = AdamW::new(model.parameters(), AdamWConfig::default())?;
        ck.restore_optimizer(&mut opt)?;
    }
    run_model(&model)
}

fn read_pretrained(p: &Path) -> Result<()> {
    let dir = p.parent().unwrap_or(Path::new("."));
    let model = pretrained::load_pretrained(dir, DType::F32, Device::Cpu)?;
    run_model(&model)
}

fn read_tokens(p: &Path) -> Result<()> {
    let f = TokenFile::open(p)?;
    f.unigram_entropy()?;
    let (train, val) = f.split(0.9)?;
    unigram_cross_entropy(&train, &val)?;
    f.batch(0, 2, 8, 0)?;
    for batch in f.eval_batches(2, 8, Some(3))? {
        batch?;
    }
    Ok(())
}

fn read_pt(p: &Path) -> Result<()> {
    let v = load_pt(p)?;
    match v.get("model") {
        Some(m) => module_state_dict(m).map(drop),
        None => state_dict(&v).map(drop),
    }
}

fn read_model_onnx(p: &Path) -> Result<()> {
    let m = read_onnx(p)?;
    for (_, value) in &m.metadata {
        // Metadata that is not a literal is kept as text by callers; only a panic matters.
        let _ = parse_python_literal(value);
    }
    Ok(())
}

/// An ONNX model run as its own graph on an image.
fn run_onnx_graph(p: &Path) -> Result<()> {
    let graph = rusting_brain::graph::OnnxGraph::load(p)?;
    let x = Tensor::rand(
        &[1, 3, 8, 8],
        DType::F32,
        Some(&mut rusting_brain::Generator::new(0)),
    )?;
    graph.run(&[("images".to_string(), x)])?;
    Ok(())
}

/// A GGUF model: loaded (every tensor dequantized), run, and its tokenizer used both ways.
fn read_gguf(p: &Path) -> Result<()> {
    let loaded = load_gguf(p, DType::F32, Device::Cpu)?;
    run_model(&loaded.model)?;
    if let Some(t) = loaded.tokenizer {
        let ids = t
            .tokenizer
            .encode("<|im_start|>Hello, corrupt world! 123<|im_end|>")?;
        t.tokenizer.decode(&ids, false)?;
    }
    Ok(())
}
