//! The five channels of a kernel, served on a single-threaded async runtime of their own:
//! heartbeat (echo), iopub (published from a queue), shell and stdin (requests passed to the
//! session thread, replies sent from a queue) and control (answered here, at once).

use super::connection::Connection;
use super::replies;
use super::wire::{Message, Signer};
use serde_json::json;
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use zeromq::{PubSocket, RepSocket, RouterSocket, Socket, SocketRecv, SocketSend};

/// The session thread's ends of the channels.
pub struct Channels {
    pub out: Outgoing,
    /// Shell requests, in the order they came.
    pub shell_requests: std_mpsc::Receiver<Message>,
    /// Replies on the stdin channel (`input_reply`).
    pub stdin_replies: std_mpsc::Receiver<Message>,
}

/// Where the session thread sends: iopub, shell replies and stdin requests. Clones share the
/// queues.
#[derive(Clone)]
pub struct Outgoing {
    /// This kernel's session id, for the headers of its messages.
    pub session_id: String,
    pub iopub: UnboundedSender<Message>,
    pub shell_replies: UnboundedSender<Message>,
    pub stdin_requests: UnboundedSender<Message>,
}

impl Outgoing {
    /// Publishes `msg_type` with `parent` as its parent on iopub.
    pub fn publish(&self, parent: &Message, msg_type: &str, content: serde_json::Value) {
        let _ = self
            .iopub
            .send(parent.child(&self.session_id, msg_type, content));
    }

    pub fn status(&self, parent: &Message, state: &str) {
        self.publish(parent, "status", json!({ "execution_state": state }));
    }
}

/// Binds the channels and starts serving them on a thread of their own.
pub fn start(connection: Connection) -> Result<Channels, String> {
    let session_id = uuid::Uuid::new_v4().to_string();
    let (iopub_tx, iopub_rx) = unbounded_channel();
    let (shell_out_tx, shell_out_rx) = unbounded_channel();
    let (stdin_out_tx, stdin_out_rx) = unbounded_channel();
    let (shell_in_tx, shell_in_rx) = std_mpsc::channel();
    let (stdin_in_tx, stdin_in_rx) = std_mpsc::channel();
    let (bound_tx, bound_rx) = std_mpsc::channel();
    let ends = RuntimeEnds {
        signer: Arc::new(Signer::new(&connection.key)),
        session_id: session_id.clone(),
        iopub_tx: iopub_tx.clone(),
        iopub_rx,
        shell_out_rx,
        stdin_out_rx,
        shell_in_tx,
        stdin_in_tx,
    };
    std::thread::Builder::new()
        .name("brain-kernel-sockets".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = bound_tx.send(Err(format!("async runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(serve(connection, ends, bound_tx));
        })
        .map_err(|e| format!("socket thread: {e}"))?;
    bound_rx
        .recv()
        .map_err(|_| "the socket thread ended before binding".to_string())??;
    Ok(Channels {
        out: Outgoing {
            session_id,
            iopub: iopub_tx,
            shell_replies: shell_out_tx,
            stdin_requests: stdin_out_tx,
        },
        shell_requests: shell_in_rx,
        stdin_replies: stdin_in_rx,
    })
}

/// The socket thread's ends of the queues.
struct RuntimeEnds {
    signer: Arc<Signer>,
    session_id: String,
    iopub_tx: UnboundedSender<Message>,
    iopub_rx: UnboundedReceiver<Message>,
    shell_out_rx: UnboundedReceiver<Message>,
    stdin_out_rx: UnboundedReceiver<Message>,
    shell_in_tx: std_mpsc::Sender<Message>,
    stdin_in_tx: std_mpsc::Sender<Message>,
}

async fn bind<S: Socket>(
    mut socket: S,
    c: &Connection,
    port: u16,
    name: &str,
) -> Result<S, String> {
    socket
        .bind(&c.endpoint(port))
        .await
        .map_err(|e| format!("{name} channel on {}: {e}", c.endpoint(port)))?;
    Ok(socket)
}

async fn serve(c: Connection, ends: RuntimeEnds, bound: std_mpsc::Sender<Result<(), String>>) {
    let sockets = async {
        Ok::<_, String>((
            bind(RouterSocket::new(), &c, c.shell_port, "shell").await?,
            bind(RouterSocket::new(), &c, c.control_port, "control").await?,
            bind(RouterSocket::new(), &c, c.stdin_port, "stdin").await?,
            bind(PubSocket::new(), &c, c.iopub_port, "iopub").await?,
            bind(RepSocket::new(), &c, c.hb_port, "heartbeat").await?,
        ))
    };
    let (shell, control, stdin, iopub, heartbeat) = match sockets.await {
        Ok(s) => s,
        Err(e) => {
            let _ = bound.send(Err(e));
            return;
        }
    };
    let _ = bound.send(Ok(()));
    let RuntimeEnds {
        signer,
        session_id,
        iopub_tx,
        iopub_rx,
        shell_out_rx,
        stdin_out_rx,
        shell_in_tx,
        stdin_in_tx,
    } = ends;
    let starting = json!({"execution_state": "starting"});
    let _ = iopub_tx.send(Message::orphan(&session_id, "status", starting));

    tokio::spawn(echo_heartbeats(heartbeat));
    tokio::spawn(publish(iopub, iopub_rx, signer.clone()));
    let (shell_send, shell_recv) = shell.split();
    tokio::spawn(send_from_queue(shell_send, shell_out_rx, signer.clone()));
    tokio::spawn(receive_into_queue(
        shell_recv,
        shell_in_tx,
        signer.clone(),
        "shell",
    ));
    let (stdin_send, stdin_recv) = stdin.split();
    tokio::spawn(send_from_queue(stdin_send, stdin_out_rx, signer.clone()));
    tokio::spawn(receive_into_queue(
        stdin_recv,
        stdin_in_tx,
        signer.clone(),
        "stdin",
    ));
    serve_control(control, signer, session_id, iopub_tx).await;
}

async fn echo_heartbeats(mut socket: RepSocket) {
    while let Ok(ping) = socket.recv().await {
        if socket.send(ping).await.is_err() {
            break;
        }
    }
}

async fn publish(
    mut socket: PubSocket,
    mut queue: UnboundedReceiver<Message>,
    signer: Arc<Signer>,
) {
    while let Some(mut msg) = queue.recv().await {
        // The topic frame: subscribers take every topic, and the message type names it.
        msg.identities = vec![msg.msg_type().as_bytes().to_vec().into()];
        // A frontend that has gone away is the frontend's business; the kernel keeps running.
        let _ = socket.send(signer.encode(&msg)).await;
    }
}

async fn send_from_queue<S: SocketSend>(
    mut socket: S,
    mut queue: UnboundedReceiver<Message>,
    signer: Arc<Signer>,
) {
    while let Some(msg) = queue.recv().await {
        let _ = socket.send(signer.encode(&msg)).await;
    }
}

async fn receive_into_queue<S: SocketRecv>(
    mut socket: S,
    queue: std_mpsc::Sender<Message>,
    signer: Arc<Signer>,
    channel: &str,
) {
    while let Ok(frames) = socket.recv().await {
        match signer.decode(frames) {
            Ok(msg) => {
                if queue.send(msg).is_err() {
                    return;
                }
            }
            Err(why) => {
                crate::stdio_capture::log(&format!("kernel: dropped a {channel} message: {why}"))
            }
        }
    }
}

/// Control requests are answered here, beside a running cell: an interrupt sets the engine's
/// cancel flag (the cell stops at its next operation), a shutdown ends the process.
async fn serve_control(
    mut socket: RouterSocket,
    signer: Arc<Signer>,
    session_id: String,
    iopub: UnboundedSender<Message>,
) {
    let status = |parent: &Message, state: &str| {
        let content = json!({ "execution_state": state });
        let _ = iopub.send(parent.child(&session_id, "status", content));
    };
    while let Ok(frames) = socket.recv().await {
        let request = match signer.decode(frames) {
            Ok(m) => m,
            Err(why) => {
                crate::stdio_capture::log(&format!("kernel: dropped a control message: {why}"));
                continue;
            }
        };
        status(&request, "busy");
        let (reply_type, content) = match request.msg_type() {
            "interrupt_request" => {
                rusting_brain::cancel::request();
                ("interrupt_reply".to_string(), json!({"status": "ok"}))
            }
            "shutdown_request" => {
                let restart = request.content["restart"].as_bool().unwrap_or(false);
                (
                    "shutdown_reply".to_string(),
                    json!({"status": "ok", "restart": restart}),
                )
            }
            "kernel_info_request" => ("kernel_info_reply".to_string(), replies::kernel_info()),
            other => replies::unknown_request(other),
        };
        let reply = request.child(&session_id, &reply_type, content.clone());
        let _ = socket.send(signer.encode(&reply)).await;
        status(&request, "idle");
        if reply_type == "shutdown_reply" {
            // The reply goes on iopub too, as ipykernel does, for every client to see.
            let _ = iopub.send(request.child(&session_id, "shutdown_reply", content));
            // Let the queued messages leave before the process ends.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            crate::stdio_capture::log("brain kernel: shut down by the frontend");
            std::process::exit(0);
        }
    }
}
