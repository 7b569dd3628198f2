//! The token-data functions of `data::`: token files written from text, contiguous splits,
//! training and evaluation windows, and the unigram baseline. Token files and spans are shared
//! handles, cheap to copy.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::{self, with_tokenizer, with_tokens, Api};
use crate::text::{extensions, files_of};
use rhai::{Array, Dynamic, Engine, Map, FLOAT, INT};
use rusting_brain::data::{unigram_cross_entropy, Shard, TokenFile, TokenFileOptions, TokenSpan};
use rusting_brain::text::Tokenizer;
use rusting_brain::Tensor;

/// Registers the `TokenFile` and `TokenSpan` types and their `vocab_size` getter.
pub fn register_types(engine: &mut Engine) {
    engine.register_type_with_name::<TokenFile>("TokenFile");
    engine.register_type_with_name::<TokenSpan>("TokenSpan");
    engine.register_get("vocab_size", |t: &mut TokenFile| t.vocab_size() as INT);
    engine.register_get("vocab_size", |t: &mut TokenSpan| t.vocab_size() as INT);
    help::getter(
        "vocab_size",
        "tokens.vocab_size -> int",
        "The vocab size a token file was written with; every id is below it.",
        with_tokens!("tokens.vocab_size"),
    );
}

/// The `eos` option: a token's string, an id, or false for none; the tokenizer's when absent.
fn eos_of(eos: Option<&Dynamic>, tok: &Tokenizer) -> RhaiResult<Option<u32>> {
    match eos {
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

crate::options! {
    struct TokenFileOpts {
        eos: Dynamic,
        jsonl_field: String = "text".into(),
        extensions: Vec<String>,
    }
}

fn token_file(tok: Tokenizer, paths: Dynamic, out: &str, opts: Map) -> RhaiResult<TokenFile> {
    let o = TokenFileOpts::parse("data::token_file", opts)?;
    let options = TokenFileOptions {
        eos: eos_of(o.eos.as_ref(), &tok)?,
        jsonl_field: o.jsonl_field,
        ..TokenFileOptions::default()
    };
    let files = files_of(&paths, &extensions(o.extensions), "data::token_file")?;
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

crate::options! {
    struct BatchOptions {
        seed: INT = 0,
        shard: usize,
        shards: usize,
    }
}

fn batch(span: &TokenSpan, step: INT, b: INT, seq_len: INT, opts: Map) -> RhaiResult<Array> {
    let o = BatchOptions::parse("batch", opts)?;
    let seed = o.seed as u64;
    // Under `brain launch`, each rank reads its own part of the step's windows by default.
    let dist = guard(rusting_brain::dist::current)?;
    let (index, count) = (
        o.shard.unwrap_or(dist.rank),
        o.shards.unwrap_or(dist.world_size),
    );
    let shard = guard(|| Shard::new(index, count))?;
    let step = u64::try_from(step)
        .map_err(|_| runtime_error(format!("batch: step {step} is negative")))?;
    let (b, s) = (
        crate::convert::usize_of(b, "batch")?,
        crate::convert::usize_of(seq_len, "batch")?,
    );
    let (x, y) = guard(|| span.shard_batch(step, b, s, seed, shard))?;
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

/// Registers the token-data functions into the `data::` module.
pub fn register(api: &mut Api) {
    api.func(
        "token_file",
        "data::token_file(tok, paths, out_path, #{ eos, jsonl_field, extensions }) -> TokenFile",
        "Encodes files (text: one document each; .jsonl: one per line, field jsonl_field, default \"text\") into a token file, streaming. eos (a token string, an id, or false) follows each document; default: the tokenizer's end-of-text token.",
        with_tokenizer!("let tokens = data::token_file(tok, [\"corpus.txt\"], \"corpus.tokens\", #{ eos: \"<|endoftext|>\" });"),
        token_file,
    );
    api.func(
        "open_tokens",
        "data::open_tokens(path) -> TokenFile",
        "Opens a token file written by data::token_file.",
        with_tokenizer!("data::token_file(tok, \"corpus.txt\", \"corpus.tokens\", #{}); let tokens = data::open_tokens(\"corpus.tokens\");"),
        |p: &str| guard(|| TokenFile::open(p)),
    );
    api.func(
        "unigram_cross_entropy",
        "data::unigram_cross_entropy(train, val) -> float",
        "The unigram baseline in nats per token: -mean over val ids of ln p(id), p from train's counts with add-one smoothing over the vocab. A language model should end below it.",
        with_tokens!("print(`unigram baseline: ${data::unigram_cross_entropy(parts[0], parts[1])}`);"),
        |train: TokenSpan, val: TokenSpan| guard(|| unigram_cross_entropy(&train, &val)),
    );
    api.method(
        "len",
        "tokens.len() -> int",
        "The number of ids in a token file or span.",
        with_tokens!("print(tokens.len())"),
        |t: &mut TokenFile| t.len() as INT,
    );
    api.method(
        "len",
        "span.len() -> int",
        "The number of ids in the span.",
        with_tokens!("print(train.len())"),
        |t: &mut TokenSpan| t.len() as INT,
    );
    api.method(
        "split",
        "tokens.split(train_fraction) -> [train, val]",
        "Contiguous split: the first fraction for training, the rest for validation.",
        with_tokens!("let parts = tokens.split(0.9); let train = parts[0]; let val = parts[1];"),
        |t: &mut TokenFile, f: FLOAT| split(&t.span(), f),
    );
    api.method(
        "split",
        "span.split(train_fraction) -> [train, val]",
        "Contiguous split of a span.",
        with_tokens!("let span = train; let parts = span.split(0.5);"),
        |t: &mut TokenSpan, f: FLOAT| split(t, f),
    );
    let batch_doc = "Random training windows for step: [x, y] i64 tensors [batch, seq_len] on the default device, y = x shifted by one. The same (step, seed) always gives the same windows, so a resumed run sees the same data. Under `brain launch`, rank r reads shard r of world_size by default: its batch windows of the batch * world_size drawn for the step, so the ranks together see what one process would with that larger batch (shard and shards set it by hand).";
    api.method(
        "batch",
        "span.batch(step, batch, seq_len, #{ seed, shard, shards }) -> [x, y]",
        batch_doc,
        with_tokens!("let model = lm::transformer(#{ vocab: tok.vocab_size, d_model: 16, layers: 1, heads: 2 }); let step = 0; let b = train.batch(step, 2, 8, #{ seed: 1 }); let loss = model.loss(b[0], b[1]);"),
        |t: &mut TokenSpan, step: INT, b: INT, s: INT, o: Map| batch(t, step, b, s, o),
    );
    api.method(
        "batch",
        "tokens.batch(step, batch, seq_len, #{ seed, shard, shards }) -> [x, y]",
        batch_doc,
        with_tokens!("let b = tokens.batch(0, 2, 8, #{});"),
        |t: &mut TokenFile, step: INT, b: INT, s: INT, o: Map| batch(&t.span(), step, b, s, o),
    );
    let eval_doc = "Consecutive non-overlapping windows from the start, as an array of [x, y] batches (the last may be smaller); max_batches <= 0 means all.";
    api.method(
        "eval_batches",
        "span.eval_batches(batch, seq_len, max_batches) -> array",
        eval_doc,
        with_tokens!("let model = lm::transformer(#{ vocab: tok.vocab_size, d_model: 16, layers: 1, heads: 2 }); let total = 0.0; for b in val.eval_batches(2, 8, 20) { total += model.loss(b[0], b[1]).item(); }"),
        |t: &mut TokenSpan, b: INT, s: INT, m: INT| eval_batches(t, b, s, m),
    );
    api.method(
        "eval_batches",
        "tokens.eval_batches(batch, seq_len, max_batches) -> array",
        eval_doc,
        with_tokens!("let all = tokens.eval_batches(2, 8, 0);"),
        |t: &mut TokenFile, b: INT, s: INT, m: INT| eval_batches(&t.span(), b, s, m),
    );
    api.method(
        "unigram_entropy",
        "span.unigram_entropy() -> float",
        "The entropy (nats per token) of the span's own unigram distribution.",
        with_tokens!("print(train.unigram_entropy())"),
        |t: &mut TokenSpan| guard(|| t.unigram_entropy()),
    );
    api.method(
        "unigram_entropy",
        "tokens.unigram_entropy() -> float",
        "The entropy (nats per token) of the file's unigram distribution.",
        with_tokens!("print(tokens.unigram_entropy())"),
        |t: &mut TokenFile| guard(|| t.unigram_entropy()),
    );
    api.method(
        "to_string",
        "tokens.to_string() -> string",
        "A one-line summary of a token file.",
        with_tokens!("print(tokens)"),
        |t: &mut TokenFile| format!("{t:?}"),
    );
    api.method(
        "to_string",
        "span.to_string() -> string",
        "A one-line summary of a span.",
        with_tokens!("print(train)"),
        |t: &mut TokenSpan| format!("{t:?}"),
    );
}
