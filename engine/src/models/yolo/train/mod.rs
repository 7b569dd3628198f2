//! The parts of ultralytics' detection trainer (8.4.190) that decide how a step trains: the
//! optimizer's parameter groups and choice, the per-iteration learning rates and momentum,
//! the EMA of the weights, and the results.csv log.

pub mod ema;
pub mod optimizer_choice;
pub mod param_groups;
pub mod results_csv;
pub mod schedule;
