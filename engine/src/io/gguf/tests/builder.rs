//! Hand-built GGUF bytes for the reader's tests: a header, key/values of any type, tensor infos
//! and data, each written exactly as the format lays it out, so a test can then break one field.

pub struct Builder {
    pub version: u32,
    pub kvs: Vec<Vec<u8>>,
    pub infos: Vec<Vec<u8>>,
    pub data: Vec<u8>,
    pub alignment: usize,
}

pub fn string(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(s.as_bytes());
    b
}

impl Builder {
    pub fn new() -> Self {
        Builder {
            version: 3,
            kvs: Vec::new(),
            infos: Vec::new(),
            data: Vec::new(),
            alignment: 32,
        }
    }

    /// A key/value: `value` is the encoded value after its type code.
    pub fn kv(mut self, key: &str, type_code: u32, value: &[u8]) -> Self {
        let mut b = string(key);
        b.extend_from_slice(&type_code.to_le_bytes());
        b.extend_from_slice(value);
        self.kvs.push(b);
        self
    }

    pub fn u32_kv(self, key: &str, v: u32) -> Self {
        self.kv(key, 4, &v.to_le_bytes())
    }

    pub fn str_kv(self, key: &str, v: &str) -> Self {
        self.kv(key, 8, &string(v))
    }

    /// A tensor of ggml type `code` with `dims` (innermost first) and raw `bytes`, placed at the
    /// next aligned offset of the data section.
    pub fn tensor(mut self, name: &str, dims: &[u64], code: u32, bytes: &[u8]) -> Self {
        let offset = self.data.len().next_multiple_of(self.alignment);
        self.data.resize(offset, 0);
        self.data.extend_from_slice(bytes);
        let mut b = string(name);
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&code.to_le_bytes());
        b.extend_from_slice(&(offset as u64).to_le_bytes());
        self.infos.push(b);
        self
    }

    pub fn f32_tensor(self, name: &str, dims: &[u64], values: &[f32]) -> Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, dims, 0, &bytes)
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&(self.infos.len() as u64).to_le_bytes());
        b.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for kv in &self.kvs {
            b.extend_from_slice(kv);
        }
        for info in &self.infos {
            b.extend_from_slice(info);
        }
        b.resize(b.len().next_multiple_of(self.alignment), 0);
        b.extend_from_slice(&self.data);
        b
    }
}
