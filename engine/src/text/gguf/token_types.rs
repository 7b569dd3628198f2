//! llama.cpp's token types (`tokenizer.ggml.token_type`) as added tokens: control, unknown and
//! user-defined tokens are cut out of the text whole before the rest is tokenized; control and
//! unknown ones are special (skipped by `decode(ids, true)`, as llama.cpp leaves them out of
//! the text unless asked).
//!
//! llama.cpp overrides the file in two ways by name, and so does this:
//! - a token spelled as one of its end-of-generation names (`</s>`, `<|im_end|>`, `<|end|>`,
//!   ...) becomes a control token whatever its type;
//! - in a model whose `general.name` contains "phi-3" or "phi3", the tokens cut out whole, and
//!   `</s>`, swallow the whitespace after them (`rstrip`), except `<unk>`, `<s>` and
//!   `<|endoftext|>`.

use crate::text::AddedToken;

pub(super) const TYPE_NORMAL: i64 = 1;
pub(super) const TYPE_UNKNOWN: i64 = 2;
pub(super) const TYPE_CONTROL: i64 = 3;
pub(super) const TYPE_USER_DEFINED: i64 = 4;

/// The names llama.cpp (llama-vocab.cpp, its end-of-generation list) makes control tokens.
const END_OF_GENERATION: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// The types llama.cpp goes by: the file's (normal where it has none), with the
/// end-of-generation names made control tokens.
pub(super) fn effective_types(tokens: &[String], types: Option<&[i64]>) -> Vec<i64> {
    tokens
        .iter()
        .enumerate()
        .map(|(id, t)| {
            if END_OF_GENERATION.contains(&t.as_str()) {
                TYPE_CONTROL
            } else {
                types
                    .and_then(|ty| ty.get(id))
                    .copied()
                    .unwrap_or(TYPE_NORMAL)
            }
        })
        .collect()
}

/// The tokens llama.cpp cuts out of the text whole, as added tokens; `model_name` is
/// `general.name`.
pub(super) fn added_tokens(
    tokens: &[String],
    types: &[i64],
    model_name: Option<&str>,
) -> Vec<AddedToken> {
    let lower = model_name.unwrap_or_default().to_lowercase();
    let phi3 = lower.contains("phi-3") || lower.contains("phi3");
    tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|(_, (t, &ty))| {
            !t.is_empty() && matches!(ty, TYPE_UNKNOWN | TYPE_CONTROL | TYPE_USER_DEFINED)
        })
        .map(|(id, (t, &ty))| AddedToken {
            id: id as u32,
            content: t.clone(),
            special: ty != TYPE_USER_DEFINED,
            lstrip: false,
            rstrip: phi3 && !matches!(t.as_str(), "<unk>" | "<s>" | "<|endoftext|>"),
            normalized: false,
            single_word: false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn end_of_generation_names_become_control_tokens() {
        let tokens = strings(&["<unk>", "</s>", "<|im_end|>", "a"]);
        let types = effective_types(&tokens, Some(&[2, 1, 4, 1]));
        assert_eq!(types, [2, 3, 3, 1]);
        assert_eq!(effective_types(&tokens, None), [1, 3, 3, 1]);
    }

    #[test]
    fn phi3_special_tokens_swallow_the_whitespace_after_them() {
        let tokens = strings(&["<unk>", "<s>", "</s>", "<|end|>", "<x>", "a"]);
        let types = [2, 3, 3, 3, 4, 1];
        let rstrip = |name| -> Vec<(String, bool)> {
            added_tokens(&tokens, &types, name)
                .into_iter()
                .map(|t| (t.content, t.rstrip))
                .collect()
        };
        let expect = |flags: [bool; 5]| -> Vec<(String, bool)> {
            tokens[..5].iter().cloned().zip(flags).collect()
        };
        assert_eq!(
            rstrip(Some("Phi3")),
            expect([false, false, true, true, true])
        );
        assert_eq!(rstrip(Some("llama")), expect([false; 5]));
    }
}
