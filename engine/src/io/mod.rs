//! Weight formats: safetensors read and write.
