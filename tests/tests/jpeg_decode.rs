//! JPEG decoding equals OpenCV's `imread(IMREAD_COLOR)` pixel for pixel (what ultralytics
//! reads through): published JPEGs of every kind a decoder must get right (baseline and
//! progressive; 4:2:0, 4:2:2 and 4:4:4; greyscale; YCCK; 16-bit quantization tables; EXIF
//! rotations; a truncated file) kept in tests/fixtures/jpeg/, and ultralytics' two sample
//! photos (fetched). cv2's pixels are kept as a digest per row (make_fixtures.py there).

use rb_integration_tests::assets::asset;
use rusting_brain::vision::image::decode_rgb;
use rusting_brain::vision::RgbImage;
use serde_json::Value;
use std::path::PathBuf;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/jpeg")
}

fn expected() -> Value {
    let path = fixture_dir().join("expected.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01B3)
    })
}

/// The rows of `img` whose digest differs from cv2's, or a size mismatch.
fn differences(img: &RgbImage, want: &Value) -> Vec<String> {
    let (w, h) = (
        want["width"].as_u64().unwrap(),
        want["height"].as_u64().unwrap(),
    );
    if (img.width() as u64, img.height() as u64) != (w, h) {
        return vec![format!(
            "size {}x{}, cv2 {w}x{h}",
            img.width(),
            img.height()
        )];
    }
    let row_bytes = w as usize * 3;
    want["rows"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter_map(|(y, digest)| {
            let row = &img.as_raw()[y * row_bytes..(y + 1) * row_bytes];
            let got = format!("{:016x}", fnv1a64(row));
            (got != digest.as_str().unwrap()).then(|| format!("row {y}"))
        })
        .collect()
}

fn check(name: &str, bytes: &[u8], want: &Value) -> Option<String> {
    let img = decode_rgb(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    let bad = differences(&img, want);
    (!bad.is_empty()).then(|| {
        format!(
            "{name} ({}): {} differ from cv2, first {}",
            want["kind"].as_str().unwrap(),
            bad.len(),
            bad[0]
        )
    })
}

#[test]
fn published_jpegs_of_every_kind_decode_as_opencv_decodes_them() {
    let e = expected();
    let images = e["images"].as_object().unwrap();
    let mut failures = Vec::new();
    let mut kept = 0;
    for (name, want) in images {
        let path = fixture_dir().join(name);
        if !path.exists() {
            continue;
        }
        kept += 1;
        failures.extend(check(name, &std::fs::read(&path).unwrap(), want));
    }
    assert!(kept >= 10, "only {kept} committed JPEGs found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn ultralytics_sample_photos_decode_as_opencv_decodes_them() {
    let e = expected();
    for name in ["bus.jpg", "zidane.jpg"] {
        let Some(path) = asset(
            "ultralytics_sample_photos_decode_as_opencv_decodes_them",
            &format!("ultralytics/assets/{name}"),
        ) else {
            return;
        };
        let failure = check(name, &std::fs::read(&path).unwrap(), &e["images"][name]);
        assert!(failure.is_none(), "{}", failure.unwrap());
    }
}

#[test]
fn a_jpeg_claiming_a_huge_size_is_refused_before_decoding() {
    // hopper.jpg with its frame header's height and width set to 65,500 each.
    let mut bytes = std::fs::read(fixture_dir().join("hopper.jpg")).unwrap();
    let sof = bytes
        .windows(2)
        .position(|w| w == [0xFF, 0xC0])
        .expect("a baseline frame header");
    bytes[sof + 5..sof + 9].copy_from_slice(&[0xFF, 0xDC, 0xFF, 0xDC]);
    let err = decode_rgb(&bytes).unwrap_err().to_string();
    assert!(
        err.contains("65500x65500") && err.contains("limit"),
        "{err}"
    );
}
