//! A running cell's outputs as iopub messages, and `input()` as a round trip on stdin.

use super::sockets::Outgoing;
use super::wire::Message;
use crate::cell::{CellOutput, Frontend};
use serde_json::json;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct KernelFrontend {
    pub out: Outgoing,
    pub stdin_replies: Arc<Mutex<Receiver<Message>>>,
    /// The `execute_request` whose cell is running: every output names it as its parent.
    pub request: Message,
    pub execution_count: u64,
    /// `silent` executions publish nothing.
    pub silent: bool,
    pub allow_stdin: bool,
}

impl Frontend for KernelFrontend {
    fn emit(&self, output: CellOutput) {
        if self.silent {
            return;
        }
        let (msg_type, content) = match output {
            CellOutput::Stream { name, text } => ("stream", json!({"name": name, "text": text})),
            CellOutput::Display {
                data,
                display_id,
                update,
            } => {
                let transient = match display_id {
                    Some(id) => json!({"display_id": id}),
                    None => json!({}),
                };
                let msg_type = if update {
                    "update_display_data"
                } else {
                    "display_data"
                };
                let content = json!({"data": data, "metadata": {}, "transient": transient});
                (msg_type, content)
            }
            CellOutput::Result { data } => (
                "execute_result",
                json!({"execution_count": self.execution_count, "data": data, "metadata": {}}),
            ),
            CellOutput::Error(e) => (
                "error",
                json!({"ename": e.ename, "evalue": e.evalue, "traceback": e.traceback}),
            ),
        };
        self.out.publish(&self.request, msg_type, content);
    }

    /// Sends `input_request` on stdin to the client that asked for the cell and waits for its
    /// `input_reply`; an interrupt ends the wait.
    fn read_line(&self, prompt: &str) -> Result<Option<String>, String> {
        if !self.allow_stdin {
            return Err(
                "this frontend takes no input (its execute request has allow_stdin false)".into(),
            );
        }
        let asked = self.request.child(
            &self.out.session_id,
            "input_request",
            json!({"prompt": prompt, "password": false}),
        );
        let replies = self.stdin_replies.lock().unwrap_or_else(|e| e.into_inner());
        // jupyter_client's input_reply names no parent, so the one that follows this request
        // is its answer; a late reply to an earlier, interrupted request is dropped first.
        while replies.try_recv().is_ok() {}
        let _ = self.out.stdin_requests.send(asked);
        loop {
            if rusting_brain::cancel::is_requested() {
                return Err("interrupted while waiting for input".into());
            }
            match replies.recv_timeout(Duration::from_millis(50)) {
                Ok(reply) if reply.msg_type() == "input_reply" => {
                    return Ok(reply.content["value"].as_str().map(String::from));
                }
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err("the stdin channel closed".into());
                }
            }
        }
    }
}
