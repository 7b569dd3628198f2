//! PyTorch `.pt` / `.pth` files, read without Python and without running any pickled code.
//!
//! `torch.save` writes one of two containers around the same pickle of the saved object:
//! - the zip format (torch >= 1.6): `<root>/data.pkl` holds the pickle, and every storage is a
//!   raw little-endian entry `<root>/data/<key>`;
//! - the legacy format: a run of pickles in one file (magic number, protocol version, system
//!   info, the object, the list of storage keys), then each storage in key-list order as an
//!   8-byte little-endian element count followed by its bytes.
//!
//! Writing ([`save_pt`]) is the reverse: a [`PyObject`] tree (Python data, tensors, and class
//! instances such as [`ModuleObject`]s) pickled at protocol 2 into the zip format.
//!
//! The pickle runs on a restricted machine ([`pickle`]) that only builds data: globals must be on
//! the allow-list ([`globals`]), tensors come from storages that are bounds-checked, and class
//! instances (`nn.Module`s, ultralytics objects) become inert [`Value::Object`]s.

mod archive;
mod globals;
mod materialise;
mod module_object;
mod pickle;
mod pickle_writer;
mod reduce;
mod save;
mod state_dict;
mod storage;
#[cfg(test)]
mod tests;
mod value;
#[cfg(test)]
mod writer_tests;

pub use archive::{load_pt, load_pt_bytes};
pub use module_object::ModuleObject;
pub use pickle_writer::PyObject;
pub use save::{save_pt, save_pt_bytes};
pub use state_dict::{module_state_dict, state_dict};
pub use value::Value;
