//! Writing `tokenizer.json` as Hugging Face does: its field order, the vocabulary in id
//! order, merges as `[left, right]` pairs one per line.

use crate::text::pretokenize::{PatternSource, PreTokenizer, Step};
use crate::text::tokenizer::Tokenizer;
use crate::Result;
use serde_json::{json, Value};
use std::path::Path;

impl Tokenizer {
    /// Writes a `tokenizer.json` that Hugging Face `tokenizers` loads, atomically (a temporary
    /// file renamed over the target).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        crate::text::write_atomically(path, self.to_json_string().as_bytes())
    }

    /// The `tokenizer.json` text: Hugging Face's field order, the vocabulary in id order and
    /// the merges as `[left, right]` pairs, one per line.
    pub fn to_json_string(&self) -> String {
        let inner = self.inner();
        let model = &inner.model;
        let added: Vec<Value> = inner
            .added
            .tokens
            .iter()
            .map(|t| {
                json!({"id": t.id, "content": t.content, "single_word": false, "lstrip": t.lstrip,
                       "rstrip": t.rstrip, "normalized": t.normalized, "special": t.special})
            })
            .collect();
        let mut s = String::new();
        s.push_str("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n");
        s.push_str(&format!("  \"added_tokens\": {},\n", lines(&added, "    ")));
        s.push_str("  \"normalizer\": null,\n");
        s.push_str(&format!(
            "  \"pre_tokenizer\": {},\n",
            pre_tokenizer_json(&inner.pre)
        ));
        s.push_str(&format!(
            "  \"post_processor\": {},\n",
            inner.post_processor_json
        ));
        s.push_str(&format!(
            "  \"decoder\": {},\n",
            json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true})
        ));
        let unk = model
            .unk_id
            .and_then(|id| model.id_to_token[id as usize].clone());
        s.push_str(&format!(
            "  \"model\": {{\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": {},\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": {},\n",
            json!(unk),
            model.ignore_merges
        ));
        let vocab: Vec<String> = model
            .id_to_token
            .iter()
            .enumerate()
            .filter_map(|(id, t)| t.as_ref().map(|t| format!("{}: {id}", json!(t))))
            .collect();
        s.push_str(&format!(
            "    \"vocab\": {{\n      {}\n    }},\n",
            vocab.join(",\n      ")
        ));
        let name = |id: u32| model.id_to_token[id as usize].clone().unwrap_or_default();
        let merges: Vec<String> = model
            .merges
            .iter()
            .map(|&(a, b)| json!([name(a), name(b)]).to_string())
            .collect();
        s.push_str(&format!(
            "    \"merges\": [\n      {}\n    ]\n  }}\n}}\n",
            merges.join(",\n      ")
        ));
        s
    }
}

fn lines(items: &[Value], indent: &str) -> String {
    if items.is_empty() {
        return "[]".into();
    }
    let body: Vec<String> = items.iter().map(|v| format!("{indent}{v}")).collect();
    format!("[\n{}\n  ]", body.join(",\n"))
}

/// The `pre_tokenizer` object for these stages, as Hugging Face writes it.
fn pre_tokenizer_json(pre: &PreTokenizer) -> Value {
    let stage = |step: &Step| match step {
        Step::ByteLevel {
            add_prefix_space,
            use_regex,
        } => json!({"type": "ByteLevel", "add_prefix_space": add_prefix_space,
                    "trim_offsets": true, "use_regex": use_regex}),
        Step::Split(rule) => {
            let pattern = match &rule.source {
                PatternSource::Regex(p) => json!({ "Regex": p }),
                PatternSource::Literal(p) => json!({ "String": p }),
            };
            json!({"type": "Split", "pattern": pattern, "behavior": rule.behavior.hf_name(),
                   "invert": false})
        }
    };
    match pre.steps.as_slice() {
        [one] => stage(one),
        many => {
            json!({"type": "Sequence", "pretokenizers": many.iter().map(stage).collect::<Vec<_>>()})
        }
    }
}

/// The post-processor a trained tokenizer gets: byte-level, adding no tokens.
pub(crate) fn byte_level_post_processor() -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true})
}
