//! The `text::` namespace: tokenizers (train, load, save, encode, decode) and finding text
//! files. Tokenizers are shared handles, cheap to copy.

pub(crate) mod chat;
mod files;
pub(crate) mod gguf;

pub(crate) use files::{extensions, files_of, strings};

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::{self, with_tokenizer, Api};
use rhai::{Array, Dynamic, Engine, Map, Module, INT};
use rusting_brain::text::{collect, SplitPattern, Tokenizer, TrainOptions};
use rusting_brain::Tensor;
use std::path::PathBuf;

crate::options! {
    struct TrainBpeOptions {
        vocab_size: usize = TrainOptions::default().vocab_size,
        special_tokens: Vec<String> = TrainOptions::default().special_tokens,
        pattern: String = "gpt2".into(),
        extensions: Vec<String>,
        min_frequency: u64 = 0,
        jsonl_field: String = TrainOptions::default().jsonl_field,
    }
}

fn train_bpe(paths: Dynamic, opts: Map) -> RhaiResult<Tokenizer> {
    let o = TrainBpeOptions::parse("text::train_bpe", opts)?;
    let options = TrainOptions {
        vocab_size: o.vocab_size,
        special_tokens: o.special_tokens,
        pattern: guard(|| SplitPattern::parse(&o.pattern))?,
        min_frequency: o.min_frequency,
        jsonl_field: o.jsonl_field,
    };
    let files = files_of(&paths, &extensions(o.extensions), "text::train_bpe")?;
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

crate::options! {
    struct DecodeOptions {
        skip_special: bool = false,
    }
}

crate::options! {
    struct FilesOptions {
        extensions: Vec<String>,
    }
}

crate::options! {
    struct EncodeOptions {
        add_special_tokens: bool = false,
    }
}

fn decode(tok: &mut Tokenizer, ids: Dynamic, opts: Map) -> RhaiResult<String> {
    let skip = DecodeOptions::parse("decode", opts)?.skip_special;
    let ids = ids_of(&ids, "decode")?;
    guard(|| tok.decode(&ids, skip))
}

fn id_array(ids: &[u32]) -> Array {
    ids.iter().map(|&i| Dynamic::from_int(i as INT)).collect()
}

pub fn register(engine: &mut Engine) {
    engine.register_type_with_name::<Tokenizer>("Tokenizer");
    engine.register_type_with_name::<rusting_brain::text::chat_template::ChatTemplate>(
        "ChatTemplate",
    );
    engine.register_get("vocab_size", |t: &mut Tokenizer| t.vocab_size() as INT);
    help::getter(
        "vocab_size",
        "tok.vocab_size -> int",
        "The number of ids (highest id + 1), the size a model's embedding needs.",
        with_tokenizer!("tok.vocab_size"),
    );
    engine.register_get("eos_id", |t: &mut Tokenizer| -> Dynamic {
        t.eos_id()
            .map_or(Dynamic::UNIT, |i| Dynamic::from_int(i as INT))
    });
    help::getter(
        "eos_id",
        "tok.eos_id -> int or ()",
        "The end-of-text id (<|endoftext|>, <|end_of_text|>, </s>), or () when there is none.",
        with_tokenizer!("tok.eos_id"),
    );
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("text"));
        api.func(
            "train_bpe",
            "text::train_bpe(paths, #{ vocab_size, special_tokens, pattern, extensions, min_frequency, jsonl_field }) -> Tokenizer",
            "Trains a byte-level BPE (Hugging Face compatible) on files and directories (walked recursively, sorted, by extension; default txt, md, jsonl). pattern is \"gpt2\" or \"llama3\"; special tokens get the first ids.",
            "io::write_text(\"docs/a.md\", \"# Tensors\\nA tensor has a shape.\"); let tok = text::train_bpe([\"docs\"], #{ vocab_size: 300, special_tokens: [\"<|endoftext|>\"], extensions: [\"md\", \"rs\"] });",
            train_bpe,
        );
        api.func(
            "load_gguf",
            "text::load_gguf(path) -> #{ tokenizer, eos_id, bos_id, add_bos, chat_template }",
            "Only the tokenizer of a llama.cpp GGUF file (a model's, or a vocabulary-only file), with the special ids and chat template lm::load_gguf gives beside a model.",
            "try { let g = text::load_gguf(\"SmolLM2-135M-Instruct.Q4_1.gguf\"); print(g.tokenizer.encode(\"Hi!\")); } catch (err) { print(`no GGUF file here: ${err}`); }",
            gguf::load_gguf,
        );
        api.func(
            "chat_template",
            "text::chat_template(source) -> ChatTemplate",
            "Compiles a chat template (Jinja, as transformers renders apply_chat_template: trimmed blocks, raise_exception, strftime_now, Python string methods, tojson). A syntax error names its line.",
            "let t = text::chat_template(\"{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}\"); print(t.render([#{ role: \"user\", content: \"Hi\" }], #{ add_generation_prompt: true }));",
            chat::compile,
        );
        api.func(
            "load_chat_template",
            "text::load_chat_template(dir) -> ChatTemplate",
            "A Hugging Face folder's chat template (chat_template.jinja, or tokenizer_config.json's chat_template) with its bos, eos, unk and pad tokens.",
            "try { let t = text::load_chat_template(\"Qwen2.5-0.5B-Instruct\"); } catch (err) { print(`no model folder here: ${err}`); }",
            chat::load,
        );
        api.method(
            "render",
            "template.render(messages, #{ add_generation_prompt, bos_token, eos_token }) -> string",
            "The conversation ([#{ role, content }, ...]) as the model reads it; add_generation_prompt (default false) opens the assistant's turn. A template that fails says which of its lines.",
            "let t = text::chat_template(\"{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}\"); print(t.render([#{ role: \"user\", content: \"Hi\" }], #{ bos_token: \"<s>\" }));",
            chat::render,
        );
        api.func(
            "load_tokenizer",
            "text::load_tokenizer(path) -> Tokenizer",
            "Loads a Hugging Face tokenizer.json with a BPE model: byte-level (GPT-2, LLaMA-3, Qwen, DeepSeek) or SentencePiece-style with byte fallback (LLaMA-2, Mistral, Gemma-3).",
            with_tokenizer!("tok.save(\"tokenizer.json\"); let tok = text::load_tokenizer(\"tokenizer.json\");"),
            |p: &str| guard(|| Tokenizer::load(p)),
        );
        api.func(
            "files",
            "text::files(paths, #{ extensions }) -> array",
            "The files under paths: named files as given, directories walked recursively in sorted order, globs (*, ?, **) expanded; filtered by extension (default txt, md, jsonl), or with extensions: \"*\" every file whose first 8 KiB are UTF-8 text without NUL bytes.",
            "io::write_text(\"docs/a.md\", \"# Notes\"); io::write_text(\"src/main.rs\", \"fn main() {}\"); let srcs = text::files([\"docs\", \"src\"], #{ extensions: [\"md\", \"rs\"] });",
            |paths: Dynamic, opts: Map| -> RhaiResult<Array> {
                let o = FilesOptions::parse("text::files", opts)?;
                let p: Vec<PathBuf> = strings(&paths, "text::files")?.into_iter().map(PathBuf::from).collect();
                let filter = extensions(o.extensions);
                let found = guard(|| collect(&p, &filter))?;
                Ok(found.into_iter().map(|f| Dynamic::from(f.display().to_string())).collect())
            },
        );
        api.method(
            "save",
            "tok.save(path)",
            "Writes the tokenizer as a Hugging Face tokenizer.json (atomically).",
            with_tokenizer!("tok.save(\"tokenizer.json\");"),
            |t: &mut Tokenizer, p: &str| guard(|| t.save(p)),
        );
        api.method("encode", "tok.encode(text) -> array", "The token ids of a string (added tokens such as <|endoftext|> included, no template tokens).", with_tokenizer!("let ids = tok.encode(\"Hello world\");"), |t: &mut Tokenizer, s: &str| guard(|| t.encode(s)).map(|ids| id_array(&ids)));
        api.method(
            "encode",
            "tok.encode(text, #{ add_special_tokens }) -> array",
            "The token ids of a string; with add_special_tokens: true, inside the tokenizer.json post-processor's template (the BOS token of LLaMA-3, BERT's [CLS] and [SEP]) and cut and padded as the file's truncation and padding say, as Hugging Face's encode does by default.",
            with_tokenizer!("let ids = tok.encode(\"Hello world\", #{ add_special_tokens: true });"),
            |t: &mut Tokenizer, s: &str, opts: Map| -> RhaiResult<Array> {
                let o = EncodeOptions::parse("encode", opts)?;
                let ids = match o.add_special_tokens {
                    true => guard(|| t.encode_with_template(s))?,
                    false => guard(|| t.encode(s))?,
                };
                Ok(id_array(&ids))
            },
        );
        api.method(
            "encode_tensor",
            "tok.encode_tensor(text) -> Tensor",
            "The token ids of a string as an i64 tensor [n] on the default device.",
            with_tokenizer!("let prompt = tok.encode_tensor(\"Once upon a time\");"),
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
            with_tokenizer!("let ids = tok.encode(\"the cat\"); print(tok.decode(ids));"),
            |t: &mut Tokenizer, ids: Dynamic| decode(t, ids, Map::new()),
        );
        api.method(
            "decode",
            "tok.decode(ids, #{ skip_special }) -> string",
            "decode, leaving out special tokens when skip_special is true.",
            with_tokenizer!("let ids = tok.encode(\"the cat<|endoftext|>\"); print(tok.decode(ids, #{ skip_special: true }));"),
            decode,
        );
        api.method(
            "token_id",
            "tok.token_id(token) -> int",
            "The id of an added token (\"<|endoftext|>\") or a vocabulary token string; an error if there is none.",
            with_tokenizer!("let eos = tok.token_id(\"<|endoftext|>\");"),
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
            with_tokenizer!("print(tok.token(42));"),
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
            with_tokenizer!("print(tok)"),
            |t: &mut Tokenizer| format!("{t:?}"),
        );
        api.method(
            "to_debug",
            "tok.to_debug() -> string",
            "Same as to_string.",
            with_tokenizer!("debug(tok)"),
            |t: &mut Tokenizer| format!("{t:?}"),
        );
    }
    engine.register_static_module("text", module.into());
}
