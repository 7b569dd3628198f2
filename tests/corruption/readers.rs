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
        name: "data.yaml",
        file_name: "data.yaml",
        header_span: 0,
        semantic: None,
        read: read_data_yaml,
    },
];

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
