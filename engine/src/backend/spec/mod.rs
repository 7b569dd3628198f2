//! The vocabulary the backends share and the layers above pass down: what to compute, in plain
//! values, so a backend needs nothing from `ops`, `optim`, `nn` or `models`. One file per family.

pub mod optim;
