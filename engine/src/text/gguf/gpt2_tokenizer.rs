//! The `gpt2` tokenizer model, a byte-level BPE: the merges (`tokenizer.ggml.merges`,
//! `"left right"`, tokens already in the byte-level alphabet) and the pre-tokenizer llama.cpp
//! applies under the name `tokenizer.ggml.pre`. That name stands for a list of split regexes
//! inside llama.cpp; only the names whose splits equal one of ours are accepted. The pieces are
//! assembled as the equivalent `tokenizer.json` and read by `Tokenizer::from_json_str`, so the
//! result is checked exactly as a Hugging Face file is.

use super::tokenizer::key_error;
use crate::text::{AddedToken, Tokenizer, LLAMA3_PATTERN};
use crate::Result;
use serde_json::{json, Map, Value};

/// Qwen2's split: LLaMA-3's with single digits (`\p{N}` instead of `\p{N}{1,3}`).
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// DeepSeek-LLM's splits, in llama.cpp's order: line breaks, runs of letters of the Latin,
/// Greek, Cyrillic, Armenian, Georgian and other cased scripts (with a space before), runs of
/// ASCII and full-width punctuation, trailing spaces, runs of CJK and Hangul, runs of digits.
const DEEPSEEK_LLM_SPLITS: [&str; 6] = [
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
];

/// DeepSeek-Coder's splits: line breaks, letters, punctuation, CJK and Hangul, single digits.
const DEEPSEEK_CODER_SPLITS: [&str; 5] = [
    "[\r\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}",
];

/// The pre-tokenizer of a `tokenizer.ggml.pre` name: its `tokenizer.json` object, whether
/// llama.cpp skips the merges for pieces that are whole tokens (`ignore_merges`), and whether
/// it adds BOS when the file does not say.
pub(super) fn pre_tokenizer(name: &str) -> Option<(Value, bool, bool)> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split = |pattern: &str| json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false});
    let sequence = |steps: Vec<Value>| json!({"type": "Sequence", "pretokenizers": steps});
    Some(match name {
        "gpt-2" => (byte_level(true), false, false),
        // Each digit alone, then GPT-2's split (llama.cpp's one regex list for SmolLM,
        // StarCoder and Refact).
        "smollm" | "starcoder" | "refact" => (
            sequence(vec![split(r"\p{N}"), byte_level(true)]),
            false,
            false,
        ),
        "llama3" | "llama-v3" | "llama-bpe" => (
            sequence(vec![split(LLAMA3_PATTERN), byte_level(false)]),
            true,
            true,
        ),
        "qwen2" | "deepseek-r1-qwen" => (
            sequence(vec![split(QWEN2_PATTERN), byte_level(false)]),
            false,
            false,
        ),
        "deepseek-llm" | "deepseek-coder" => {
            let splits: &[&str] = match name {
                "deepseek-llm" => &DEEPSEEK_LLM_SPLITS,
                _ => &DEEPSEEK_CODER_SPLITS,
            };
            let mut steps: Vec<Value> = splits.iter().map(|p| split(p)).collect();
            steps.push(byte_level(false));
            (sequence(steps), false, false)
        }
        _ => return None,
    })
}

pub(super) const KNOWN_PRE: &str =
    "gpt-2, smollm, starcoder, refact, llama3, llama-v3, llama-bpe, \
     qwen2, deepseek-r1-qwen, deepseek-llm, deepseek-coder";

/// What a `gpt2` tokenizer is assembled from.
pub(super) struct Gpt2Parts<'a> {
    pub tokens: &'a [String],
    pub merges: &'a [String],
    pub added: &'a [AddedToken],
    pub pre_json: Value,
    pub ignore_merges: bool,
    pub prefix: Option<u32>,
    pub suffix: Option<u32>,
}

/// The byte-level BPE, as the `tokenizer.json` it amounts to.
pub(super) fn gpt2_tokenizer(file: &str, p: Gpt2Parts) -> Result<Tokenizer> {
    let added: Vec<Value> = p
        .added
        .iter()
        .map(|t| {
            json!({"id": t.id, "content": t.content, "single_word": false, "lstrip": t.lstrip,
                   "rstrip": t.rstrip, "normalized": false, "special": t.special})
        })
        .collect();
    let mut root = Map::new();
    root.insert("version".into(), "1.0".into());
    root.insert("added_tokens".into(), Value::Array(added));
    root.insert("normalizer".into(), Value::Null);
    root.insert("pre_tokenizer".into(), p.pre_json);
    root.insert(
        "post_processor".into(),
        post_processor(p.tokens, p.prefix, p.suffix),
    );
    root.insert("decoder".into(), json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}));
    root.insert(
        "model".into(),
        bpe_model(p.tokens, p.merges, p.ignore_merges)
            .map_err(|m| key_error(file, "tokenizer.ggml.merges", m))?,
    );
    let text = Value::Object(root).to_string();
    Tokenizer::from_json_str(&text, &format!("{file} (GGUF tokenizer)"))
}

/// BOS and EOS around each sequence, as `add_bos_token` / `add_eos_token` ask.
fn post_processor(tokens: &[String], bos: Option<u32>, eos: Option<u32>) -> Value {
    if bos.is_none() && eos.is_none() {
        return Value::Null;
    }
    let mut single = Vec::new();
    let mut specials = Map::new();
    let mut special = |id: u32, single: &mut Vec<Value>| {
        let name = &tokens[id as usize];
        single.push(json!({"SpecialToken": {"id": name, "type_id": 0}}));
        specials.insert(
            name.clone(),
            json!({"id": name, "ids": [id], "tokens": [name]}),
        );
    };
    if let Some(id) = bos {
        special(id, &mut single);
    }
    single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
    if let Some(id) = eos {
        special(id, &mut single);
    }
    json!({"type": "TemplateProcessing", "single": single, "pair": [], "special_tokens": specials})
}

/// The BPE model object; a merge is split at its first space after the first byte, as
/// llama.cpp splits it (a token may itself start with a space).
fn bpe_model(
    tokens: &[String],
    merges: &[String],
    ignore_merges: bool,
) -> std::result::Result<Value, String> {
    let vocab: Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), Value::from(i)))
        .collect();
    let pairs = merges
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let cut = m
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(at, _)| at)
                .ok_or_else(|| format!("merge {i} {m:?} is not two tokens separated by a space"))?;
            Ok(json!([&m[..cut], &m[cut + 1..]]))
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    Ok(json!({"type": "BPE", "dropout": null, "unk_token": null,
              "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
              "byte_fallback": false, "ignore_merges": ignore_merges, "vocab": vocab,
              "merges": pairs}))
}
