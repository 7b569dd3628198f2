//! Layers and the `Module` trait: named parameters whose names match published checkpoints.
