//! Chat templates as transformers renders them (`apply_chat_template`): the checkpoint's Jinja
//! source (`chat_template` in tokenizer_config.json, or a GGUF's `tokenizer.chat_template`)
//! given `messages`, `add_generation_prompt` and the tokenizer's special tokens
//! (`bos_token`, `eos_token`, ...), in an environment set up as transformers sets up its
//! Jinja one: blocks trimmed and left-stripped, loop controls, `raise_exception(msg)`,
//! `strftime_now(format)`, Python's string and dict methods (`.strip()`, `.startswith()`,
//! `.items()`), and `tojson` writing what Python's `json.dumps` writes (no HTML escaping).
//!
//! A template that does not parse, or fails while rendering (its own `raise_exception`
//! included), is an error that names the template's line.

use super::Tokenizer;
use crate::io::clock::{civil, now_unix};
use crate::{Error, Result};
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template and the special tokens it may name.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    tokens: BTreeMap<String, String>,
    /// The template's text, where its end-of-turn markers are read (`stop_ids`).
    source: String,
}

/// Markers that end a turn in the chat formats in use (ChatML, Llama 3, Gemma, Phi-3, Mistral,
/// ...), checked against what a template writes.
const END_OF_TURN: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "</s>",
    "<|return|>",
];

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source`; a syntax error names its line.
    pub fn new(source: impl Into<String>) -> Result<Self> {
        let source = source.into();
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<Value, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_function("strftime_now", |format: String| {
            strftime(&format, now_unix())
        });
        env.add_filter("tojson", to_json);
        env.add_template_owned(NAME, source.clone())
            .map_err(|e| template_error(&e))?;
        Ok(ChatTemplate {
            env,
            tokens: BTreeMap::new(),
            source,
        })
    }

    /// The template of a Hugging Face folder with its special tokens: `chat_template.jinja`
    /// (as transformers 5 saves it) or tokenizer_config.json's `chat_template` (a string, or
    /// a list of named templates, of which `default` is taken). `None` when there is none.
    pub fn from_folder(dir: &Path) -> Result<Option<Self>> {
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = match config_path.exists() {
            true => {
                let text = std::fs::read_to_string(&config_path)
                    .map_err(|e| Error::io(&config_path, e))?;
                serde_json::from_str(&text).map_err(|e| {
                    Error::format(
                        "tokenizer_config.json",
                        format!("{}: {e}", config_path.display()),
                    )
                })?
            }
            false => serde_json::Value::Null,
        };
        let jinja = dir.join("chat_template.jinja");
        let source = match (jinja.exists(), config.get("chat_template")) {
            (true, _) => std::fs::read_to_string(&jinja).map_err(|e| Error::io(&jinja, e))?,
            (false, Some(serde_json::Value::String(s))) => s.clone(),
            (false, Some(serde_json::Value::Array(named))) => named
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str())
                .map(str::to_string)
                .ok_or_else(|| {
                    Error::format(
                        "tokenizer_config.json",
                        "chat_template lists no \"default\" template",
                    )
                })?,
            _ => return Ok(None),
        };
        let mut template = ChatTemplate::new(source)?;
        for key in ["bos_token", "eos_token", "unk_token", "pad_token"] {
            let token = match config.get(key) {
                Some(serde_json::Value::String(s)) => Some(s.as_str()),
                Some(o) => o.get("content").and_then(|c| c.as_str()),
                None => None,
            };
            if let Some(token) = token {
                template = template.with_token(key, token);
            }
        }
        Ok(Some(template))
    }

    /// The ids where a reply ends: the tokenizer's end of text, the template's `eos_token`,
    /// and every end-of-turn marker the template writes that the tokenizer has as one token
    /// (ChatML's `<|im_end|>` for Qwen, `<|eot_id|>` for Llama 3, `<end_of_turn>` for Gemma,
    /// `<|end|>` for Phi-3).
    pub fn stop_ids(&self, tokenizer: &Tokenizer) -> Vec<u32> {
        let mut ids: Vec<u32> = tokenizer.eos_id().into_iter().collect();
        let named = self.tokens.get("eos_token").map(String::as_str);
        let written = END_OF_TURN
            .iter()
            .copied()
            .filter(|m| self.source.contains(m));
        for marker in named.into_iter().chain(written) {
            if let Some(id) = tokenizer.token_to_id(marker) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        ids
    }

    /// Sets a special token the template may name (`bos_token`, `eos_token`, `pad_token`, ...).
    pub fn with_token(mut self, name: &str, token: &str) -> Self {
        self.tokens.insert(name.to_string(), token.to_string());
        self
    }

    /// The conversation as the model reads it; with `add_generation_prompt`, followed by what
    /// opens the assistant's turn.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| template_error(&e))?;
        let mut ctx: BTreeMap<String, Value> = self
            .tokens
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        ctx.insert("messages".into(), Value::from_serialize(messages));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        template.render(ctx).map_err(|e| template_error(&e))
    }
}

/// The error with the template's line, and the cause minijinja chains under it.
fn template_error(e: &minijinja::Error) -> Error {
    let mut text = match e.line() {
        Some(line) => format!(
            "line {line}: {}",
            e.detail().unwrap_or(&e.kind().to_string())
        ),
        None => e.to_string(),
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(" ({cause})"));
        source = cause.source();
    }
    Error::format("chat template", text)
}

/// `tojson` as Python's `json.dumps(x, ensure_ascii=False)` writes it: ", " and ": " between
/// items, no HTML escaping; `indent` puts each item on its own line.
fn to_json(
    value: Value,
    indent: Option<usize>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let indent = indent.or(kwargs.get::<Option<usize>>("indent")?);
    // ensure_ascii is read and ignored (non-ASCII stays as is); any other option is refused.
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

/// `v` as JSON, maps in their own key order (as a Python dict keeps it).
fn write_json(
    v: &Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> std::result::Result<(), minijinja::Error> {
    use minijinja::value::ValueKind as K;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let (open, close, map) = match v.kind() {
        K::Undefined | K::None => {
            out.push_str("null");
            return Ok(());
        }
        K::Bool => {
            out.push_str(if v.is_true() { "true" } else { "false" });
            return Ok(());
        }
        K::Number => {
            out.push_str(&v.to_string());
            return Ok(());
        }
        K::String => {
            out.push_str(&serde_json::Value::String(v.to_string()).to_string());
            return Ok(());
        }
        K::Map => ('{', '}', true),
        _ => ('[', ']', false),
    };
    out.push(open);
    let items: Vec<Value> = v.try_iter()?.collect();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(if indent.is_some() { "," } else { ", " });
        }
        newline(out, depth + 1);
        if map {
            write_json(item, None, 0, out)?;
            out.push_str(": ");
            write_json(&v.get_item(item)?, indent, depth + 1, out)?;
        } else {
            write_json(item, indent, depth + 1, out)?;
        }
    }
    if !items.is_empty() {
        newline(out, depth);
    }
    out.push(close);
    Ok(())
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// C's strftime for the directives chat templates use (%Y %m %d %B %b %H %M %S %%), in UTC.
fn strftime(format: &str, unix: i64) -> std::result::Result<String, minijinja::Error> {
    let (year, month, day) = civil(unix.div_euclid(86_400));
    let secs = unix.rem_euclid(86_400);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('B') => out.push_str(MONTHS[month - 1]),
            Some('b') => out.push_str(&MONTHS[month - 1][..3]),
            Some('H') => out.push_str(&format!("{:02}", secs / 3600)),
            Some('M') => out.push_str(&format!("{:02}", secs / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", secs % 60)),
            Some('%') => out.push('%'),
            other => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!("strftime_now: %{} is not supported", other.unwrap_or(' ')),
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ChatML as Qwen's and SmolLM's templates write it.
    const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn a_reply_stops_at_the_end_of_turn_marker_the_template_writes() {
        let opts = crate::text::TrainOptions {
            vocab_size: 270,
            special_tokens: vec![
                "<|endoftext|>".into(),
                "<|im_start|>".into(),
                "<|im_end|>".into(),
            ],
            ..Default::default()
        };
        let tok = crate::text::train_bpe(["a small corpus of text".to_string()], &opts).unwrap();
        let id = |t: &str| tok.token_to_id(t).unwrap();
        let chatml = ChatTemplate::new(CHATML).unwrap();
        assert_eq!(
            chatml.stop_ids(&tok),
            [id("<|endoftext|>"), id("<|im_end|>")]
        );
        // A template that never writes the marker does not stop at it.
        let plain =
            ChatTemplate::new("{% for m in messages %}{{ m.content }}{% endfor %}").unwrap();
        assert_eq!(plain.stop_ids(&tok), [id("<|endoftext|>")]);
    }

    fn chat() -> Vec<ChatMessage> {
        vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ]
    }

    #[test]
    fn chatml_renders_each_turn_and_the_generation_prompt() {
        let t = ChatTemplate::new(CHATML).unwrap();
        assert_eq!(
            t.render(&chat(), true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(!t.render(&chat(), false).unwrap().ends_with("assistant\n"));
    }

    /// Blocks on their own lines leave no blank lines (trim_blocks and lstrip_blocks), Python's
    /// string methods work, and the special tokens are there.
    #[test]
    fn blocks_are_trimmed_and_python_methods_and_tokens_work() {
        let source = "{{ bos_token }}\n{% for m in messages %}\n    {% if m.role == 'system' %}\n[{{ m.content.strip().upper() }}]\n    {% else %}\n{{ m.content }}{{ eos_token }}\n    {% endif %}\n{% endfor %}\n";
        let t = ChatTemplate::new(source)
            .unwrap()
            .with_token("bos_token", "<s>")
            .with_token("eos_token", "</s>");
        assert_eq!(
            t.render(&chat(), false).unwrap(),
            "<s>\n[BE BRIEF.]\nHi</s>\n"
        );
    }

    #[test]
    fn tojson_writes_as_python_json_dumps() {
        let t =
            ChatTemplate::new("{{ messages[0] | tojson }}|{{ messages[0] | tojson(indent=2) }}")
                .unwrap();
        let m = [ChatMessage::new("user", "a<b & \"c\"")];
        assert_eq!(
            t.render(&m, false).unwrap(),
            "{\"role\": \"user\", \"content\": \"a<b & \\\"c\\\"\"}|{\n  \"role\": \"user\",\n  \"content\": \"a<b & \\\"c\\\"\"\n}"
        );
    }

    #[test]
    fn a_template_error_names_its_line() {
        let e = ChatTemplate::new("ok\n{% if %}").err().unwrap().to_string();
        assert!(e.contains("line 2"), "{e}");
        let t =
            ChatTemplate::new("a\nb\n{{ raise_exception('Conversation roles must alternate') }}")
                .unwrap();
        let e = t.render(&chat(), false).unwrap_err().to_string();
        assert!(
            e.contains("line 3") && e.contains("Conversation roles must alternate"),
            "{e}"
        );
    }

    /// tokenizer_config.json's template and tokens (a token as a string or an added-token
    /// object), as transformers reads them.
    #[test]
    fn a_folder_gives_its_template_and_special_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let config = serde_json::json!({
            "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}",
            "bos_token": "<s>",
            "eos_token": { "content": "</s>", "lstrip": false },
        });
        std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
        let t = ChatTemplate::from_folder(dir.path()).unwrap().unwrap();
        assert_eq!(t.render(&chat(), false).unwrap(), "<s>Be brief.</s>Hi</s>");
        std::fs::write(
            dir.path().join("chat_template.jinja"),
            "{{ messages | length }}",
        )
        .unwrap();
        let t = ChatTemplate::from_folder(dir.path()).unwrap().unwrap();
        assert_eq!(t.render(&chat(), false).unwrap(), "2");
        let empty = tempfile::tempdir().unwrap();
        assert!(ChatTemplate::from_folder(empty.path()).unwrap().is_none());
    }

    #[test]
    fn strftime_now_formats_the_civil_date() {
        // 2024-07-23 12:34:56 UTC.
        let t = 1_721_738_096;
        assert_eq!(strftime("%d %b %Y", t).unwrap(), "23 Jul 2024");
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %B %%", t).unwrap(),
            "2024-07-23 12:34:56 July %"
        );
    }
}
