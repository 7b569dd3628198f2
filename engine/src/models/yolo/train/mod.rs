//! The parts of ultralytics' detection trainer (8.4.190) that decide how a step trains: the
//! optimizer's parameter groups and choice, the per-iteration learning rates and momentum,
//! the EMA of the weights, and the results.csv log; and the trainer that runs them in
//! ultralytics' order, with its checkpoints.

pub mod checkpoint;
mod epoch;
pub mod optimizer_choice;
pub mod param_groups;
pub mod results_csv;
pub mod schedule;
pub mod settings;
mod trainer;
#[cfg(test)]
mod trainer_tests;
mod val_loss;

pub use epoch::{BatchProgress, EpochReport, EpochValidation, PHASES};
pub use settings::TrainSettings;
pub use trainer::{YoloTrainer, MAX_GRAD_NORM};
