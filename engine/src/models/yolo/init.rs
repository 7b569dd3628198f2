//! The random source a network is initialised from, with a bound on the values building may
//! make. A model definition's widths and repeats are input (a YAML file, or the definition a
//! `.pt` or our safetensors carries), so every convolution claims its values before it is
//! allocated, and building stops with an error at the first one past the bound: the values
//! of the weights that come with the definition (a network that needs more cannot be the one
//! they were saved from), or for a definition alone a ceiling far above any published model.

use crate::{Error, Generator, Result};

/// A definition alone may build at most this many values: 4 GiB of F32, against YOLOv8x's
/// 68 million parameters.
pub const DEFINITION_CEILING: usize = 1 << 30;

pub struct Init<'a> {
    gen: &'a mut Generator,
    left: usize,
    /// The values of the accompanying weights, if any.
    weights: Option<usize>,
}

impl<'a> Init<'a> {
    /// For a definition alone.
    pub fn new(gen: &'a mut Generator) -> Self {
        Init {
            gen,
            left: DEFINITION_CEILING,
            weights: None,
        }
    }

    /// For a definition whose weights hold `values` values in all.
    pub fn for_weights(gen: &'a mut Generator, values: usize) -> Self {
        Init {
            gen,
            left: values,
            weights: Some(values),
        }
    }

    /// Takes `values` from what is left, for the module `what` describes, and hands out the
    /// random source to initialise it.
    pub fn claim(
        &mut self,
        values: usize,
        what: impl FnOnce() -> String,
    ) -> Result<&mut Generator> {
        match self.left.checked_sub(values) {
            Some(left) => {
                self.left = left;
                Ok(&mut *self.gen)
            }
            None => Err(Error::invalid(
                "yolo model",
                match self.weights {
                    Some(total) => format!(
                        "the definition needs more values than the {total} its weights hold \
                         (at {}): it is not the network they were saved from",
                        what()
                    ),
                    None => format!(
                        "the definition needs more than {DEFINITION_CEILING} values (at {}), \
                         far beyond any published YOLO",
                        what()
                    ),
                },
            )),
        }
    }
}
