//! Jupyter messages on the wire (messaging protocol 5.3): the routing identities, the `<IDS|MSG>`
//! delimiter, the HMAC-SHA256 signature of the four JSON parts, then header, parent header,
//! metadata, content and any binary buffers.

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use zeromq::ZmqMessage;

/// The protocol version this kernel speaks and `kernel_info_reply` advertises.
pub const PROTOCOL_VERSION: &str = "5.3";

const DELIMITER: &[u8] = b"<IDS|MSG>";

/// One message, parsed.
#[derive(Clone, Debug)]
pub struct Message {
    /// The ROUTER socket's routing frames: a reply goes back with the request's.
    pub identities: Vec<Bytes>,
    pub header: Value,
    pub parent_header: Value,
    pub metadata: Value,
    pub content: Value,
    pub buffers: Vec<Bytes>,
}

impl Message {
    pub fn msg_type(&self) -> &str {
        self.header["msg_type"].as_str().unwrap_or("")
    }

    /// A new message in the session `session` with this one as its parent.
    pub fn child(&self, session: &str, msg_type: &str, content: Value) -> Message {
        Message {
            identities: self.identities.clone(),
            header: new_header(session, msg_type),
            parent_header: self.header.clone(),
            metadata: json!({}),
            content,
            buffers: Vec::new(),
        }
    }

    /// A message with no parent (the kernel's `starting` status).
    pub fn orphan(session: &str, msg_type: &str, content: Value) -> Message {
        Message {
            identities: Vec::new(),
            header: new_header(session, msg_type),
            parent_header: json!({}),
            metadata: json!({}),
            content,
            buffers: Vec::new(),
        }
    }
}

fn new_header(session: &str, msg_type: &str) -> Value {
    json!({
        "msg_id": uuid::Uuid::new_v4().to_string(),
        "session": session,
        "username": "brain",
        "date": now_iso8601(),
        "msg_type": msg_type,
        "version": PROTOCOL_VERSION,
    })
}

/// Signs and checks messages with the connection file's key (`hmac-sha256`); an empty key
/// turns signing off, as the protocol allows.
pub struct Signer {
    key: Option<Hmac<Sha256>>,
}

impl Signer {
    pub fn new(key: &str) -> Signer {
        let key = (!key.is_empty())
            .then(|| Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key"));
        Signer { key }
    }

    fn signature(&self, parts: &[&[u8]]) -> String {
        let Some(key) = &self.key else {
            return String::new();
        };
        let mut mac = key.clone();
        for part in parts {
            mac.update(part);
        }
        hex(&mac.finalize().into_bytes())
    }

    /// The frames of `msg`, signed.
    pub fn encode(&self, msg: &Message) -> ZmqMessage {
        let json = |v: &Value| serde_json::to_vec(v).expect("JSON values serialize");
        let parts = [
            json(&msg.header),
            json(&msg.parent_header),
            json(&msg.metadata),
            json(&msg.content),
        ];
        let signature = self.signature(&parts.each_ref().map(|p| p.as_slice()));
        let mut frames: Vec<Bytes> = msg.identities.clone();
        frames.push(Bytes::from_static(DELIMITER));
        frames.push(Bytes::from(signature));
        frames.extend(parts.into_iter().map(Bytes::from));
        frames.extend(msg.buffers.iter().cloned());
        ZmqMessage::try_from(frames).expect("a message has frames")
    }

    /// Parses and checks a received message; the error says what was wrong with it.
    pub fn decode(&self, frames: ZmqMessage) -> Result<Message, String> {
        let frames = frames.into_vec();
        let split = frames
            .iter()
            .position(|f| f.as_ref() == DELIMITER)
            .ok_or("no <IDS|MSG> delimiter")?;
        let (identities, rest) = frames.split_at(split);
        let [_, signature, header, parent, metadata, content, buffers @ ..] = rest else {
            return Err(format!(
                "{} frames after the delimiter, expected at least 6",
                rest.len()
            ));
        };
        let expected = self.signature(&[header, parent, metadata, content].map(|b| b.as_ref()));
        // Compared in constant time, as HMAC checks should be.
        if !constant_time_eq(expected.as_bytes(), signature.as_ref()) {
            return Err("bad signature".into());
        }
        let parse = |what: &str, b: &Bytes| {
            serde_json::from_slice::<Value>(b).map_err(|e| format!("{what} is not JSON: {e}"))
        };
        Ok(Message {
            identities: identities.to_vec(),
            header: parse("header", header)?,
            parent_header: parse("parent header", parent)?,
            metadata: parse("metadata", metadata)?,
            content: parse("content", content)?,
            buffers: buffers.to_vec(),
        })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The current UTC time as ISO 8601 with microseconds (`2026-12-07T05:01:02.123456Z`).
pub fn now_iso8601() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    iso8601(since.as_secs() as i64, since.subsec_micros())
}

fn iso8601(secs: i64, micros: u32) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = rusting_brain::io::clock::civil(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_iso8601_utc() {
        assert_eq!(iso8601(0, 0), "1970-01-01T00:00:00.000000Z");
        // 2024-02-29 (a leap day) 12:34:56.
        assert_eq!(iso8601(1_709_210_096, 7), "2024-02-29T12:34:56.000007Z");
        assert_eq!(iso8601(4_102_444_799, 0), "2099-12-31T23:59:59.000000Z");
    }

    #[test]
    fn a_signed_message_decodes_and_a_tampered_one_is_refused() {
        let signer = Signer::new("secret");
        let mut msg = Message::orphan("s", "status", json!({"execution_state": "idle"}));
        msg.identities = vec![Bytes::from_static(b"peer")];
        let frames = signer.encode(&msg);
        let back = signer.decode(frames.clone()).unwrap();
        assert_eq!(back.content, msg.content);
        assert_eq!(back.identities, msg.identities);
        let mut parts = frames.into_vec();
        // The content frame: identity, delimiter, signature, header, parent, metadata, content.
        parts[6] = Bytes::from_static(b"{\"execution_state\":\"busy\"}");
        let tampered = ZmqMessage::try_from(parts).unwrap();
        assert_eq!(signer.decode(tampered).unwrap_err(), "bad signature");
        assert!(Signer::new("other").decode(signer.encode(&msg)).is_err());
    }

    /// The signature of a message as jupyter_client's Session computes it (hmac.new(key,
    /// digestmod=sha256) over the four JSON parts), checked with Python's hmac module.
    #[test]
    fn signatures_match_the_reference_hmac() {
        let signer = Signer::new("key");
        let sig = signer.signature(&[b"{}", b"{}", b"{}", b"{}"]);
        // python3 -c 'import hmac,hashlib; print(hmac.new(b"key", b"{}"*4, hashlib.sha256).hexdigest())'
        assert_eq!(
            sig,
            "ca767b02c5bc061ed184a9a029e7f93a7f2f7ed4e8fe74120fc1212f0b008fa3"
        );
        assert_eq!(Signer::new("").signature(&[b"{}"]), "");
    }
}
