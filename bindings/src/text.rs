//! The `text::` namespace (tokenizers: train, load, save, encode, decode, finding files) and
//! the token-data functions of `data::` (token files, training and evaluation windows, the
//! unigram baseline). Tokenizers and token files are shared handles, cheap to copy.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::{self, Api, HelpEntry};
use crate::options::Options;
use rhai::{Array, Dynamic, Engine, Map, Module, FLOAT, INT};
use rusting_brain::data::{unigram_cross_entropy, TokenFile, TokenFileOptions, TokenSpan};
use rusting_brain::text::{collect_files, SplitPattern, Tokenizer, TrainOptions};
use rusting_brain::Tensor;
use std::path::PathBuf;

/// Extensions a directory contributes when a script names none.
const DEFAULT_EXTENSIONS: &[&str] = &["txt", "md", "jsonl"];

fn strings(v: &Dynamic, what: &str) -> RhaiResult<Vec<String>> {
    let bad = || runtime_error(format!("{what}: expected an array of strings"));
    if let Ok(s) = v.clone().into_string() {
        return Ok(vec![s]);
    }
    let arr = v.read_lock::<Array>().ok_or_else(bad)?;
    arr.iter()
        .map(|x| x.clone().into_string().map_err(|_| bad()))
        .collect()
}

fn extensions(o: &Options) -> RhaiResult<Vec<String>> {
    match o.get("extensions") {
        Some(v) => strings(v, "extensions"),
        None => Ok(DEFAULT_EXTENSIONS.iter().map(|s| s.to_string()).collect()),
    }
}

/// Files named in `paths` (strings or an array of them), directories walked.
fn files_of(paths: &Dynamic, exts: &[String], what: &str) -> RhaiResult<Vec<PathBuf>> {
    let paths: Vec<PathBuf> = strings(paths, what)?
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let files = guard(|| collect_files(&paths, exts))?;
    if files.is_empty() {
        return Err(runtime_error(format!(
            "{what}: no files with extension {} under {}",
            exts.join("/"),
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(files)
}

fn train_bpe(paths: Dynamic, opts: Map) -> RhaiResult<Tokenizer> {
    let o = Options::new(
        "text::train_bpe",
        opts,
        &[
            "vocab_size",
            "special_tokens",
            "pattern",
            "extensions",
            "min_frequency",
            "jsonl_field",
        ],
    )?;
    let defaults = TrainOptions::default();
    let pattern_name = o.string("pattern")?.unwrap_or_else(|| "gpt2".into());
    let options = TrainOptions {
        vocab_size: o.usize("vocab_size", defaults.vocab_size)?,
        special_tokens: match o.get("special_tokens") {
            Some(v) => strings(v, "text::train_bpe option special_tokens")?,
            None => defaults.special_tokens,
        },
        pattern: guard(|| SplitPattern::parse(&pattern_name))?,
        min_frequency: o.usize("min_frequency", 0)? as u64,
        jsonl_field: o.string("jsonl_field")?.unwrap_or(defaults.jsonl_field),
    };
    let files = files_of(&paths, &extensions(&o)?, "text::train_bpe")?;
    guard(|| rusting_brain::text::train_bpe_files(&files, &options))
}

fn ids_of(v: &Dynamic, what: &str) -> RhaiResult<Vec<u32>> {
    if let Some(t) = v.clone().try_cast::<Tensor>() {
        let values = guard(|| t.to_vec_f64())?;
        return values
            .into_iter()
            .map(|x| {
                if x >= 0.0 && x <= u32::MAX as f64 && x.fract() == 0.0 {
                    Ok(x as u32)
                } else {
                    Err(runtime_error(format!("{what}: {x} is not a token id")))
                }
            })
            .collect();
    }
    let arr = v.read_lock::<Array>().ok_or_else(|| {
        runtime_error(format!(
            "{what}: expected an array of ids or a tensor, got {}",
            v.type_name()
        ))
    })?;
    arr.iter()
        .map(|x| {
            x.as_int()
                .ok()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| runtime_error(format!("{what}: {x} is not a token id")))
        })
        .collect()
}

fn decode(tok: &mut Tokenizer, ids: Dynamic, opts: Map) -> RhaiResult<String> {
    let o = Options::new("decode", opts, &["skip_special"])?;
    let skip = o.bool("skip_special", false)?;
    let ids = ids_of(&ids, "decode")?;
    guard(|| tok.decode(&ids, skip))
}

fn id_array(ids: &[u32]) -> Array {
    ids.iter().map(|&i| Dynamic::from_int(i as INT)).collect()
}

fn getter(name: &str, signature: &str, doc: &str) {
    help::record(HelpEntry {
        name: name.into(),
        signature: signature.into(),
        doc: doc.into(),
        example: signature.split(" ->").next().unwrap_or(signature).into(),
    });
}

pub fn register(engine: &mut Engine) {
    engine.register_type_with_name::<Tokenizer>("Tokenizer");
    engine.register_type_with_name::<TokenFile>("TokenFile");
    engine.register_type_with_name::<TokenSpan>("TokenSpan");
    engine.register_get("vocab_size", |t: &mut Tokenizer| t.vocab_size() as INT);
    getter(
        "vocab_size",
        "tok.vocab_size -> int",
        "The number of ids (highest id + 1), the size a model's embedding needs.",
    );
    engine.register_get("eos_id", |t: &mut Tokenizer| -> Dynamic {
        t.eos_id()
            .map_or(Dynamic::UNIT, |i| Dynamic::from_int(i as INT))
    });
    getter(
        "eos_id",
        "tok.eos_id -> int or ()",
        "The end-of-text id (<|endoftext|>, <|end_of_text|>, </s>), or () when there is none.",
    );
    engine.register_get("vocab_size", |t: &mut TokenFile| t.vocab_size() as INT);
    engine.register_get("vocab_size", |t: &mut TokenSpan| t.vocab_size() as INT);
    getter(
        "vocab_size",
        "tokens.vocab_size -> int",
        "The vocab size a token file was written with; every id is below it.",
    );
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("text"));
        api.func(
            "train_bpe",
            "text::train_bpe(paths, #{ vocab_size, special_tokens, pattern, extensions, min_frequency, jsonl_field }) -> Tokenizer",
            "Trains a byte-level BPE (Hugging Face compatible) on files and directories (walked recursively, sorted, by extension; default txt, md, jsonl). pattern is \"gpt2\" or \"llama3\"; special tokens get the first ids.",
            "let tok = text::train_bpe([\"docs\"], #{ vocab_size: 2048, special_tokens: [\"<|endoftext|>\"], extensions: [\"md\", \"rs\"] });",
            train_bpe,
        );
        api.func(
            "load_tokenizer",
            "text::load_tokenizer(path) -> Tokenizer",
            "Loads a Hugging Face tokenizer.json with a byte-level BPE model (GPT-2 or LLaMA-3 style).",
            "let tok = text::load_tokenizer(\"tokenizer.json\");",
            |p: &str| guard(|| Tokenizer::load(p)),
        );
        api.func(
            "files",
            "text::files(paths, #{ extensions }) -> array",
            "The files under paths: named files as given, directories walked recursively in sorted order, filtered by extension (default txt, md, jsonl).",
            "let srcs = text::files([\"docs\", \"engine/src\"], #{ extensions: [\"md\", \"rs\"] });",
            |paths: Dynamic, opts: Map| -> RhaiResult<Array> {
                let o = Options::new("text::files", opts, &["extensions"])?;
                let p: Vec<PathBuf> = strings(&paths, "text::files")?.into_iter().map(PathBuf::from).collect();
                let exts = extensions(&o)?;
                let found = guard(|| collect_files(&p, &exts))?;
                Ok(found.into_iter().map(|f| Dynamic::from(f.display().to_string())).collect())
            },
        );
        api.method(
            "save",
            "tok.save(path)",
            "Writes the tokenizer as a Hugging Face tokenizer.json (atomically).",
            "tok.save(\"tokenizer.json\");",
            |t: &mut Tokenizer, p: &str| guard(|| t.save(p)),
        );
        api.method("encode", "tok.encode(text) -> array", "The token ids of a string (added tokens such as <|endoftext|> included, no template tokens).", "let ids = tok.encode(\"Hello world\");", |t: &mut Tokenizer, s: &str| guard(|| t.encode(s)).map(|ids| id_array(&ids)));
        api.method(
            "encode_tensor",
            "tok.encode_tensor(text) -> Tensor",
            "The token ids of a string as an i64 tensor [n] on the default device.",
            "let prompt = tok.encode_tensor(\"Once upon a time\");",
            |t: &mut Tokenizer, s: &str| {
                guard(|| {
                    let ids: Vec<i64> = t.encode(s)?.into_iter().map(|i| i as i64).collect();
                    let n = ids.len();
                    Tensor::from_vec(ids, &[n])?.to_device(crate::tensor::default_device())
                })
            },
        );
        api.method(
            "decode",
            "tok.decode(ids) -> string",
            "The text of ids (an array or a tensor); a character cut between ids shows as U+FFFD.",
            "print(tok.decode(ids));",
            |t: &mut Tokenizer, ids: Dynamic| decode(t, ids, Map::new()),
        );
        api.method(
            "decode",
            "tok.decode(ids, #{ skip_special }) -> string",
            "decode, leaving out special tokens when skip_special is true.",
            "print(tok.decode(ids, #{ skip_special: true }));",
            decode,
        );
        api.method(
            "token_id",
            "tok.token_id(token) -> int",
            "The id of an added token (\"<|endoftext|>\") or a vocabulary token string; an error if there is none.",
            "let eos = tok.token_id(\"<|endoftext|>\");",
            |t: &mut Tokenizer, s: &str| {
                t.token_to_id(s)
                    .map(|i| i as INT)
                    .ok_or_else(|| runtime_error(format!("no token {s:?} in this tokenizer")))
            },
        );
        api.method(
            "token",
            "tok.token(id) -> string",
            "The token string of an id as the vocabulary spells it (Ġ for a space).",
            "print(tok.token(42));",
            |t: &mut Tokenizer, id: INT| {
                u32::try_from(id)
                    .ok()
                    .and_then(|i| t.id_to_token(i))
                    .ok_or_else(|| runtime_error(format!("id {id} is not in the vocabulary")))
            },
        );
        api.method(
            "to_string",
            "tok.to_string() -> string",
            "A one-line summary: vocab size, merges, added tokens.",
            "print(tok)",
            |t: &mut Tokenizer| format!("{t:?}"),
        );
        api.method(
            "to_debug",
            "tok.to_debug() -> string",
            "Same as to_string.",
            "debug(tok)",
            |t: &mut Tokenizer| format!("{t:?}"),
        );
    }
    engine.register_static_module("text", module.into());
}

fn eos_of(o: &Options, tok: &Tokenizer) -> RhaiResult<Option<u32>> {
    match o.get("eos") {
        None => Ok(tok.eos_id()),
        Some(v) if v.as_bool() == Ok(false) => Ok(None),
        Some(v) => {
            if let Ok(name) = v.clone().into_string() {
                return guard(|| tok.special_id(&name)).map(Some);
            }
            let id = v.as_int().map_err(|_| {
                runtime_error(
                    "data::token_file option eos: expected a token string, an id or false",
                )
            })?;
            u32::try_from(id).map(Some).map_err(|_| {
                runtime_error(format!(
                    "data::token_file option eos: {id} is not a token id"
                ))
            })
        }
    }
}

fn token_file(tok: Tokenizer, paths: Dynamic, out: &str, opts: Map) -> RhaiResult<TokenFile> {
    let o = Options::new(
        "data::token_file",
        opts,
        &["eos", "jsonl_field", "extensions"],
    )?;
    let options = TokenFileOptions {
        eos: eos_of(&o, &tok)?,
        jsonl_field: o.string("jsonl_field")?.unwrap_or_else(|| "text".into()),
    };
    let files = files_of(&paths, &extensions(&o)?, "data::token_file")?;
    guard(|| TokenFile::write_from_files(&tok, &files, out, &options))
}

fn pair(x: Tensor, y: Tensor) -> RhaiResult<Array> {
    let d = crate::tensor::default_device();
    guard(|| {
        Ok(vec![
            Dynamic::from(x.to_device(d)?),
            Dynamic::from(y.to_device(d)?),
        ])
    })
}

fn batch(span: &TokenSpan, step: INT, b: INT, seq_len: INT, opts: Map) -> RhaiResult<Array> {
    let o = Options::new("batch", opts, &["seed"])?;
    let seed = o.int("seed", 0)? as u64;
    let step = u64::try_from(step)
        .map_err(|_| runtime_error(format!("batch: step {step} is negative")))?;
    let (b, s) = (
        crate::convert::usize_of(b, "batch")?,
        crate::convert::usize_of(seq_len, "batch")?,
    );
    let (x, y) = guard(|| span.batch(step, b, s, seed))?;
    pair(x, y)
}

fn eval_batches(span: &TokenSpan, b: INT, seq_len: INT, max: INT) -> RhaiResult<Array> {
    let (b, s) = (
        crate::convert::usize_of(b, "eval_batches")?,
        crate::convert::usize_of(seq_len, "eval_batches")?,
    );
    let max = if max > 0 { Some(max as usize) } else { None };
    let batches = guard(|| span.eval_batches(b, s, max))?;
    batches
        .map(|r| guard(|| r).and_then(|(x, y)| pair(x, y).map(Dynamic::from_array)))
        .collect()
}

fn split(span: &TokenSpan, f: FLOAT) -> RhaiResult<Array> {
    let (a, b) = guard(|| span.split(f))?;
    Ok(vec![Dynamic::from(a), Dynamic::from(b)])
}

/// Registers the token-data functions into the `data::` module (called from `data.rs`).
pub fn register_token_data(api: &mut Api) {
    api.func(
        "token_file",
        "data::token_file(tok, paths, out_path, #{ eos, jsonl_field, extensions }) -> TokenFile",
        "Encodes files (text: one document each; .jsonl: one per line, field jsonl_field, default \"text\") into a token file, streaming. eos (a token string, an id, or false) follows each document; default: the tokenizer's end-of-text token.",
        "let tokens = data::token_file(tok, [\"docs\"], \"corpus.tokens\", #{ extensions: [\"md\"] });",
        token_file,
    );
    api.func(
        "open_tokens",
        "data::open_tokens(path) -> TokenFile",
        "Opens a token file written by data::token_file.",
        "let tokens = data::open_tokens(\"corpus.tokens\");",
        |p: &str| guard(|| TokenFile::open(p)),
    );
    api.func(
        "unigram_cross_entropy",
        "data::unigram_cross_entropy(train, val) -> float",
        "The unigram baseline in nats per token: -mean over val ids of ln p(id), p from train's counts with add-one smoothing over the vocab. A language model should end below it.",
        "print(`unigram baseline: ${data::unigram_cross_entropy(parts[0], parts[1])}`);",
        |train: TokenSpan, val: TokenSpan| guard(|| unigram_cross_entropy(&train, &val)),
    );
    api.method(
        "len",
        "tokens.len() -> int",
        "The number of ids in a token file or span.",
        "print(tokens.len())",
        |t: &mut TokenFile| t.len() as INT,
    );
    api.method(
        "len",
        "span.len() -> int",
        "The number of ids in the span.",
        "print(train.len())",
        |t: &mut TokenSpan| t.len() as INT,
    );
    api.method(
        "split",
        "tokens.split(train_fraction) -> [train, val]",
        "Contiguous split: the first fraction for training, the rest for validation.",
        "let parts = tokens.split(0.9); let train = parts[0]; let val = parts[1];",
        |t: &mut TokenFile, f: FLOAT| split(&t.span(), f),
    );
    api.method(
        "split",
        "span.split(train_fraction) -> [train, val]",
        "Contiguous split of a span.",
        "let parts = span.split(0.5);",
        |t: &mut TokenSpan, f: FLOAT| split(t, f),
    );
    let batch_doc = "Random training windows for step: [x, y] i64 tensors [batch, seq_len] on the default device, y = x shifted by one. The same (step, seed) always gives the same windows, so a resumed run sees the same data.";
    api.method(
        "batch",
        "span.batch(step, batch, seq_len, #{ seed }) -> [x, y]",
        batch_doc,
        "let b = train.batch(step, 16, 128, #{ seed: 1 }); let loss = model.loss(b[0], b[1]);",
        |t: &mut TokenSpan, step: INT, b: INT, s: INT, o: Map| batch(t, step, b, s, o),
    );
    api.method(
        "batch",
        "tokens.batch(step, batch, seq_len, #{ seed }) -> [x, y]",
        batch_doc,
        "let b = tokens.batch(0, 8, 64, #{});",
        |t: &mut TokenFile, step: INT, b: INT, s: INT, o: Map| batch(&t.span(), step, b, s, o),
    );
    let eval_doc = "Consecutive non-overlapping windows from the start, as an array of [x, y] batches (the last may be smaller); max_batches <= 0 means all.";
    api.method(
        "eval_batches",
        "span.eval_batches(batch, seq_len, max_batches) -> array",
        eval_doc,
        "for b in val.eval_batches(16, 128, 20) { total += model.loss(b[0], b[1]).item(); }",
        |t: &mut TokenSpan, b: INT, s: INT, m: INT| eval_batches(t, b, s, m),
    );
    api.method(
        "eval_batches",
        "tokens.eval_batches(batch, seq_len, max_batches) -> array",
        eval_doc,
        "let all = tokens.eval_batches(8, 64, 0);",
        |t: &mut TokenFile, b: INT, s: INT, m: INT| eval_batches(&t.span(), b, s, m),
    );
    api.method(
        "unigram_entropy",
        "span.unigram_entropy() -> float",
        "The entropy (nats per token) of the span's own unigram distribution.",
        "print(train.unigram_entropy())",
        |t: &mut TokenSpan| guard(|| t.unigram_entropy()),
    );
    api.method(
        "unigram_entropy",
        "tokens.unigram_entropy() -> float",
        "The entropy (nats per token) of the file's unigram distribution.",
        "print(tokens.unigram_entropy())",
        |t: &mut TokenFile| guard(|| t.unigram_entropy()),
    );
    api.method(
        "to_string",
        "tokens.to_string() -> string",
        "A one-line summary of a token file.",
        "print(tokens)",
        |t: &mut TokenFile| format!("{t:?}"),
    );
    api.method(
        "to_string",
        "span.to_string() -> string",
        "A one-line summary of a span.",
        "print(train)",
        |t: &mut TokenSpan| format!("{t:?}"),
    );
}
