//! The valid file each reader's corruptions start from, built here (or read from a committed
//! fixture) so the harness needs no downloaded assets. Each is small, so a thousand cases
//! stay quick, and reaches the reader's deeper paths (several dtypes, an optimizer state,
//! metadata, a multi-layer model).

use rusting_brain::data::TokenFile;
use rusting_brain::data::{idx, npy};
use rusting_brain::io::onnx::proto::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto, ValueInfoProto,
};
use rusting_brain::models::transformer_lm::TransformerLm;
use rusting_brain::models::transformer_lm::{checkpoint, train_step, LmConfig, TrainState};
use rusting_brain::nn::Module;
use rusting_brain::optim::{AdamW, AdamWConfig, Optimizer};
use rusting_brain::{DType, Generator, Tensor};
use std::collections::HashMap;
use std::path::PathBuf;

/// A valid file, and the files a reader needs beside it (a model's weights beside its
/// `config.json`), written next to the corrupt file unchanged.
pub struct Sample {
    pub valid: Vec<u8>,
    pub siblings: Vec<(&'static str, Vec<u8>)>,
}

impl Sample {
    fn alone(valid: Vec<u8>) -> Sample {
        Sample {
            valid,
            siblings: Vec::new(),
        }
    }
}

fn fixture(relative: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(relative);
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

/// The sample of the reader named `reader` (a name from `readers::READERS`).
pub fn sample(reader: &str) -> Sample {
    match reader {
        "safetensors" => Sample::alone(safetensors()),
        "tokenizer.json" => Sample::alone(fixture("tokenizer/hf_gpt2.tokenizer.json")),
        "npy" => Sample::alone(npy::npy_bytes(&values(&[20, 6], 3)).unwrap()),
        "idx" => {
            let pixels: Vec<u8> = (0..10 * 8 * 8).map(|i| (i * 37 % 256) as u8).collect();
            let t = Tensor::from_vec(pixels, &[10, 8, 8]).unwrap();
            Sample::alone(idx::idx_bytes(&t).unwrap())
        }
        "csv" => Sample::alone(csv()),
        "checkpoint" => Sample::alone(checkpoint()),
        "config.json" => {
            let model = tiny_model();
            let weights = rusting_brain::io::save_bytes(&model.state_dict(), None).unwrap();
            Sample {
                valid: checkpoint::config_json(&model.config).into_bytes(),
                siblings: vec![("model.safetensors", weights)],
            }
        }
        "token file" => Sample::alone(token_file()),
        "pt" => Sample::alone(fixture("torch/tiny_checkpoint.pt")),
        "onnx" | "onnx graph" => Sample::alone(onnx()),
        "gguf" => Sample::alone(fixture("gguf/tiny_llama.gguf")),
        "model yaml" => Sample::alone(fixture("yolo/mini11.yaml")),
        "spiece.model" => Sample {
            valid: fixture("siglip_tokenizer/spiece.model"),
            siblings: vec![(
                "tokenizer_config.json",
                fixture("siglip_tokenizer/tokenizer_config.json"),
            )],
        },
        "vocab.json" => Sample {
            valid: fixture("vision_families/clip/vocab.json"),
            siblings: vec![("merges.txt", fixture("vision_families/clip/merges.txt"))],
        },
        "preprocessor_config.json" => {
            Sample::alone(fixture("vision_families/clip/preprocessor_config.json"))
        }
        "image folder" => Sample::alone(png_32x32()),
        "data.yaml" => Sample {
            valid: b"train: val.txt\nval: val.txt\nnames: [thing, other]\n".to_vec(),
            siblings: vec![
                ("val.txt", b"./a.png\n".to_vec()),
                ("a.png", png_32x32()),
                (
                    "a.txt",
                    b"0 0.5 0.5 0.25 0.25\n1 0.2 0.3 0.1 0.1\n".to_vec(),
                ),
            ],
        },
        // DPM-Solver++ 2M Karras with SD 1.5's noise schedule: the most numbers to edit.
        "scheduler_config.json" => Sample::alone(
            br#"{"_class_name": "DPMSolverMultistepScheduler", "num_train_timesteps": 1000,
                "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear",
                "solver_order": 2, "use_karras_sigmas": true, "steps_offset": 1,
                "timestep_spacing": "linspace", "lambda_min_clipped": -5.1}"#
                .to_vec(),
        ),
        "unet config.json" => Sample {
            valid: fixture("diffusion/sd_tiny/unet/config.json"),
            siblings: vec![(
                "diffusion_pytorch_model.safetensors",
                fixture("diffusion/sd_tiny/unet/diffusion_pytorch_model.safetensors"),
            )],
        },
        "textual inversion" => {
            Sample::alone(fixture("diffusion/textual_inversion/style.safetensors"))
        }
        "vae config.json" => Sample {
            valid: fixture("diffusion/sd_tiny/vae/config.json"),
            siblings: vec![(
                "diffusion_pytorch_model.safetensors",
                fixture("diffusion/sd_tiny/vae/diffusion_pytorch_model.safetensors"),
            )],
        },
        "t5 config.json" => Sample {
            valid: fixture("diffusion/sd3_tiny/text_encoder_3/config.json"),
            siblings: vec![(
                "model.safetensors",
                fixture("diffusion/sd3_tiny/text_encoder_3/model.safetensors"),
            )],
        },
        "sd3 transformer config.json" => Sample {
            valid: fixture("diffusion/sd3_tiny/transformer/config.json"),
            siblings: vec![(
                "diffusion_pytorch_model.safetensors",
                fixture("diffusion/sd3_tiny/transformer/diffusion_pytorch_model.safetensors"),
            )],
        },
        "flux transformer config.json" => Sample {
            valid: fixture("diffusion/flux_tiny/transformer/config.json"),
            siblings: vec![(
                "diffusion_pytorch_model.safetensors",
                fixture("diffusion/flux_tiny/transformer/diffusion_pytorch_model.safetensors"),
            )],
        },
        other => panic!("no sample for reader {other:?}"),
    }
}

fn values(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, Some(&mut Generator::new(seed))).unwrap()
}

fn safetensors() -> Vec<u8> {
    let tensors = vec![
        ("weight", values(&[3, 4], 1)),
        (
            "ids",
            Tensor::from_vec(vec![3i64, -1, 7, 0, 2], &[5]).unwrap(),
        ),
        ("half", values(&[2, 2, 2], 2).to_dtype(DType::BF16).unwrap()),
        ("bytes", Tensor::from_vec((0..7u8).collect(), &[7]).unwrap()),
        (
            "mask",
            Tensor::from_vec(vec![true, false, true], &[3]).unwrap(),
        ),
    ];
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    canonical_safetensors(&rusting_brain::io::save_bytes(&tensors, Some(meta)).unwrap())
}

/// A CSV with a quoted header, CRLF lines and a label column with doubled quotes.
fn csv() -> Vec<u8> {
    let mut g = Generator::new(11);
    let mut text = String::from("sepal length,\"petal, width\",score,species\r\n");
    let species = ["setosa", "versicolor", "\"vir\"\"ginica\""];
    for row in 0..40 {
        let v = g.normal(3);
        text.push_str(&format!(
            "{:.3},{:.4},{:.2},{}\r\n",
            v[0],
            v[1] * 10.0,
            v[2],
            species[row % 3]
        ));
    }
    text.into_bytes()
}

/// Two layers, grouped queries, an untied head.
fn tiny_config() -> LmConfig {
    let mut c = LmConfig::new(40, 16, 2, 4);
    c.n_kv_heads = 2;
    c.ffn_hidden = 24;
    c.max_seq_len = 32;
    c.tied_embeddings = false;
    c
}

fn tiny_model() -> TransformerLm {
    TransformerLm::new(tiny_config(), &mut Generator::new(7)).unwrap()
}

/// A training checkpoint after one AdamW step, so it carries optimizer state.
fn checkpoint() -> Vec<u8> {
    let model = tiny_model();
    let mut opt = AdamW::new(model.parameters(), AdamWConfig::default()).unwrap();
    let ids = |v: Vec<i64>| Tensor::from_vec(v, &[1, 4]).unwrap();
    let batch = (ids(vec![1, 2, 3, 4]), ids(vec![2, 3, 4, 5]));
    train_step(&model, &mut opt, &[batch]).unwrap();
    let train = TrainState {
        step: 1,
        data_seed: 3,
        extra: serde_json::json!({"lr": 0.001, "losses": [3.7]}),
    };
    let dir = tempfile_dir();
    let path = dir.join("ckpt.safetensors");
    checkpoint::save(&path, &model, Some(&opt as &dyn Optimizer), &train).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    canonical_safetensors(&bytes)
}

/// The same file with its header's keys in sorted order: the metadata is a `HashMap`, whose
/// order (and so every byte offset after it) would change from run to run, and with it which
/// bytes a seeded corruption hits.
fn canonical_safetensors(bytes: &[u8]) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.extend_from_slice(&bytes[8 + n..]);
    out
}

fn token_file() -> Vec<u8> {
    let dir = tempfile_dir();
    let path = dir.join("corpus.tokens");
    let ids: Vec<u32> = (0..400u32).map(|i| (i * 7) % 50).collect();
    TokenFile::write_ids(&path, &ids, 50).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    bytes
}

/// A fresh folder under the system temp dir (the tests crate has no tempfile dependency).
fn tempfile_dir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rb_corruption_sample_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A small ONNX model as ultralytics exports one: an opset, Python-literal metadata, a conv
/// with attributes, float and int64 initializers (raw and typed), symbolic input dims.
fn onnx() -> Vec<u8> {
    use prost::Message;
    let dim = |v: i64, param: &str| match param {
        "" => proto::Dimension {
            dim_value: Some(v),
            dim_param: None,
        },
        p => proto::Dimension {
            dim_value: None,
            dim_param: Some(p.into()),
        },
    };
    let value_info = |name: &str, dims: Vec<proto::Dimension>| ValueInfoProto {
        name: name.into(),
        r#type: Some(proto::TypeProto {
            tensor_type: Some(proto::TypeProtoTensor {
                elem_type: proto::data_type::FLOAT,
                shape: Some(proto::TensorShapeProto { dim: dims }),
            }),
        }),
    };
    let weight = TensorProto {
        name: "conv.weight".into(),
        data_type: proto::data_type::FLOAT,
        dims: vec![4, 3, 3, 3],
        raw_data: (0..108)
            .flat_map(|i| (i as f32 * 0.01).to_le_bytes())
            .collect(),
        ..Default::default()
    };
    let bias = TensorProto {
        name: "conv.bias".into(),
        data_type: proto::data_type::FLOAT,
        dims: vec![4],
        float_data: vec![0.1, -0.2, 0.3, 0.0],
        ..Default::default()
    };
    let shape = TensorProto {
        name: "shape".into(),
        data_type: proto::data_type::INT64,
        dims: vec![2],
        int64_data: vec![1, -1],
        ..Default::default()
    };
    let ints = |name: &str, v: Vec<i64>| AttributeProto {
        name: name.into(),
        r#type: proto::attribute_type::INTS,
        ints: v,
        ..Default::default()
    };
    let conv = NodeProto {
        input: vec!["images".into(), "conv.weight".into(), "conv.bias".into()],
        output: vec!["y".into()],
        name: "/conv/Conv".into(),
        op_type: "Conv".into(),
        attribute: vec![
            ints("kernel_shape", vec![3, 3]),
            ints("strides", vec![1, 1]),
            ints("pads", vec![1, 1, 1, 1]),
            AttributeProto {
                name: "group".into(),
                r#type: proto::attribute_type::INT,
                i: 1,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let reshape = NodeProto {
        input: vec!["y".into(), "shape".into()],
        output: vec!["output0".into()],
        name: "/Reshape".into(),
        op_type: "Reshape".into(),
        ..Default::default()
    };
    let meta = |k: &str, v: &str| StringStringEntryProto {
        key: k.into(),
        value: v.into(),
    };
    let model = ModelProto {
        ir_version: 9,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        producer_name: "pytorch".into(),
        producer_version: "2.3.1".into(),
        graph: Some(GraphProto {
            node: vec![conv, reshape],
            name: "main_graph".into(),
            initializer: vec![weight, bias, shape],
            input: vec![value_info(
                "images",
                vec![dim(0, "batch"), dim(3, ""), dim(0, "h"), dim(0, "w")],
            )],
            output: vec![value_info("output0", vec![dim(1, ""), dim(0, "n")])],
        }),
        metadata_props: vec![
            meta("stride", "32"),
            meta("names", "{0: 'person', 1: 'bicycle', 2: 'car'}"),
            meta("imgsz", "[320, 320]"),
            meta("args", "{'batch': 1, 'half': False, 'dynamic': True}"),
        ],
    };
    model.encode_to_vec()
}

/// A 32x32 PNG (ultralytics drops images under 10 pixels), the image of a dataset's label.
fn png_32x32() -> Vec<u8> {
    let mut bytes = Vec::new();
    image::RgbImage::from_pixel(32, 32, image::Rgb([100, 50, 25]))
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    bytes
}
