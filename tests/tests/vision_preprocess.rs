//! ultralytics' validation preprocessing on its own sample images, compared with what real
//! OpenCV gives (crops and statistics made by tests/fixtures/yolo/make_resize_fixture.py).
//! Both decode with libjpeg-turbo's decoder, so the decoded crops are equal; the resized ones
//! are compared with a tolerance.

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
    assert!(max == 0, "{name} decode: mean {mean}, max {max}");

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

/// Boxes drawn on a real photo survive a JPEG round trip (and the file can be looked at:
/// set RB_KEEP_DRAWN=path to keep it).
#[test]
fn draw_boxes_on_bus_and_save() {
    use rusting_brain::vision::{class_color, draw_boxes, read_image, save_image, DrawBox};
    let Some(path) = asset("vision_preprocess", "ultralytics/assets/bus.jpg") else {
        return;
    };
    let img = read_image(&path).unwrap();
    let boxes = [
        DrawBox {
            xyxy: [50.0, 400.0, 245.0, 905.0],
            label: "person 0.87".into(),
            color: class_color(0),
        },
        DrawBox {
            xyxy: [20.0, 230.0, 805.0, 750.0],
            label: "bus 0.94".into(),
            color: class_color(5),
        },
    ];
    let drawn = draw_boxes(&img, &boxes).unwrap();
    let out = std::env::var_os("RB_KEEP_DRAWN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("rb_drawn_{}.jpg", std::process::id()))
        });
    save_image(&drawn, &out).unwrap();
    let back = read_image(&out).unwrap();
    assert_eq!(back.dims(), &[1080, 810, 3]);
    let v = back.to_vec::<u8>().unwrap();
    let at = (402 * 810 + 150) * 3; // on the person box's top edge (line width 3)
    let want = class_color(0);
    assert!(
        (0..3).all(|c| v[at + c].abs_diff(want[c]) < 40),
        "{:?}",
        &v[at..at + 3]
    );
    if std::env::var_os("RB_KEEP_DRAWN").is_none() {
        std::fs::remove_file(&out).unwrap();
    }
}
