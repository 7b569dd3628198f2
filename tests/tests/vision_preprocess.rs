//! ultralytics' validation preprocessing on its own sample images, compared with what real
//! OpenCV gives (crops and statistics made by tests/fixtures/yolo/make_resize_fixture.py).
//! The JPEG decoders differ (jpeg-decoder here, libjpeg-turbo in cv2), so pixels are compared
//! with a tolerance: mean |diff| <= 0.5 and max |diff| <= 3 levels.

use rb_integration_tests::assets::asset;
use rusting_brain::data::npy::read_npy;
use rusting_brain::vision::{image::read_rgb, preprocess_val, RgbImage};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/yolo")
        .join(name)
}

/// (mean, max) |a - b| over a 48x48 RGB crop of `img` at (y, x) against the stored crop.
fn crop_diff(img: &RgbImage, y: usize, x: usize, stored: &str) -> (f64, u8) {
    let want = read_npy(fixture(stored)).unwrap().to_vec::<u8>().unwrap();
    assert_eq!(want.len(), 48 * 48 * 3);
    let mut got = Vec::with_capacity(want.len());
    for yy in y..y + 48 {
        for xx in x..x + 48 {
            got.extend_from_slice(&img.get_pixel(xx as u32, yy as u32).0);
        }
    }
    let diffs: Vec<u8> = got.iter().zip(&want).map(|(a, b)| a.abs_diff(*b)).collect();
    let mean = diffs.iter().map(|&d| d as f64).sum::<f64>() / diffs.len() as f64;
    (mean, *diffs.iter().max().unwrap())
}

fn check(name: &str) {
    let Some(path) = asset(
        "vision_preprocess",
        &format!("ultralytics/assets/{name}.jpg"),
    ) else {
        return;
    };
    let meta = read_npy(fixture(&format!("{name}_val640_meta.npy")))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let at = |i: usize| meta[i] as usize;
    let decoded = read_rgb(&path).unwrap();
    assert_eq!(
        (decoded.height() as usize, decoded.width() as usize),
        (at(0), at(1))
    );
    let (mean, max) = crop_diff(&decoded, at(2), at(3), &format!("{name}_decoded_crop.npy"));
    eprintln!("{name}: decode vs cv2: mean |diff| {mean:.3}, max {max}");
    assert!(
        mean <= 0.5 && max <= 3,
        "{name} decode: mean {mean}, max {max}"
    );

    let (out, rp) = preprocess_val(&decoded, 640, None);
    assert_eq!(
        (out.height() as usize, out.width() as usize),
        (at(6), at(7))
    );
    assert_eq!(rp.gain_hw, (meta[8], meta[9]));
    assert_eq!(rp.pad_xy, (meta[10], meta[11]));
    let (mean, max) = crop_diff(&out, at(4), at(5), &format!("{name}_val640_crop.npy"));
    eprintln!("{name}: preprocessed vs cv2: mean |diff| {mean:.3}, max {max}");
    assert!(
        mean <= 0.5 && max <= 3,
        "{name} preprocessed: mean {mean}, max {max}"
    );
    for c in 0..3 {
        let sum: f64 = out.pixels().map(|p| p.0[c] as f64).sum();
        let channel_mean = sum / (640.0 * 640.0);
        assert!(
            (channel_mean - meta[12 + c]).abs() < 0.25,
            "{name} channel {c}: {channel_mean} vs {}",
            meta[12 + c]
        );
    }
}

#[test]
fn bus_preprocessing_matches_cv2() {
    check("bus");
}

#[test]
fn zidane_preprocessing_matches_cv2() {
    check("zidane");
}
