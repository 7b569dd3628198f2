//! Help text for every registered function: one-line doc with its signature and an example.
//! Functions are registered through [`Api`], which records the entry as it registers the
//! function with Rhai's metadata, so `help("name")` and the REPL's completion read one source.
//! [`check`] proves the entries true: each example runs and each signature has as many
//! parameters as the function it documents.

mod api;
mod book;
pub mod check;
mod example_setup;
pub mod receivers;
pub mod signature;
mod suggest;

pub use api::Api;
pub use book::{entries, getter, lookup, names, overview, record, record_entry, render, HelpEntry};
pub(crate) use example_setup::{with_lm, with_tokenizer, with_tokenizer_and_lm, with_tokens};
pub use suggest::{closest_name, forms_of};
