//! Text generation from a `TransformerLm`: the sampler (greedy, temperature, top-k, top-p,
//! min-p, penalties) and the cached decode loop for one sequence or a batch.

mod decode;
mod sampler;
mod step;

pub use decode::{generate, log_probabilities, Flow, GenerateOptions};
pub use sampler::{argmax, Sampler, SamplingOptions};
