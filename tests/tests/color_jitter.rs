//! torchvision's colour jitter: each adjustment against torchvision's PIL path
//! (tests/fixtures/color_jitter/make_cases.py) byte for byte, and the jitter's draws.

use rusting_brain::vision::color_jitter::{
    adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, ColorJitter,
};
use rusting_brain::vision::image::read_rgb;
use rusting_brain::vision::RgbImage;
use rusting_brain::Generator;
use std::path::PathBuf;

fn fixture(name: &str) -> RgbImage {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/color_jitter")
        .join(name);
    read_rgb(&path).unwrap()
}

fn assert_same(got: &RgbImage, case: &str) {
    let want = fixture(&format!("{case}.png"));
    let differing: Vec<_> = got
        .enumerate_pixels()
        .filter(|(x, y, p)| want.get_pixel(*x, *y) != *p)
        .map(|(x, y, p)| (x, y, p.0, want.get_pixel(x, y).0))
        .take(4)
        .collect();
    assert!(
        differing.is_empty(),
        "{case}: (x, y, ours, torchvision's) {differing:?}"
    );
}

#[test]
fn brightness_contrast_and_saturation_match_pillows_enhance() {
    let img = fixture("input.png");
    for f in [0.0, 0.55, 1.0, 1.6] {
        assert_same(&adjust_brightness(&img, f), &format!("brightness_{f:?}"));
    }
    for f in [0.3, 1.0, 1.9] {
        assert_same(&adjust_contrast(&img, f), &format!("contrast_{f:?}"));
    }
    for f in [0.0, 0.5, 2.2] {
        assert_same(&adjust_saturation(&img, f), &format!("saturation_{f:?}"));
    }
}

#[test]
fn hue_matches_torchvisions_hsv_round_trip() {
    let img = fixture("input.png");
    for f in [-0.5, -0.3, -0.02, 0.0, 0.1, 0.45] {
        assert_same(&adjust_hue(&img, f), &format!("hue_{f:?}"));
    }
}

#[test]
fn jitter_repeats_by_seed_and_zero_strength_is_the_identity() {
    let img = fixture("input.png");
    let jitter = ColorJitter::new(0.4, 0.4, 0.4, 0.1).unwrap();
    let a = jitter.apply(&img, &mut Generator::new(3));
    assert_eq!(a, jitter.apply(&img, &mut Generator::new(3)));
    assert_ne!(a, img);
    assert_ne!(a, jitter.apply(&img, &mut Generator::new(4)));
    let none = ColorJitter::new(0.0, 0.0, 0.0, 0.0).unwrap();
    assert_eq!(none.apply(&img, &mut Generator::new(3)), img);
}

#[test]
fn out_of_range_strengths_are_refused_by_name() {
    let e = ColorJitter::new(0.4, -0.1, 0.0, 0.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("contrast"), "{e}");
    let e = ColorJitter::new(0.0, 0.0, 0.0, 0.6)
        .unwrap_err()
        .to_string();
    assert!(e.contains("hue"), "{e}");
}
