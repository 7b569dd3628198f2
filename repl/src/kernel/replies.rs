//! The contents of the replies that need no running cell: kernel info, completion, inspection,
//! whether code is complete, history, and the error for a request this kernel does not serve.

use super::wire::PROTOCOL_VERSION;
use crate::session::{EntryError, Session};
use serde_json::{json, Value};

pub fn kernel_info() -> Value {
    json!({
        "status": "ok",
        "protocol_version": PROTOCOL_VERSION,
        "implementation": "brain",
        "implementation_version": env!("CARGO_PKG_VERSION"),
        "language_info": {
            "name": "rhai",
            "version": "1",
            "mimetype": "text/x-rhai",
            "file_extension": ".rhai",
            // Neither CodeMirror nor Pygments knows Rhai; Rust's modes colour its `let`, `fn`,
            // `::` paths, closures and literals closest.
            "codemirror_mode": "rust",
            "pygments_lexer": "rust",
            "nbconvert_exporter": "script"
        },
        "banner": format!(
            "brain {}: RustingBrain's Rhai session (help(\"name\") documents a function)",
            env!("CARGO_PKG_VERSION")
        ),
        "help_links": [],
        "debugger": false
    })
}

/// A reply for a request type this kernel does not serve (`debug_request`), with its name.
pub fn unknown_request(msg_type: &str) -> (String, Value) {
    let reply = match msg_type.strip_suffix("_request") {
        Some(stem) => format!("{stem}_reply"),
        None => format!("{msg_type}_reply"),
    };
    let content = json!({
        "status": "error",
        "ename": "UnknownRequest",
        "evalue": format!("brain's kernel does not serve {msg_type}"),
        "traceback": []
    });
    (reply, content)
}

/// `cursor_pos` counts Unicode code points (protocol 5.2+); this is its byte offset in `code`.
fn byte_offset(code: &str, cursor_pos: usize) -> usize {
    code.char_indices()
        .nth(cursor_pos)
        .map_or(code.len(), |(i, _)| i)
}

fn code_points(code: &str, byte: usize) -> usize {
    code[..byte].chars().count()
}

/// Completions at the cursor: the REPL's type-aware candidates for the word before it.
pub fn complete(session: &Session, code: &str, cursor_pos: usize) -> Value {
    let cursor = byte_offset(code, cursor_pos);
    let line_start = code[..cursor].rfind('\n').map_or(0, |i| i + 1);
    let line = &code[line_start..cursor];
    let (start, mut matches) =
        crate::complete::candidates(line, line.len(), &session.variable_types());
    // The REPL's `:commands` are not cells.
    matches.retain(|m| !m.starts_with(':'));
    json!({
        "status": "ok",
        "matches": matches,
        "cursor_start": code_points(code, line_start + start),
        "cursor_end": code_points(code, cursor),
        "metadata": {}
    })
}

/// The name under the cursor (`nn::linear`, or `reshape` in `x.reshape`).
fn name_at(code: &str, cursor: usize) -> Option<&str> {
    let is_name = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let start = code[..cursor].rfind(|c: char| !is_name(c)).map_or(0, |i| {
        i + code[i..].chars().next().map_or(1, char::len_utf8)
    });
    let end = code[cursor..]
        .find(|c: char| !is_name(c))
        .map_or(code.len(), |i| cursor + i);
    let name = code[start..end].trim_matches(':');
    (!name.is_empty()).then_some(name)
}

/// The help text of the name under the cursor, or what a variable of that name holds.
pub fn inspect(session: &Session, code: &str, cursor_pos: usize) -> Value {
    let cursor = byte_offset(code, cursor_pos);
    let text = name_at(code, cursor).and_then(|name| {
        if let Some(value) = session.scope.get_value::<rhai::Dynamic>(name) {
            return Some(format!("{name}: {}", session.describe(&value)));
        }
        let help = rusting_brain_rhai::help::render(name);
        (!help.starts_with("no help for")).then_some(help)
    });
    match text {
        Some(text) => json!({
            "status": "ok",
            "found": true,
            "data": {"text/plain": text},
            "metadata": {}
        }),
        None => json!({"status": "ok", "found": false, "data": {}, "metadata": {}}),
    }
}

/// Whether `code` is a whole entry (the console runs it on Enter) or needs more lines.
pub fn is_complete(session: &Session, code: &str) -> Value {
    match session.compile(code, true) {
        Ok(_) => json!({"status": "complete"}),
        Err(EntryError::Incomplete) => json!({"status": "incomplete", "indent": ""}),
        Err(_) => json!({"status": "invalid"}),
    }
}

/// One executed input: its execution count and code.
pub struct HistoryEntry {
    pub count: u64,
    pub code: String,
}

/// `history_request` for this kernel's inputs (session 0, as IPython numbers the current one):
/// `tail` (the last n), `range` (counts start..stop) and `search` (a glob with `*` and `?`).
pub fn history(entries: &[HistoryEntry], request: &Value) -> Value {
    let n = request["n"].as_u64().unwrap_or(10) as usize;
    let picked: Vec<&HistoryEntry> = match request["hist_access_type"].as_str() {
        Some("range") => {
            let start = request["start"].as_u64().unwrap_or(1);
            let stop = request["stop"].as_u64().unwrap_or(u64::MAX);
            entries
                .iter()
                .filter(|e| e.count >= start && e.count < stop)
                .collect()
        }
        Some("search") => {
            let pattern = request["pattern"].as_str().unwrap_or("*");
            let mut found: Vec<&HistoryEntry> =
                entries.iter().filter(|e| glob(pattern, &e.code)).collect();
            if request["unique"].as_bool().unwrap_or(false) {
                let mut seen = std::collections::HashSet::new();
                found.reverse();
                found.retain(|e| seen.insert(e.code.as_str()));
                found.reverse();
            }
            let skip = found.len().saturating_sub(n);
            found.into_iter().skip(skip).collect()
        }
        _ => entries
            .iter()
            .skip(entries.len().saturating_sub(n))
            .collect(),
    };
    let history: Vec<Value> = picked.iter().map(|e| json!([0, e.count, e.code])).collect();
    json!({"status": "ok", "history": history})
}

/// Shell-style glob: `*` any run of characters, `?` one.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Classic two-pointer match with backtracking to the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session_with(src: &str) -> Session {
        let mut s = Session::new(rusting_brain_rhai::new_engine());
        assert!(s.eval_complete(src).is_ok(), "{src}");
        s
    }

    #[test]
    fn completion_finds_the_word_on_the_cursor_s_line_in_code_points() {
        let s = session_with("let x = ones([2, 3]);");
        // "é" is one code point and two bytes: positions are code points.
        let code = "let é = 1;\nx.resh";
        let reply = complete(&s, code, code.chars().count());
        assert_eq!(reply["matches"], json!(["reshape"]));
        assert_eq!(reply["cursor_start"], 13);
        assert_eq!(reply["cursor_end"], 17);
        let reply = complete(&s, "nn::line", 8);
        let m = reply["matches"].as_array().unwrap();
        assert!(m.contains(&json!("nn::linear")), "{m:?}");
        assert_eq!(reply["cursor_start"], 0);
    }

    #[test]
    fn inspection_gives_help_for_functions_and_the_value_of_variables() {
        let s = session_with("let lr = 0.5;");
        let reply = inspect(&s, "optim::adamw(p, #{})", 3);
        assert_eq!(reply["found"], true);
        let text = reply["data"]["text/plain"].as_str().unwrap();
        assert!(text.starts_with("optim::adamw"), "{text}");
        let reply = inspect(&s, "print(lr)", 7);
        assert_eq!(reply["data"]["text/plain"], "lr: f64 = 0.5");
        assert_eq!(inspect(&s, "nothing_here", 3)["found"], false);
    }

    #[test]
    fn code_is_complete_incomplete_or_invalid() {
        let s = session_with("");
        assert_eq!(is_complete(&s, "let a = 1;")["status"], "complete");
        assert_eq!(is_complete(&s, "fn f(x) {")["status"], "incomplete");
        assert_eq!(is_complete(&s, "let = ;")["status"], "invalid");
    }

    #[test]
    fn history_tail_range_and_search() {
        let entries: Vec<HistoryEntry> = ["let a = 1;", "print(a);", "let b = a;", "print(a);"]
            .iter()
            .enumerate()
            .map(|(i, c)| HistoryEntry {
                count: i as u64 + 1,
                code: c.to_string(),
            })
            .collect();
        let h = history(&entries, &json!({"hist_access_type": "tail", "n": 2}));
        assert_eq!(
            h["history"],
            json!([[0, 3, "let b = a;"], [0, 4, "print(a);"]])
        );
        let h = history(
            &entries,
            &json!({"hist_access_type": "range", "start": 2, "stop": 3}),
        );
        assert_eq!(h["history"], json!([[0, 2, "print(a);"]]));
        let h = history(
            &entries,
            &json!({"hist_access_type": "search", "pattern": "print*", "n": 10, "unique": true}),
        );
        assert_eq!(h["history"], json!([[0, 4, "print(a);"]]));
        assert!(glob("l?t *", "let b = a;") && !glob("print", "print(a);"));
    }

    #[test]
    fn an_unknown_request_is_answered_with_its_reply_type_and_an_error() {
        let (reply, content) = unknown_request("debug_request");
        assert_eq!(reply, "debug_reply");
        assert_eq!(content["status"], "error");
    }
}
