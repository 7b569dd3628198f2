//! Training-time augmentation as ultralytics 8.4.190 trains detectors by default
//! (`v8_transforms` with `cfg/default.yaml`): 4-image mosaic, random affine (translate 0.1,
//! scale 0.5), HSV jitter (0.015, 0.7, 0.4) through lookup tables, horizontal flip 0.5, and
//! `Format`'s normalised boxes.
//!
//! Every random choice of a sample is drawn first into a [`SampleDraws`] (from a generator keyed
//! by seed, epoch and image, [`sample_generator`]); the transforms are then pure functions of
//! the images and those values. That makes samples reproducible on any number of threads, and
//! lets the parity tests replay ultralytics' own draws (tests/fixtures/yolo/augment/).
//! Pixel arithmetic follows OpenCV (the bilinear `warpAffine` and `cvtColor` HSV), box
//! arithmetic numpy's f32 order.

pub mod affine;
pub mod config;
pub mod draws;
pub mod flip;
pub mod hsv;
pub mod mosaic;
pub mod pipeline;
pub mod sample;
mod simd;
pub mod warp;
mod warp_separable;
pub mod warp_source;

pub use affine::{box_candidates, random_affine, random_affine_from, CandidateRule};
pub use config::AugmentConfig;
pub use draws::{
    sample_generator, shuffle_generator, AffineDraw, MosaicDraw, Partners, SampleDraws,
};
pub use hsv::{apply_hsv, HsvLut};
pub use mosaic::{mosaic4, mosaic4_canvas, MosaicCanvas};
pub use pipeline::augment;
pub use sample::{AugmentedSample, Labeled, TrainImage};
pub use warp::{warp_affine, warp_affine_from};
pub use warp_source::WarpSource;

#[cfg(test)]
mod tests;
