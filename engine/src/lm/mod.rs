//! Language-model workflows over `TransformerLm`: the training step with gradient
//! accumulation, evaluation (loss and perplexity) and checkpoints that resume exactly.

pub mod checkpoint;
mod step;
#[cfg(test)]
mod tests;

pub use checkpoint::{Checkpoint, TrainState};
pub use step::{evaluate, train_step, Evaluation};
