//! Well-framed hostile edits: the corruption a byte-level mutation rarely produces, because
//! the container (a length prefix, a zip CRC, a protobuf) would reject the bytes first. Each
//! edit decodes the valid file, puts a hostile value where the format keeps a size, and
//! encodes it again, so the value reaches the code that trusts it.

use super::mutate::{hostile_number, HOSTILE_NUMBERS};
use super::rng::Rng;
use serde_json::Value;

/// The marker a hostile number replaces after serialization (serde_json cannot hold 1e999).
const MARKER: &str = "\u{1}HOSTILE\u{1}";
const MARKER_JSON: &str = "\"\\u0001HOSTILE\\u0001\"";

/// Paths to every number in `v`, as JSON pointers.
fn number_paths(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Number(_) => out.push(at),
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                number_paths(x, format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (k, x) in map {
                let k = k.replace('~', "~0").replace('/', "~1");
                number_paths(x, format!("{at}/{k}"), out);
            }
        }
        _ => {}
    }
}

/// One number of a JSON document (among those whose pointer starts with one of `prefer`,
/// when any does) replaced by a hostile number; the text is otherwise serde's.
fn edit_json_number(text: &[u8], prefer: &[&str], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    let mut doc: Value = serde_json::from_slice(text).ok()?;
    let mut paths = Vec::new();
    number_paths(&doc, String::new(), &mut paths);
    let preferred: Vec<String> = paths
        .iter()
        .filter(|p| prefer.iter().any(|q| p.starts_with(q)))
        .cloned()
        .collect();
    let pool = if preferred.is_empty() {
        paths
    } else {
        preferred
    };
    if pool.is_empty() {
        return None;
    }
    let path = rng.pick(&pool).clone();
    let number = *rng.pick(HOSTILE_NUMBERS);
    *doc.pointer_mut(&path)? = Value::String(MARKER.into());
    let out = serde_json::to_string(&doc)
        .ok()?
        .replace(MARKER_JSON, number);
    Some((out.into_bytes(), format!("JSON {path} set to {number}")))
}

/// `config.json`: one of its sizes.
pub fn config_json(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    edit_json_number(valid, &[], rng)
}

/// `tokenizer.json`: an id of the vocab or of an added token.
pub fn tokenizer_json(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    edit_json_number(valid, &["/added_tokens", "/model/vocab"], rng)
}

/// The safetensors framing: an 8-byte little-endian header length, the JSON header, the data.
fn split_safetensors(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = u64::from_le_bytes(b.get(..8)?.try_into().ok()?) as usize;
    Some((b.get(8..8 + n)?, b.get(8 + n..)?))
}

fn join_safetensors(header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header);
    out.extend_from_slice(data);
    out
}

/// safetensors: a shape dim or a data offset in the header, the length prefix kept right.
pub fn safetensors_header(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    let (header, data) = split_safetensors(valid)?;
    let (header, what) = edit_json_number(header, &[], rng)?;
    Some((join_safetensors(&header, data), format!("header {what}")))
}

/// A training checkpoint: a size of the model config (or another number) inside the
/// `rusting_brain` metadata entry, itself a JSON string inside the safetensors header.
pub fn checkpoint_header(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    let (header, data) = split_safetensors(valid)?;
    let mut doc: Value = serde_json::from_slice(header).ok()?;
    let inner = doc
        .pointer("/__metadata__/rusting_brain")?
        .as_str()?
        .to_string();
    let prefer: &[&str] = if rng.below(4) == 0 { &[] } else { &["/config"] };
    let (inner, what) = edit_json_number(inner.as_bytes(), prefer, rng)?;
    *doc.pointer_mut("/__metadata__/rusting_brain")? =
        Value::String(String::from_utf8(inner).ok()?);
    let header = serde_json::to_vec(&doc).ok()?;
    Some((
        join_safetensors(&header, data),
        format!("checkpoint header {what}"),
    ))
}

/// NPY: the shape tuple replaced by hostile dims, the header length and padding kept right.
pub fn npy_shape(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    const SHAPES: &[&str] = &[
        "2147483648, 6",
        "20, 4294967296",
        "9007199254740992,",
        "0, 18446744073709551615",
        "4294967295, 4294967295",
        "99999999999999999999999, 6",
        "-1, 6",
        "20, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1",
    ];
    let header_len = u16::from_le_bytes(valid.get(8..10)?.try_into().ok()?) as usize;
    let header = std::str::from_utf8(valid.get(10..10 + header_len)?).ok()?;
    let data = valid.get(10 + header_len..)?;
    let open = header.find("'shape': (")? + "'shape': (".len();
    let close = open + header[open..].find(')')?;
    let shape = *rng.pick(SHAPES);
    let mut dict = format!("{}{shape}{}", &header[..open], &header[close..]);
    dict.truncate(dict.trim_end().len());
    // Padded with spaces and a newline so magic + version + length + dict is a multiple of 64.
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = valid[..8].to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    Some((out, format!("shape set to ({shape})")))
}

/// IDX: one big-endian dimension set to a hostile size.
pub fn idx_dims(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    let ndims = *valid.get(3)? as usize;
    let i = rng.below(ndims);
    let value = *rng.pick(&[u32::MAX, 1 << 31, 1 << 16, 0, 1]);
    let mut out = valid.to_vec();
    out.get_mut(4 + 4 * i..8 + 4 * i)?
        .copy_from_slice(&value.to_be_bytes());
    Some((out, format!("dimension {i} set to {value}")))
}

/// A token file: the header's vocab size or id count set to a hostile value.
pub fn token_header(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    let mut out = valid.to_vec();
    if rng.below(2) == 0 {
        let v = *rng.pick(&[u32::MAX, 1 << 28, 1 << 24, 1 << 24 | 1, 0, 1]);
        out.get_mut(12..16)?.copy_from_slice(&v.to_le_bytes());
        Some((out, format!("header vocab size set to {v}")))
    } else {
        let v = *rng.pick(&[u64::MAX, 1 << 62, 1 << 40, 0, 1]);
        out.get_mut(16..24)?.copy_from_slice(&v.to_le_bytes());
        Some((out, format!("header id count set to {v}")))
    }
}

/// CSV: one cell replaced by a hostile value (a huge or non-finite number, an empty cell, a
/// stray quote or extra delimiters).
pub fn csv_cell(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    const CELLS: &[&str] = &[
        "NaN", "inf", "-inf", "1e999", "-1e999", "", "\"", ",,,,", "1e-999", "0x10",
    ];
    let mut b = valid.to_vec();
    if rng.below(3) == 0 {
        return hostile_number(&mut b, rng).map(|w| (b, w));
    }
    let cells: Vec<usize> = std::iter::once(0)
        .chain(
            b.iter()
                .enumerate()
                .filter(|&(_, &c)| c == b',' || c == b'\n')
                .map(|(i, _)| i + 1),
        )
        .filter(|&i| i < b.len())
        .collect();
    let start = *rng.pick(&cells);
    let end = start
        + b[start..]
            .iter()
            .position(|&c| c == b',' || c == b'\r' || c == b'\n')
            .unwrap_or(b.len() - start);
    let cell = *rng.pick(CELLS);
    b.splice(start..end, cell.bytes());
    Some((b, format!("cell at {start} set to {cell:?}")))
}

/// A `.pt` zip: the pickle (or a storage) corrupted inside, then zipped again with correct
/// CRCs, so the corruption reaches the unpickler instead of the zip reader's checksum.
pub fn pt_pickle(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    use std::io::{Read, Write};
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(valid)).ok()?;
    let mut entries = Vec::new();
    for i in 0..archive.len() {
        let mut f = archive.by_index(i).ok()?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).ok()?;
        entries.push((f.name().to_string(), bytes));
    }
    let pickle = entries.iter().position(|(n, _)| n.ends_with("data.pkl"))?;
    let storages: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].0.contains("/data/"))
        .collect();
    let target = if storages.is_empty() || rng.below(4) != 0 {
        pickle
    } else {
        *rng.pick(&storages)
    };
    let (name, bytes) = &mut entries[target];
    let what = match rng.below(4) {
        0 => {
            let at = rng.below(bytes.len());
            bytes.truncate(at);
            format!("{name} truncated to {at} bytes")
        }
        1 => {
            // A 4-byte little-endian argument (BININT, a length) set to a hostile value.
            let at = rng.below(bytes.len().saturating_sub(4));
            let v = *rng.pick(&[u32::MAX, 1 << 31, 1 << 30, 0x7FFF_FFFF]);
            bytes.get_mut(at..at + 4)?.copy_from_slice(&v.to_le_bytes());
            format!("{name}: 4 bytes at {at} set to {v}")
        }
        2 => match hostile_number(bytes, rng) {
            Some(w) => format!("{name}: {w}"),
            None => return None,
        },
        _ => {
            let n = 1 + rng.below(4);
            for _ in 0..n {
                let at = rng.below(bytes.len());
                if let Some(x) = bytes.get_mut(at) {
                    *x = rng.below(256) as u8;
                }
            }
            format!("{name}: {n} bytes overwritten")
        }
    };
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in &entries {
        out.start_file(name.as_str(), stored).ok()?;
        out.write_all(bytes).ok()?;
    }
    Some((out.finish().ok()?.into_inner(), what))
}

/// ONNX: an initializer's dims, data type or data, or an attribute's list, made hostile and
/// encoded again.
pub fn onnx_model(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    use prost::Message;
    use rusting_brain::io::onnx::proto::ModelProto;
    let mut model = ModelProto::decode(valid).ok()?;
    let graph = model.graph.as_mut()?;
    let what = match rng.below(5) {
        0 | 1 => {
            let i = rng.below(graph.initializer.len());
            let t = graph.initializer.get_mut(i)?;
            let d = rng.below(t.dims.len() + 1);
            let v = *rng.pick(&[1i64 << 31, 1 << 40, 1 << 62, i64::MAX, -1, 0]);
            if d == t.dims.len() {
                t.dims.push(v);
            } else {
                t.dims[d] = v;
            }
            format!("initializer {} dims set to {:?}", t.name, t.dims)
        }
        2 => {
            let i = rng.below(graph.initializer.len());
            let t = graph.initializer.get_mut(i)?;
            t.data_type = *rng.pick(&[0, 8, 13, 14, 17, 99, -1]);
            format!("initializer {} data type set to {}", t.name, t.data_type)
        }
        3 => {
            let i = rng.below(graph.initializer.len());
            let t = graph.initializer.get_mut(i)?;
            t.raw_data.truncate(rng.below(t.raw_data.len() + 1));
            t.float_data.truncate(rng.below(t.float_data.len() + 1));
            format!("initializer {} data cut short", t.name)
        }
        _ => {
            let node = graph.node.first_mut()?;
            let a = node.attribute.first_mut()?;
            a.ints = vec![i64::MAX; 1 + rng.below(4)];
            a.r#type = *rng.pick(&[2, 7, 99]);
            format!(
                "attribute {} set to {:?} (type {})",
                a.name, a.ints, a.r#type
            )
        }
    };
    Some((model.encode_to_vec(), what))
}

/// An ONNX graph whose nodes say hostile things to the graph runtime: an attribute or the
/// shape constant set to sizes no tensor can have, a node turned into another operator over
/// the same inputs, or its inputs rewired.
pub fn onnx_graph(valid: &[u8], rng: &mut Rng) -> Option<(Vec<u8>, String)> {
    use prost::Message;
    use rusting_brain::io::onnx::proto::ModelProto;
    const OPS: &[&str] = &[
        "Resize",
        "GatherND",
        "ScatterND",
        "ScatterElements",
        "NonZero",
        "Trilu",
        "Hardmax",
        "Mod",
        "Tile",
        "Expand",
        "Slice",
        "Split",
        "Range",
        "OneHot",
        "ConstantOfShape",
        "Pad",
        "MaxPool",
        "AveragePool",
        "ConvTranspose",
        "LSTM",
        "GRU",
        "Einsum",
        "Gather",
        "Reshape",
        "Unsqueeze",
        "Squeeze",
        "Transpose",
        "TopK",
        "CumSum",
        "DepthToSpace",
        "LayerNormalization",
        "BatchNormalization",
        "Gemm",
        "Softmax",
        "ReduceProd",
        "Flatten",
        "Concat",
    ];
    const HOSTILE: &[i64] = &[0, -1, -7, 1 << 20, 1 << 40, i64::MAX, i64::MIN];
    let mut model = ModelProto::decode(valid).ok()?;
    let graph = model.graph.as_mut()?;
    let what = match rng.below(4) {
        0 => {
            let node = graph.node.get_mut(rng.below(2))?;
            let i = rng.below(node.attribute.len());
            let op = node.op_type.clone();
            let a = node.attribute.get_mut(i)?;
            let n = 1 + rng.below(5);
            a.ints = (0..n).map(|_| *rng.pick(HOSTILE)).collect();
            a.i = *rng.pick(HOSTILE);
            format!("{op} attribute {} set to {:?} / {}", a.name, a.ints, a.i)
        }
        1 => {
            let t = graph.initializer.iter_mut().find(|t| t.name == "shape")?;
            let n = 1 + rng.below(4);
            t.int64_data = (0..n).map(|_| *rng.pick(HOSTILE)).collect();
            t.dims = vec![n as i64];
            format!("the shape constant set to {:?}", t.int64_data)
        }
        2 => {
            let node = graph.node.get_mut(rng.below(2))?;
            node.op_type = rng.pick(OPS).to_string();
            format!("node {} made a {}", node.name, node.op_type)
        }
        _ => {
            let node = graph.node.get_mut(rng.below(2))?;
            let names = ["images", "conv.weight", "conv.bias", "shape", "y", ""];
            for input in node.input.iter_mut() {
                *input = rng.pick(&names).to_string();
            }
            format!("node {} reads {:?}", node.name, node.input)
        }
    };
    Some((model.encode_to_vec(), what))
}
