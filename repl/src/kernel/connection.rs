//! The connection file a Jupyter client writes before it starts the kernel: where each of the
//! five channels listens, and the key that signs the messages.

use serde_json::Value;
use std::path::Path;

#[derive(Debug, PartialEq)]
pub struct Connection {
    pub transport: String,
    pub ip: String,
    pub shell_port: u16,
    pub iopub_port: u16,
    pub stdin_port: u16,
    pub control_port: u16,
    pub hb_port: u16,
    pub key: String,
}

impl Connection {
    pub fn read(path: &Path) -> Result<Connection, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("connection file {}: {e}", path.display()))?;
        Connection::parse(&text).map_err(|e| format!("connection file {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Connection, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let text_field = |name: &str, default: &str| match v.get(name) {
            None => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(format!("`{name}` should be a string, not {other}")),
        };
        let port = |name: &str| match v.get(name).and_then(Value::as_u64) {
            Some(p) if (1..=65535).contains(&p) => Ok(p as u16),
            Some(p) => Err(format!("`{name}` {p} is not a port number")),
            None => Err(format!("`{name}` is missing")),
        };
        let transport = text_field("transport", "tcp")?;
        if transport != "tcp" {
            return Err(format!(
                "transport `{transport}` is not supported: brain's kernel listens on tcp"
            ));
        }
        let scheme = text_field("signature_scheme", "hmac-sha256")?;
        if scheme != "hmac-sha256" {
            return Err(format!(
                "signature scheme `{scheme}` is not supported: brain signs with hmac-sha256"
            ));
        }
        Ok(Connection {
            transport,
            ip: text_field("ip", "127.0.0.1")?,
            shell_port: port("shell_port")?,
            iopub_port: port("iopub_port")?,
            stdin_port: port("stdin_port")?,
            control_port: port("control_port")?,
            hb_port: port("hb_port")?,
            key: text_field("key", "")?,
        })
    }

    /// The endpoint a channel binds to (`tcp://127.0.0.1:5555`).
    pub fn endpoint(&self, port: u16) -> String {
        format!("{}://{}:{port}", self.transport, self.ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{"shell_port": 5001, "iopub_port": 5002, "stdin_port": 5003,
        "control_port": 5004, "hb_port": 5005, "ip": "127.0.0.1", "key": "abc",
        "transport": "tcp", "signature_scheme": "hmac-sha256", "kernel_name": "brain"}"#;

    #[test]
    fn a_connection_file_gives_each_channel_its_endpoint() {
        let c = Connection::parse(FILE).unwrap();
        assert_eq!(c.endpoint(c.hb_port), "tcp://127.0.0.1:5005");
        assert_eq!(c.key, "abc");
    }

    #[test]
    fn what_the_kernel_cannot_serve_is_named() {
        let err = Connection::parse(&FILE.replace("5004", "70000")).unwrap_err();
        assert!(err.contains("`control_port` 70000"), "{err}");
        let err = Connection::parse(&FILE.replace("\"tcp\"", "\"ipc\"")).unwrap_err();
        assert!(err.contains("transport `ipc`"), "{err}");
        let err = Connection::parse(&FILE.replace("hmac-sha256", "hmac-md5")).unwrap_err();
        assert!(err.contains("hmac-md5"), "{err}");
        let err = Connection::parse(&FILE.replace("\"hb_port\": 5005,", "")).unwrap_err();
        assert!(err.contains("`hb_port` is missing"), "{err}");
        assert!(Connection::parse("{").unwrap_err().contains("not JSON"));
    }
}
