//! Chat templates from a script: `text::chat_template(source)`, `text::load_chat_template(dir)`
//! and `template.render(messages, opts)`; the rendering is the engine's (`text::chat_template`).

use crate::error::{guard, runtime_error, RhaiResult};
use rhai::{Array, Map};
use rusting_brain::text::chat_template::{ChatMessage, ChatTemplate};
use std::path::Path;

/// `[#{ role, content }, ...]` as messages; a bad entry is named by its index.
pub(crate) fn messages(list: &Array) -> RhaiResult<Vec<ChatMessage>> {
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let map = m.read_lock::<Map>().ok_or_else(|| {
                runtime_error(format!(
                    "chat messages: entry {i} is a {}, not a map #{{ role, content }}",
                    m.type_name()
                ))
            })?;
            let field = |key: &str| {
                map.get(key)
                    .and_then(|v| v.clone().into_immutable_string().ok())
                    .map(|s| s.to_string())
                    .ok_or_else(|| {
                        runtime_error(format!("chat messages: entry {i} has no string {key}"))
                    })
            };
            Ok(ChatMessage::new(field("role")?, field("content")?))
        })
        .collect()
}

crate::options! {
    struct RenderOptions {
        add_generation_prompt: bool = false,
        bos_token: String,
        eos_token: String,
    }
}

pub fn render(t: &mut ChatTemplate, list: Array, opts: Map) -> RhaiResult<String> {
    let o = RenderOptions::parse("template.render", opts)?;
    let mut template = t.clone();
    for (key, token) in [("bos_token", &o.bos_token), ("eos_token", &o.eos_token)] {
        if let Some(token) = token {
            template = template.with_token(key, token);
        }
    }
    let add = o.add_generation_prompt;
    let list = messages(&list)?;
    guard(|| template.render(&list, add))
}

pub fn load(dir: &str) -> RhaiResult<ChatTemplate> {
    guard(|| ChatTemplate::from_folder(Path::new(dir)))?.ok_or_else(|| {
        runtime_error(format!(
            "text::load_chat_template: {dir} has no chat template (tokenizer_config.json's chat_template, or chat_template.jinja)"
        ))
    })
}

pub fn compile(source: &str) -> RhaiResult<ChatTemplate> {
    guard(|| ChatTemplate::new(source))
}
