//! ggml's block-quantized formats on the host: rows quantized into blocks (`quantize`) and
//! blocks dequantized back (`quants`), with ggml's arithmetic, so that files written here load
//! in llama.cpp and its files load here. The formats themselves are `spec::ggml`.

pub mod gemv;
pub mod quantize;
pub mod quants;
