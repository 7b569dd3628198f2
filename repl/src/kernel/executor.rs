//! The session thread: shell requests handled in the order they came, cells run in the one
//! persistent scope.

use super::frontend::KernelFrontend;
use super::replies::{self, HistoryEntry};
use super::sockets::{Channels, Outgoing};
use super::wire::Message;
use crate::session::Session;
use serde_json::{json, Map as JsonMap, Value};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

pub struct Executor {
    session: Session,
    out: Outgoing,
    requests: Receiver<Message>,
    stdin_replies: Arc<Mutex<Receiver<Message>>>,
    execution_count: u64,
    history: Vec<HistoryEntry>,
    /// The notebook's path when the server names it (`JPY_SESSION_NAME`), for error places.
    notebook: Option<String>,
}

impl Executor {
    pub fn new(session: Session, channels: Channels) -> Executor {
        let notebook = std::env::var("JPY_SESSION_NAME")
            .ok()
            .filter(|s| !s.is_empty())
            .map(|p| {
                std::path::Path::new(&p)
                    .file_name()
                    .map_or(p.clone(), |f| f.to_string_lossy().into_owned())
            });
        Executor {
            session,
            out: channels.out,
            requests: channels.shell_requests,
            stdin_replies: Arc::new(Mutex::new(channels.stdin_replies)),
            execution_count: 0,
            history: Vec::new(),
            notebook,
        }
    }

    /// Handles shell requests until the socket thread goes away.
    pub fn run(mut self) {
        loop {
            let Ok(request) = self.requests.recv() else {
                return;
            };
            self.handle(&request);
        }
    }

    /// Replies to one request between a busy and an idle status. After a cell that failed,
    /// the cells queued behind it (a "run all") are not run: each is answered `aborted`, as
    /// IPython does. Only requests that arrived before the failed cell's reply count, so a
    /// client that sends its next cell on seeing the error is served.
    fn handle(&mut self, request: &Message) {
        self.out.status(request, "busy");
        let Some((reply_type, content)) = self.respond(request) else {
            self.out.status(request, "idle");
            return;
        };
        let failed = reply_type == "execute_reply" && content["status"] == "error";
        let queued: Vec<Message> =
            if failed && request.content["stop_on_error"].as_bool().unwrap_or(true) {
                self.requests.try_iter().collect()
            } else {
                Vec::new()
            };
        self.reply(request, &reply_type, content);
        self.out.status(request, "idle");
        for later in queued {
            if later.msg_type() == "execute_request" {
                self.out.status(&later, "busy");
                let aborted = json!({"status": "aborted", "execution_count": self.execution_count});
                self.reply(&later, "execute_reply", aborted);
                self.out.status(&later, "idle");
            } else {
                self.handle(&later);
            }
        }
    }

    /// The reply to one request; `None` for messages that take none (comms).
    fn respond(&mut self, request: &Message) -> Option<(String, Value)> {
        let code = request.content["code"].as_str().unwrap_or("");
        let cursor = request.content["cursor_pos"]
            .as_u64()
            .unwrap_or(code.chars().count() as u64) as usize;
        Some(match request.msg_type() {
            "execute_request" => ("execute_reply".to_string(), self.execute(request)),
            "kernel_info_request" => ("kernel_info_reply".into(), replies::kernel_info()),
            "complete_request" => (
                "complete_reply".into(),
                replies::complete(&self.session, code, cursor),
            ),
            "inspect_request" => (
                "inspect_reply".into(),
                replies::inspect(&self.session, code, cursor),
            ),
            "is_complete_request" => (
                "is_complete_reply".into(),
                replies::is_complete(&self.session, code),
            ),
            "history_request" => (
                "history_reply".into(),
                replies::history(&self.history, &request.content),
            ),
            "comm_info_request" => (
                "comm_info_reply".into(),
                json!({"status": "ok", "comms": {}}),
            ),
            // Comms are widgets' channel; this kernel has none, and the protocol has no reply.
            "comm_open" | "comm_msg" | "comm_close" => return None,
            "shutdown_request" => {
                let restart = request.content["restart"].as_bool().unwrap_or(false);
                self.reply(
                    request,
                    "shutdown_reply",
                    json!({"status": "ok", "restart": restart}),
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
                std::process::exit(0);
            }
            other => replies::unknown_request(other),
        })
    }

    fn reply(&self, request: &Message, reply_type: &str, content: Value) {
        let reply = request.child(&self.out.session_id, reply_type, content);
        let _ = self.out.shell_replies.send(reply);
    }

    fn execute(&mut self, request: &Message) -> Value {
        let c = &request.content;
        let code = c["code"].as_str().unwrap_or("").to_string();
        let silent = c["silent"].as_bool().unwrap_or(false);
        let store_history = !silent && c["store_history"].as_bool().unwrap_or(true);
        if store_history {
            self.execution_count += 1;
        }
        let count = self.execution_count;
        if !silent {
            self.out.publish(
                request,
                "execute_input",
                json!({"code": code, "execution_count": count}),
            );
        }
        let frontend = Arc::new(KernelFrontend {
            out: self.out.clone(),
            stdin_replies: self.stdin_replies.clone(),
            request: request.clone(),
            execution_count: count,
            silent,
            allow_stdin: c["allow_stdin"].as_bool().unwrap_or(false),
        });
        let origin = match &self.notebook {
            Some(name) => format!("{name}:In[{count}]"),
            None => format!("In[{count}]"),
        };
        let outcome = crate::cell::run(&mut self.session, frontend, &code, &origin, !silent);
        if store_history {
            self.history.push(HistoryEntry {
                count,
                code: code.clone(),
            });
        }
        match outcome {
            Ok(_) => json!({
                "status": "ok",
                "execution_count": count,
                "user_expressions": self.user_expressions(&c["user_expressions"]),
                "payload": []
            }),
            Err(e) => json!({
                "status": "error",
                "execution_count": count,
                "ename": e.ename,
                "evalue": e.evalue,
                "traceback": e.traceback
            }),
        }
    }

    /// The frontend's `user_expressions`, each evaluated in the scope after the cell.
    fn user_expressions(&mut self, asked: &Value) -> Value {
        let mut out = JsonMap::new();
        let Some(asked) = asked.as_object() else {
            return Value::Object(out);
        };
        for (name, expr) in asked {
            let expr = expr.as_str().unwrap_or("");
            let result = self
                .session
                .engine
                .eval_with_scope::<rhai::Dynamic>(&mut self.session.scope, expr);
            let value = match result {
                Ok(v) => json!({
                    "status": "ok",
                    "data": crate::mime::bundle(&self.session.engine, &v),
                    "metadata": {}
                }),
                Err(e) => json!({
                    "status": "error",
                    "ename": "RuntimeError",
                    "evalue": e.to_string(),
                    "traceback": []
                }),
            };
            out.insert(name.clone(), value);
        }
        Value::Object(out)
    }
}
