//! Text generation from a `TransformerLm`: the sampler (greedy, temperature, top-k, top-p,
//! min-p, penalties), the cached decode loop for one sequence or a batch, beam search and
//! speculative decoding.

mod beam;
mod decode;
mod sampler;
mod speculative;
mod step;
#[cfg(test)]
mod test_support;

pub use beam::{beam_search, Beam, BeamOptions, EarlyStopping};
pub use decode::{generate, generate_scored, log_probabilities, Flow, GenerateOptions, Scored};
pub use sampler::{argmax, Candidates, Sampler, SamplingOptions};
pub use speculative::{generate_speculative, Drafter, SpeculationStats};
