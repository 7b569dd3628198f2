//! Data: in-memory datasets from CSV, NPY and IDX files, splits, scaling and batching.
//! Every reader treats its bytes as untrusted: a corrupt file is an error, never a panic, and
//! nothing is allocated beyond what the file's size can justify.

pub mod spirals;
